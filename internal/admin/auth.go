package admin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// SessionCookie names the session cookie. The __Host- prefix makes browsers
// accept it only when Secure, without Domain and for Path=/, so no other
// host or path can plant or shadow it.
const SessionCookie = "__Host-tsubame_session"

// CSRFHeader carries a session's CSRF token on every state-changing request
// made with the session cookie (API tokens need none: browsers never attach
// them by themselves).
const CSRFHeader = "X-CSRF-Token"

// maxSessions bounds the sessions held; past it the oldest is ended.
const maxSessions = 10000

// session is a logged-in browser. Its id is 256 random bits, held by the
// client only; the server keys sessions by the id's SHA-256.
type session struct {
	user string
	// cred is the credentials the session began with (credTag): a new
	// password or TOTP secret, or a user deleted and made again under the
	// same name, ends it.
	cred    [32]byte
	csrf    string
	created time.Time
	seen    time.Time
}

// credTag identifies a user's credentials: the password hash (salted: a
// new password, even the same one again, gives a new tag), the TOTP secret
// and the time the user was made.
func credTag(u *User) [32]byte {
	return sha256.Sum256([]byte(u.Password + "\x00" + u.TOTP + "\x00" + u.Created.Format(time.RFC3339Nano)))
}

type sessions struct {
	mu        sync.Mutex
	m         map[[32]byte]*session
	idle, max time.Duration
}

func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux ≥ 3.17
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for u and returns its id.
func (ss *sessions) create(u *User, now time.Time) (string, *session) {
	id := randomToken(32)
	s := &session{user: u.Name, cred: credTag(u), csrf: randomToken(32), created: now, seen: now}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.m) >= maxSessions {
		ss.sweep(now)
	}
	if len(ss.m) >= maxSessions {
		var oldest [32]byte
		var at time.Time
		for k, v := range ss.m {
			if at.IsZero() || v.created.Before(at) {
				oldest, at = k, v.created
			}
		}
		delete(ss.m, oldest)
	}
	ss.m[sha256.Sum256([]byte(id))] = s
	return id, s
}

// get returns the live session with id and marks it used, or nil.
func (ss *sessions) get(id string, now time.Time) *session {
	if id == "" || len(id) > 64 {
		return nil
	}
	key := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[key]
	if s == nil {
		return nil
	}
	if now.Sub(s.seen) > ss.idle || now.Sub(s.created) > ss.max {
		delete(ss.m, key)
		return nil
	}
	s.seen = now
	return s
}

// peek returns the session with id if it is live (else nil), without
// marking it used.
func (ss *sessions) peek(id string, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[sha256.Sum256([]byte(id))]
	if s != nil && now.Sub(s.seen) <= ss.idle && now.Sub(s.created) <= ss.max {
		return s
	}
	return nil
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, sha256.Sum256([]byte(id)))
}

// endUser ends every session of user (the user was deleted).
func (ss *sessions) endUser(user string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, s := range ss.m {
		if s.user == user {
			delete(ss.m, k)
		}
	}
}

func (ss *sessions) sweep(now time.Time) {
	for k, s := range ss.m {
		if now.Sub(s.seen) > ss.idle || now.Sub(s.created) > ss.max {
			delete(ss.m, k)
		}
	}
}

// throttle slows down password guessing without letting anyone lock an
// account. Each address has a rate limit on attempts. Failures are counted
// per address, per account and address, and per account: after `free`
// failures on a key, the next attempt on it must wait 1 s, then 2 s, 4 s ...
// up to maxDelay. The account-wide key allows ten times as many failures
// and waits at most accountMaxDelay, so an attacker spread over many
// addresses slows an account's owner by seconds at most, while the owner's
// own (account, address) key stays clean. Success clears the keys it used.
type throttle struct {
	mu        sync.Mutex
	free      int
	maxDelay  time.Duration
	perMinute int
	keys      map[string]*failures
	limiters  map[netip.Prefix]*limiterEntry
}

type failures struct {
	n    int
	next time.Time // no attempt before this
	last time.Time
}

type limiterEntry struct {
	l    *rate.Limiter
	last time.Time
}

