// Package server is the public HTTP listener: ad-tag endpoints under
// /api/<name>.<ext>, GET /json and the webhook receivers, on fasthttp. It is a thin adapter: request
// values are validated here, payloads come from a Source, framing from
// internal/render, and no fasthttp type leaves this package.
//
// It must not import the admin listener, config, the store backends or metrics: cmd/tsubame wires it (arch_test.go).
package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"
	"unsafe"

	"github.com/maypok86/otter/v2"
	"github.com/valyala/fasthttp"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/health"
	"tsubame/internal/render"
	"tsubame/internal/static"
	"tsubame/internal/webhook"
)

// Endpoint is one /api/<Name>.<ext> endpoint.
type Endpoint struct {
	Name         string
	Source       Source
	Formats      []render.Format // served formats; empty means js and json
	CacheControl string          // Cache-Control value; empty sends none
	// CORSOrigins allow pages of these origins (or "*": any) to read the
	// responses; CORSMaxAge is the preflight's Access-Control-Max-Age.
	CORSOrigins []string
	CORSMaxAge  time.Duration
	// Log receives a record of every response of this endpoint; nil logs nothing.
	Log *accesslog.Logger
	// Template, if set, renders .js responses instead of JSONP; Source must
	// then be a PlacementSource.
	Template *template.Template
}

// Site is one virtual host.
type Site struct {
	Name      string
	Hosts     []string // lower-case names, or *.example.com
	Endpoints []Endpoint
	Static    *static.Server // nil: no /lib/
}

// Options configure the listener. Zero timeouts and sizes take Defaults'
// (a public listener has no "no timeout"); MaxConns, MaxInFlightAds,
// MaxInFlightTracking, MaxInFlightHooks and LimitWait keep their zero (no
// bound, no wait).
type Options struct {
	Name           string // Server header; empty sends none
	ReadTimeout    time.Duration
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	MaxHeaderBytes int
	MaxBodyBytes   int
	MaxConns       int // connections open at once; one more gets a 503 (0: no bound)
	// MaxInFlightAds bounds the ad requests handled at once: the ad
	// endpoints under /api/ and the Routes of LimitAds (/api/decide,
	// /rtb/); MaxInFlightTracking the Routes of LimitTracking (tracking
	// and notice URLs); MaxInFlightHooks the webhooks (0: no bound). One
	// over its bound waits up to LimitWait for a slot, then gets a 503 (or
	// its route's Shed answer).
	MaxInFlightAds      int
	MaxInFlightTracking int
	MaxInFlightHooks    int
	LimitWait           time.Duration
	HelloJSON           bool // serve GET /json
	// Webhook receives POST /callback and POST /webhook/<platform> for
	// each of its platforms; nil serves none.
	Webhook *webhook.Receiver
	// CallbackToken, if set (with Webhook), serves POST /callback to requests
	// carrying "Authorization: Bearer <CallbackToken>"; others get a 401.
	// A reload may change it (rotate the token) but not turn /callback on.
	CallbackToken string
	// Static serves GET /lib/... for the default site; nil serves nothing there.
	Static *static.Server
	// Sites are virtual hosts picked by the Host header; the endpoints
	// given beside the options, and Static, form the default site, which
	// answers other hosts unless RejectUnknownHosts.
	Sites              []Site
	RejectUnknownHosts bool
	// TrustedProxies are the load balancers and proxies whose
	// X-Forwarded-For, Forwarded and (with ProxyProtocol) PROXY headers are
	// believed; see clientaddr.go. Both need a restart to change.
	TrustedProxies []netip.Prefix
	ProxyProtocol  bool
	// Routes are the paths other packages serve (route.go), beside the
	// server's own; they need a restart to change.
	Routes []Route
	// HSTS, if set, is the Strict-Transport-Security value sent on every
	// answer over TLS (a reload may change it).
	HSTS string
	// DrainGrace is how long a stop lets a keep-alive connection sit idle
	// since its last answer before closing it; every answer in a stop
	// carries Connection: close (drain.go). Zero takes Defaults'.
	DrainGrace time.Duration
	// Ready returns the checks GET /readyz reports (nil: always ready): the
	// server takes traffic while every required one passes. It is called on
	// every probe, so it must only read state kept elsewhere, and be safe
	// for concurrent use.
	Ready  func() health.Report
	Logger *slog.Logger
}

