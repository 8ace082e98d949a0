// Package admin is the admin listener, on net/http and separate from the
// public one: the dashboard at /, a JSON API under /api/v1/ (placements,
// cache purge, config, access-log status, live stats, API tokens), /metrics
// (Prometheus), /debug/pprof, /healthz and /readyz. Everything but the
// probes, the login and the page's assets takes a user: there are no default
// credentials; the first user is created with a one-time bootstrap token or
// `tsubame admin create-user`. It listens on loopback by default, and on
// the control socket (socket.go), where the peer's uid authenticates.
//
// It must not import the public listener, config, the cache or the store backends: it works through tsubame.Store and the callbacks cmd/tsubame gives it (arch_test.go).
package admin

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tsubame"
	"tsubame/internal/asset"
	"tsubame/internal/forecast"
	"tsubame/internal/health"
)

// Options configure the admin listener.
type Options struct {
	// Ready returns the checks /readyz reports (nil: none; the listener's
	// own SetReady still counts). It is called on every probe, so it must
	// only read state kept elsewhere, and be safe for concurrent use.
	Ready func() health.Report
	// Metrics is served at /metrics in the Prometheus text format; nil
	// disables the route. MetricsPublic serves it without authentication.
	Metrics       prometheus.Gatherer
	MetricsPublic bool
	// Pprof serves /debug/pprof to authenticated users.
	Pprof  bool
	Logger *slog.Logger

	// Accounts holds the users and API tokens; Audit records every action.
	// Both are required.
	Accounts *Accounts
	Audit    *Audit
	Policy   PasswordPolicy
	// RequireTOTP refuses to create users without a second factor.
	RequireTOTP bool
	SessionIdle time.Duration
	SessionMax  time.Duration
	// Login throttling (see throttle).
	LoginFreeFailures int
	LoginMaxDelay     time.Duration
	LoginPerMinute    int
	// TLS is the listener's TLS config, nil for plain HTTP.
	TLS *tls.Config
	// Hosts are the names (and addresses) a request's Host may give besides
	// localhost, loopback addresses and the listener's own: see hosts.go.
	Hosts []string

	// Placements is the store the API edits: the cache decorator, so that a
	// write invalidates this node's cache and, on Redis, every node's.
	Placements tsubame.Store
	// Campaigns is the campaign model's store, which the campaign API
	// (campaigns.go) reads and writes; nil: those routes answer that this
	// server keeps no campaigns.
	Campaigns tsubame.CampaignStore
	// Assets keeps creatives' uploaded files (assets.go), each at most
	// AssetLimits' bytes of its kind; nil: uploads answer that this
	// server's store keeps none.
	Assets      tsubame.Assets
	AssetLimits asset.Limits
	// Purge drops cached placements on every node: by id, by dependency key,
	// or everything.
	Purge func(ctx context.Context, ids, deps []string, all bool) error
	// ConfigView returns the effective configuration with secrets redacted.
	ConfigView func() any
	// Endpoints lists the configured public endpoints (the default site's
	// and every site's), for the dashboard's table of them.
	Endpoints func() []string
	// Tags tells the placements' ad tag snippets where the public
	// listener answers and what it serves (tags.go); nil: no script tag,
	// no decide form, and a base URL without a port.
	Tags func() TagSetup
	// AccessLog returns the access logs' status.
	AccessLog func() any
	// Sample returns the counters the dashboard turns into rates.
	Sample func() Sample
	// Budgets reports every budget and impression limit as the store holds
	// it (booked, settled, reserved, remaining, the pacing's target and
	// ideal curve), JSON-encodable; nil: the route answers that this
	// server keeps none.
	Budgets func(ctx context.Context) (any, error)
	// Reports are the delivery and billing reports; nil: the report routes
	// answer that this server keeps none. ReportLocation is the zone of
	// their hours and days when a query names none (report.timezone).
	Reports        Reports
	ReportLocation *time.Location
	// StoreAudit tells what the store keeps (tsubame.Auditor), after
	// giving the past days' budget keys still kept their drop time when
	// expire is set; nil: the route answers that this store cannot.
	StoreAudit func(ctx context.Context, expire bool) (*tsubame.StoreAudit, error)
	// Forecast answers forecasts (internal/forecast); nil: the route
	// answers that this server makes none.
	Forecast func(forecast.Request) (*forecast.Result, error)
	// Explain tells what /api/decide would answer a request of the query
	// and headers given, and why each candidate line item serves or not
	// (internal/ads, Service.Explain), JSON-encodable; nil: the route
	// answers that this server makes no decisions.
	Explain func(q url.Values, h http.Header) (any, error)
	// LineItemStatus tells whether each of items serves now and why not
	// (LineStatus), in their order, from the state the decision index
	// uses; nil: the line items are listed without it.
	LineItemStatus func(ctx context.Context, items []*tsubame.LineItem) ([]LineStatus, error)
	// MaxImportBytes bounds a bulk import's body.
	MaxImportBytes int64
	// MaxTokenTTL caps an API token's lifetime (and is the lifetime of one
	// made without a ttl); 0: no cap.
	MaxTokenTTL time.Duration
}

