package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"tsubame/internal/server"
)

// The public listener answers load balancers' probes, without details.
func TestPublicHealthProbes(t *testing.T) {
	var failing atomic.Bool
	ready := func(context.Context) error {
		if failing.Load() {
			return errors.New("redis: connection refused to 10.0.0.7:6379")
		}
		return nil
	}
	_, addr := startWith(t, server.Options{Ready: ready})
	get := func(method, path string) (int, string, http.Header) {
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	if code, body, h := get("GET", "/healthz"); code != 200 || body != "ok\n" || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("/healthz: %d %q %v", code, body, h)
	}
	if code, body, _ := get("GET", "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if code, _, _ := get("HEAD", "/readyz"); code != 200 {
		t.Fatalf("HEAD /readyz: %d", code)
	}
	if code, _, _ := get("POST", "/healthz"); code != 405 {
		t.Fatalf("POST /healthz: %d, want 405", code)
	}
	// A failing backend: 503 and no detail of it. The first probe's result
	// may be reused for a second, so wait for the new one.
	failing.Store(true)
	waitUntil(t, func() bool { code, _, _ := get("GET", "/readyz"); return code == 503 })
	if code, body, _ := get("GET", "/readyz"); code != 503 || body != "not ready\n" || strings.Contains(body, "10.0.0.7") {
		t.Fatalf("/readyz with a failing store: %d %q", code, body)
	}
	if code, _, _ := get("GET", "/healthz"); code != 200 {
		t.Fatalf("/healthz must stay 200 while not ready: %d", code)
	}
}
