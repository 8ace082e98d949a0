package ads_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tsubame/internal/accesslog"
	"tsubame/internal/ads"
	"tsubame/internal/decision"
	"tsubame/internal/server"
	"tsubame/internal/track"
)

// BenchmarkServeDecide is /api/decide end to end in process (a loopback
// connection, the real server, access log and signer): what a decision
// costs beyond the matching core (BenchmarkDecide in internal/decision).
func BenchmarkServeDecide(b *testing.B) {
	f := newFixtureB(b)
	signer, _ := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	eng := decision.NewEngine(f.store, decision.EngineOptions{Currency: "JPY"})
	if _, err := eng.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	device := func([]byte) ads.Device { return ads.Device{Device: "desktop", OS: "windows", Browser: "chrome"} }
	svc, err := ads.New(ads.Options{Engine: eng, Signer: signer, Currency: "JPY", TTL: time.Hour, Reservation: 10 * time.Minute,
		CookieName: "tsubame_uid", CookieMaxAge: time.Hour, Dedupe: f.store, Device: device})
	if err != nil {
		b.Fatal(err)
	}
	sink, err := accesslog.OpenFile(accesslog.FileOptions{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	log := accesslog.New(sink, accesslog.Options{})
	defer log.Close(context.Background())
	srv, err := server.New(server.Options{Routes: svc.Routes(log)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	addr := ln.Addr().String()
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return net.Dial("tcp", addr) }, MaxConnsPerHost: 64}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://ads.example/api/decide?placement=top&uid=u-1&site=news.example.com&kv.section=sports")
		req.Header.Set("User-Agent", "Mozilla/5.0 Chrome/131")
		for pb.Next() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("%v %d", err, resp.StatusCode())
				return
			}
		}
	})
	// The deferred shutdown drains for a second: not a decision's cost
	// (it made every run of b.N=1 take a second, so N never grew).
	b.StopTimer()
}
