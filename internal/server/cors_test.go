package server_test

import (
	"net/http"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/server"
)

// CORS per endpoint: allowed origins get Access-Control-Allow-Origin,
// others nothing; preflights answer 204.
func TestCORS(t *testing.T) {
	body := server.Fixed(`{"urls":[]}`)
	_, addr := startWith(t, server.Options{},
		server.Endpoint{Name: "pub", Source: body, CORSOrigins: []string{"https://pub.example", "http://localhost:8000"}, CORSMaxAge: 10 * time.Minute},
		server.Endpoint{Name: "open", Source: body, CORSOrigins: []string{"*"}, CORSMaxAge: time.Hour},
		server.Endpoint{Name: "none", Source: body})
	do := func(method, path string, header ...string) *http.Response {
		t.Helper()
		return request(t, method, "http://"+addr+path, header...)
	}
	type want struct {
		status          int
		acao, vary      string
		methods, hdrs   string
		maxAge, allowed string
	}
	check := func(name string, resp *http.Response, w want) {
		t.Helper()
		h := resp.Header
		got := want{resp.StatusCode, h.Get("Access-Control-Allow-Origin"), h.Get("Vary"), h.Get("Access-Control-Allow-Methods"),
			h.Get("Access-Control-Allow-Headers"), h.Get("Access-Control-Max-Age"), h.Get("Allow")}
		if got != w {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, w)
		}
		if h.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s: credentials allowed", name)
		}
	}
	const pub = "https://pub.example"
	check("allowed origin", do("GET", "/api/pub.json?id=1", "Origin", pub), want{status: 200, acao: pub, vary: "Origin"})
	check("second allowed origin", do("GET", "/api/pub.json?id=1", "Origin", "http://localhost:8000"), want{status: 200, acao: "http://localhost:8000", vary: "Origin"})
	check("other origin", do("GET", "/api/pub.json?id=1", "Origin", "https://evil.example"), want{status: 200, vary: "Origin"})
	check("origin differing in case", do("GET", "/api/pub.json?id=1", "Origin", "https://PUB.example"), want{status: 200, vary: "Origin"})
	check("no origin", do("GET", "/api/pub.json?id=1"), want{status: 200, vary: "Origin"})
	check("error answer keeps CORS", do("GET", "/api/pub.json", "Origin", pub), want{status: 400, acao: pub, vary: "Origin"})
	check("any origin", do("GET", "/api/open.json?id=1", "Origin", "https://anyone.example"), want{status: 200, acao: "*"})
	check("no CORS on the endpoint", do("GET", "/api/none.json?id=1", "Origin", pub), want{status: 200})

	const preflightVary = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"
	check("preflight", do("OPTIONS", "/api/pub.json?id=1", "Origin", pub, "Access-Control-Request-Method", "GET",
		"Access-Control-Request-Headers", "x-request-id, content-type"),
		want{status: 204, acao: pub, vary: preflightVary, methods: "GET, HEAD", hdrs: "x-request-id, content-type", maxAge: "600", allowed: "GET, HEAD, OPTIONS"})
	check("preflight for any origin", do("OPTIONS", "/api/open.json?id=1", "Origin", pub, "Access-Control-Request-Method", "HEAD"),
		want{status: 204, acao: "*", vary: preflightVary, methods: "GET, HEAD", maxAge: "3600", allowed: "GET, HEAD, OPTIONS"})
	check("preflight for POST", do("OPTIONS", "/api/pub.json?id=1", "Origin", pub, "Access-Control-Request-Method", "POST"),
		want{status: 204, vary: preflightVary, allowed: "GET, HEAD, OPTIONS"})
	check("preflight from another origin", do("OPTIONS", "/api/pub.json?id=1", "Origin", "https://evil.example", "Access-Control-Request-Method", "GET"),
		want{status: 204, vary: preflightVary, allowed: "GET, HEAD, OPTIONS"})
	check("preflight with bad header names", do("OPTIONS", "/api/pub.json?id=1", "Origin", pub, "Access-Control-Request-Method", "GET",
		"Access-Control-Request-Headers", "x-a, (x-b)"),
		want{status: 204, acao: pub, vary: preflightVary, methods: "GET, HEAD", maxAge: "600", allowed: "GET, HEAD, OPTIONS"})
	check("OPTIONS without CORS", do("OPTIONS", "/api/none.json?id=1", "Origin", pub, "Access-Control-Request-Method", "GET"),
		want{status: 204, allowed: "GET, HEAD, OPTIONS"})
}

