package server

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"tsubame"
	"tsubame/internal/accesslog"
)

// The public listener's paths are one table: the server's own routes (ad
// tags under /api/, the webhooks, /lib/, the probes, /json) and the routes
// other packages register through Options.Routes, each counted under its
// own name. An exact path wins over a prefix (so /api/decide can sit beside
// the ad endpoints under /api/), and a longer prefix over a shorter one.
// Nothing else in the server switches on a path.

// Route is one path and what answers it, registered by the package that
// owns it (wired in cmd/tsubame).
type Route struct {
	// Name counts the route's requests (the route label of the request
	// metrics). Unique among routes.
	Name string
	// Path is an exact path such as "/api/decide", or, ending in "/", a
	// prefix such as "/t/" that serves every path under it.
	Path string
	// Methods are the methods served; others get a 405 with Allow. Empty
	// serves GET and HEAD.
	Methods []string
	Handler Handler
	// Log, when set, receives the line of every response of the route (as
	// an endpoint's), and the event lines its handler writes through
	// Request.LogEvent.
	Log *accesslog.Logger
	// Limit is the in-flight bound the route's requests count against:
	// every public request passes one (limits.go).
	Limit Limit
	// CORS, when set, lets the pages of its origins read the route's
	// responses (errors too), and answers OPTIONS preflights: a route
	// served to GET and HEAD only (NewCORSPolicy with its Methods).
	CORS *CORSPolicy
	// Shed answers a request its limit refused; nil answers a 503 with
	// Retry-After, as the ad endpoints do. It must not block: the server
	// is overloaded when it runs.
	Shed Handler
}

// Limit names the in-flight bound a route's requests count against.
type Limit uint8

const (
	// LimitAds is Options.MaxInFlightAds, shared with the ad endpoints
	// under /api/: requests that decide or bid. The zero value, so that
	// a route is bounded unless it says otherwise.
	LimitAds Limit = iota
	// LimitTracking is Options.MaxInFlightTracking: the tracking and
	// notice URLs, each a billable event. Their bound is their own, so a
	// flood of ad requests never sheds them.
	LimitTracking
)

// Handler answers requests. It must be safe for concurrent use. A Request
// and every byte slice it returns are valid only until ServeRequest
// returns; a Response's setters copy what they are given.
type Handler interface {
	// ServeRequest answers r through w, or returns an error whose kind
	// (tsubame.ErrorCode) the server maps to a status and a short body.
	ServeRequest(w Response, r Request) error
}

// HandlerFunc is a function that is a Handler.
type HandlerFunc func(w Response, r Request) error

// ServeRequest calls f.
func (f HandlerFunc) ServeRequest(w Response, r Request) error { return f(w, r) }

// Request is a request as a Handler sees it: read-only, without the HTTP
// engine's types.
type Request struct {
	ctx *fasthttp.RequestCtx
	s   *Server
	log *accesslog.Logger // the route's or endpoint's; nil: events are not logged
}

// Method is the request's method.
func (r Request) Method() []byte { return r.ctx.Method() }

// Path is the request's path, unescaped.
func (r Request) Path() []byte { return r.ctx.Path() }

// Query is the first value of the query argument name, or nil.
func (r Request) Query(name string) []byte { return r.ctx.QueryArgs().Peek(name) }

// QueryEach calls fn for every query argument, in order.
func (r Request) QueryEach(fn func(key, value []byte)) {
	for k, v := range r.ctx.QueryArgs().All() {
		fn(k, v)
	}
}

// Header is the value of the header name (the first, if repeated), or nil.
func (r Request) Header(name string) []byte { return r.ctx.Request.Header.Peek(name) }

// Cookie is the value of the cookie name, or nil.
func (r Request) Cookie(name string) []byte { return r.ctx.Request.Header.Cookie(name) }

// Host is the Host the request names (the site it was routed by).
func (r Request) Host() []byte { return r.ctx.Host() }

// Site is the name of the site the request's Host routes to ("" for the
// default site, and for a host no site takes).
func (r Request) Site() string {
	if st := r.s.routes.Load().site(r.ctx.Host()); st != nil {
		return st.name
	}
	return ""
}

// Body is the request's body.
func (r Request) Body() []byte { return r.ctx.PostBody() }

// TLS reports whether the request came over TLS.
func (r Request) TLS() bool { return r.ctx.IsTLS() }

// Client is the client's address: the connection's peer, or the address a
// trusted proxy in front names (clientaddr.go), as the access log has it.
func (r Request) Client() netip.Addr {
	client, _ := r.s.clientAddr(r.ctx)
	return client
}

// Time is when the request's head was read.
func (r Request) Time() time.Time { return r.ctx.Time() }

// UserAgent is the request's User-Agent.
func (r Request) UserAgent() []byte { return r.ctx.UserAgent() }

// Logs reports whether LogEvent writes to an access log.
func (r Request) Logs() bool { return r.log != nil }

// LogEvent appends e as an event line of this request to the access log of
// its route or endpoint (with the request's time, client and request id,
// which tie it to the request's own line). An error means the log refused
// it (only once it is closed): the caller must not serve what the event
// records. Without a log it does nothing.
func (r Request) LogEvent(e *accesslog.Event) error {
	if r.log == nil {
		return nil
	}
	remote, _ := r.s.clientAddr(r.ctx)
	var idBuf [40]byte
	rec := accesslog.Record{
		Time:      time.Now(),
		Remote:    remote,
		RequestID: r.s.requestID(r.ctx, idBuf[:0]),
		Event:     e,
	}
	return r.log.Append(&rec, r.ctx.ConnID())
}

