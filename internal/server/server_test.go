package server_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/cache"
	"tsubame/internal/render"
	"tsubame/internal/server"
	"tsubame/internal/store/memory"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// start runs a real Server on 127.0.0.1:0 over a memory store holding ids
// 1..3 and "evil", with the default sample endpoints and two extra ones.
func start(t testing.TB) (base string, store *memory.Store) {
	t.Helper()
	store = memory.New()
	ps := []*tsubame.Placement{
		{ID: "evil", URLs: []string{"http://a.example.com/?q=</script><script>alert(1)</script>&x=1"}},
	}
	for n := 1; n <= 3; n++ {
		ps = append(ps, &tsubame.Placement{ID: fmt.Sprint(n), URLs: []string{
			fmt.Sprintf("http://ad%d.example.com/tag.js", 2*n-1), fmt.Sprintf("http://ad%d.example.com/tag.js", 2*n)}})
	}
	if err := store.PutMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(store, cache.Options{Encoders: render.Encoders(render.EncoderOptions{}, []render.Format{render.FormatJSONP, render.FormatVAST})})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{
		Name: "tsubame", ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		MaxHeaderBytes: 8 << 10, MaxBodyBytes: 1 << 20, MaxConns: 1000, HelloJSON: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, []server.Endpoint{
		{Name: "sample1", Source: server.FixedURLs([]string{"http://ad1.example.com/tag.js", "http://ad2.example.com/tag.js"}, render.Encoders(render.EncoderOptions{}, render.Formats()))},
		{Name: "sample2", Source: server.Direct{Store: store, Encoders: render.Encoders(render.EncoderOptions{}, render.Formats())}},
		{Name: "sample3", Source: server.Cached{Cache: c}},
		{Name: "jsononly", Source: server.Cached{Cache: c}, Formats: []render.Format{render.FormatJSON}},
		{Name: "nocache", Source: server.Cached{Cache: c}, CacheControl: "no-store"},
		{Name: "video", Source: server.Cached{Cache: c}, Formats: []render.Format{render.FormatVAST}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = c.Close()
	})
	return "http://" + ln.Addr().String(), store
}

// Each golden file starts with "METHOD target"; the rest is the expected
// response: status line, the headers the server controls, a blank line and
// the body. Run with -update to rewrite them after a deliberate change.
func TestGolden(t *testing.T) {
	base, _ := start(t)
	files, err := filepath.Glob("testdata/golden/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".golden"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			reqLine, want, _ := strings.Cut(string(raw), "\n")
			method, target, _ := strings.Cut(reqLine, " ")
			got := roundTrip(t, method, base+target)
			if *update {
				if err := os.WriteFile(file, []byte(reqLine+"\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("%s %s\n--- got\n%s\n--- want\n%s", method, target, got, want)
			}
		})
	}
}

func roundTrip(t *testing.T, method, url string) string {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", resp.StatusCode)
	for _, h := range []string{"Content-Type", "Cache-Control", "Allow", "Retry-After", "X-Content-Type-Options", "Server"} {
		if v := resp.Header.Get(h); v != "" {
			fmt.Fprintf(&b, "%s: %s\n", h, v)
		}
	}
	fmt.Fprintf(&b, "\n%s", body)
	return b.String()
}

func TestServesStoreChanges(t *testing.T) {
	base, store := start(t)
	if err := store.Put(context.Background(), &tsubame.Placement{ID: "new", URLs: []string{"https://n.example.com/t.js"}}); err != nil {
		t.Fatal(err)
	}
	// The uncached endpoint sees the change at once.
	got := roundTrip(t, "GET", base+"/api/sample2.js?id=new&callback=cb")
	if !strings.HasSuffix(got, `cb({"urls":["https://n.example.com/t.js"]});`) {
		t.Fatalf("sample2 after a store write: %s", got)
	}
}

// In-flight requests finish during Shutdown; new connections are refused after.
func TestShutdownRefusesNewConnections(t *testing.T) {
	store := memory.New()
	srv, err := server.New(server.Options{ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second,
		MaxHeaderBytes: 4096, MaxConns: 10}, []server.Endpoint{{Name: "s", Source: server.Direct{Store: store, Encoders: render.Encoders(render.EncoderOptions{}, render.Formats())}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/api/s.json?id=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Fatal("listener still accepts after Shutdown")
	}
}

func TestNewRejectsBadEndpoints(t *testing.T) {
	src := server.Fixed("{}")
	if _, err := server.New(server.Options{}, []server.Endpoint{{Name: "a", Source: src}, {Name: "a", Source: src}}); err == nil {
		t.Fatal("duplicate endpoint accepted")
	}
	if _, err := server.New(server.Options{}, []server.Endpoint{{Name: "a"}}); err == nil {
		t.Fatal("endpoint without source accepted")
	}
}

// failing is a Source whose backend is down.
type failing struct{}

func (failing) Payload(context.Context, render.Encoding, []byte, []byte) ([]byte, bool, error) {
	return nil, false, tsubame.WrapError(tsubame.EUNAVAILABLE, errors.New("dial tcp 10.0.0.1:6379: refused"), "placement store unavailable")
}

func TestBackendDownIs503WithoutInternals(t *testing.T) {
	srv, err := server.New(server.Options{MaxHeaderBytes: 4096, MaxConns: 10}, []server.Endpoint{{Name: "s", Source: failing{}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(context.Background())
	got := roundTrip(t, "GET", "http://"+ln.Addr().String()+"/api/s.js?id=1&callback=cb")
	if !strings.HasPrefix(got, "503\n") || !strings.Contains(got, "Retry-After: 1") || strings.Contains(got, "10.0.0.1") {
		t.Fatalf("backend failure response:\n%s", got)
	}
}

// FuzzRequest sends arbitrary ids and callbacks through the real handler:
// every answer is 200, 400 or 404 (431 for a head over the limit), and a 200 JSONP body is exactly
// callback(payload); with the callback as sent.
func FuzzRequest(f *testing.F) {
	for _, s := range [][2]string{{"1", "Example.process"}, {"", "cb"}, {"1", ""}, {"<x>", "a.b"}, {"1", "a(1)"}, {"1\x00", "é"}} {
		f.Add(s[0], s[1])
	}
	base, _ := start(f)
	client := &http.Client{Timeout: 5 * time.Second}
	f.Fuzz(func(t *testing.T, id, cb string) {
		q := "id=" + urlQueryEscape(id) + "&callback=" + urlQueryEscape(cb)
		resp, err := client.Get(base + "/api/sample3.js?" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200, 404:
			if !render.ValidCallback([]byte(cb)) || tsubame.ValidID(id) != nil {
				t.Fatalf("id %q callback %q accepted with %d", id, cb, resp.StatusCode)
			}
			if !bytes.HasPrefix(body, []byte(cb+"(")) || !bytes.HasSuffix(body, []byte(");")) {
				t.Fatalf("body %q does not frame callback %q", body, cb)
			}
		case 431:
			if len(q) < 4<<10 {
				t.Fatalf("a %d-byte query refused as too large", len(q))
			}
		case 400:
			if render.ValidCallback([]byte(cb)) && tsubame.ValidID(id) == nil {
				t.Fatalf("valid id %q and callback %q refused: %s", id, cb, body)
			}
		default:
			t.Fatalf("status %d for id %q callback %q", resp.StatusCode, id, cb)
		}
	})
}

func urlQueryEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// A Shutdown right after Serve was called (before fasthttp has taken the
// listener) still stops it: Serve returns and the port is closed.
func TestShutdownRightAfterServe(t *testing.T) {
	for range 50 {
		srv, err := server.New(server.Options{Logger: slog.New(slog.DiscardHandler)},
			[]server.Endpoint{{Name: "e", Source: server.Fixed(`{"urls":[]}`)}})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Serve still accepting after Shutdown")
		}
	}
}
