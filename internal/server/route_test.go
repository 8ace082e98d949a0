package server_test

import (
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/server"
)

// Routes other packages register sit in the same table as the server's
// own: an exact path beside the ad endpoints under /api/, a prefix with
// the rest of the path, their methods, their errors mapped to statuses,
// each counted under its name; a clash with a built-in route is refused.
func TestRegisteredRoutes(t *testing.T) {
	decide := server.HandlerFunc(func(w server.Response, r server.Request) error {
		if len(r.Query("placement")) == 0 {
			return tsubame.Errorf(tsubame.EINVALID, "placement is required")
		}
		if string(r.Query("placement")) == "none" {
			w.Status(http.StatusNoContent)
			return nil
		}
		w.Header("X-Client", r.Client().String())
		var args []string
		r.QueryEach(func(k, v []byte) { args = append(args, string(k)+"="+string(v)) })
		w.Header("X-Args", strings.Join(args, "&"))
		w.Cookie(server.Cookie{Name: "uid", Value: "v1", MaxAge: time.Hour, HTTPOnly: true})
		w.Body("application/json", []byte(`{"placement":"`+string(r.Query("placement"))+`","ua":"`+string(r.Header("User-Agent"))+`","uid":"`+string(r.Cookie("uid"))+`"}`))
		return nil
	})
	click := server.HandlerFunc(func(w server.Response, r server.Request) error {
		w.Redirect("https://advertiser.example/landing?from="+strings.TrimPrefix(string(r.Path()), "/t/"), http.StatusFound)
		return nil
	})
	srv, addr := startWith(t, server.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Routes: []server.Route{
		{Name: "decide", Path: "/api/decide", Handler: decide},
		{Name: "track", Path: "/t/", Methods: []string{"GET", "POST"}, Handler: click},
	}}, server.Endpoint{Name: "e", Source: server.Fixed(`{"urls":[]}`)})
	base := "http://" + addr
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, header ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := do("GET", "/api/decide?placement=p1", "User-Agent", "UA/1", "Cookie", "uid=abc", "X-Forwarded-For", "203.0.113.9")
	if resp.StatusCode != 200 || body != `{"placement":"p1","ua":"UA/1","uid":"abc"}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/api/decide: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if got := resp.Header.Get("X-Args"); got != "placement=p1" {
		t.Errorf("query arguments: %q", got)
	}
	if got := resp.Header.Get("X-Client"); got != "203.0.113.9" {
		t.Errorf("client behind the trusted proxy: %q", got)
	}
	if c := resp.Header.Get("Set-Cookie"); !strings.Contains(c, "uid=v1") || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "max-age=3600") {
		t.Errorf("Set-Cookie: %q", c)
	}
	if resp, _ := do("GET", "/api/decide?placement=none"); resp.StatusCode != 204 {
		t.Errorf("no decision: %d", resp.StatusCode)
	}
	if resp, body := do("GET", "/api/decide"); resp.StatusCode != 400 || !strings.Contains(body, "placement is required") {
		t.Errorf("missing placement: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do("POST", "/api/decide?placement=p1"); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /api/decide: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	// The ad endpoints under /api/ are served as before.
	if resp, body := do("GET", "/api/e.json?id=1"); resp.StatusCode != 200 || body != `{"urls":[]}` {
		t.Errorf("/api/e.json beside /api/decide: %d %q", resp.StatusCode, body)
	}
	for _, m := range []string{"GET", "POST"} {
		if resp, _ := do(m, "/t/c/abc"); resp.StatusCode != 302 || resp.Header.Get("Location") != "https://advertiser.example/landing?from=c/abc" {
			t.Errorf("%s /t/c/abc: %d %q", m, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if resp, _ := do("GET", "/tx"); resp.StatusCode != 404 {
		t.Errorf("/tx (not under /t/): %d", resp.StatusCode)
	}
	counts := map[string]map[int]uint64{}
	for _, rc := range srv.Requests() {
		if counts[rc.Route] == nil {
			counts[rc.Route] = map[int]uint64{}
		}
		for _, n := range rc.Buckets {
			counts[rc.Route][rc.Code] += n
		}
	}
	if counts["decide"][200] != 1 || counts["decide"][204] != 1 || counts["decide"][400] != 1 || counts["decide"][405] != 1 || counts["track"][302] != 2 { // a click redirect, counted apart
		t.Errorf("decide counted %v, track %v", counts["decide"], counts["track"])
	}

	for _, bad := range []server.Route{
		{Name: "callback", Path: "/x", Handler: decide},    // a built-in route's name
		{Name: "mine", Path: "/json", Handler: decide},     // a built-in route's path
		{Name: "rel", Path: "api/decide", Handler: decide}, // not a path
		{Name: "nil", Path: "/nil"},                        // no handler
	} {
		if _, err := server.New(testDefaults(server.Options{Routes: []server.Route{bad}}), nil); err == nil {
			t.Errorf("route %+v accepted", bad)
		}
	}
}

// Every registered route passes an in-flight limit: /api/decide and
// /rtb/ share the ad endpoints' (max_in_flight_ads), the tracking and
// notice routes have their own (max_in_flight_tracking), so a flood of ad
// requests never sheds a billable event. Over its bound a route answers
// its own way (a bid a bare 204) or a 503 with Retry-After, and the
// refusal is counted under its limit.
func TestRegisteredRoutesAreLimited(t *testing.T) {
	release := make(chan struct{})
	var entered atomic.Int64
	// A request with hold=1 holds its slot until release; others answer
	// at once.
	block := server.HandlerFunc(func(w server.Response, r server.Request) error {
		if string(r.Query("hold")) == "1" {
			entered.Add(1)
			<-release
		}
		w.Body("text/plain", []byte("done"))
		return nil
	})
	noBid := server.HandlerFunc(func(w server.Response, r server.Request) error {
		w.Header("X-Openrtb-Version", "2.6")
		w.Status(http.StatusNoContent)
		return nil
	})
	srv, addr := startWith(t, server.Options{MaxConns: 100, MaxInFlightAds: 2, MaxInFlightTracking: 1, LimitWait: time.Millisecond, Routes: []server.Route{
		{Name: "decide", Path: "/api/decide", Handler: block},
		{Name: "rtb", Path: "/rtb/", Methods: []string{"POST"}, Handler: block, Shed: noBid},
		{Name: "track", Path: "/t/", Handler: block, Limit: server.LimitTracking},
	}}, server.Endpoint{Name: "s", Source: server.Fixed(`{"urls":[]}`)})
	base := "http://" + addr
	get := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		resp, err := (&http.Transport{}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	hold := func(method, path string) {
		wg.Go(func() {
			if resp, body := get(method, path); resp.StatusCode != 200 || body != "done" {
				t.Errorf("held %s %s: %d %q", method, path, resp.StatusCode, body)
			}
		})
	}
	// Two decisions hold the ad limit.
	hold("GET", "/api/decide?placement=a&hold=1")
	hold("GET", "/api/decide?placement=b&hold=1")
	waitUntil(t, func() bool { return entered.Load() == 2 })

	if resp, body := get("GET", "/api/decide?placement=c"); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(body, "too many ad requests") {
		t.Errorf("/api/decide over the limit: %d %q %q", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp, body := get("POST", "/rtb/ssp"); resp.StatusCode != 204 || body != "" || resp.Header.Get("X-Openrtb-Version") != "2.6" {
		t.Errorf("/rtb/ over the limit: %d %q, want a bare 204", resp.StatusCode, body)
	}
	if resp, _ := get("GET", "/api/s.json?id=1"); resp.StatusCode != 503 {
		t.Errorf("an ad endpoint beside them: %d", resp.StatusCode)
	}
	// The tracking routes' limit is their own: free while ads are full.
	hold("GET", "/t/i/x?hold=1")
	waitUntil(t, func() bool { return entered.Load() == 3 })
	if resp, body := get("GET", "/t/c/y"); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(body, "too many tracking requests") {
		t.Errorf("/t/ over its limit: %d %q", resp.StatusCode, body)
	}
	refused := srv.Stats().Refused
	if refused[server.ReasonInFlightAds] != 3 || refused[server.ReasonInFlightTracking] != 1 {
		t.Errorf("refused: %v", refused)
	}
	releaseOnce.Do(func() { close(release) })
	wg.Wait()
	// The slots are given back.
	for _, p := range []struct{ method, path string }{{"GET", "/api/decide?placement=d"}, {"POST", "/rtb/ssp"}, {"GET", "/t/i/z"}} {
		if resp, body := get(p.method, p.path); resp.StatusCode != 200 || body != "done" {
			t.Errorf("%s %s after the release: %d %q", p.method, p.path, resp.StatusCode, body)
		}
	}

	if _, err := server.New(testDefaults(server.Options{Routes: []server.Route{{Name: "x", Path: "/x", Handler: block, Limit: 9}}}), nil); err == nil {
		t.Error("a route with an unknown limit accepted")
	}
}
