package server

import (
	"bytes"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tsubame/internal/framing"
)

// CORS per endpoint and route, so publishers' pages can read .json and
// /api/decide with fetch(). Allowed origins get Access-Control-Allow-Origin
// (the origin itself, or * where any origin is allowed); others get no
// CORS headers, and the browser keeps the response from the page. An ad
// endpoint's responses do not depend on cookies, and never allow
// credentials; a route's may (CORS.Credentials: /api/decide's visitor
// cookie), and then to its listed origins only, each echoed exactly.

// CORS is a route's CORS policy (Route.CORS).
type CORS struct {
	// Origins are the serialized origins whose pages may read the
	// route's responses (lower case), or "*" alone for every page.
	Origins []string
	// MaxAge is how long a browser may reuse a preflight's answer.
	MaxAge time.Duration
	// Credentials lets the listed origins' requests carry cookies
	// (Access-Control-Allow-Credentials); "*" never does.
	Credentials bool
}

// CORSPolicy is a route's CORS, replaced at once by a reload.
type CORSPolicy struct{ p atomic.Pointer[cors] }

// NewCORSPolicy makes a policy of c, for a route served to methods (GET,
// HEAD or both).
func NewCORSPolicy(c CORS, methods ...string) *CORSPolicy {
	p := &CORSPolicy{}
	p.set(c, methods)
	return p
}

// Set replaces the policy's origins, age and credentials.
func (p *CORSPolicy) Set(c CORS) { p.set(c, p.methods()) }

func (p *CORSPolicy) methods() []string {
	if cur := p.p.Load(); cur != nil {
		return cur.methods
	}
	return nil
}

func (p *CORSPolicy) set(c CORS, methods []string) {
	if len(methods) == 0 {
		methods = []string{fasthttp.MethodGet, fasthttp.MethodHead}
	}
	next := newCORS(c.Origins, c.MaxAge)
	if next == nil {
		next = &cors{} // no origin allowed: preflights get Allow alone
	}
	allow := strings.Join(methods, ", ")
	next.credentials = c.Credentials && !next.any
	next.methods, next.read, next.allow = methods, []byte(allow), []byte(allow+", OPTIONS")
	p.p.Store(next)
}

// cors is an endpoint's or route's CORS policy; nil sends no CORS headers.
type cors struct {
	any         bool                // cors_origins: ["*"]
	origins     map[string]struct{} // serialized origins, lower case
	maxAge      []byte              // Access-Control-Max-Age, in seconds
	credentials bool                // listed origins may send cookies
	// read are the methods a preflight allows (GET, HEAD or both), allow
	// the Allow header of an OPTIONS answer.
	read, allow []byte
	methods     []string // a route's: read, as its Route has them
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
	hdrACAC           = []byte("Access-Control-Allow-Credentials")
	valTrue           = []byte("true")
	valComma          = []byte(",")
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
	c := &cors{origins: map[string]struct{}{}, maxAge: strconv.AppendInt(nil, int64(maxAge/time.Second), 10),
		read: valReadMethods, allow: valAllowedMethods}
	for _, o := range origins {
		if o == "*" {
			c.any = true
		}
		c.origins[o] = struct{}{}
	}
	return c
}

// permit sets the CORS headers of a response to a request from an allowed
// origin, and reports whether it was one.
func (c *cors) permit(ctx *fasthttp.RequestCtx) bool {
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
	if c.credentials {
		h.SetCanonical(hdrACAC, valTrue)
	}
	return true
}

// preflight answers OPTIONS to an endpoint or route of policy c (nil:
// none): 204 with Allow, and for an allowed origin asking to GET or HEAD
// the preflight headers.
func preflight(ctx *fasthttp.RequestCtx, c *cors) {
	h := &ctx.Response.Header
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	if c == nil {
		h.SetCanonical(hdrAllow, valAllowedMethods)
		return
	}
	h.SetCanonical(hdrAllow, c.allow)
	method := ctx.Request.Header.PeekBytes(hdrACRM)
	allowed := hasToken(c.read, method) && c.permit(ctx)
	h.SetCanonical(hdrVary, valPreflightVary) // after allow's Vary: Origin; a preflight varies on more
	if !allowed {
		return
	}
	h.SetCanonical(hdrACAM, c.read)
	if req := ctx.Request.Header.PeekBytes(hdrACRH); len(req) > 0 && len(req) <= maxRequestHeaders && tokenList(req) {
		h.SetCanonical(hdrACAH, req) // responses do not depend on request headers: any may be sent
	}
	h.SetCanonical(hdrACMaxAge, c.maxAge)
}

// hasToken reports whether the comma-separated list holds the token t.
func hasToken(list, t []byte) bool {
	for rest := list; len(t) > 0 && len(rest) > 0; {
		var tok []byte
		tok, rest, _ = bytes.Cut(rest, valComma)
		if bytes.Equal(bytes.TrimSpace(tok), t) {
			return true
		}
	}
	return false
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
