package server_test

import (
	"bufio"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tsubame/internal/server"
	"tsubame/internal/static"
)

func TestStaticOverHTTP(t *testing.T) {
	root := t.TempDir()
	a, b := strings.Repeat("function a(){}\n", 50), strings.Repeat("function b(){}\n", 50)
	for name, body := range map[string]string{"js/a.js": a, "js/b.js": b} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := static.New(static.Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, addr := startWith(t, server.Options{MaxConns: 100, Static: st})
	base := "http://" + addr
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}

	get := func(path string, header ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, body
	}
	resp, body := get("/lib/js/a.js~js/b.js~v7.js")
	if resp.StatusCode != 200 || string(body) != a+b {
		t.Fatalf("combined: %d, %d bytes", resp.StatusCode, len(body))
	}
	for h, want := range map[string]string{"Content-Type": "application/javascript; charset=utf-8",
		"Cache-Control": "public, max-age=31536000, immutable", "Vary": "Accept-Encoding"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	lm := resp.Header.Get("Last-Modified")
	if _, err := http.ParseTime(lm); err != nil {
		t.Fatalf("Last-Modified %q: %v", lm, err)
	}
	if resp, body := get("/lib/js/a.js~js/b.js~v7.js", "If-Modified-Since", lm); resp.StatusCode != 304 || len(body) != 0 {
		t.Fatalf("If-Modified-Since: %d, %d bytes", resp.StatusCode, len(body))
	}
	old := time.Now().Add(-48 * time.Hour).UTC().Format(http.TimeFormat)
	if resp, _ := get("/lib/js/a.js~js/b.js~v7.js", "If-Modified-Since", old); resp.StatusCode != 200 {
		t.Fatalf("stale If-Modified-Since: %d", resp.StatusCode)
	}
	resp, body = get("/lib/js/a.js~js/b.js~v7.js", "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	if plain, _ := io.ReadAll(zr); string(plain) != a+b {
		t.Fatal("gzip body does not decode to the combined files")
	}
	if resp, _ := get("/lib/js/a.js", "Accept-Encoding", "br, gzip"); resp.Header.Get("Content-Encoding") != "br" {
		t.Fatalf("brotli not preferred: %q", resp.Header.Get("Content-Encoding"))
	}
	// Traversal, raw on the wire so no client cleans the path first.
	for _, p := range []string{"/lib/../../etc/passwd", "/lib/..%2f..%2fetc%2fpasswd", "/lib/%2e%2e/%2e%2e/etc/hostname",
		"/lib/js/a.js~..%2f..%2fetc%2fpasswd~v1.js", "/lib/js%00/a.js"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET "+p+" HTTP/1.1\r\nHost: x\r\n\r\n")
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode == 200 {
			t.Errorf("%s served", p)
		}
	}
	if resp, _ := http.Post(base+"/lib/js/a.js", "text/plain", nil); resp.StatusCode != 405 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
}
