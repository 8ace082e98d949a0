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

	// Accept-Encoding per RFC 9110 §12.5.3.
	for ae, want := range map[string]string{
		"":                             "",
		"gzip;q=1.0":                   "gzip",
		"br;q=1.0, gzip;q=0.8":         "br",
		"br;q=0.5, gzip;q=0.8":         "gzip",
		"gzip;q=1, br;q=1":             "br", // br at equal weight
		"GZIP":                         "gzip",
		"Br , GZip ;Q=0.9":             "br",
		"gzip , deflate":               "gzip",
		"gzip ;q=0.5":                  "gzip",
		"x-gzip":                       "gzip",
		"br;q=0, gzip;q=0":             "",
		"gzip;q=0":                     "",
		"br;q=0":                       "",
		"*":                            "br",
		"*;q=0.5, br;q=0":              "gzip",
		"gzip;q=0.001":                 "gzip",
		"gzip;q=1.001":                 "",
		"gzip;q=2":                     "",
		"gzip;q=abc":                   "",
		"identity":                     "",
		"deflate, compress":            "",
		"gzip;level=9;q=0.4, br;q=0.3": "gzip",
	} {
		resp, body := get("/lib/js/a.js", "Accept-Encoding", ae)
		if got := resp.Header.Get("Content-Encoding"); got != want || resp.StatusCode != 200 {
			t.Errorf("Accept-Encoding %q: %d %q, want %q", ae, resp.StatusCode, got, want)
		}
		if want == "" && string(body) != a {
			t.Errorf("Accept-Encoding %q: an identity body that is not the file", ae)
		}
	}

	// A strong ETag per representation; If-None-Match takes precedence
	// over If-Modified-Since, and every 304 carries the 200's caching
	// headers.
	path := "/lib/js/a.js~js/b.js~v7.js"
	plainResp, _ := get(path)
	gzResp, _ := get(path, "Accept-Encoding", "gzip")
	etag, gzTag := plainResp.Header.Get("ETag"), gzResp.Header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, "W/") || etag == gzTag || gzTag == "" {
		t.Fatalf("ETags %q (identity) and %q (gzip): want two different strong tags", etag, gzTag)
	}
	if other, _ := get("/lib/js/a.js"); other.Header.Get("ETag") == etag {
		t.Fatal("two assets share an ETag")
	}
	exp, err := http.ParseTime(plainResp.Header.Get("Expires"))
	if err != nil || exp.Before(time.Now().Add(364*24*time.Hour)) {
		t.Fatalf("Expires %q (%v): want a year ahead, as max-age says", plainResp.Header.Get("Expires"), err)
	}
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	for name, c := range map[string]struct {
		headers []string
		want    int
	}{
		"match":                 {[]string{"If-None-Match", etag}, 304},
		"weak match":            {[]string{"If-None-Match", "W/" + etag}, 304},
		"in a list":             {[]string{"If-None-Match", `"nope", ` + etag}, 304},
		"star":                  {[]string{"If-None-Match", "*"}, 304},
		"other coding's tag":    {[]string{"If-None-Match", gzTag}, 200},
		"gzip tag with gzip":    {[]string{"If-None-Match", gzTag, "Accept-Encoding", "gzip"}, 304},
		"no match":              {[]string{"If-None-Match", `"nope"`}, 200},
		"no match, IMS current": {[]string{"If-None-Match", `"nope"`, "If-Modified-Since", future}, 200},
		"match, IMS stale":      {[]string{"If-None-Match", etag, "If-Modified-Since", old}, 304},
		"IMS only":              {[]string{"If-Modified-Since", future}, 304},
		"malformed":             {[]string{"If-None-Match", "nope"}, 200},
	} {
		resp, body := get(path, c.headers...)
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", name, resp.StatusCode, c.want)
			continue
		}
		if c.want != 304 {
			continue
		}
		if len(body) != 0 {
			t.Errorf("%s: a 304 with a body", name)
		}
		for _, h := range []string{"Cache-Control", "Vary", "Expires", "ETag", "Last-Modified"} {
			if resp.Header.Get(h) == "" {
				t.Errorf("%s: the 304 lacks %s", name, h)
			}
		}
		if resp.Header.Get("Cache-Control") != plainResp.Header.Get("Cache-Control") {
			t.Errorf("%s: Cache-Control %q", name, resp.Header.Get("Cache-Control"))
		}
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