// Response is how a Handler answers.
type Response struct {
	ctx *fasthttp.RequestCtx
}

// Status sets the status code (200 unless set).
func (w Response) Status(code int) { w.ctx.SetStatusCode(code) }

// Header sets a response header.
func (w Response) Header(name, value string) { w.ctx.Response.Header.Set(name, value) }

// Body sets the body and its content type.
func (w Response) Body(contentType string, body []byte) {
	w.ctx.SetContentType(contentType)
	w.ctx.SetBody(body)
}

// BodyShared sets the body and its content type without copying the
// body, which must never change afterwards (an immutable file held in a
// cache).
func (w Response) BodyShared(contentType string, body []byte) {
	w.ctx.SetContentType(contentType)
	w.ctx.Response.SetBodyRaw(body)
}

// Redirect answers with code (a 3xx) and Location: location, which the
// caller must have checked (no open redirect: see internal/track).
func (w Response) Redirect(location string, code int) {
	w.ctx.Response.Header.Set("Location", location)
	w.ctx.SetStatusCode(code)
}

// Cookie sets a cookie.
func (w Response) Cookie(c Cookie) {
	ck := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(ck)
	ck.SetKey(c.Name)
	ck.SetValue(c.Value)
	ck.SetPath(cmpOr(c.Path, "/"))
	if c.MaxAge > 0 {
		ck.SetMaxAge(int(c.MaxAge / time.Second))
	}
	ck.SetHTTPOnly(c.HTTPOnly)
	ck.SetSecure(c.Secure)
	if c.SameSiteNone {
		ck.SetSameSite(fasthttp.CookieSameSiteNoneMode)
	}
	w.ctx.Response.Header.SetCookie(ck)
}

// Cookie is a cookie a Response sets.
type Cookie struct {
	Name, Value, Path string
	MaxAge            time.Duration
	HTTPOnly, Secure  bool
	SameSiteNone      bool // SameSite=None (which browsers take only with Secure)
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

type route struct {
	name  string // unique: a registered route may not take a built-in one's name
	path  []byte
	kind  routeKind
	stats *routeStats                    // nil: the route counts by endpoint or platform itself
	ext   func(ctx *fasthttp.RequestCtx) // kind routeExternal
	logEP *endpoint                      // kind routeExternal with a Log: what its lines are logged as
	limit Limit                          // kind routeExternal
	shed  Handler                        // kind routeExternal; nil: a 503
}

// routeKind names the server's own routes, which dispatch calls directly.
type routeKind uint8

const (
	routeExternal routeKind = iota // registered through Options.Routes
	routeAPI
	routeCallback
	routeWebhook
	routeLib
	routeHealth
	routeReady
	routeJSON
)

// routeTable is fixed at New. Exact paths are few and compared by length
// first, so a linear scan costs less than hashing the path.
type routeTable struct {
	exact    []route
	prefixes []route // longest first
}

func (t *routeTable) add(rt route) error {
	for _, o := range slices.Concat(t.exact, t.prefixes) {
		if o.name == rt.name || bytes.Equal(o.path, rt.path) {
			return tsubame.Errorf(tsubame.EINVALID, "route %q (%s) clashes with route %q (%s)", rt.name, rt.path, o.name, o.path)
		}
	}
	if len(rt.path) == 0 || rt.path[0] != '/' {
		return tsubame.Errorf(tsubame.EINVALID, "route %q: path %q does not start with /", rt.name, rt.path)
	}
	if rt.path[len(rt.path)-1] != '/' {
		t.exact = append(t.exact, rt)
		return nil
	}
	t.prefixes = append(t.prefixes, rt)
	slices.SortStableFunc(t.prefixes, func(a, b route) int { return len(b.path) - len(a.path) })
	return nil
}

// lookup returns the route for path and the rest of the path after a
// prefix route's prefix.
func (t *routeTable) lookup(path []byte) (*route, []byte) {
	for i := range t.exact {
		if bytes.Equal(t.exact[i].path, path) {
			return &t.exact[i], nil
		}
	}
	for i := range t.prefixes {
		if bytes.HasPrefix(path, t.prefixes[i].path) {
			return &t.prefixes[i], path[len(t.prefixes[i].path):]
		}
	}
	return nil, nil
}

// external makes a registered Route ready to serve.
func (s *Server) external(rt Route) func(ctx *fasthttp.RequestCtx) {
	methods := rt.Methods
	if len(methods) == 0 {
		methods = []string{fasthttp.MethodGet, fasthttp.MethodHead}
	}
	allow := strings.Join(methods, ", ")
	return func(ctx *fasthttp.RequestCtx) {
		if rt.CORS != nil {
			c := rt.CORS.p.Load()
			if ctx.IsOptions() {
				preflight(ctx, c)
				return
			}
			c.permit(ctx)
		}
		if !slices.ContainsFunc(methods, func(m string) bool { return string(ctx.Method()) == m }) {
			ctx.Response.Header.Set("Allow", allow)
			plain(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed")
			return
		}
		if err := rt.Handler.ServeRequest(Response{ctx}, Request{ctx, s, rt.Log}); err != nil {
			s.fail(ctx, err)
		}
	}
}