// Server is the admin listener.
type Server struct {
	opt       Options
	http      *http.Server
	log       *slog.Logger
	ready     atomic.Bool
	accounts  *Accounts
	auditLog  *Audit
	sessions  *sessions
	throttle  *throttle
	now       func() time.Time
	stats     *statsRing
	stopStats func()
	statsOnce sync.Once
	hosts     *hostAllow

	closing   chan struct{} // closed by Shutdown: ends the stats streams
	closeOnce sync.Once

	bootMu    sync.Mutex
	bootstrap string // the one-time token while no user exists; "" once used
}

// Defaults are the values zero options take where zero means nothing
// (sessions that end at once, imports of no bytes); the login throttle's
// and the policy's zeros are settings of their own. The configuration's
// defaults (admin: in defaults.yaml) are checked against them.
var Defaults = Options{SessionIdle: 30 * time.Minute, SessionMax: 12 * time.Hour, MaxImportBytes: 64 << 20}

func (o *Options) setDefaults() {
	d := Defaults
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxImportBytes <= 0 {
		o.MaxImportBytes = d.MaxImportBytes
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = d.SessionIdle
	}
	if o.SessionMax <= 0 {
		o.SessionMax = d.SessionMax
	}
}

// New returns an admin Server; it reports not ready until SetReady(true).
// If no user exists yet it makes a one-time bootstrap token, which
// BootstrapToken returns for the caller to show once.
func New(opt Options) *Server {
	opt.setDefaults()
	s := &Server{opt: opt, log: opt.Logger, accounts: opt.Accounts, auditLog: opt.Audit,
		sessions: &sessions{m: map[[32]byte]*session{}, idle: opt.SessionIdle, max: opt.SessionMax},
		throttle: newThrottle(opt.LoginFreeFailures, opt.LoginMaxDelay, opt.LoginPerMinute),
		now:      time.Now, closing: make(chan struct{}), hosts: newHostAllow(opt.Hosts)}
	if opt.Accounts.Empty() {
		s.bootstrap = randomToken(24)
	}
	if opt.Sample != nil {
		s.stats = newStatsRing(opt.Sample)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		s.stopStats = func() { cancel(); <-done }
		go func() { s.stats.run(ctx, time.Second); close(done) }()
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	if opt.Metrics != nil {
		var h http.Handler = promhttp.HandlerFor(opt.Metrics, promhttp.HandlerOpts{
			ErrorLog:            slog.NewLogLogger(opt.Logger.Handler(), slog.LevelWarn),
			MaxRequestsInFlight: 4,
		})
		if !opt.MetricsPublic {
			h = s.requireAuth(h.ServeHTTP)
		}
		mux.Handle("GET /metrics", h)
	}
	if opt.Pprof {
		mux.HandleFunc("GET /debug/pprof/", s.requireRole(RoleAdmin, pprof.Index))
		mux.HandleFunc("GET /debug/pprof/cmdline", s.requireRole(RoleAdmin, pprof.Cmdline))
		mux.HandleFunc("GET /debug/pprof/profile", s.requireRole(RoleAdmin, pprof.Profile))
		mux.HandleFunc("GET /debug/pprof/symbol", s.requireRole(RoleAdmin, pprof.Symbol))
		mux.HandleFunc("GET /debug/pprof/trace", s.requireRole(RoleAdmin, pprof.Trace))
	}
	mux.HandleFunc("GET /{$}", s.dashboard)
	mux.HandleFunc("GET /assets/{file}", s.asset)
	mux.HandleFunc("GET /api/v1/setup", s.setupStatus)
	mux.HandleFunc("POST /api/v1/setup", s.setup)
	mux.HandleFunc("POST /api/v1/login", s.login)
	mux.HandleFunc("POST /api/v1/logout", s.requireAuth(s.logout))
	mux.HandleFunc("GET /api/v1/session", s.requireAuth(s.session))
	s.apiRoutes(mux)

	// Cross-origin state-changing requests are refused by their
	// Sec-Fetch-Site/Origin headers before any handler runs; the CSRF
	// token (requireAuth) covers browsers that send neither.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.audit(r, "", "csrf", r.URL.Path, "denied", "cross-origin request")
		writeError(w, http.StatusForbidden, "cross-origin request refused")
	}))
	s.http = &http.Server{
		Handler:           s.checkHost(s.headers(cop.Handler(mux))),
		TLSConfig:         opt.TLS,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       time.Minute, // bulk imports
		WriteTimeout:      0,           // the stats stream and pprof profiles run long; handlers bound their own writes
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(opt.Logger.Handler(), slog.LevelDebug),
		ConnContext:       connContext, // the control socket's peer (socket.go)
	}
	return s
}