// accountMaxDelay caps the account-wide delay, which its owner feels too.
const accountMaxDelay = 30 * time.Second

// maxThrottleKeys bounds the throttle's memory; past it, entries idle for
// longer than the longest delay are dropped.
const maxThrottleKeys = 100000

func newThrottle(free int, maxDelay time.Duration, perMinute int) *throttle {
	return &throttle{free: free, maxDelay: maxDelay, perMinute: perMinute,
		keys: map[string]*failures{}, limiters: map[netip.Prefix]*limiterEntry{}}
}

// clientPrefix groups addresses: one IPv4 address, or one IPv6 /64 (what
// one customer usually holds).
func clientPrefix(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap()
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}

func (t *throttle) keysFor(client netip.Prefix, user string) []string {
	ip := "i " + client.String()
	if user == "" {
		return []string{ip}
	}
	return []string{ip, "a " + user + " " + client.String(), "u " + user}
}

func (t *throttle) limit(key string) (free int, max time.Duration) {
	if strings.HasPrefix(key, "u ") {
		return 10 * t.free, min(t.maxDelay, accountMaxDelay)
	}
	return t.free, t.maxDelay
}

// allow reports whether an attempt by client on user may go ahead now, and
// otherwise how long to wait.
func (t *throttle) allow(client netip.Prefix, user string, now time.Time) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	le := t.limiters[client]
	if le == nil {
		if len(t.limiters) >= maxThrottleKeys {
			t.prune(now)
		}
		le = &limiterEntry{l: rate.NewLimiter(rate.Limit(float64(t.perMinute)/60), t.perMinute)}
		t.limiters[client] = le
	}
	le.last = now
	var wait time.Duration
	for _, k := range t.keysFor(client, user) {
		if f := t.keys[k]; f != nil && now.Before(f.next) {
			wait = max(wait, f.next.Sub(now))
		}
	}
	if wait > 0 {
		return false, wait
	}
	if r := le.l.ReserveN(now, 1); !r.OK() || r.DelayFrom(now) > 0 {
		d := r.DelayFrom(now)
		r.CancelAt(now)
		return false, max(d, time.Second)
	}
	return true, 0
}

// fail counts a failed attempt.
func (t *throttle) fail(client netip.Prefix, user string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.keys) >= maxThrottleKeys {
		t.prune(now)
	}
	for _, k := range t.keysFor(client, user) {
		f := t.keys[k]
		if f == nil {
			if len(t.keys) >= maxThrottleKeys {
				continue // the rate limit per address still holds
			}
			f = &failures{}
			t.keys[k] = f
		}
		f.n++
		f.last = now
		free, maxDelay := t.limit(k)
		if over := f.n - free; over >= 0 {
			d := time.Second << min(over, 30)
			f.next = now.Add(min(d, maxDelay))
		}
	}
}

// succeed clears the keys of a successful login.
func (t *throttle) succeed(client netip.Prefix, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range t.keysFor(client, user) {
		delete(t.keys, k)
	}
}

func (t *throttle) prune(now time.Time) {
	for k, f := range t.keys {
		if now.Sub(f.last) > 2*t.maxDelay && now.After(f.next) {
			delete(t.keys, k)
		}
	}
	for k, le := range t.limiters {
		if now.Sub(le.last) > 2*time.Minute {
			delete(t.limiters, k)
		}
	}
}

// identity is who made an authenticated request.
type identity struct {
	user  string
	actor string // for the audit log: the user, "token:<id>@<user>" or "local:<user>(uid N)"
	sess  *session
	role  Role
	scope string // a token's scope ("" or ScopeMetrics)
}

type ctxKey struct{}

func identityOf(r *http.Request) *identity {
	id, _ := r.Context().Value(ctxKey{}).(*identity)
	return id
}

// remoteAddr is the client's address (the admin listener trusts no
// forwarding headers: put nothing in front of it that hides the client).
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.IPv4Unspecified()
	}
	return ap.Addr().Unmap()
}

