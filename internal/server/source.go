package server

import (
	"context"

	"tsubame"
	"tsubame/internal/cache"
	"tsubame/internal/render"
)

// Source yields the payload an endpoint serves for a placement id, in an
// encoding (render.Encoding: the format's). It must be safe for concurrent
// use. id is only valid during the call. buf is scratch space the source
// may append an encoded payload to (nil unless the source says it encodes
// per request); the returned payload is only read until the response is
// written and is never modified.
type Source interface {
	Payload(ctx context.Context, enc render.Encoding, id []byte, buf []byte) (payload []byte, found bool, err error)
}

// RequestSource is a Source whose payload depends on the whole request (the
// visitor, the site, key-values: a decision), not on the placement id
// alone. The server calls RequestPayload instead of Payload, with the
// response (for a cookie) and the request, whose LogEvent writes to the
// endpoint's access log. A RequestSource always gets a scratch buffer;
// found false answers 404 as for an unknown placement.
type RequestSource interface {
	Source
	RequestPayload(w Response, r Request, enc render.Encoding, id []byte, buf []byte) (payload []byte, found bool, err error)
}

// PlacementSource is a Source that also hands out the placement itself,
// for response templates. The placement is nil for an unknown id; it is
// shared and read-only. version tells placements apart: the same non-nil
// version means the same placement, so a rendering may be reused; nil
// means "do not reuse".
type PlacementSource interface {
	Source
	Placement(ctx context.Context, id []byte) (p *tsubame.Placement, version any, err error)
}

// Fixed serves the same payload whatever the id and the encoding.
type Fixed []byte

// Payload returns the fixed payload.
func (f Fixed) Payload(context.Context, render.Encoding, []byte, []byte) ([]byte, bool, error) {
	return f, true, nil
}

// fixedURLs serves the same URLs whatever the id (the benchmark's sample1).
type fixedURLs struct {
	payloads [render.MaxEncodings][]byte
	p        *tsubame.Placement
}

// FixedURLs returns a source serving the given ad tag URLs for every id,
// encoded by encoders (render.Encoders).
func FixedURLs(urls []string, encoders [render.MaxEncodings]render.Encoder) PlacementSource {
	f := &fixedURLs{p: &tsubame.Placement{URLs: urls}}
	for i, e := range encoders {
		if e.Encode != nil {
			f.payloads[i] = e.Encode(nil, f.p)
		}
	}
	return f
}

func (f *fixedURLs) Payload(_ context.Context, enc render.Encoding, _, _ []byte) ([]byte, bool, error) {
	return f.payloads[enc], true, nil
}

func (f *fixedURLs) Placement(context.Context, []byte) (*tsubame.Placement, any, error) {
	return f.p, f, nil
}

// Direct reads the store and encodes the placement on every request (the
// benchmark's sample2: no cache).
type Direct struct {
	Store    tsubame.Store
	Encoders [render.MaxEncodings]render.Encoder // render.Encoders
}

// Payload reads id from the store and appends its payload to buf.
func (d Direct) Payload(ctx context.Context, enc render.Encoding, id []byte, buf []byte) ([]byte, bool, error) {
	p, err := d.Store.Get(ctx, string(id))
	switch {
	case err == nil:
		return d.Encoders[enc].Encode(buf, p), true, nil
	case tsubame.IsNotFound(err):
		return d.Encoders[enc].NotFound, false, nil
	}
	return nil, false, err
}

// encodesPerRequest tells the server to lend a scratch buffer (the other
// sources return payloads they already hold).
func (d Direct) encodesPerRequest() bool { return true }

// Placement reads id from the store; nothing is reused across requests.
func (d Direct) Placement(ctx context.Context, id []byte) (*tsubame.Placement, any, error) {
	p, err := d.Store.Get(ctx, string(id))
	if tsubame.IsNotFound(err) {
		return nil, nil, nil
	}
	return p, nil, err
}

// Cached serves ready-encoded payloads from the in-process cache.
type Cached struct{ Cache *cache.Cache }

// Payload looks id up in the cache.
func (c Cached) Payload(ctx context.Context, enc render.Encoding, id []byte, _ []byte) ([]byte, bool, error) {
	e, err := c.Cache.Lookup(ctx, id)
	if err != nil {
		return nil, false, err
	}
	if payload := e.Payloads[enc]; payload != nil {
		return payload, e.Found, nil
	}
	// A format whose encoding the cache was not made with (cache.Options).
	return nil, false, tsubame.Errorf(tsubame.EINTERNAL, "the cache keeps no payloads in encoding %d", enc)
}

// Placement looks id up in the cache; the entry is the version.
func (c Cached) Placement(ctx context.Context, id []byte) (*tsubame.Placement, any, error) {
	e, err := c.Cache.Lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return e.Placement(), e, nil
}
