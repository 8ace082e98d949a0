package server

import (
	"context"
	"testing"

	"github.com/valyala/fasthttp"

	"tsubame"
	"tsubame/internal/cache"
	"tsubame/internal/render"
	"tsubame/internal/store/memory"
)

// benchHandler measures one request through the real handler, without the
// network: routing, validation, source and framing. It reports allocs/op, the
// figure the hot path is held to (0 for a cache hit).
func benchHandler(b *testing.B, uri string, src func(tsubame.Store, *cache.Cache) Source) {
	store := memory.New()
	if err := store.Put(context.Background(), &tsubame.Placement{ID: "1", URLs: []string{
		"http://ad1.example.com/tag.js", "http://ad2.example.com/tag.js"}}); err != nil {
		b.Fatal(err)
	}
	c, err := cache.New(store, cache.Options{Encode: render.AppendPayload, NotFound: render.NotFoundPayload})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := New(Options{}, []Endpoint{{Name: "ep", Source: src(store, c)}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		for pb.Next() {
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.SetRequestURI(uri)
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
		return FixedURLs([]string{"http://ad1.example.com/tag.js", "http://ad2.example.com/tag.js"})
	})
}

func BenchmarkHandlerDirectMemory(b *testing.B) {
	benchHandler(b, benchURI, func(s tsubame.Store, _ *cache.Cache) Source { return Direct{Store: s} })
}
