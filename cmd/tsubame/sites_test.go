package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func hostGet(t *testing.T, base, host, path string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Two sites on one server: each Host gets its own endpoints, templates and
// static files; a reload adds a host to a site.
func TestTwoSites(t *testing.T) {
	dir := t.TempDir()
	for site, body := range map[string]string{"a": "console.log('site a');\n", "b": "console.log('site b');\n"} {
		if err := os.MkdirAll(filepath.Join(dir, site), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, site, "app.js"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "tsubame.yaml")
	conf := func(extraHost string) string {
		return `
endpoints:
  sample3: {source: store}
sites:
  a:
    hosts: [a.example.com` + extraHost + `]
    static_root: ` + filepath.Join(dir, "a") + `
    endpoints:
      top: {source: fixed, urls: ["https://a.example.com/ad.js"]}
  b:
    hosts: ["*.b.example.com"]
    static_root: ` + filepath.Join(dir, "b") + `
    templates:
      inject: {text: "document.write({{.URLsJSON}});"}
    endpoints:
      top: {source: store, formats: [js]}
      tags: {source: store, template: inject}
`
	}
	if err := os.WriteFile(file, []byte(conf("")), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "TSUBAME_CONFIG="+file)
	checks := []struct{ host, path, want string }{
		{"a.example.com", "/api/top.js?id=5&callback=cb", `cb({"urls":["https://a.example.com/ad.js"]});`},
		{"www.b.example.com", "/api/top.js?id=5&callback=cb", `cb({"urls":["http://ad9.example.com/tag.js","http://ad10.example.com/tag.js"]});`},
		{"a.example.com", "/lib/app.js", "console.log('site a');\n"},
		{"x.b.example.com", "/lib/app.js", "console.log('site b');\n"},
		{"x.b.example.com", "/api/tags.js?id=2", `document.write(["http:\/\/ad3.example.com\/tag.js","http:\/\/ad4.example.com\/tag.js"]);`},
		{"other.example.net", "/api/sample3.js?id=1&callback=Example.process", wantID1},
	}
	for _, c := range checks {
		if status, body := hostGet(t, p.base, c.host, c.path); status != 200 || body != c.want {
			t.Errorf("Host %s %s: %d %q", c.host, c.path, status, body)
		}
	}
	if status, _ := hostGet(t, p.base, "a.example.com", "/api/sample3.js?id=1&callback=cb"); status != 404 {
		t.Errorf("a site served the default site's endpoint: %d", status)
	}
	if status, _ := hostGet(t, p.base, "other.example.net", "/lib/app.js"); status != 404 {
		t.Errorf("the default site without a static root served /lib/: %d", status)
	}

	if err := os.WriteFile(file, []byte(conf(", alias.example.com")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, body := hostGet(t, p.base, "alias.example.com", "/lib/app.js"); body == "console.log('site a');\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reloaded host not served:\n%s", p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
