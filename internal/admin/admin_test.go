package admin_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"tsubame/internal/admin"
)

func TestHealthAndReadiness(t *testing.T) {
	var storeDown atomic.Bool
	s := admin.New(admin.Options{Probe: func(context.Context) error {
		if storeDown.Load() {
			return errors.New("down")
		}
		return nil
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	base := "http://" + ln.Addr().String()

	check := func(path string, wantStatus int, wantBody string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantStatus || strings.TrimSpace(string(body)) != wantBody {
			t.Fatalf("GET %s = %d %q, want %d %q", path, resp.StatusCode, body, wantStatus, wantBody)
		}
	}
	check("/healthz", 200, "ok")
	check("/readyz", 503, "not ready")
	s.SetReady(true)
	check("/readyz", 200, "ready")
	storeDown.Store(true)
	check("/readyz", 503, "store unavailable")
	storeDown.Store(false)
	s.SetReady(false)
	check("/readyz", 503, "not ready")
	check("/nope", 404, "404 page not found")

	resp, err := http.Post(base+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /healthz = %d", resp.StatusCode)
	}
}