// Server serves the public endpoints. Create it with New, run it with Serve
// and stop it with Shutdown.
type Server struct {
	srv *fasthttp.Server
	// lns are the listeners given to Serve, closed by Shutdown too: a
	// Shutdown that comes before fasthttp has registered a listener (right
	// after Serve was called) would otherwise leave it accepting.
	lnMu     sync.Mutex
	lns      []net.Listener
	shutdown bool
	routes   atomic.Pointer[routes] // swapped whole by Reload
	webhook  *webhook.Receiver
	log      *slog.Logger
	maxConns int
	counters counters
	// trustedProxies and proxyProto: see Options.
	trustedProxies []netip.Prefix
	proxyProto     bool
	readTimeout    time.Duration
	panics         panicLog
	ready          readiness
	open           atomic.Int64 // connections open, on every listener
	loops          atomic.Int64 // accept loops running
	// deadlines sweeps the connections' read and write deadlines.
	deadlines *deadlines
	reqs      requestStats
	// The routes that are not ad tags, counted apart.
	statOther *routeStats // unknown paths, hosts and endpoints
	table     routeTable  // every path served, each with its stats (route.go)
	// draining is set by Shutdown: every answer closes its connection.
	draining   atomic.Bool
	drainGrace time.Duration
	// idleTimeout is how long a kept-alive connection waits for its next
	// request (an adopted one too, see limitListener).
	idleTimeout time.Duration
	handoff     atomic.Pointer[Handoff] // where a drain sends idle connections; nil closes them
	// hooks are the webhook platforms served at /webhook/<source>.
	hooks  map[string]hookRoute
	bootID string // prefixes generated request ids, so they differ across restarts
}

// routes is what a reload may change. A request reads it once, so it sees
// either the old set or the new one, never a mix.
type routes struct {
	def   *site            // the default site; nil rejects unknown hosts
	exact map[string]*site // host -> site
	wild  map[string]*site // ".example.com" -> site, from *.example.com
	hello bool
	ads   *gate
	track *gate
	hooks *gate
	hsts  []byte // Strict-Transport-Security on TLS answers; nil sends none
	// callbackKey is the SHA-256 of the /callback bearer credential
	// ("Bearer <token>"); nil serves no /callback.
	callbackKey *[sha256.Size]byte
}

type site struct {
	name      string // "" for the default site
	endpoints map[string]*endpoint
	static    *static.Server
}

// maxHost bounds the Host header looked up (DNS names are at most 253 bytes).
const maxHost = 256

// site picks the site for a host (the Host header's, or an absolute-form
// target's, as fasthttp reads them): exact name first, then the longest
// *.suffix, then the default; case, the port and one trailing dot are
// ignored. It allocates nothing.
func (r *routes) site(host []byte) *site {
	if len(r.exact) == 0 && len(r.wild) == 0 {
		return r.def
	}
	if i := bytes.LastIndexByte(host, ':'); i >= 0 && bytes.IndexByte(host[i:], ']') < 0 {
		host = host[:i] // drop the port (but not from an IPv6 literal's inside)
	}
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1] // a fully qualified name's trailing dot
	}
	if len(host) > maxHost {
		return r.def
	}
	var buf [maxHost]byte
	h := buf[:len(host)]
	for i, c := range host {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		h[i] = c
	}
	if st, ok := r.exact[string(h)]; ok {
		return st
	}
	for i, c := range h {
		if c == '.' {
			if st, ok := r.wild[string(h[i:])]; ok {
				return st
			}
		}
	}
	return r.def
}

type endpoint struct {
	name         string
	source       Source
	formats      [render.MaxFormats]bool
	cacheControl []byte
	cors         *cors // nil: no CORS headers
	log          *accesslog.Logger
	tmpl         *template.Template
	encodes      bool // the source encodes per request and wants a scratch buffer
	stats        *routeStats
	psource      PlacementSource
	rsource      RequestSource                   // the source, when it reads the whole request
	renders      *otter.Cache[string, *rendered] // template output by id
}

// hookRoute is a webhook platform served at /webhook/<source>.
type hookRoute struct {
	source webhook.Source
	stats  *routeStats
}

// rendered is a template's output for one placement version.
type rendered struct {
	version any
	out     []byte
}

// renderCacheBytes bounds each template endpoint's cache of outputs.
const renderCacheBytes = 8 << 20

// Defaults are the listener's defaults. The configuration's (server: in
// defaults.yaml) are checked against them.
var Defaults = Options{Name: "tsubame", ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: time.Minute,
	MaxHeaderBytes: 8 << 10, MaxBodyBytes: 1 << 20, MaxConns: 100000, MaxInFlightAds: 10000, MaxInFlightTracking: 20000, MaxInFlightHooks: 1000,
	LimitWait: 50 * time.Millisecond, DrainGrace: time.Second, HelloJSON: true}

