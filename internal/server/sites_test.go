package server_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"

	"tsubame/internal/render"
	"tsubame/internal/server"
)

func fixedEP(name, url string) server.Endpoint {
	return server.Endpoint{Name: name, Source: server.FixedURLs([]string{url}, render.Encoders(render.EncoderOptions{}, render.Formats()))}
}

func getHost(t *testing.T, addr, host, path string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
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

func TestHostDispatch(t *testing.T) {
	opt := server.Options{MaxConns: 100, Sites: []server.Site{
		{Name: "news", Hosts: []string{"news.example.com", "*.news.example.com"}, Endpoints: []server.Endpoint{fixedEP("top", "http://news.example.com/a.js")}},
		{Name: "eu", Hosts: []string{"*.eu.news.example.com"}, Endpoints: []server.Endpoint{fixedEP("top", "http://eu.example.com/a.js")}},
		{Name: "shop", Hosts: []string{"shop.example.com"}, Endpoints: []server.Endpoint{fixedEP("cart", "http://shop.example.com/a.js")}},
	}}
	srv, addr := startWith(t, opt, fixedEP("top", "http://default.example.com/a.js"))
	cases := []struct {
		host, path string
		status     int
		body       string
	}{
		{"news.example.com", "/api/top.json?id=1", 200, `{"urls":["http://news.example.com/a.js"]}`},
		{"NEWS.Example.com:8080", "/api/top.json?id=1", 200, `{"urls":["http://news.example.com/a.js"]}`},
		{"www.news.example.com", "/api/top.json?id=1", 200, `{"urls":["http://news.example.com/a.js"]}`},
		{"a.eu.news.example.com", "/api/top.json?id=1", 200, `{"urls":["http://eu.example.com/a.js"]}`}, // longest wildcard
		{"x.a.eu.news.example.com", "/api/top.json?id=1", 200, `{"urls":["http://eu.example.com/a.js"]}`},
		{"eu.news.example.com", "/api/top.json?id=1", 200, `{"urls":["http://news.example.com/a.js"]}`},
		{"shop.example.com", "/api/cart.json?id=1", 200, `{"urls":["http://shop.example.com/a.js"]}`},
		{"shop.example.com", "/api/top.json?id=1", 404, ""}, // each site has only its own endpoints
		{"other.example.org", "/api/top.json?id=1", 200, `{"urls":["http://default.example.com/a.js"]}`},
		{"[::1]:4000", "/api/top.json?id=1", 200, `{"urls":["http://default.example.com/a.js"]}`},
		{"example.com", "/api/top.json?id=1", 200, `{"urls":["http://default.example.com/a.js"]}`},
	}
	for _, c := range cases {
		status, body := getHost(t, addr, c.host, c.path)
		if status != c.status || (c.body != "" && body != c.body) {
			t.Errorf("Host %s %s: %d %s, want %d %s", c.host, c.path, status, body, c.status, c.body)
		}
	}

	opt.RejectUnknownHosts = true
	if err := srv.Reload(opt, []server.Endpoint{fixedEP("top", "http://default.example.com/a.js")}); err != nil {
		t.Fatal(err)
	}
	if status, body := getHost(t, addr, "other.example.org", "/api/top.json?id=1"); status != 404 || body != "unknown host\n" {
		t.Fatalf("rejected unknown host: %d %q", status, body)
	}
	if status, _ := getHost(t, addr, "news.example.com", "/api/top.json?id=1"); status != 200 {
		t.Fatal("known host refused after the reload")
	}
	dup := opt
	dup.Sites = append(dup.Sites, server.Site{Name: "x", Hosts: []string{"shop.example.com"}, Endpoints: nil})
	if err := srv.Reload(dup, nil); err == nil {
		t.Fatal("a host in two sites was accepted")
	}
	if status, _ := getHost(t, addr, "news.example.com", "/api/top.json?id=1"); status != 200 {
		t.Fatal("a rejected reload replaced the running sites")
	}
}