// authenticate resolves the request's credentials: the peer of a control
// socket connection (checked when it was accepted: socket.go), else a
// bearer token, or the session cookie. It returns nil, with presented
// reporting whether any credential was offered, when none is valid.
func (s *Server) authenticate(r *http.Request) (id *identity, presented bool) {
	if id := socketIdentity(r); id != nil {
		return id, true
	}
	now := s.now()
	if h := r.Header.Get("Authorization"); h != "" {
		// RFC 9110 §11.1: the scheme is case-insensitive ("bearer" too),
		// and one or more spaces separate it from the token.
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, true
		}
		tok = strings.TrimLeft(tok, " ")
		t, ok := s.accounts.VerifyToken(strings.TrimSpace(tok), now)
		if !ok {
			s.logAccountsError()
			return nil, true
		}
		return &identity{user: t.User, actor: "token:" + t.ID + "@" + t.User, role: t.Role, scope: t.Scope}, true
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return nil, false
	}
	sess := s.sessions.get(c.Value, now)
	if sess == nil {
		return nil, true
	}
	u := s.sessionUser(sess)
	if u == nil {
		s.sessions.end(c.Value)
		return nil, true
	}
	return &identity{user: sess.user, actor: sess.user, sess: sess, role: u.Role}, true
}

// sessionUser returns the session's user, or nil when the user is gone or
// their credentials changed since the session began (perhaps by the CLI,
// which cannot reach this process's sessions).
func (s *Server) sessionUser(sess *session) *User {
	u, err := s.accounts.user(sess.user)
	if err != nil {
		s.logAccountsError()
	}
	if err != nil || u == nil || credTag(u) != sess.cred {
		return nil
	}
	return u
}

// logAccountsError logs why the accounts file cannot be read, if it
// cannot: a credential refused for that reason is the operator's problem,
// not the client's (the process log bounds repeated lines).
func (s *Server) logAccountsError() {
	if err := s.accounts.ReadError(); err != nil {
		s.log.Error("admin: cannot read the accounts file: every login, session and API token is refused until it can", "err", err)
	}
}

// requireAuth runs next for authenticated requests of any role.
func (s *Server) requireAuth(next http.HandlerFunc) http.HandlerFunc {
	return s.requireRole(RoleViewer, next)
}

// requireRole runs next for authenticated requests whose role allows need
// (403 otherwise). With a session cookie, a state-changing method must also
// carry the session's CSRF token. A token scoped to /metrics is refused
// everywhere else.
func (s *Server) requireRole(need Role, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, presented := s.authenticate(r)
		if id == nil {
			if presented {
				s.audit(r, "", "auth", r.URL.Path, "denied", "invalid or expired credentials")
			}
			writeError(w, http.StatusUnauthorized, "authentication required")
			return
		}
		if id.sess != nil && !safeMethod(r.Method) {
			got := r.Header.Get(CSRFHeader)
			if subtle.ConstantTimeCompare([]byte(got), []byte(id.sess.csrf)) != 1 {
				s.audit(r, id.actor, "csrf", r.URL.Path, "denied", "missing or wrong "+CSRFHeader)
				writeError(w, http.StatusForbidden, "missing or invalid CSRF token")
				return
			}
		}
		if id.scope == ScopeMetrics && r.URL.Path != "/metrics" {
			s.audit(r, id.actor, "forbidden", r.URL.Path, "denied", "a token scoped to /metrics")
			writeError(w, http.StatusForbidden, "this token may only read /metrics")
			return
		}
		if !id.role.Allows(need) {
			s.audit(r, id.actor, "forbidden", r.URL.Path, "denied", "needs the "+string(need)+" role")
			writeError(w, http.StatusForbidden, "your role ("+string(id.role)+") may not do this; it needs "+string(need))
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, id)))
	}
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// setSessionCookie sets the session cookie; a negative maxAge deletes it.
func (s *Server) setSessionCookie(w http.ResponseWriter, id string, maxAge time.Duration) {
	age := int(maxAge / time.Second)
	if maxAge < 0 {
		age = -1 // Max-Age=0 on the wire: without it the cookie would stay, empty, until the browser closes
	}
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    id,
		Path:     "/",
		MaxAge:   age,
		Secure:   true,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
}