func (o *Options) setDefaults() {
	d := Defaults
	o.ReadTimeout = positiveOr(o.ReadTimeout, d.ReadTimeout)
	o.WriteTimeout = positiveOr(o.WriteTimeout, d.WriteTimeout)
	o.IdleTimeout = positiveOr(o.IdleTimeout, d.IdleTimeout)
	o.MaxHeaderBytes = positiveOr(o.MaxHeaderBytes, d.MaxHeaderBytes)
	o.MaxBodyBytes = positiveOr(o.MaxBodyBytes, d.MaxBodyBytes)
	o.DrainGrace = positiveOr(o.DrainGrace, d.DrainGrace)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

func positiveOr[T int | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// New returns a Server for the given endpoints.
func New(opt Options, endpoints []Endpoint) (*Server, error) {
	opt.setDefaults()
	s := &Server{log: opt.Logger, webhook: opt.Webhook, trustedProxies: opt.TrustedProxies, proxyProto: opt.ProxyProtocol,
		readTimeout: opt.ReadTimeout, idleTimeout: opt.IdleTimeout, drainGrace: opt.DrainGrace,
		maxConns: opt.MaxConns, bootID: strconv.FormatInt(time.Now().UnixNano(), 36)}
	if s.webhook != nil {
		s.hooks = map[string]hookRoute{}
		for _, src := range s.webhook.Sources() {
			if src != webhook.SourceCallback { // at /callback, behind its token
				s.hooks[string(src)] = hookRoute{src, s.reqs.get(RouteWebhook + string(src))}
			}
		}
	}
	s.statOther = s.reqs.get(RouteOther)
	for _, rt := range s.builtins() {
		if err := s.table.add(rt); err != nil {
			return nil, err
		}
	}
	for _, rt := range opt.Routes {
		if rt.Handler == nil {
			return nil, tsubame.Errorf(tsubame.EINVALID, "route %q has no handler", rt.Name)
		}
		if rt.Limit != LimitAds && rt.Limit != LimitTracking {
			return nil, tsubame.Errorf(tsubame.EINVALID, "route %q has no in-flight limit", rt.Name)
		}
		ext := route{name: rt.Name, path: []byte(rt.Path), kind: routeExternal, stats: s.reqs.get(rt.Name), ext: s.external(rt),
			limit: rt.Limit, shed: rt.Shed}
		if rt.Log != nil {
			ext.logEP = &endpoint{name: rt.Name, log: rt.Log}
		}
		if err := s.table.add(ext); err != nil {
			return nil, err
		}
	}
	s.ready.probe = opt.Ready
	if err := s.Reload(opt, endpoints); err != nil {
		return nil, err
	}
	s.deadlines = newDeadlines(tickFor(opt.ReadTimeout, opt.WriteTimeout, opt.IdleTimeout))
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		Name:                  opt.Name,
		NoDefaultServerHeader: opt.Name == "",
		NoDefaultContentType:  true,
		ReadTimeout:           opt.ReadTimeout,
		WriteTimeout:          opt.WriteTimeout,
		IdleTimeout:           opt.IdleTimeout,
		ReadBufferSize:        opt.MaxHeaderBytes, // also the largest request head fasthttp accepts
		MaxRequestBodySize:    opt.MaxBodyBytes,
		// Connections are bounded by limitListener, which answers a fast
		// 503; fasthttp's own bound only backs it up.
		Concurrency:           max(opt.MaxConns*2, 1024),
		ErrorHandler:          s.errorHandler,
		ConnState:             s.connState,
		HeaderReceived:        s.headerReceived,
		SecureErrorLogMessage: true,
		Logger:                fasthttpLogger{opt.Logger},
	}
	return s, nil
}

// Reload replaces the endpoints and the reloadable options (HelloJSON and
// the in-flight bounds) atomically; requests in flight finish on what they
// started with. The listener's own options (timeouts, sizes, max_conns)
// need a restart. An invalid set leaves the current one serving.
func (s *Server) Reload(opt Options, endpoints []Endpoint) error {
	r := &routes{
		exact: map[string]*site{},
		wild:  map[string]*site{},
		hello: opt.HelloJSON,
		ads:   &gate{max: int64(opt.MaxInFlightAds), wait: opt.LimitWait},
		track: &gate{max: int64(opt.MaxInFlightTracking), wait: opt.LimitWait},
		hooks: &gate{max: int64(opt.MaxInFlightHooks), wait: opt.LimitWait},
	}
	if opt.HSTS != "" {
		r.hsts = []byte(opt.HSTS)
	}
	if opt.CallbackToken != "" && s.webhook != nil {
		k := sha256.Sum256([]byte(opt.CallbackToken))
		r.callbackKey = &k
	}
	def, err := s.buildSite(endpoints, opt.Static)
	if err != nil {
		return err
	}
	if !opt.RejectUnknownHosts {
		r.def = def
	}
	for _, sc := range opt.Sites {
		st, err := s.buildSite(sc.Endpoints, sc.Static)
		if err != nil {
			return tsubame.WrapError(tsubame.EINVALID, err, "site %q", sc.Name)
		}
		st.name = sc.Name
		for _, h := range sc.Hosts {
			h = strings.ToLower(h)
			m, key := r.exact, h
			if suffix, ok := strings.CutPrefix(h, "*"); ok {
				m, key = r.wild, suffix
			}
			if _, dup := m[key]; dup {
				return tsubame.Errorf(tsubame.EINVALID, "host %q belongs to two sites", h)
			}
			m[key] = st
		}
	}
	s.routes.Store(r)
	return nil
}

func (s *Server) buildSite(endpoints []Endpoint, st *static.Server) (*site, error) {
	out := &site{endpoints: make(map[string]*endpoint, len(endpoints)), static: st}
	for _, e := range endpoints {
		if _, dup := out.endpoints[e.Name]; dup {
			return nil, tsubame.Errorf(tsubame.EINVALID, "endpoint %q declared twice", e.Name)
		}
		if e.Source == nil {
			return nil, tsubame.Errorf(tsubame.EINVALID, "endpoint %q has no source", e.Name)
		}
		ep := &endpoint{name: e.Name, source: e.Source, log: e.Log, tmpl: e.Template, stats: s.reqs.get(e.Name),
			cors: newCORS(e.CORSOrigins, e.CORSMaxAge)}
		if enc, ok := e.Source.(interface{ encodesPerRequest() bool }); ok {
			ep.encodes = enc.encodesPerRequest()
		}
		if rs, ok := e.Source.(RequestSource); ok {
			ep.rsource, ep.encodes = rs, true
		}
		if e.CacheControl != "" {
			ep.cacheControl = []byte(e.CacheControl)
		}
		if e.Template != nil {
			ps, ok := e.Source.(PlacementSource)
			if !ok {
				return nil, tsubame.Errorf(tsubame.EINVALID, "endpoint %q: its source cannot feed a template", e.Name)
			}
			ep.psource = ps
			ep.renders = otter.Must(&otter.Options[string, *rendered]{
				MaximumWeight: renderCacheBytes,
				Weigher:       func(k string, r *rendered) uint32 { return uint32(min(len(k)+len(r.out)+64, 1<<31)) },
			})
		}
		if len(e.Formats) == 0 {
			e.Formats = []render.Format{render.FormatJSONP, render.FormatJSON}
		}
		for _, f := range e.Formats {
			ep.formats[f] = true
		}
		out.endpoints[e.Name] = ep
	}
	return out, nil
}

// Serve accepts connections on ln until Shutdown. It returns nil after a
// Shutdown and the accept error otherwise.
func (s *Server) Serve(ln net.Listener) error {
	return s.serveOn(ln, nil)
}

// serveOn serves ln, speaking TLS over it if t is set. Both kinds of
// listener share the connection bound, the deadlines and the handler; a
// PROXY header, if any, comes before the TLS handshake.
func (s *Server) serveOn(ln net.Listener, t *tlsServing) error {
	if !s.register(ln) {
		return nil
	}
	return s.serveRegistered(ln, t, s.proxyProto, false)
}

// register adds ln to the listeners Shutdown closes, or closes it if
// Shutdown has begun.
func (s *Server) register(ln net.Listener) bool {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.shutdown {
		_ = ln.Close()
		return false
	}
	s.lns = append(s.lns, ln)
	return true
}

func (s *Server) serveRegistered(ln net.Listener, t *tlsServing, proxied, adopted bool) error {
	if proxied {
		ln = s.proxyListener(ln, s.readTimeout)
	}
	ll := &limitListener{Listener: ln, max: int64(s.maxConns), open: &s.open, refused: &s.counters.conns, dl: s.deadlines, tls: t,
		adopted: adopted, idle: s.idleTimeout, readTimeout: s.readTimeout}
	// A connection is counted in open only once Accept has returned it: a
	// drain also waits for the accept loops, or one accepted as the
	// listener closed could be served after the drain.
	s.loops.Add(1)
	defer s.loops.Add(-1)
	err := s.srv.Serve(ll)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, lets in-flight requests finish, answers each
// connection's next request with Connection: close and lets idle ones go
// (to a successor, or after DrainGrace: drain.go); it returns when every
// connection has ended or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.lnMu.Lock()
	s.shutdown = true
	lns := s.lns
	s.lnMu.Unlock()
	s.draining.Store(true)
	for _, ln := range lns {
		if al, ok := ln.(*adoptListener); ok {
			_ = al.closeInto(ctx, s.handoff.Load())
			continue
		}
		_ = ln.Close() // Serve returns; its workers finish their connections
	}
	err := s.drain(ctx)
	if err == nil {
		// Every connection is closed; those left by a cut-short shutdown
		// keep their deadlines swept.
		s.deadlines.close()
	}
	return err
}

// WaitIdle waits, after a Shutdown that ran out of time, until every
// connection is closed or ctx ends: requests that outlived the deadline
// (held by a failing access log) finish once the log has closed, and their
// answers should reach their clients before the process exits.
func (s *Server) WaitIdle(ctx context.Context) error {
	for s.open.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

var (
	apiPrefix = []byte("/api/")
	helloPath = []byte("/json")
	helloBody = []byte(`{"message":"Hello, World!"}`)

	libPrefix    = []byte("/lib/")
	callbackPath = []byte("/callback")
	hookPrefix   = []byte("/webhook/")
	argID        = "id"
	argCB        = "callback"

	// Header names in canonical form, set without per-request normalisation.
	hdrNosniff      = []byte("X-Content-Type-Options")
	valNosniff      = []byte("nosniff")
	hdrCacheControl = []byte("Cache-Control")
	hdrHSTS         = []byte("Strict-Transport-Security")
)

// bufPool holds scratch buffers for sources that encode per request.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// handle answers a request, logs it if its endpoint keeps an access log, and
// counts it by route, status and latency (one clock read serves both).
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	var lr logged
	rs := s.statOther
	if why := checkFramingIf(&ctx.Request.Header); why != "" {
		s.refuseFraming(ctx, why)
	} else {
		rs = s.serve(ctx, &lr)
	}
	if s.draining.Load() {
		ctx.SetConnectionClose()
	}
	d := time.Since(ctx.Time())
	if lr.ep != nil {
		s.logRequest(ctx, &lr, d)
	}
	rs.observe(ctx.ConnID(), ctx.Response.StatusCode(), d)
}

// logged is what an ad request leaves for its access-log record: the
// endpoint (nil: nothing to log) and the id and callback it carried.
type logged struct {
	ep           *endpoint
	id, callback []byte
}

// serve answers a request by dispatch and returns the stats of the route
// it took. A panic in a handler is answered with a 500 and the request
// keeps its access-log record and its count: one bad request or placement
// must not end the process.
func (s *Server) serve(ctx *fasthttp.RequestCtx, lr *logged) (rs *routeStats) {
	rs = s.statOther
	defer func() {
		if p := recover(); p != nil {
			s.recovered(ctx, p)
		}
	}()
	s.dispatch(ctx, lr, &rs)
	return rs
}

// dispatch answers a request. It records the route taken in *rs (left as
// is for unknown paths, hosts and endpoints) before answering, so that a
// panic is counted under its route.
func (s *Server) dispatch(ctx *fasthttp.RequestCtx, lr *logged, rs **routeStats) {
	ctx.Response.Header.SetCanonical(hdrNosniff, valNosniff)
	path := ctx.Path()
	r := s.routes.Load()
	if r.hsts != nil && ctx.IsTLS() {
		ctx.Response.Header.SetCanonical(hdrHSTS, r.hsts)
	}
	rt, rest := s.table.lookup(path)
	if rt == nil {
		plain(ctx, fasthttp.StatusNotFound, "not found")
		return
	}
	// The server's own routes are direct calls: through a func value, the
	// request's stack state (lr, rs) would escape, two allocations a request.
	switch rt.kind {
	case routeAPI:
		st := r.site(ctx.Host())
		if st == nil {
			s.fail(ctx, errUnknownHost)
			return
		}
		s.serveAPI(ctx, r, st, rest, lr, rs)
	case routeCallback:
		if r.callbackKey == nil {
			plain(ctx, fasthttp.StatusNotFound, "not found")
			return
		}
		*rs = rt.stats
		if allowPost(ctx) && s.authorized(ctx, r.callbackKey) && s.enter(ctx, r.hooks, &s.counters.hookLimit, errTooManyWebhooks) {
			defer r.hooks.leave()
			status, body := s.webhook.Serve(webhook.SourceCallback, ctx.PostBody(), &ctx.Request.Header)
			reply(ctx, status, body)
		}
	case routeWebhook:
		h, ok := s.hooks[string(rest)]
		if !ok {
			plain(ctx, fasthttp.StatusNotFound, "not found")
			return
		}
		*rs = h.stats
		if allowPost(ctx) && s.enter(ctx, r.hooks, &s.counters.hookLimit, errTooManyWebhooks) {
			defer r.hooks.leave()
			status, body := s.webhook.Serve(h.source, ctx.PostBody(), &ctx.Request.Header)
			reply(ctx, status, body)
		}
	case routeLib:
		st := r.site(ctx.Host())
		if st == nil || st.static == nil {
			plain(ctx, fasthttp.StatusNotFound, "not found")
			return
		}
		*rs = rt.stats
		if allowRead(ctx) {
			s.serveStatic(ctx, st.static, rest)
		}
	case routeHealth, routeReady:
		*rs = rt.stats
		s.serveHealth(ctx, rt.kind == routeReady)
	case routeJSON:
		if !r.hello {
			plain(ctx, fasthttp.StatusNotFound, "not found")
			return
		}
		*rs = rt.stats
		if allowRead(ctx) {
			ctx.SetContentType(render.ContentTypeJSON)
			ctx.SetBody(helloBody)
		}
	case routeExternal:
		*rs = rt.stats
		if rt.logEP != nil {
			lr.ep = rt.logEP
		}
		g, refused := r.ads, &s.counters.adsLimit
		if rt.limit == LimitTracking {
			g, refused = r.track, &s.counters.trackLimit
		}
		if !g.enter() {
			refused.Add(1)
			s.shed(ctx, rt)
			return
		}
		defer g.leave()
		rt.ext(ctx)
	}
}

// builtins are the server's own routes (route.go).
func (s *Server) builtins() []route {
	health := s.reqs.get(RouteHealth) // /healthz and /readyz together
	out := []route{
		{name: "api", path: apiPrefix, kind: routeAPI}, // counted by endpoint
		{name: RouteCallback, path: callbackPath, kind: routeCallback, stats: s.reqs.get(RouteCallback)},
		{name: RouteLib, path: libPrefix, kind: routeLib, stats: s.reqs.get(RouteLib)},
		{name: "healthz", path: healthPath, kind: routeHealth, stats: health},
		{name: "readyz", path: readyPath, kind: routeReady, stats: health},
		{name: RouteJSON, path: helloPath, kind: routeJSON, stats: s.reqs.get(RouteJSON)},
	}
	if s.hooks != nil {
		out = append(out, route{name: RouteWebhook, path: hookPrefix, kind: routeWebhook}) // counted by platform
	}
	return out
}

func (s *Server) serveAPI(ctx *fasthttp.RequestCtx, r *routes, st *site, rest []byte, lr *logged, rs **routeStats) {
	dot := bytes.LastIndexByte(rest, '.')
	if dot < 0 {
		s.fail(ctx, errUnknownEndpoint)
		return
	}
	ep := st.endpoints[string(rest[:dot])]
	format, ok := render.ParseFormat(rest[dot+1:])
	if ep == nil || !ok {
		s.fail(ctx, errUnknownEndpoint)
		return
	}
	if !ep.formats[format] {
		s.fail(ctx, errFormatNotServed)
		return
	}
	*rs = ep.stats
	if ep.log != nil {
		lr.ep = ep // before responding: a panic's 500 is logged too
	}
	if ctx.IsOptions() {
		preflight(ctx, ep.cors)
		return
	}
	if ep.cors != nil {
		ep.cors.permit(ctx)
	}
	if s.enter(ctx, r.ads, &s.counters.adsLimit, errTooManyAds) {
		defer r.ads.leave()
		if err := s.respond(ctx, ep, format, lr); err != nil {
			s.fail(ctx, err)
		}
	}
}

// shed answers a request of the registered route rt that its limit
// refused: the route's own way, else a 503 with Retry-After.
func (s *Server) shed(ctx *fasthttp.RequestCtx, rt *route) {
	if rt.shed == nil {
		s.fail(ctx, errTooManyRequests[rt.limit])
		return
	}
	if err := rt.shed.ServeRequest(Response{ctx}, Request{ctx, s, nil}); err != nil {
		s.fail(ctx, err)
	}
}

// enter passes the request through g, or answers refusal (a 503) and
// counts it.
func (s *Server) enter(ctx *fasthttp.RequestCtx, g *gate, refused *atomic.Uint64, refusal error) bool {
	if g.enter() {
		return true
	}
	refused.Add(1)
	s.fail(ctx, refusal)
	return false
}

// respond writes the response of ep to ctx, or returns why it cannot
// (for fail), and keeps the id and callback the request carried in lr, for
// the access log.
func (s *Server) respond(ctx *fasthttp.RequestCtx, ep *endpoint, format render.Format, lr *logged) error {
	if !allowRead(ctx) {
		return nil
	}
	args := ctx.QueryArgs()
	id := args.Peek(argID)
	var callback []byte
	if format.Callback() {
		callback = args.Peek(argCB)
	}
	lr.id, lr.callback = id, callback
	if err := checkID(id); err != nil {
		return err
	}
	if ep.tmpl != nil && format == render.FormatJSONP {
		if len(callback) > 0 && !render.ValidCallback(callback) {
			return errBadCallback
		}
		return s.respondTemplate(ctx, ep, id, callback)
	}
	if format.Callback() {
		if len(callback) == 0 {
			return errMissingCallback
		}
		if !render.ValidCallback(callback) {
			return errBadCallback
		}
	}

	var scratch []byte
	if ep.encodes {
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		scratch = (*bp)[:0]
	}
	var payload []byte
	var found bool
	var err error
	if ep.rsource != nil {
		payload, found, err = ep.rsource.RequestPayload(Response{ctx}, Request{ctx, s, ep.log}, format.Encoding(), id, scratch)
	} else {
		payload, found, err = ep.source.Payload(context.Background(), format.Encoding(), id, scratch)
	}
	if err != nil {
		return err
	}
	if !found {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
	}
	ctx.SetContentType(format.ContentType())
	if ep.cacheControl != nil {
		ctx.Response.Header.SetCanonical(hdrCacheControl, ep.cacheControl)
	}
	render.Write(ctx, format, callback, payload)
	return nil
}

// respondTemplate answers with ep's template rendered for the placement.
// An output is reused while the placement's version (its cache entry) and
// the callback stay the same; a changed placement renders once more.
func (s *Server) respondTemplate(ctx *fasthttp.RequestCtx, ep *endpoint, id, callback []byte) error {
	p, version, err := ep.psource.Placement(context.Background(), id)
	if err != nil {
		return err
	}
	var out []byte
	// The callback is part of the output, so outputs are reused only for
	// requests without one (the usual script-injection case).
	if version != nil && len(callback) == 0 {
		if r, ok := ep.renders.GetIfPresent(unsafe.String(unsafe.SliceData(id), len(id))); ok && r.version == version {
			out = r.out
		}
	}
	if out == nil {
		var b bytes.Buffer
		if err := ep.tmpl.Execute(&b, render.NewTemplateData(string(id), ep.name, p, callback)); err != nil {
			return tsubame.WrapError(tsubame.EINTERNAL, err, "response template %s of endpoint %s failed", ep.tmpl.Name(), ep.name)
		}
		out = b.Bytes()
		if version != nil && len(callback) == 0 {
			ep.renders.Set(string(id), &rendered{version: version, out: out})
		}
	}
	if p == nil {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
	}
	ctx.SetContentType(render.ContentTypeJS)
	if ep.cacheControl != nil {
		ctx.Response.Header.SetCanonical(hdrCacheControl, ep.cacheControl)
	}
	ctx.Response.SetBodyRaw(out) // outputs are never modified once made
	return nil
}

// maxRequestID bounds a client-supplied X-Request-Id kept in the log.
const maxRequestID = 128

// logRequest appends the record of the response in ctx, stamped when it
// was produced. If the log refuses it (only after it was closed: a request
// that outlived the shutdown deadline), the response becomes a 503, and
// that 503 is recorded in the log's fallback file: no response goes out
// unaccounted for, and no ad is served once the log has stopped.
func (s *Server) logRequest(ctx *fasthttp.RequestCtx, lr *logged, took time.Duration) {
	ep := lr.ep
	done := ctx.Time().Add(took)
	remote, peer := s.clientAddr(ctx)
	if peer == remote {
		peer = netip.Addr{} // logged only when it differs
	}
	var idBuf [40]byte
	reqID := s.requestID(ctx, idBuf[:0])
	rec := accesslog.Record{
		Time:      done,
		Duration:  took,
		Remote:    remote,
		Peer:      peer,
		Host:      ctx.Request.Header.Host(), // as sent; ctx.Host() is fasthttp's reading of it
		Method:    ctx.Method(),
		Path:      ctx.Path(),
		Endpoint:  ep.name,
		ID:        lr.id,
		Callback:  lr.callback,
		Status:    ctx.Response.StatusCode(),
		Size:      len(ctx.Response.Body()),
		UserAgent: ctx.UserAgent(),
		Referer:   ctx.Referer(),
		RequestID: reqID,
	}
	if err := ep.log.Append(&rec, ctx.ConnID()); err != nil {
		s.log.Error("access log refused a record; answering 503, recorded in the fallback file", "endpoint", ep.name, "err", err)
		ctx.Response.ResetBody()
		ctx.Response.Header.Del("Cache-Control")
		s.fail(ctx, errLogUnavailable)
		ctx.SetConnectionClose() // the server is stopping
		rec.Status, rec.Size = fasthttp.StatusServiceUnavailable, len(ctx.Response.Body())
		ep.log.Late(&rec)
	}
}

// requestID is the request's id in the access log: the client's
// X-Request-Id when it has a sane length, else this process's boot id and
// the request's number, appended to buf.
func (s *Server) requestID(ctx *fasthttp.RequestCtx, buf []byte) []byte {
	if id := ctx.Request.Header.Peek("X-Request-Id"); len(id) > 0 && len(id) <= maxRequestID {
		return id
	}
	buf = append(buf, s.bootID...)
	buf = append(buf, '-')
	return strconv.AppendUint(buf, ctx.ID(), 36)
}

// checkID returns why id cannot name a placement, or nil if it can.
func checkID(id []byte) error {
	if len(id) == 0 {
		return errMissingID
	}
	if len(id) > tsubame.MaxIDLength {
		return errLongID
	}
	for _, c := range id {
		if !tsubame.IDChar(c) {
			return errIDChars
		}
	}
	return nil
}

// The errors public requests meet most, made once.
var (
	errUnknownHost     = tsubame.Errorf(tsubame.ENOTFOUND, "unknown host")
	errUnknownEndpoint = tsubame.Errorf(tsubame.ENOTFOUND, "unknown endpoint")
	errFormatNotServed = tsubame.Errorf(tsubame.ENOTFOUND, "format not enabled for this endpoint (its formats in the configuration)")
	errMissingID       = tsubame.Errorf(tsubame.EINVALID, "missing placement id")
	errLongID          = tsubame.Errorf(tsubame.EINVALID, "placement id too long")
	errIDChars         = tsubame.Errorf(tsubame.EINVALID, "placement id may contain only letters, digits and -_.:@")
	errMissingCallback = tsubame.Errorf(tsubame.EINVALID, "missing callback")
	errBadCallback     = tsubame.Errorf(tsubame.EINVALID, "callback must be a JavaScript identifier path such as Example.process")
	errLogUnavailable  = tsubame.Errorf(tsubame.EUNAVAILABLE, "access log unavailable")
	errTooManyAds      = tsubame.Errorf(tsubame.EUNAVAILABLE, "too many ad requests at once, retry later")
	errTooManyWebhooks = tsubame.Errorf(tsubame.EUNAVAILABLE, "too many webhook requests at once, retry later")
	errTooManyTracking = tsubame.Errorf(tsubame.EUNAVAILABLE, "too many tracking requests at once, retry later")
	// errTooManyRequests is a registered route's refusal, by its Limit.
	errTooManyRequests = [...]error{LimitAds: errTooManyAds, LimitTracking: errTooManyTracking}
	errUnauthorized    = tsubame.Errorf(tsubame.EUNAUTHORIZED, "missing or wrong bearer token")
)

// fail answers a public request that err stopped: the status err's kind
// maps to (render.HTTPStatus, the one map) and err's client-safe message
// as text. Internal errors are logged (their details never reach the
// client). The access log records the answer like any other (logRequest
// reads the response).
func (s *Server) fail(ctx *fasthttp.RequestCtx, err error) {
	status := render.HTTPStatus(err)
	if status == fasthttp.StatusInternalServerError {
		s.log.Error("public request failed", "path", string(ctx.Path()), "err", err)
	}
	plain(ctx, status, tsubame.ErrorMessage(err))
}

// reply writes a webhook answer (always JSON; its status comes from the
// webhook receiver, which maps its errors with render.HTTPStatus too).
func reply(ctx *fasthttp.RequestCtx, status int, body []byte) {
	answer(ctx, status, render.ContentTypeJSON)
	ctx.SetBody(body)
}

func allowPost(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsPost() {
		return true
	}
	ctx.Response.Header.Set("Allow", "POST")
	plain(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed")
	return false
}

func allowRead(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsGet() || ctx.IsHead() {
		return true
	}
	ctx.Response.Header.Set("Allow", "GET, HEAD")
	plain(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed")
	return false
}

// plain answers with a one-line text body.
func plain(ctx *fasthttp.RequestCtx, status int, msg string) {
	answer(ctx, status, render.ContentTypeText)
	ctx.SetBodyString(msg + "\n")
}

// answer sets the status and content type of an answer that is not an ad:
// a 503 says when to retry (Retry-After: 1, the condition passes), here
// alone.
func answer(ctx *fasthttp.RequestCtx, status int, contentType string) {
	ctx.SetStatusCode(status)
	if status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	ctx.SetContentType(contentType)
}

// fasthttpLogger sends fasthttp's own reports (connection errors) to slog.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	if f.l.Enabled(context.Background(), slog.LevelDebug) {
		f.l.Debug("fasthttp", "msg", fmt.Sprintf(format, args...))
	}
}