// CORS on a route with credentials (/api/decide's): a listed origin is
// echoed exactly with Access-Control-Allow-Credentials and Vary: Origin,
// errors too; "*" allows every page without credentials; a preflight
// allows the route's own methods; a reload (Set) replaces the origins at
// once.
func TestRouteCORS(t *testing.T) {
	const pub = "https://pub.example"
	policy := server.NewCORSPolicy(server.CORS{Origins: []string{pub}, MaxAge: 5 * time.Minute, Credentials: true}, "GET")
	decide := server.HandlerFunc(func(w server.Response, r server.Request) error {
		if len(r.Query("placement")) == 0 {
			return tsubame.Errorf(tsubame.EINVALID, "placement is required")
		}
		w.Body("application/json", []byte(`{"decisions":{}}`))
		return nil
	})
	_, addr := startWith(t, server.Options{Routes: []server.Route{{Name: "decide", Path: "/api/decide", Methods: []string{"GET"},
		Handler: decide, CORS: policy}}})
	type got struct {
		status                  int
		acao, acac, vary, allow string
		methods, maxAge         string
	}
	do := func(method, path string, header ...string) got {
		t.Helper()
		resp := request(t, method, "http://"+addr+path, header...)
		h := resp.Header
		return got{resp.StatusCode, h.Get("Access-Control-Allow-Origin"), h.Get("Access-Control-Allow-Credentials"), h.Get("Vary"),
			h.Get("Allow"), h.Get("Access-Control-Allow-Methods"), h.Get("Access-Control-Max-Age")}
	}
	const preflightVary = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"
	for _, tc := range []struct {
		name string
		got  got
		want got
	}{
		{"listed origin", do("GET", "/api/decide?placement=top", "Origin", pub), got{status: 200, acao: pub, acac: "true", vary: "Origin"}},
		{"error keeps CORS", do("GET", "/api/decide", "Origin", pub), got{status: 400, acao: pub, acac: "true", vary: "Origin"}},
		{"other origin", do("GET", "/api/decide?placement=top", "Origin", "https://evil.example"), got{status: 200, vary: "Origin"}},
		{"the origin with a path is not the origin", do("GET", "/api/decide?placement=top", "Origin", pub+"/x"), got{status: 200, vary: "Origin"}},
		{"preflight", do("OPTIONS", "/api/decide?placement=top", "Origin", pub, "Access-Control-Request-Method", "GET"),
			got{status: 204, acao: pub, acac: "true", vary: preflightVary, allow: "GET, OPTIONS", methods: "GET", maxAge: "300"}},
		{"preflight for HEAD, which the route does not serve", do("OPTIONS", "/api/decide", "Origin", pub, "Access-Control-Request-Method", "HEAD"),
			got{status: 204, vary: preflightVary, allow: "GET, OPTIONS"}},
		{"preflight for POST", do("OPTIONS", "/api/decide", "Origin", pub, "Access-Control-Request-Method", "POST"),
			got{status: 204, vary: preflightVary, allow: "GET, OPTIONS"}},
		{"preflight for a part of a method", do("OPTIONS", "/api/decide", "Origin", pub, "Access-Control-Request-Method", "GE"),
			got{status: 204, vary: preflightVary, allow: "GET, OPTIONS"}},
		{"POST", do("POST", "/api/decide?placement=top", "Origin", pub), got{status: 405, acao: pub, acac: "true", vary: "Origin", allow: "GET"}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, tc.got, tc.want)
		}
	}
	policy.Set(server.CORS{Origins: []string{"*"}, MaxAge: time.Minute, Credentials: true})
	if g, w := do("GET", "/api/decide?placement=top", "Origin", pub), (got{status: 200, acao: "*"}); g != w {
		t.Errorf("every origin, after a reload: got %+v, want %+v (no credentials with *)", g, w)
	}
	policy.Set(server.CORS{Credentials: true})
	if g, w := do("GET", "/api/decide?placement=top", "Origin", pub), (got{status: 200, vary: "Origin"}); g != w {
		t.Errorf("no origins, after a reload: got %+v, want %+v", g, w)
	}
	if g, w := do("OPTIONS", "/api/decide", "Origin", pub, "Access-Control-Request-Method", "GET"), (got{status: 204, vary: preflightVary, allow: "GET, OPTIONS"}); g != w {
		t.Errorf("preflight with no origins: got %+v, want %+v", g, w)
	}
}

// request sends method to url with the header's name, value pairs, and
// returns the response, its body read and closed.
func request(t *testing.T, method, url string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}
