package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/valyala/fasthttp"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/cache"
	"tsubame/internal/render"
	"tsubame/internal/static"
	"tsubame/internal/store/memory"
)

// benchHandler measures one request through the real handler, without the
// network: routing, validation, source and framing. It reports allocs/op, the
// figure the hot path is held to (0 for a cache hit).
func benchHandler(b *testing.B, uri string, src func(tsubame.Store, *cache.Cache) Source, log ...*accesslog.Logger) {
	store := memory.New()
	if err := store.Put(context.Background(), &tsubame.Placement{ID: "1", URLs: []string{
		"http://ad1.example.com/tag.js", "http://ad2.example.com/tag.js"}}); err != nil {
		b.Fatal(err)
	}
	c, err := cache.New(store, cache.Options{Encoders: render.Encoders(render.EncoderOptions{}, []render.Format{render.FormatJSONP})})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ep := Endpoint{Name: "ep", Source: src(store, c)}
	if len(log) > 0 {
		ep.Log = log[0]
	}
	s, err := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, []Endpoint{ep})
	if err != nil {
		b.Fatal(err)
	}
	serveLoop(b, s, uri, "")
}

// serveLoop runs the handler on uri (with a Host header, if given) in
// parallel and fails on any status but 200.
func serveLoop(b *testing.B, s *Server, uri, host string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		ctx.Init(&fasthttp.Request{}, nil, nil) // a connection of its own, as in the server
		for pb.Next() {
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.SetRequestURI(uri)
			if host != "" {
				ctx.Request.Header.SetHost(host)
			}
			s.handle(&ctx)
			if ctx.Response.StatusCode() != fasthttp.StatusOK {
				b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
	})
}

const benchURI = "/api/ep.js?id=1&callback=Example.process"

func BenchmarkHandlerCacheHit(b *testing.B) {
	benchHandler(b, benchURI, func(_ tsubame.Store, c *cache.Cache) Source { return Cached{Cache: c} })
}

func BenchmarkHandlerFixed(b *testing.B) {
	benchHandler(b, benchURI, func(tsubame.Store, *cache.Cache) Source {
		return FixedURLs([]string{"http://ad1.example.com/tag.js", "http://ad2.example.com/tag.js"}, render.Encoders(render.EncoderOptions{}, render.Formats()))
	})
}

func BenchmarkHandlerDirectMemory(b *testing.B) {
	benchHandler(b, benchURI, func(s tsubame.Store, _ *cache.Cache) Source {
		return Direct{Store: s, Encoders: render.Encoders(render.EncoderOptions{}, render.Formats())}
	})
}

// The same cache hit with its record appended to a file access log.
func BenchmarkHandlerCacheHitLogged(b *testing.B) {
	sink, err := accesslog.OpenFile(accesslog.FileOptions{Dir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	l := accesslog.New(sink, accesslog.Options{})
	defer l.Close(context.Background())
	benchHandler(b, benchURI, func(_ tsubame.Store, c *cache.Cache) Source { return Cached{Cache: c} }, l)
}

// The same cache hit with its record copied into the file through the
// mapped writer (durability: process, the default).
func BenchmarkHandlerCacheHitMapped(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	l, _, err := accesslog.OpenMapped(accesslog.FileOptions{Dir: b.TempDir(), Logger: quiet}, accesslog.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	benchHandler(b, benchURI, func(_ tsubame.Store, c *cache.Cache) Source { return Cached{Cache: c} }, l)
}

// The same cache hit when the server also has virtual hosts to choose from.
func BenchmarkHandlerCacheHitWithSites(b *testing.B) {
	store := memory.New()
	if err := store.Put(context.Background(), &tsubame.Placement{ID: "1", URLs: []string{"http://ad1.example.com/tag.js"}}); err != nil {
		b.Fatal(err)
	}
	c, err := cache.New(store, cache.Options{Encoders: render.Encoders(render.EncoderOptions{}, []render.Format{render.FormatJSONP})})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	eps := []Endpoint{{Name: "ep", Source: Cached{Cache: c}}}
	s, err := New(Options{Sites: []Site{
		{Name: "a", Hosts: []string{"a.example.com", "*.a.example.com"}, Endpoints: eps},
		{Name: "b", Hosts: []string{"b.example.com"}, Endpoints: eps},
	}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	serveLoop(b, s, benchURI, "www.A.example.com:4000")
}

// BenchmarkHandlerLib serves a cached /lib/ asset to a browser's
// Accept-Encoding: the coding chosen, the validators and Expires set.
func BenchmarkHandlerLib(b *testing.B) {
	root := b.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.js"), bytes.Repeat([]byte("function a(){}\n"), 100), 0o644); err != nil {
		b.Fatal(err)
	}
	st, err := static.New(static.Options{Root: root})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s, err := New(Options{Static: st}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		ctx.Init(&fasthttp.Request{}, nil, nil)
		for pb.Next() {
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.SetRequestURI("/lib/a.js~v1.js")
			ctx.Request.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
			s.handle(&ctx)
			if ctx.Response.StatusCode() != fasthttp.StatusOK || string(ctx.Response.Header.ContentEncoding()) != "br" {
				b.Fatalf("status %d, %q", ctx.Response.StatusCode(), ctx.Response.Header.ContentEncoding())
			}
		}
	})
}

// BenchmarkHandlerRoute is a registered route (as /api/decide and /rtb/
// are): the table lookup, its in-flight limit and a handler that writes
// a constant.
func BenchmarkHandlerRoute(b *testing.B) {
	ok := []byte("ok")
	s, err := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxInFlightAds: 10000, Routes: []Route{
		{Name: "r", Path: "/r", Handler: HandlerFunc(func(w Response, r Request) error { w.Body("text/plain", ok); return nil })},
	}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	serveLoop(b, s, "/r", "")
}
