package server

import (
	"bytes"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"tsubame/internal/static"
)

// /lib/: combined static assets with far-future caching. The assets never
// change under one URL (a new version gets a new ~vN), so responses are
// "immutable" for a year; the validators (a strong ETag per content coding
// and Last-Modified) serve clients that revalidate anyway.

var (
	hdrVary           = []byte("Vary")
	hdrETag           = []byte("ETag")
	hdrExpires        = []byte("Expires")
	hdrIfNoneMatch    = []byte("If-None-Match")
	hdrAcceptEncoding = []byte("Accept-Encoding")
	valAcceptEncoding = []byte("Accept-Encoding")
	valImmutable      = []byte("public, max-age=31536000, immutable")
)

// assetMaxAge is valImmutable's max-age, for Expires.
const assetMaxAge = 365 * 24 * time.Hour

// serveStatic answers /lib/ requests: the combined asset in the coding the
// client prefers, or a 304 when its copy is current. A 304 carries the
// headers the 200 would (RFC 9110 §15.4.5): Cache-Control, Expires, Vary,
// ETag and Last-Modified.
func (s *Server) serveStatic(ctx *fasthttp.RequestCtx, assets *static.Server, rest []byte) {
	a, err := assets.Get(unsafe.String(unsafe.SliceData(rest), len(rest))) // Get copies what it keeps
	if err != nil {
		plain(ctx, fasthttp.StatusNotFound, "not found")
		return
	}
	body, etag, coding := a.Body, a.ETag, ""
	if a.Gzip != nil || a.Brotli != nil {
		br, gz := acceptedCodings(&ctx.Request.Header)
		if a.Brotli == nil {
			br = 0
		}
		if a.Gzip == nil {
			gz = 0
		}
		switch {
		case br > 0 && br >= gz: // brotli at equal preference: it is smaller
			body, etag, coding = a.Brotli, a.ETagBrotli, "br"
		case gz > 0:
			body, etag, coding = a.Gzip, a.ETagGzip, "gzip"
		}
	}
	h := &ctx.Response.Header
	h.SetCanonical(hdrVary, valAcceptEncoding)
	h.SetCanonical(hdrCacheControl, valImmutable)
	h.SetCanonical(hdrExpires, expires.get(ctx.Time()))
	h.SetCanonical(hdrETag, etag)
	h.SetLastModified(a.ModTime)
	if notModified(ctx, etag, a.ModTime) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetContentType(a.ContentType)
	if coding != "" {
		h.SetContentEncoding(coding)
	}
	ctx.Response.SetBodyRaw(body) // assets are immutable: no copy
}

// notModified evaluates the client's preconditions (RFC 9110 §13.2.2):
// If-None-Match when present, and only then If-Modified-Since.
func notModified(ctx *fasthttp.RequestCtx, etag []byte, mod time.Time) bool {
	if inm := ctx.Request.Header.PeekBytes(hdrIfNoneMatch); inm != nil {
		return matchesAny(inm, etag)
	}
	return !ctx.IfModifiedSince(mod)
}

// matchesAny reports whether an If-None-Match value matches etag: "*", or
// a list of entity tags compared weakly (W/ ignored, RFC 9110 §13.1.2).
// A malformed element ends the list.
func matchesAny(list, etag []byte) bool {
	list = bytes.TrimSpace(list)
	if len(list) == 1 && list[0] == '*' {
		return true
	}
	for len(list) > 0 {
		list = bytes.TrimLeft(list, " \t,")
		if len(list) == 0 {
			break
		}
		list, _ = bytes.CutPrefix(list, []byte("W/"))
		if len(list) < 2 || list[0] != '"' {
			return false
		}
		end := bytes.IndexByte(list[1:], '"')
		if end < 0 {
			return false
		}
		if bytes.Equal(list[:end+2], etag) {
			return true
		}
		list = list[end+2:]
	}
	return false
}

// acceptedCodings reads Accept-Encoding (RFC 9110 §12.5.3) and returns the
// preference, in thousandths, for br and gzip: codings are matched without
// regard to case and with whitespace anywhere allowed, "x-gzip" is gzip,
// "*" stands for the codings not named, and q=0 (or a malformed q)
// refuses. No header means no preference for any coding.
func acceptedCodings(h *fasthttp.RequestHeader) (br, gz int) {
	br, gz = -1, -1
	star := 0
	for _, v := range h.PeekAll(string(hdrAcceptEncoding)) {
		for len(v) > 0 {
			var elem []byte
			elem, v, _ = bytes.Cut(v, []byte(","))
			name, params, _ := bytes.Cut(elem, []byte(";"))
			name = bytes.TrimSpace(name)
			if len(name) == 0 {
				continue
			}
			q := qvalue(params)
			switch {
			case bytes.EqualFold(name, []byte("br")):
				br = max(br, q)
			case bytes.EqualFold(name, []byte("gzip")), bytes.EqualFold(name, []byte("x-gzip")):
				gz = max(gz, q)
			case len(name) == 1 && name[0] == '*':
				star = max(star, q)
			}
		}
	}
	if br < 0 {
		br = star
	}
	if gz < 0 {
		gz = star
	}
	return br, gz
}

// qvalue parses an element's parameters for its weight, in thousandths:
// 1000 without one, 0 for a malformed one.
func qvalue(params []byte) int {
	for len(params) > 0 {
		var p []byte
		p, params, _ = bytes.Cut(params, []byte(";"))
		k, v, ok := bytes.Cut(p, []byte("="))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(k), []byte("q")) {
			continue
		}
		return parseQ(bytes.TrimSpace(v))
	}
	return 1000
}

// parseQ parses a weight: 0 or 1 with up to three decimals ("0.8", "1.000").
func parseQ(v []byte) int {
	if len(v) == 0 || len(v) > 5 || (v[0] != '0' && v[0] != '1') {
		return 0
	}
	q := int(v[0]-'0') * 1000
	if len(v) == 1 {
		return q
	}
	if v[1] != '.' {
		return 0
	}
	scale := 100
	for _, c := range v[2:] {
		if c < '0' || c > '9' {
			return 0
		}
		q += int(c-'0') * scale
		scale /= 10
	}
	if q > 1000 {
		return 0
	}
	return q
}

// expires is the Expires value of /lib/ responses, formatted once a second.
var expires expiresClock

type expiresClock struct {
	cur atomic.Pointer[expiresValue]
}

type expiresValue struct {
	sec int64
	val []byte
}

func (e *expiresClock) get(now time.Time) []byte {
	sec := now.Unix()
	if v := e.cur.Load(); v != nil && v.sec == sec {
		return v.val
	}
	v := &expiresValue{sec: sec, val: fasthttp.AppendHTTPDate(nil, now.Add(assetMaxAge))}
	e.cur.Store(v)
	return v.val
}