// BootstrapToken returns the one-time token that creates the first user,
// or "" when users exist.
func (s *Server) BootstrapToken() string {
	s.bootMu.Lock()
	defer s.bootMu.Unlock()
	s.expireBootstrap()
	return s.bootstrap
}

// expireBootstrap ends the bootstrap token for good once any user exists,
// however it was made (the CLI writes beside the running server): a token
// left in a console or a journal must not make an admin later, even if
// the users are all deleted. s.bootMu held.
func (s *Server) expireBootstrap() {
	if s.bootstrap != "" && !s.accounts.Empty() {
		s.bootstrap = ""
		s.log.Info("admin bootstrap token expired: a user exists")
	}
}

// dashboardPolicy is the Content-Security-Policy of every admin response.
// Scripts, styles, connections and frames come from this listener only.
// Images and media may come from any http or https URL, for the creative
// previews: a creative's image or video is on its advertiser's host, which
// no list written ahead could name, and neither runs code in the page.
// An HTML creative is shown in a sandboxed srcdoc frame, which inherits
// this policy and needs nothing more.
const dashboardPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: http: https:; " +
	"media-src http: https:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// headers sets the security headers of every admin response.
func (s *Server) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", dashboardPolicy)
		h.Set("Cache-Control", "no-store")
		if s.opt.TLS != nil {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

// SetReady sets what /readyz reports: true once serving, false while draining.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// Serve accepts connections on ln until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.listening(ln.Addr())
	if s.opt.TLS != nil {
		ln = tls.NewListener(ln, s.opt.TLS)
	}
	err := s.http.Serve(strictListener{ln, s.log}) // see strict.go
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops the listener and waits for in-flight requests until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.StopStats()
	s.closeOnce.Do(func() { close(s.closing) })
	return s.http.Shutdown(ctx)
}

// StopStats stops the dashboard's sampling and returns once it has: it
// reads the collectors of Options.Metrics and Options.Sample, whose
// sources may close after. Shutdown calls it; a server that never served
// is stopped by it alone. Calls after the first return at once.
func (s *Server) StopStats() {
	if s.stopStats != nil {
		s.statsOnce.Do(s.stopStats)
	}
}

// healthz answers 200 while the process runs: for liveness checks.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	text(w, http.StatusOK, "ok")
}

// readyz answers 200 while the node can serve (serving, and every
// required check passing), 503 otherwise: for load balancers, which stop
// sending traffic on drain. The store is reported, not required: a node
// rides out its outage on the cache. With ?verbose it lists every check,
// with why a failed one failed (this listener is the operator's).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var rep health.Report
	if s.opt.Ready != nil {
		rep = s.opt.Ready()
	}
	if !s.ready.Load() {
		rep = rep.With(health.Check{Name: health.Serving, Required: true, Detail: "starting or draining"})
	}
	status := http.StatusOK
	if !rep.Ready() {
		status = http.StatusServiceUnavailable
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_ = rep.WriteVerbose(w, true)
		return
	}
	if status == http.StatusOK {
		text(w, status, "ready")
	} else {
		text(w, status, "not ready")
	}
}

func text(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// audit records an action of the request r.
func (s *Server) audit(r *http.Request, actor, action, target, result, detail string) {
	remote := remoteAddr(r).String()
	if socketIdentity(r) != nil {
		remote = localRemote
	}
	s.auditLog.Record(AuditRecord{Actor: actor, Remote: remote, Action: action, Target: target,
		Result: result, Detail: detail})
}

// maxAuthBody bounds the login and setup bodies.
const maxAuthBody = 4 << 10

func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return tsubame.Errorf(tsubame.EINVALID, "request body: %v", err)
	}
	return nil
}

