package server_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"tsubame/internal/health"
	"tsubame/internal/server"
)

// The public listener answers load balancers' probes, without details:
// readiness follows the required checks only, and ?verbose names every
// check and its state but no detail of a failure.
func TestPublicHealthProbes(t *testing.T) {
	var storeDown, logFailing atomic.Bool
	ready := func() health.Report {
		rep := health.Report{{Name: health.Serving, OK: true, Required: true},
			{Name: health.AccessLogFile, OK: !logFailing.Load(), Required: true, Detail: "write /var/log/tsubame/access.log: no space left on device"},
			{Name: health.Store, OK: !storeDown.Load(), Detail: "dial tcp 10.0.0.7:6379: connection refused"}}
		return rep
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
	want := "[+]serving ok\n[+]access_log_file ok\n[+]store ok (reported, not required)\nready\n"
	if code, body, h := get("GET", "/readyz?verbose"); code != 200 || body != want || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("/readyz?verbose: %d %q, want %q", code, body, want)
	}

	// The store down: still ready (the node serves from its cache); the
	// verbose answer says the store failed, and nothing of why.
	storeDown.Store(true)
	if code, body, _ := get("GET", "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz with the store down: %d %q", code, body)
	}
	want = "[+]serving ok\n[+]access_log_file ok\n[-]store failed (reported, not required)\nready\n"
	if code, body, _ := get("GET", "/readyz?verbose"); code != 200 || body != want {
		t.Fatalf("/readyz?verbose with the store down: %d %q, want %q", code, body, want)
	}

	// A failing access log: 503, and again no detail of it.
	logFailing.Store(true)
	if code, body, _ := get("GET", "/readyz"); code != 503 || body != "not ready\n" {
		t.Fatalf("/readyz with a failing log: %d %q", code, body)
	}
	code, body, _ := get("GET", "/readyz?verbose")
	if code != 503 || !strings.Contains(body, "[-]access_log_file failed\n") || !strings.HasSuffix(body, "not ready\n") {
		t.Fatalf("/readyz?verbose with a failing log: %d %q", code, body)
	}
	for _, secret := range []string{"10.0.0.7", "6379", "/var/log", "space"} {
		if strings.Contains(body, secret) {
			t.Fatalf("the public /readyz?verbose shows %q: %q", secret, body)
		}
	}
	if code, _, _ := get("GET", "/healthz"); code != 200 {
		t.Fatalf("/healthz must stay 200 while not ready: %d", code)
	}
}
