package server

import (
	"context"

	"tsubame"
	"tsubame/internal/cache"
	"tsubame/internal/render"
)

// Source yields the payload an endpoint serves for a placement id. It must be
// safe for concurrent use. id is only valid during the call. buf is scratch
// space the source may append an encoded payload to; the returned payload is
// only read until the response is written and is never modified.
type Source interface {
	Payload(ctx context.Context, id []byte, buf []byte) (payload []byte, found bool, err error)
}

// Fixed serves the same payload whatever the id (the seed's sample1).
type Fixed []byte

// FixedURLs returns a Fixed source serving the given ad tag URLs.
func FixedURLs(urls []string) Fixed { return Fixed(render.AppendURLs(nil, urls)) }

// Payload returns the fixed payload.
func (f Fixed) Payload(context.Context, []byte, []byte) ([]byte, bool, error) {
	return f, true, nil
}

// Direct reads the store and encodes the placement on every request (the
// seed's sample2: no cache).
type Direct struct{ Store tsubame.Store }

// Payload reads id from the store and appends its payload to buf.
func (d Direct) Payload(ctx context.Context, id []byte, buf []byte) ([]byte, bool, error) {
	p, err := d.Store.Get(ctx, string(id))
	switch {
	case err == nil:
		return render.AppendPayload(buf, p), true, nil
	case tsubame.IsNotFound(err):
		return render.NotFoundPayload, false, nil
	}
	return nil, false, err
}

// Cached serves ready-encoded payloads from the in-process cache.
type Cached struct{ Cache *cache.Cache }

// Payload looks id up in the cache.
func (c Cached) Payload(ctx context.Context, id []byte, _ []byte) ([]byte, bool, error) {
	e, err := c.Cache.Lookup(ctx, id)
	if err != nil {
		return nil, false, err
	}
	return e.Payload, e.Found, nil
}