type loginRequest struct {
	User     string `json:"user"`
	Password string `json:"password"`
	TOTP     string `json:"totp"`
}

// login checks a name, password and TOTP code and starts a session. Every
// failure answers the same 401, whichever part was wrong; throttled
// attempts answer 429 with Retry-After, whether or not the name exists.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var req loginRequest
	if err := decodeBody(w, r, maxAuthBody, &req); err != nil {
		s.audit(r, "", "login", "", "invalid", "malformed request")
		writeError(w, http.StatusBadRequest, "malformed login request")
		return
	}
	client := clientPrefix(remoteAddr(r))
	now := s.now()
	if ok, wait := s.throttle.allow(client, req.User, now); !ok {
		s.audit(r, req.User, "login", "", "throttled", "")
		w.Header().Set("Retry-After", retryAfter(wait))
		writeError(w, http.StatusTooManyRequests, "too many attempts; try again later")
		return
	}
	u, err := s.accounts.Authenticate(req.User, req.Password, req.TOTP, now)
	if err != nil {
		if !errors.Is(err, errBadCredentials) {
			s.log.Error("admin login: cannot read the accounts", "err", err)
		}
		s.throttle.fail(client, req.User, now)
		s.audit(r, req.User, "login", "", "denied", "")
		writeError(w, http.StatusUnauthorized, "invalid credentials")
		return
	}
	s.throttle.succeed(client, u.Name)
	// A new session id at every login (never reuse one the browser had).
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.sessions.end(c.Value)
	}
	id, sess := s.sessions.create(u, now)
	s.setSessionCookie(w, id, s.opt.SessionMax)
	s.audit(r, u.Name, "login", "", "ok", "")
	writeJSON(w, http.StatusOK, map[string]string{"user": u.Name, "role": string(u.Role), "csrf_token": sess.csrf})
}

func retryAfter(d time.Duration) string {
	secs := int((d + time.Second - 1) / time.Second)
	return strconv.Itoa(max(secs, 1))
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	id := identityOf(r)
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.sessions.end(c.Value)
	}
	s.setSessionCookie(w, "", -1)
	s.audit(r, id.actor, "logout", "", "ok", "")
	writeJSON(w, http.StatusOK, map[string]string{"ok": "logged out"})
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	id := identityOf(r)
	out := map[string]string{"user": id.user, "role": string(id.role)}
	if id.sess != nil {
		out["csrf_token"] = id.sess.csrf
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) setupStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"needed": s.BootstrapToken() != "", "totp": s.opt.RequireTOTP})
}

type setupRequest struct {
	Token    string `json:"token"`
	User     string `json:"user"`
	Password string `json:"password"`
}

// setup creates the first user with the bootstrap token, once. The answer
// carries the user's TOTP secret, shown this once.
func (s *Server) setup(w http.ResponseWriter, r *http.Request) {
	var req setupRequest
	if err := decodeBody(w, r, maxAuthBody, &req); err != nil {
		writeError(w, http.StatusBadRequest, "malformed setup request")
		return
	}
	client := clientPrefix(remoteAddr(r))
	now := s.now()
	if ok, wait := s.throttle.allow(client, "", now); !ok {
		s.audit(r, "", "setup", req.User, "throttled", "")
		w.Header().Set("Retry-After", retryAfter(wait))
		writeError(w, http.StatusTooManyRequests, "too many attempts; try again later")
		return
	}
	s.bootMu.Lock()
	defer s.bootMu.Unlock()
	s.expireBootstrap()
	if s.bootstrap == "" || subtle.ConstantTimeCompare([]byte(req.Token), []byte(s.bootstrap)) != 1 {
		s.throttle.fail(client, "", now)
		s.audit(r, "", "setup", req.User, "denied", "wrong or used bootstrap token")
		writeError(w, http.StatusUnauthorized, "invalid or used bootstrap token")
		return
	}
	key, err := NewTOTP(req.User)
	if err != nil {
		writeError(w, http.StatusBadRequest, "cannot make a TOTP secret for this user name")
		return
	}
	if err := s.accounts.CreateUser(req.User, req.Password, key.Secret(), s.opt.Policy); err != nil {
		s.audit(r, "", "setup", req.User, "invalid", tsubame.ErrorMessage(err))
		s.writeStoreError(w, err)
		return
	}
	s.bootstrap = ""
	s.audit(r, req.User, "setup", req.User, "ok", "first user created with the bootstrap token")
	writeJSON(w, http.StatusCreated, enrolment(req.User, RoleAdmin, key))
}
