package server

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"tsubame/internal/framing"
)

// CORS per endpoint, so publishers' pages can read .json with fetch().
// Allowed origins get Access-Control-Allow-Origin (the origin itself, or *
// where any origin is allowed); others get no CORS headers, and the
// browser keeps the response from the page. Credentials are never allowed:
// ad responses do not depend on cookies.

// cors is an endpoint's CORS policy; nil sends no CORS headers.
type cors struct {
	any     bool                // cors_origins: ["*"]
	origins map[string]struct{} // serialized origins, lower case
	maxAge  []byte              // Access-Control-Max-Age, in seconds
}

// maxRequestHeaders bounds the Access-Control-Request-Headers echoed back.
const maxRequestHeaders = 1024

var (
	hdrOrigin         = []byte("Origin")
	hdrACAO           = []byte("Access-Control-Allow-Origin")
	hdrACAM           = []byte("Access-Control-Allow-Methods")
	hdrACAH           = []byte("Access-Control-Allow-Headers")
	hdrACMaxAge       = []byte("Access-Control-Max-Age")
	hdrACRM           = []byte("Access-Control-Request-Method")
	hdrACRH           = []byte("Access-Control-Request-Headers")
	hdrAllow          = []byte("Allow")
	valStar           = []byte("*")
	valOrigin         = []byte("Origin")
	valPreflightVary  = []byte("Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
	valReadMethods    = []byte("GET, HEAD")
	valAllowedMethods = []byte("GET, HEAD, OPTIONS")
)

func newCORS(origins []string, maxAge time.Duration) *cors {
	if len(origins) == 0 {
		return nil
	}
	c := &cors{origins: map[string]struct{}{}, maxAge: strconv.AppendInt(nil, int64(maxAge/time.Second), 10)}
	for _, o := range origins {
		if o == "*" {
			c.any = true
		}
		c.origins[o] = struct{}{}
	}
	return c
}

// allow sets the CORS headers of a response to a request from an allowed
// origin, and reports whether it was one.
func (c *cors) allow(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Response.Header
	if !c.any {
		h.SetCanonical(hdrVary, valOrigin) // the answer depends on Origin, for any cache on the way
	}
	origin := ctx.Request.Header.PeekBytes(hdrOrigin)
	if len(origin) == 0 {
		return false
	}
	if c.any {
		h.SetCanonical(hdrACAO, valStar)
		return true
	}
	if _, ok := c.origins[string(origin)]; !ok { // no allocation: the compiler reads the map in place
		return false
	}
	h.SetCanonical(hdrACAO, origin)
	return true
}

// preflight answers OPTIONS to an endpoint: 204 with Allow, and for an
// allowed origin asking to GET or HEAD the preflight headers.
func (s *Server) preflight(ctx *fasthttp.RequestCtx, ep *endpoint) {
	h := &ctx.Response.Header
	h.SetCanonical(hdrAllow, valAllowedMethods)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	if ep.cors == nil {
		return
	}
	method := string(ctx.Request.Header.PeekBytes(hdrACRM)) // compared without a copy
	allowed := (method == fasthttp.MethodGet || method == fasthttp.MethodHead) && ep.cors.allow(ctx)
	h.SetCanonical(hdrVary, valPreflightVary) // after allow's Vary: Origin; a preflight varies on more
	if !allowed {
		return
	}
	h.SetCanonical(hdrACAM, valReadMethods)
	if req := ctx.Request.Header.PeekBytes(hdrACRH); len(req) > 0 && len(req) <= maxRequestHeaders && tokenList(req) {
		h.SetCanonical(hdrACAH, req) // responses do not depend on request headers: any may be sent
	}
	h.SetCanonical(hdrACMaxAge, ep.cors.maxAge)
}

// tokenList reports whether b is a comma-separated list of field names.
func tokenList(b []byte) bool {
	for _, c := range b {
		if !framing.TokenByte(c) && c != ',' && c != ' ' && c != '\t' {
			return false
		}
	}
	return true
}
