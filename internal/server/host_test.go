package server_test

import (
	"strings"
	"testing"

	"tsubame/internal/server"
)

// hostSites is a server with two sites and a default, each endpoint
// logging to one access log.
func hostSites(t *testing.T) (*server.Server, string, func() []string) {
	t.Helper()
	alog, lines := memoryLog(t)
	ep := func(name, url string) server.Endpoint {
		e := fixedEP(name, url)
		e.Log = alog
		return e
	}
	opt := server.Options{HelloJSON: true, Sites: []server.Site{
		{Name: "a", Hosts: []string{"a.example"}, Endpoints: []server.Endpoint{ep("x", "http://a.example/ad.js")}},
		{Name: "b", Hosts: []string{"b.example"}, Endpoints: []server.Endpoint{ep("x", "http://b.example/ad.js")}},
	}}
	srv, addr := startWith(t, opt, ep("x", "http://default.example/ad.js"))
	return srv, addr, lines
}

// A Host value that is not uri-host [":" port] (RFC 9112 §3.2: a 400) is
// refused and its connection closed, userinfo first of all: it used to be
// routed to the site after the "@". So is an authority with userinfo in an
// absolute-form target, and a target starting with "//", which fasthttp
// would read as an authority.
func TestInvalidHostRefused(t *testing.T) {
	srv, addr, _ := hostSites(t)
	for _, tc := range []struct{ line, host string }{
		{"GET /api/x.json?id=1 HTTP/1.1", "x@a.example"},
		{"GET /api/x.json?id=1 HTTP/1.1", "user:pass@a.example"},
		{"GET /api/x.json?id=1 HTTP/1.1", "@a.example"},
		{"GET /api/x.json?id=1 HTTP/1.1", "a.example@b.example:80"},
		{"GET /api/x.json?id=1 HTTP/1.1", "a.example/x"},
		{"GET /api/x.json?id=1 HTTP/1.1", "a.example\\b"},
		{"GET /api/x.json?id=1 HTTP/1.1", "a.exa mple"},
		{"GET /api/x.json?id=1 HTTP/1.1", "<a.example>"},
		{"GET /api/x.json?id=1 HTTP/1.1", "a.example:80x"},
		{"GET /api/x.json?id=1 HTTP/1.1", "a.example:80:80"},
		{"GET /api/x.json?id=1 HTTP/1.1", "a%zz.example"},
		{"GET /api/x.json?id=1 HTTP/1.1", "[::1%eth0]"},
		{"GET /api/x.json?id=1 HTTP/1.1", "[::1]x"},
		{"GET http://x@a.example/api/x.json?id=1 HTTP/1.1", "b.example"},
		{"GET //a.example/api/x.json?id=1 HTTP/1.1", "b.example"},
	} {
		before := srv.Stats().Refused
		raw := tc.line + "\r\nHost: " + tc.host + "\r\n\r\n"
		statuses, closed := exchange(t, addr, raw+smuggled)
		if len(statuses) != 1 || statuses[0] != 400 || !closed {
			t.Errorf("%q: answered %v (closed %v), want one 400 and a closed connection", raw, statuses, closed)
			continue
		}
		after := srv.Stats().Refused
		if after[server.ReasonFraming]+after[server.ReasonMalformed] != before[server.ReasonFraming]+before[server.ReasonMalformed]+1 {
			t.Errorf("%q: refusal not counted: %v -> %v", raw, before, after)
		}
	}
	// What stays valid: a port, an IPv6 literal, an IPv4 address, sub-delims,
	// a trailing dot.
	for _, host := range []string{"a.example:4000", "[::1]:4000", "[::1]", "127.0.0.1", "a-b_c~d!$&'()*+,;=.example", "a.example."} {
		if status, _ := getHost(t, addr, host, "/api/x.json?id=1"); status != 200 {
			t.Errorf("Host %q: %d, want 200", host, status)
		}
	}
}

// The body of a refused Host says why.
func TestInvalidHostAnswer(t *testing.T) {
	_, addr, _ := hostSites(t)
	status, body := getHost(t, addr, "x@a.example", "/api/x.json?id=1")
	if status != 400 || body != "bad request: invalid Host header\n" {
		t.Fatalf("%d %q", status, body)
	}
}

// An absolute-form target picks the site by its own authority, whatever the
// Host header says (RFC 9112 §3.2.2: the origin server ignores Host then);
// the access log keeps the Host header as sent.
func TestAbsoluteFormPicksSiteByTarget(t *testing.T) {
	_, addr, lines := hostSites(t)
	for _, tc := range []struct{ target, host, want string }{
		{"http://a.example/api/x.json?id=1", "b.example", "http://a.example/ad.js"},
		{"http://b.example:4000/api/x.json?id=1", "a.example", "http://b.example/ad.js"},
		{"https://A.Example/api/x.json?id=1", "other.example", "http://a.example/ad.js"},
		{"http://other.example/api/x.json?id=1", "a.example", "http://default.example/ad.js"},
		{"/api/x.json?id=1", "B.Example.:80", "http://b.example/ad.js"},
	} {
		status, body := getHost(t, addr, tc.host, tc.target)
		if status != 200 || body != `{"urls":["`+tc.want+`"]}` {
			t.Errorf("GET %s with Host %s: %d %s, want %s", tc.target, tc.host, status, body, tc.want)
		}
	}
	logged := strings.Join(lines(), "\n")
	for _, host := range []string{"\tvhost:b.example\t", "\tvhost:other.example\t", "\tvhost:B.Example.:80\t"} {
		if !strings.Contains(logged, host) {
			t.Errorf("access log lacks %q:\n%s", host, logged)
		}
	}
}
