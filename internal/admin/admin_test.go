package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
	"github.com/prometheus/client_golang/prometheus"

	"tsubame"
	"tsubame/internal/health"
	"tsubame/internal/store/memory"
)

const (
	testUser     = "ops"
	testPassword = "correct horse battery staple"
)

// harness is an admin Server on a loopback port with a memory store.
type harness struct {
	t        *testing.T
	s        *Server
	base     string
	accounts *Accounts
	store    tsubame.Store
	dir      string
	logBuf   *syncBuffer
	secret   string // the test user's TOTP secret
	clock    *fakeClock
	purged   [][]string
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newHarness(t *testing.T, withUser bool, edit func(*Options)) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{t: t, dir: dir, logBuf: &syncBuffer{}, clock: &fakeClock{now: time.Now()}}
	var err error
	if h.accounts, err = OpenAccounts(dir); err != nil {
		t.Fatal(err)
	}
	if withUser {
		key, err := NewTOTP(testUser)
		if err != nil {
			t.Fatal(err)
		}
		h.secret = key.Secret()
		if err := h.accounts.CreateUser(testUser, testPassword, h.secret, PasswordPolicy{MinLength: 12}); err != nil {
			t.Fatal(err)
		}
	}
	logger := slog.New(slog.NewTextHandler(h.logBuf, nil))
	audit, err := OpenAudit(AuditOptions{Path: filepath.Join(dir, "audit.log"), AlertAt: 10, AlertWindow: time.Minute, RepeatInterval: time.Minute, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	audit.now = h.clock.Now
	h.store = memory.New()
	opt := Options{
		Logger: logger, Accounts: h.accounts, Audit: audit, Policy: PasswordPolicy{MinLength: 12, MinScore: 3}, RequireTOTP: true,
		SessionIdle: 30 * time.Minute, SessionMax: 12 * time.Hour,
		LoginFreeFailures: 3, LoginMaxDelay: 15 * time.Minute, LoginPerMinute: 100,
		Metrics: prometheus.NewRegistry(), Pprof: true,
		Placements: h.store,
		Purge: func(_ context.Context, ids, deps []string, all bool) error {
			h.purged = append(h.purged, append(append([]string{}, ids...), deps...))
			return nil
		},
		ConfigView:     func() any { return map[string]any{"admin": map[string]any{"listen": "x"}} },
		AccessLog:      func() any { return map[string]any{"file": map[string]any{"healthy": true}} },
		MaxImportBytes: 1 << 20,
	}
	if edit != nil {
		edit(&opt)
	}
	h.s = New(opt)
	h.s.now = h.clock.Now
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.s.SetReady(true)
	go func() { _ = h.s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.s.Shutdown(ctx)
		_ = audit.Close()
	})
	h.base = "http://" + ln.Addr().String()
	return h
}

// response is a finished request.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("status %d, body %q: %v", r.status, r.body, err)
	}
	return m
}

// do sends a request; headers are name, value pairs.
func (h *harness) do(method, path string, body any, headers ...string) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, h.base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func (h *harness) code() string {
	h.t.Helper()
	c, err := totp.GenerateCode(h.secret, h.clock.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// login logs the test user in and returns the session cookie and CSRF token.
func (h *harness) login() (cookie, csrf string) {
	h.t.Helper()
	r := h.do("POST", "/api/v1/login", map[string]string{"user": testUser, "password": testPassword, "totp": h.code()})
	if r.status != 200 {
		h.t.Fatalf("login: %d %s", r.status, r.body)
	}
	h.clock.Add(30 * time.Second) // the next login needs the next code
	return sessionCookie(h.t, r), r.json(h.t)["csrf_token"].(string)
}

func sessionCookie(t *testing.T, r response) string {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == SessionCookie {
			return c.Value
		}
	}
	t.Fatalf("no session cookie in %v", r.header)
	return ""
}

func (h *harness) auditLines() []AuditRecord {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, "audit.log"))
	if err != nil {
		h.t.Fatal(err)
	}
	var out []AuditRecord
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec AuditRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			h.t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

func TestPasswordPolicy(t *testing.T) {
	p := PasswordPolicy{MinLength: 12, MinScore: 3}
	for _, tc := range []struct{ user, pw, want string }{
		{"ops", "short", "at least 12"},
		{"ops", "1qaz2wsx3edc", "most common"}, // in the list of 10,000
		{"ops", "123QWEasdZXC", "most common"}, // whatever the case
		// Not in the list, long enough, and still guessed at once.
		{"ops", "Password1234", "too easy to guess"},
		{"ops", "password1234", "too easy to guess"},
		{"ops", "qwertyuiop[]", "too easy to guess"},
		{"ops", "Summer2026!!", "too easy to guess"},
		{"ops", "monkeymonkey", "too easy to guess"},
		{"ops", "abcdefghijkl", "too easy to guess"},
		{"ops", "iloveyou1234", "too easy to guess"},
		{"ops", "purple-otter-38-kettle", ""},
		{"ops", "tsubame-admin-2026", "too easy to guess"}, // the product's name is a context word
		{"ops", "tsubametsubame", "too easy to guess"},
		{"ops", "xK9#mQ2$vL7p", ""},
		{"alice", "xx-Alice-2026-xx", "user name"},
		{"ops", "zzzzzzzzzzzzzzzzzz", "single character"},
		{"ops", strings.Repeat("long pass ", 30), "at most"},
		{"ops", "invalid \xff utf-8", "UTF-8"},
		{"ops", "correct horse battery staple", ""},
	} {
		err := p.Check(tc.user, tc.pw)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want accepted", tc.pw, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error containing %q", tc.pw, err, tc.want)
		}
	}
	// The bundled list is the 10,000 (fewer once folded to lower case).
	if lines := bytes.Count(commonPasswordsText, []byte("\n")); lines != 10000 {
		t.Errorf("common passwords file: %d lines", lines)
	}
	if n := len(commonPasswords()); n < 9900 {
		t.Errorf("common passwords: %d", n)
	}
	// Without the estimate, only the list and the rules apply.
	if err := (PasswordPolicy{MinLength: 12}).Check("ops", "Password1234"); err != nil {
		t.Errorf("MinScore 0: %v", err)
	}
	if err := (PasswordPolicy{MinLength: 8}).Check("x", "PASSWORD"); err == nil {
		t.Error("PASSWORD accepted")
	}
}

func TestPasswordHash(t *testing.T) {
	h, err := hashPassword(testPassword)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Errorf("hash %q", h)
	}
	if h2, _ := hashPassword(testPassword); h2 == h {
		t.Error("two hashes of one password are equal: no salt")
	}
	for pw, want := range map[string]bool{testPassword: true, testPassword + " ": false, "": false} {
		if ok, err := checkPassword(h, pw); err != nil || ok != want {
			t.Errorf("check %q: %v %v", pw, ok, err)
		}
	}
	if _, err := checkPassword("$argon2id$v=19$m=99999999,t=2,p=1$AAAA$AAAA", "x"); err == nil {
		t.Error("a hash asking for 95 GiB was accepted")
	}
}

func TestAccountsFile(t *testing.T) {
	dir := t.TempDir()
	a, err := OpenAccounts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Empty() {
		t.Fatal("new accounts not empty")
	}
	policy := PasswordPolicy{MinLength: 12}
	if err := a.CreateUser("bad name", testPassword, "", policy); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("bad name: %v", err)
	}
	if err := a.CreateUser("ops", "password", "", policy); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("weak password: %v", err)
	}
	if err := a.CreateUser("ops", testPassword, "", policy); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateUser("ops", testPassword, "", policy); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
		t.Errorf("duplicate: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "users.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("users.json: %v %v", fi.Mode(), err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "users.json"))
	if bytes.Contains(raw, []byte(testPassword)) {
		t.Error("the password is stored in clear")
	}
	// Another process (the CLI) adds a user: the first sees it.
	b, err := OpenAccounts(dir)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a distinct modification time
	if err := b.CreateUser("dev", "another good passphrase", "", policy); err != nil {
		t.Fatal(err)
	}
	if names, _ := a.Users(); len(names) != 2 {
		t.Errorf("users seen by the first: %v", names)
	}
	// A file readable by others is refused.
	if err := os.Chmod(filepath.Join(dir, "users.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenAccounts(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable file: %v", err)
	}
}

func TestAuthenticate(t *testing.T) {
	a, err := OpenAccounts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := NewTOTP("ops")
	if err := a.CreateUser("ops", testPassword, key.Secret(), PasswordPolicy{MinLength: 12}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	code, _ := totp.GenerateCode(key.Secret(), now)
	for name, c := range map[string][3]string{
		"unknown user":   {"nobody", testPassword, code},
		"wrong password": {"ops", "wrong password here", code},
		"no code":        {"ops", testPassword, ""},
		"wrong code":     {"ops", testPassword, "000000"},
	} {
		if _, err := a.Authenticate(c[0], c[1], c[2], now); !errors.Is(err, errBadCredentials) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if u, err := a.Authenticate("ops", testPassword, code, now); err != nil || u.Name != "ops" {
		t.Fatalf("good login: %v", err)
	}
	if _, err := a.Authenticate("ops", testPassword, code, now); !errors.Is(err, errBadCredentials) {
		t.Error("a TOTP code was accepted twice")
	}
	// The previous step's code (clock drift) is accepted once, if not older
	// than the last one used.
	next := now.Add(30 * time.Second)
	prev, _ := totp.GenerateCode(key.Secret(), next.Add(-30*time.Second))
	if prev == code {
		if _, err := a.Authenticate("ops", testPassword, prev, next); err == nil {
			t.Error("the used step was accepted again")
		}
	}
	nextCode, _ := totp.GenerateCode(key.Secret(), next)
	if _, err := a.Authenticate("ops", testPassword, nextCode, next); err != nil {
		t.Errorf("next step: %v", err)
	}
}

func TestTokens(t *testing.T) {
	dir := t.TempDir()
	a, _ := OpenAccounts(dir)
	if err := a.CreateUser("ops", testPassword, "", PasswordPolicy{MinLength: 12}); err != nil {
		t.Fatal(err)
	}
	plain, tok, err := a.CreateToken("ops", "ci", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(plain, "tsb_"+tok.ID+"_") || len(plain) < 40 {
		t.Errorf("token %q", plain)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "users.json"))
	if bytes.Contains(raw, []byte(plain[len(plain)-20:])) {
		t.Error("the token is stored in clear")
	}
	now := time.Now()
	if got, ok := a.VerifyToken(plain, now); !ok || got.User != "ops" || got.Role != RoleAdmin {
		t.Errorf("verify: %+v %v", got, ok)
	}
	for _, bad := range []string{"", plain + "x", plain[:len(plain)-1], "tsb_" + tok.ID, strings.Replace(plain, tok.ID, "000000000000", 1)} {
		if got, ok := a.VerifyToken(bad, now); ok {
			t.Errorf("%q verified as %q", bad, got.User)
		}
	}
	if _, ok := a.VerifyToken(plain, now.Add(2*time.Hour)); ok {
		t.Error("an expired token verified")
	}
	if err := a.DeleteToken("someone", tok.ID); tsubame.ErrorCode(err) != tsubame.ENOTFOUND {
		t.Errorf("another user revoked the token: %v", err)
	}
	if err := a.DeleteToken("ops", tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.VerifyToken(plain, now); ok {
		t.Error("a revoked token verified")
	}
}

func TestLoginAnswersAlikeForEveryFailure(t *testing.T) {
	h := newHarness(t, true, nil)
	var first response
	for i, body := range []map[string]string{
		{"user": "nobody", "password": testPassword, "totp": h.code()},
		{"user": testUser, "password": "not the password", "totp": h.code()},
		{"user": testUser, "password": testPassword, "totp": "123456"},
		{"user": testUser, "password": testPassword},
	} {
		h.clock.Add(time.Hour) // past any delay
		r := h.do("POST", "/api/v1/login", body)
		if r.status != 401 || len(r.header.Values("Set-Cookie")) != 0 {
			t.Errorf("case %d: %d %s", i, r.status, r.body)
		}
		if i == 0 {
			first = r
		} else if !bytes.Equal(r.body, first.body) {
			t.Errorf("case %d answers %q, case 0 %q", i, r.body, first.body)
		}
	}
	if r := h.do("POST", "/api/v1/login", `{"user":"ops","password":`); r.status != 400 {
		t.Errorf("malformed: %d", r.status)
	}
	if r := h.do("POST", "/api/v1/login", `{"user":"ops","password":"x","admin":true}`); r.status != 400 {
		t.Errorf("unknown field: %d", r.status)
	}
	denied := 0
	for _, rec := range h.auditLines() {
		if rec.Action == "login" && rec.Result == "denied" {
			denied++
			if rec.Remote != "127.0.0.1" {
				t.Errorf("audit remote %q", rec.Remote)
			}
		}
	}
	if denied != 4 {
		t.Errorf("audited login failures: %d, want 4", denied)
	}
}

func TestSessionCookieAndLifecycle(t *testing.T) {
	h := newHarness(t, true, nil)
	r := h.do("POST", "/api/v1/login", map[string]string{"user": testUser, "password": testPassword, "totp": h.code()})
	if r.status != 200 {
		t.Fatalf("login %d %s", r.status, r.body)
	}
	h.clock.Add(30 * time.Second)
	set := r.header.Get("Set-Cookie")
	for _, attr := range []string{SessionCookie + "=", "Path=/", "HttpOnly", "Secure", "SameSite=Strict"} {
		if !strings.Contains(set, attr) {
			t.Errorf("Set-Cookie %q lacks %s", set, attr)
		}
	}
	if strings.Contains(set, "Domain=") {
		t.Errorf("Set-Cookie %q has a Domain", set)
	}
	id := sessionCookie(t, r)
	if len(id) < 43 { // 256 bits in base64url
		t.Errorf("session id %q is short", id)
	}
	cookie := SessionCookie + "=" + id
	if r := h.do("GET", "/api/v1/session", nil, "Cookie", cookie); r.status != 200 || r.json(t)["user"] != testUser {
		t.Fatalf("session: %d %s", r.status, r.body)
	}
	// Logging in again with the cookie rotates it: the old id stops working.
	r = h.do("POST", "/api/v1/login", map[string]string{"user": testUser, "password": testPassword, "totp": h.code()}, "Cookie", cookie)
	h.clock.Add(30 * time.Second)
	id2 := sessionCookie(t, r)
	if id2 == id {
		t.Fatal("the session id was reused at login")
	}
	if r := h.do("GET", "/api/v1/session", nil, "Cookie", cookie); r.status != 401 {
		t.Errorf("old session after a new login: %d", r.status)
	}
	cookie2 := SessionCookie + "=" + id2
	csrf := r.json(t)["csrf_token"].(string)
	// Logout ends it.
	if r := h.do("POST", "/api/v1/logout", nil, "Cookie", cookie2, CSRFHeader, csrf); r.status != 200 {
		t.Fatalf("logout: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/api/v1/session", nil, "Cookie", cookie2); r.status != 401 {
		t.Errorf("session after logout: %d", r.status)
	}
	// Idle timeout and absolute lifetime.
	cookie3, _ := h.login()
	h.clock.Add(29 * time.Minute)
	if r := h.do("GET", "/api/v1/session", nil, "Cookie", SessionCookie+"="+cookie3); r.status != 200 {
		t.Errorf("session used within the idle timeout: %d", r.status)
	}
	h.clock.Add(31 * time.Minute)
	if r := h.do("GET", "/api/v1/session", nil, "Cookie", SessionCookie+"="+cookie3); r.status != 401 {
		t.Errorf("session idle for 31 minutes: %d", r.status)
	}
	cookie4, _ := h.login()
	for range 25 {
		h.clock.Add(29 * time.Minute)
		h.do("GET", "/api/v1/session", nil, "Cookie", SessionCookie+"="+cookie4)
	}
	if r := h.do("GET", "/api/v1/session", nil, "Cookie", SessionCookie+"="+cookie4); r.status != 401 {
		t.Errorf("session older than session_max: %d", r.status)
	}
}

func TestCSRF(t *testing.T) {
	h := newHarness(t, true, nil)
	cookie, csrf := h.login()
	c := SessionCookie + "=" + cookie
	body := map[string]any{"urls": []string{"https://ad.example.com/a.js"}}
	if r := h.do("PUT", "/api/v1/placements/7", body, "Cookie", c); r.status != 403 {
		t.Errorf("PUT without the CSRF token: %d", r.status)
	}
	if r := h.do("PUT", "/api/v1/placements/7", body, "Cookie", c, CSRFHeader, "forged"); r.status != 403 {
		t.Errorf("PUT with a wrong CSRF token: %d", r.status)
	}
	if _, err := h.store.Get(t.Context(), "7"); !tsubame.IsNotFound(err) {
		t.Fatalf("a refused request wrote: %v", err)
	}
	// A cross-site request is refused whatever it carries.
	if r := h.do("PUT", "/api/v1/placements/7", body, "Cookie", c, CSRFHeader, csrf, "Sec-Fetch-Site", "cross-site"); r.status != 403 {
		t.Errorf("cross-site PUT: %d", r.status)
	}
	if r := h.do("PUT", "/api/v1/placements/7", body, "Cookie", c, CSRFHeader, csrf); r.status != 200 {
		t.Errorf("PUT with the token: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/api/v1/placements/7", nil, "Cookie", c); r.status != 200 {
		t.Errorf("GET needs no token: %d", r.status)
	}
	var tokenDenied, crossSite int
	h.s.auditLog.flush(true) // repeats of a kind are written as one line with their count
	for _, rec := range h.auditLines() {
		n := max(rec.Repeated, 1)
		switch {
		case rec.Action == "csrf" && rec.Result == "denied" && rec.Actor == testUser:
			tokenDenied += n
		case rec.Action == "csrf" && rec.Result == "denied" && rec.Detail == "cross-origin request":
			crossSite += n
		}
	}
	if tokenDenied != 2 || crossSite != 1 {
		t.Errorf("audited CSRF failures: %d by token, %d cross-site; want 2 and 1", tokenDenied, crossSite)
	}
}

func TestThrottle(t *testing.T) {
	th := newThrottle(3, 15*time.Minute, 1000)
	now := time.Now()
	attacker := clientPrefix(mustAddr("198.51.100.7"))
	owner := clientPrefix(mustAddr("203.0.113.9"))
	for i := range 3 {
		if ok, _ := th.allow(attacker, "ops", now); !ok {
			t.Fatalf("attempt %d refused within the free failures", i)
		}
		th.fail(attacker, "ops", now)
	}
	// The fourth waits 1 s, then each failure doubles the wait.
	var waits []time.Duration
	for range 4 {
		ok, wait := th.allow(attacker, "ops", now)
		if ok {
			t.Fatal("no delay after the free failures")
		}
		waits = append(waits, wait)
		now = now.Add(wait)
		if ok, _ := th.allow(attacker, "ops", now); !ok {
			t.Fatal("refused after waiting")
		}
		th.fail(attacker, "ops", now)
	}
	if waits[0] != time.Second || waits[1] != 2*time.Second || waits[2] != 4*time.Second || waits[3] != 8*time.Second {
		t.Errorf("waits %v, want 1s 2s 4s 8s", waits)
	}
	// The owner, from their own address, is not locked out by the attacker.
	if ok, wait := th.allow(owner, "ops", now); !ok {
		t.Errorf("the owner waits %v because of another address's failures", wait)
	}
	// Another account from the attacker's address waits: the address is counted.
	if ok, _ := th.allow(attacker, "other", now); ok {
		t.Error("the attacking address may try another account at once")
	}
	// The delay is capped.
	for range 40 {
		th.fail(attacker, "x", now)
	}
	if _, wait := th.allow(attacker, "x", now); wait > 15*time.Minute {
		t.Errorf("wait %v beyond the maximum", wait)
	}
	// Many addresses against one account slow it down by accountMaxDelay at most.
	for i := range 200 {
		p := clientPrefix(netipFrom4(10, 0, byte(i/250), byte(i%250)))
		th.fail(p, "victim", now)
	}
	if ok, wait := th.allow(owner, "victim", now); !ok && wait > accountMaxDelay {
		t.Errorf("the owner of an attacked account waits %v", wait)
	}
	// Success clears the owner's keys.
	th.fail(owner, "ops", now)
	th.succeed(owner, "ops")
	if f := th.keys["a ops "+owner.String()]; f != nil {
		t.Error("success left the failures")
	}
}

func TestLoginThrottledOverHTTP(t *testing.T) {
	h := newHarness(t, true, nil)
	bad := map[string]string{"user": testUser, "password": "not the password"}
	for range 3 {
		if r := h.do("POST", "/api/v1/login", bad); r.status != 401 {
			t.Fatalf("failure: %d", r.status)
		}
	}
	r := h.do("POST", "/api/v1/login", map[string]string{"user": testUser, "password": testPassword, "totp": h.code()})
	if r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("after 3 failures: %d Retry-After %q", r.status, r.header.Get("Retry-After"))
	}
	// The address is throttled too, with the same answer for a name that
	// does not exist.
	if r2 := h.do("POST", "/api/v1/login", map[string]string{"user": "ghost", "password": "x"}); r2.status != 429 || !bytes.Equal(r2.body, r.body) {
		t.Errorf("unknown user from the address: %d %s", r2.status, r2.body)
	}
	h.clock.Add(time.Hour)
	if _, csrf := h.login(); csrf == "" {
		t.Error("no CSRF token")
	}
	var throttled int
	for _, rec := range h.auditLines() {
		if rec.Result == "throttled" {
			throttled++
		}
	}
	if throttled != 2 {
		t.Errorf("throttled attempts audited: %d, want 2", throttled)
	}
}

func TestLoginRatePerAddress(t *testing.T) {
	h := newHarness(t, true, func(o *Options) { o.LoginPerMinute = 5; o.LoginFreeFailures = 100 })
	codes := map[int]int{}
	for i := range 8 {
		r := h.do("POST", "/api/v1/login", map[string]string{"user": "user" + string(rune('a'+i)), "password": "x"})
		codes[r.status]++
	}
	if codes[401] != 5 || codes[429] != 3 {
		t.Errorf("answers %v, want 5 × 401 then 3 × 429", codes)
	}
}

func TestBootstrap(t *testing.T) {
	h := newHarness(t, false, nil)
	tok := h.s.BootstrapToken()
	if len(tok) < 32 {
		t.Fatalf("bootstrap token %q", tok)
	}
	if r := h.do("GET", "/api/v1/setup", nil); r.json(t)["needed"] != true {
		t.Errorf("setup status %s", r.body)
	}
	if r := h.do("POST", "/api/v1/setup", map[string]string{"token": "guess", "user": "first", "password": testPassword}); r.status != 401 {
		t.Errorf("wrong token: %d", r.status)
	}
	if r := h.do("POST", "/api/v1/setup", map[string]string{"token": tok, "user": "first", "password": "password"}); r.status != 400 {
		t.Errorf("weak password: %d %s", r.status, r.body)
	}
	r := h.do("POST", "/api/v1/setup", map[string]string{"token": tok, "user": "first", "password": testPassword})
	if r.status != 201 {
		t.Fatalf("setup: %d %s", r.status, r.body)
	}
	m := r.json(t)
	secret, _ := m["totp_secret"].(string)
	if secret == "" || !strings.HasPrefix(m["totp_url"].(string), "otpauth://totp/Tsubame:first?") {
		t.Errorf("setup answer %s", r.body)
	}
	if r := h.do("POST", "/api/v1/setup", map[string]string{"token": tok, "user": "second", "password": testPassword}); r.status != 401 {
		t.Errorf("the token worked twice: %d", r.status)
	}
	if h.s.BootstrapToken() != "" {
		t.Error("the token outlived its use")
	}
	// The new user logs in with the secret.
	code, _ := totp.GenerateCode(secret, h.clock.Now())
	if r := h.do("POST", "/api/v1/login", map[string]string{"user": "first", "password": testPassword, "totp": code}); r.status != 200 {
		t.Errorf("first login: %d %s", r.status, r.body)
	}
	// A token printed at start dies when a user is made another way (the
	// CLI, beside the running server), and stays dead when the users are
	// gone again.
	h3 := newHarness(t, false, nil)
	tok3 := h3.s.BootstrapToken()
	if tok3 == "" {
		t.Fatal("no bootstrap token without users")
	}
	key, _ := NewTOTP("cli-user")
	if err := h3.accounts.CreateUserWithRole("cli-user", testPassword, key.Secret(), RoleViewer, PasswordPolicy{MinLength: 12}); err != nil {
		t.Fatal(err)
	}
	if h3.s.BootstrapToken() != "" {
		t.Error("the bootstrap token outlived a user made with the CLI")
	}
	if err := h3.accounts.DeleteUser("cli-user"); err != nil {
		t.Fatal(err)
	}
	if r := h3.do("POST", "/api/v1/setup", map[string]string{"token": tok3, "user": "late", "password": testPassword}); r.status != 401 {
		t.Errorf("the old bootstrap token made a user after the users were gone: %d %s", r.status, r.body)
	}
	// With users, no token is made at all.
	h2 := newHarness(t, true, nil)
	if h2.s.BootstrapToken() != "" {
		t.Error("a bootstrap token exists beside users")
	}
	if r := h2.do("POST", "/api/v1/setup", map[string]string{"token": "", "user": "x", "password": testPassword}); r.status != 401 {
		t.Errorf("setup with users: %d", r.status)
	}
}

// A flood of failed logins from one client costs a few lines per interval,
// each kind (client, user, result) on its own, with counts that add up.
func TestAuditFloodIsAggregated(t *testing.T) {
	h := newHarness(t, true, nil)
	for i := range 200 {
		user := "victim"
		if i%2 == 1 {
			user = "other"
		}
		h.do("POST", "/api/v1/login", map[string]string{"user": user, "password": "guess"})
	}
	before := len(h.auditLines())
	if before > 4 {
		t.Fatalf("%d lines for 200 attempts within the interval", before)
	}
	h.clock.Add(time.Minute)
	h.s.auditLog.flush(false)
	counts := map[string]int{}
	for _, rec := range h.auditLines() {
		n := 1
		if rec.Repeated > 0 {
			n = rec.Repeated
			if rec.Since.IsZero() || rec.Since.After(rec.Time) {
				t.Errorf("summary %+v", rec)
			}
		}
		counts[rec.Actor+" "+rec.Result] += n
	}
	if counts["victim denied"]+counts["victim throttled"] != 100 || counts["other denied"]+counts["other throttled"] != 100 {
		t.Fatalf("counts %v, want 100 attempts for each user", counts)
	}
	// Quiet for an interval: nothing more is written, and the next failure
	// is written in full again.
	n := len(h.auditLines())
	h.clock.Add(time.Minute)
	h.s.auditLog.flush(false)
	h.do("POST", "/api/v1/login", map[string]string{"user": "victim", "password": "guess"})
	if recs := h.auditLines(); len(recs) != n+1 || recs[n].Repeated != 0 {
		t.Fatalf("after a quiet interval: %d lines (was %d)", len(recs), n)
	}
}

func TestAuditRecordsAndAlerts(t *testing.T) {
	h := newHarness(t, true, nil)
	// A name made to forge a second line or field stays in its field.
	evil := "ops\n{\"actor\":\"root\",\"result\":\"ok\"}\x1b[31m"
	for range 10 {
		h.clock.Add(time.Second)
		h.do("POST", "/api/v1/login", map[string]string{"user": evil, "password": "x"})
	}
	// Repeats of one kind are counted within the interval, then written
	// as one line with their count: every failure is accounted for.
	h.clock.Add(time.Minute)
	h.s.auditLog.flush(false)
	recs := h.auditLines()
	total := 0
	for _, rec := range recs {
		if rec.Actor != evil || rec.Action != "login" || rec.Result == "ok" {
			t.Errorf("record %+v", rec)
		}
		total += 1 + rec.Repeated
		if rec.Repeated > 0 {
			total-- // a summary line stands for the ones left out, not itself
		}
	}
	if total != 10 || len(recs) > 4 {
		t.Fatalf("%d audit lines account for %d failures, want 10 in at most 4 lines", len(recs), total)
	}
	if st := h.s.auditLog.Stats(); st.Alerts != 1 || st.AuthFailures != 10 {
		t.Errorf("stats %+v, want one alert after 10 failures", st)
	}
	if !strings.Contains(h.logBuf.String(), "ALERT: burst of admin authentication failures") {
		t.Errorf("no alert in the log:\n%s", h.logBuf.String())
	}
	// One alert per burst: more failures inside it raise none.
	h.do("POST", "/api/v1/login", map[string]string{"user": "x", "password": "x"})
	if st := h.s.auditLog.Stats(); st.Alerts != 1 {
		t.Errorf("alerts %d within one burst", st.Alerts)
	}
	// Actions are recorded with who did them.
	h.clock.Add(time.Hour)
	cookie, csrf := h.login()
	h.do("DELETE", "/api/v1/placements/nope", nil, "Cookie", SessionCookie+"="+cookie, CSRFHeader, csrf)
	last := h.auditLines()
	rec := last[len(last)-1]
	if rec.Actor != testUser || rec.Action != "placement.delete" || rec.Target != "nope" || rec.Result != "invalid" {
		t.Errorf("last record %+v", rec)
	}
	if fi, _ := os.Stat(filepath.Join(h.dir, "audit.log")); fi.Mode().Perm() != 0o600 {
		t.Errorf("audit.log mode %v", fi.Mode())
	}
}

func TestPlacementAPI(t *testing.T) {
	h := newHarness(t, true, nil)
	plain, _, err := h.accounts.CreateToken(testUser, "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	auth := []string{"Authorization", "Bearer " + plain}
	do := func(method, path string, body any) response {
		return h.do(method, path, body, auth...)
	}
	if r := h.do("GET", "/api/v1/placements", nil); r.status != 401 {
		t.Errorf("no credentials: %d", r.status)
	}
	if r := h.do("GET", "/api/v1/placements", nil, "Authorization", "Bearer tsb_0_0"); r.status != 401 {
		t.Errorf("bad token: %d", r.status)
	}
	// The scheme is case-insensitive (RFC 9110 §11.1); another scheme is refused.
	for header, want := range map[string]int{"bearer " + plain: 200, "BEARER  " + plain: 200, "Basic " + plain: 401, "Bearer" + plain: 401} {
		if r := h.do("GET", "/api/v1/placements", nil, "Authorization", header); r.status != want {
			t.Errorf("Authorization %q: %d, want %d", header[:min(len(header), 8)], r.status, want)
		}
	}
	for i := range 5 {
		id := string(rune('a' + i))
		if r := do("PUT", "/api/v1/placements/"+id, map[string]any{"urls": []string{"https://ad.example.com/" + id + ".js"}}); r.status != 200 {
			t.Fatalf("put %s: %d %s", id, r.status, r.body)
		}
	}
	r := do("GET", "/api/v1/placements?limit=2", nil)
	m := r.json(t)
	if len(m["placements"].([]any)) != 2 || m["next"] != "b" {
		t.Errorf("page 1: %s", r.body)
	}
	r = do("GET", "/api/v1/placements?limit=2&after=d", nil)
	if m := r.json(t); len(m["placements"].([]any)) != 1 || m["next"] != "" {
		t.Errorf("last page: %s", r.body)
	}
	// Numbered placements list by number, with the count; offset pages,
	// q searches ids and names.
	for _, id := range []string{"100", "2", "10", "1", "9"} {
		body := map[string]any{"urls": []string{"https://ad.example.com/" + id + ".js"}, "name": "Campaign #" + id}
		if r := do("PUT", "/api/v1/placements/"+id, body); r.status != 200 {
			t.Fatalf("put %s: %d %s", id, r.status, r.body)
		}
	}
	page := func(query string) string {
		t.Helper()
		r := do("GET", "/api/v1/placements?"+query, nil)
		var m struct {
			Placements []tsubame.Placement
			Next       string
			Total      int
			Offset     int
		}
		if r.status != 200 || json.Unmarshal([]byte(r.body), &m) != nil {
			t.Fatalf("%s: %d %s", query, r.status, r.body)
		}
		var ids []string
		for _, p := range m.Placements {
			ids = append(ids, p.ID)
		}
		return fmt.Sprintf("%s next=%s total=%d offset=%d", strings.Join(ids, ","), m.Next, m.Total, m.Offset)
	}
	for query, want := range map[string]string{
		"limit=3":                "1,2,9 next=9 total=10 offset=0",
		"limit=3&offset=3":       "10,100,a next=a total=10 offset=3",
		"limit=3&after=100":      "a,b,c next=c total=10 offset=5",
		"limit=3&offset=9":       "e next= total=10 offset=9",
		"limit=3&offset=20":      " next= total=10 offset=20",
		"q=CAMPAIGN%20%231":      "1,10,100 next= total=3 offset=0",
		"q=campaign&limit=2":     "1,2 next=2 total=5 offset=0",
		"q=campaign&after=2":     "9,10,100 next= total=5 offset=2",
		"q=e":                    "e next= total=1 offset=0",
		"q=nothing-matches-this": " next= total=0 offset=0",
	} {
		if got := page(query); got != want {
			t.Errorf("%s: %s, want %s", query, got, want)
		}
	}
	for _, q := range []string{"limit=0", "limit=5000", "limit=x", "after=%00", "offset=-1", "offset=x", "after=a&offset=2",
		"q=" + strings.Repeat("x", 129), "q=%ff"} {
		if r := do("GET", "/api/v1/placements?"+q, nil); r.status != 400 {
			t.Errorf("%s: %d", q, r.status)
		}
	}
	if r := do("GET", "/api/v1/placements/zz", nil); r.status != 404 {
		t.Errorf("missing: %d", r.status)
	}
	for name, body := range map[string]any{
		"bad url":     map[string]any{"urls": []string{"javascript:alert(1)"}},
		"id mismatch": map[string]any{"id": "b", "urls": []string{"https://x.example.com/a.js"}},
		"unknown key": map[string]any{"urls": []string{"https://x.example.com/a.js"}, "admin": true},
		"not json":    "{",
	} {
		if r := do("PUT", "/api/v1/placements/a", body); r.status != 400 {
			t.Errorf("%s: %d %s", name, r.status, r.body)
		}
	}
	if r := do("DELETE", "/api/v1/placements/a", nil); r.status != 204 {
		t.Errorf("delete: %d", r.status)
	}
	if r := do("DELETE", "/api/v1/placements/a", nil); r.status != 404 {
		t.Errorf("delete twice: %d", r.status)
	}
	// Bulk import: all or nothing.
	good := `{"id":"x1","urls":["https://ad.example.com/1.js"]}` + "\n" + `{"id":"x2","urls":["https://ad.example.com/2.js"]}` + "\n"
	if r := do("POST", "/api/v1/import?format=jsonl", good); r.status != 200 || r.json(t)["imported"] != 2.0 {
		t.Errorf("import: %d %s", r.status, r.body)
	}
	bad := `{"id":"y1","urls":["https://ad.example.com/1.js"]}` + "\n" + `{"id":"y2","urls":["ftp://nope"]}` + "\n"
	if r := do("POST", "/api/v1/import?format=jsonl", bad); r.status != 400 || !strings.Contains(string(r.body), "line 2") {
		t.Errorf("bad import: %d %s", r.status, r.body)
	}
	if _, err := h.store.Get(t.Context(), "y1"); !tsubame.IsNotFound(err) {
		t.Error("a refused import wrote its good lines")
	}
	if r := do("POST", "/api/v1/import?format=xml", good); r.status != 400 {
		t.Errorf("bad format: %d", r.status)
	}
	if r := do("POST", "/api/v1/import", strings.Repeat(good, (2<<20)/len(good))); r.status != 400 || !strings.Contains(string(r.body), "max_import_bytes") {
		t.Errorf("oversized import: %d %s", r.status, r.body)
	}
	// Purge.
	if r := do("POST", "/api/v1/purge", map[string]any{"ids": []string{"x1"}, "deps": []string{"campaign:1"}}); r.status != 200 {
		t.Errorf("purge: %d %s", r.status, r.body)
	}
	if len(h.purged) != 1 || strings.Join(h.purged[0], ",") != "x1,campaign:1" {
		t.Errorf("purged %v", h.purged)
	}
	if r := do("POST", "/api/v1/purge", map[string]any{}); r.status != 400 {
		t.Errorf("empty purge: %d", r.status)
	}
	// Views.
	if r := do("GET", "/api/v1/config", nil); r.status != 200 || !strings.Contains(string(r.body), `"listen":"x"`) {
		t.Errorf("config: %d %s", r.status, r.body)
	}
	if r := do("GET", "/api/v1/accesslog", nil); r.status != 200 || !strings.Contains(string(r.body), `"healthy":true`) {
		t.Errorf("accesslog: %d %s", r.status, r.body)
	}
	// Tokens: listed without their secret, revocable.
	r = do("GET", "/api/v1/tokens", nil)
	if r.status != 200 || strings.Contains(string(r.body), plain) || !strings.Contains(string(r.body), `"name":"ci"`) {
		t.Errorf("tokens: %s", r.body)
	}
	r = do("POST", "/api/v1/tokens", map[string]string{"name": "deploy", "ttl": "1h"})
	newTok, _ := r.json(t)["token"].(string)
	if r.status != 201 || !strings.HasPrefix(newTok, "tsb_") {
		t.Fatalf("create token: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	if r := do("DELETE", "/api/v1/tokens/"+id, nil); r.status != 204 {
		t.Errorf("revoke: %d", r.status)
	}
	if r := h.do("GET", "/api/v1/placements", nil, "Authorization", "Bearer "+newTok); r.status != 401 {
		t.Errorf("revoked token: %d", r.status)
	}
	// Users.
	r = do("POST", "/api/v1/users", map[string]string{"user": "dev", "password": "another good passphrase"})
	if r.status != 201 || r.json(t)["totp_secret"] == "" {
		t.Errorf("create user: %d %s", r.status, r.body)
	}
	if r := do("POST", "/api/v1/users", map[string]string{"user": "dev2", "password": "qwerty"}); r.status != 400 {
		t.Errorf("weak user password: %d", r.status)
	}
	if r := do("DELETE", "/api/v1/users/dev", nil); r.status != 204 {
		t.Errorf("delete user: %d", r.status)
	}
}

func TestProtectedRoutesAndHeaders(t *testing.T) {
	h := newHarness(t, true, nil)
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/cmdline", "/api/v1/stats", "/api/v1/config", "/api/v1/users"} {
		if r := h.do("GET", path, nil); r.status != 401 {
			t.Errorf("%s without credentials: %d", path, r.status)
		}
	}
	plain, _, _ := h.accounts.CreateToken(testUser, "ci", 0)
	if r := h.do("GET", "/debug/pprof/cmdline", nil, "Authorization", "Bearer "+plain); r.status != 200 {
		t.Errorf("pprof with a token: %d", r.status)
	}
	for _, path := range []string{"/healthz", "/readyz", "/", "/assets/dashboard.js", "/assets/dashboard.css"} {
		if r := h.do("GET", path, nil); r.status != 200 {
			t.Errorf("%s: %d", path, r.status)
		}
	}
	if r := h.do("GET", "/assets/../admin.go", nil); r.status == 200 {
		t.Error("an asset path escaped web/")
	}
	r := h.do("GET", "/", nil)
	for name, want := range map[string]string{
		"Content-Security-Policy": "script-src 'self'", "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
		"Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
	} {
		if got := r.header.Get(name); !strings.Contains(got, want) {
			t.Errorf("%s: %q", name, got)
		}
	}
	if bytes.Contains(r.body, []byte("<script>")) || bytes.Contains(r.body, []byte(" style=")) {
		t.Error("the page has inline script or style, which its CSP refuses")
	}
	// Public metrics when configured.
	h2 := newHarness(t, true, func(o *Options) { o.MetricsPublic = true; o.Pprof = false })
	if r := h2.do("GET", "/metrics", nil); r.status != 200 {
		t.Errorf("public metrics: %d", r.status)
	}
	if r := h2.do("GET", "/debug/pprof/", nil, "Authorization", "Bearer "+plain); r.status != 404 {
		t.Errorf("pprof disabled: %d", r.status)
	}
}

func TestStatsStream(t *testing.T) {
	var mu sync.Mutex
	var n uint64
	h := newHarness(t, true, func(o *Options) {
		o.Sample = func() Sample {
			mu.Lock()
			defer mu.Unlock()
			n += 100
			// 100 requests a tick: 98 under 1 ms, 2 near 50 ms.
			return Sample{Requests: n, LatencyBounds: []float64{0.001, 0.1}, Latency: []uint64{n / 100 * 98, n / 100 * 2, 0},
				CacheHits: n, CacheMisses: n / 100}
		}
	})
	plain, _, _ := h.accounts.CreateToken(testUser, "ci", 0)
	req, _ := http.NewRequest("GET", h.base+"/api/v1/stats/stream", nil)
	req.Header.Set("Authorization", "Bearer "+plain)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	buf := make([]byte, 4096)
	var got string
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(got, "\n\n") && time.Now().Before(deadline) {
		k, err := res.Body.Read(buf)
		got += string(buf[:k])
		if err != nil {
			break
		}
	}
	line, ok := strings.CutPrefix(strings.SplitN(got, "\n", 2)[0], "data: ")
	if !ok {
		t.Fatalf("stream: %q", got)
	}
	var p Point
	if err := json.Unmarshal([]byte(line), &p); err != nil {
		t.Fatal(err)
	}
	if p.RPS < 50 || p.RPS > 200 || p.P50 <= 0 || p.P50 > 1 || p.P99 < 1 || p.P99 > 100 || p.HitRate < 0.98 || p.Goroutines == 0 || p.RSS == 0 {
		t.Errorf("point %+v", p)
	}
	if cores, _ := readCPUTimes(); len(p.CPU) != len(cores) || len(cores) == 0 {
		t.Errorf("cpu %v, %d cores", p.CPU, len(cores))
	}
}

func TestQuantile(t *testing.T) {
	bounds := []float64{1, 2, 4}
	for _, tc := range []struct {
		counts []uint64
		q      float64
		want   float64
	}{
		{[]uint64{10, 0, 0, 0}, 0.5, 0.5},
		{[]uint64{0, 10, 0, 0}, 0.5, 1.5},
		{[]uint64{50, 50, 0, 0}, 0.99, 1.98},
		{[]uint64{0, 0, 0, 5}, 0.5, 4},
		{[]uint64{0, 0, 0, 0}, 0.5, 0},
	} {
		if got := quantile(bounds, tc.counts, tc.q); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("quantile(%v, %v) = %v, want %v", tc.counts, tc.q, got, tc.want)
		}
	}
}

// /readyz follows the required checks only: the store down leaves the
// node ready, a failing access log or a drain does not. ?verbose lists
// every check with why a failed one failed.
func TestReadyz(t *testing.T) {
	var storeDown, logFailing atomic.Bool
	h := newHarness(t, true, func(o *Options) {
		o.Ready = func() health.Report {
			return health.Report{{Name: health.AccessLogFile, OK: !logFailing.Load(), Required: true, Detail: "no space left on device"},
				{Name: health.Store, OK: !storeDown.Load(), Detail: "dial tcp 10.0.0.7:6379: connection refused"}}
		}
	})
	if r := h.do("GET", "/readyz", nil); r.status != 200 || string(r.body) != "ready\n" {
		t.Errorf("ready: %d %q", r.status, r.body)
	}
	storeDown.Store(true)
	if r := h.do("GET", "/readyz", nil); r.status != 200 {
		t.Errorf("store down: %d, want 200 (the store is reported, not required)", r.status)
	}
	want := "[+]access_log_file ok\n[-]store failed: dial tcp 10.0.0.7:6379: connection refused (reported, not required)\nready\n"
	if r := h.do("GET", "/readyz?verbose", nil); r.status != 200 || string(r.body) != want {
		t.Errorf("verbose, store down: %d %q, want %q", r.status, r.body, want)
	}
	logFailing.Store(true)
	if r := h.do("GET", "/readyz", nil); r.status != 503 || string(r.body) != "not ready\n" {
		t.Errorf("log failing: %d %q", r.status, r.body)
	}
	if r := h.do("GET", "/readyz?verbose", nil); r.status != 503 || !strings.Contains(string(r.body), "[-]access_log_file failed: no space left on device\n") {
		t.Errorf("verbose, log failing: %d %q", r.status, r.body)
	}
	logFailing.Store(false)
	h.s.SetReady(false)
	if r := h.do("GET", "/readyz", nil); r.status != 503 {
		t.Errorf("draining: %d", r.status)
	}
	if r := h.do("GET", "/readyz?verbose", nil); r.status != 503 || !strings.Contains(string(r.body), "[-]serving failed: starting or draining\n") {
		t.Errorf("verbose, draining: %d %q", r.status, r.body)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func netipFrom4(a, b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{a, b, c, d}) }

// A token's lifetime is capped by admin.max_token_ttl, which is also the
// lifetime of a token made without one; its JSON says when it expires.
func TestTokenLifetimeCap(t *testing.T) {
	h := newHarness(t, true, func(o *Options) { o.MaxTokenTTL = 90 * 24 * time.Hour })
	plain, _, err := h.accounts.CreateToken(testUser, "ci", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	do := func(body map[string]string) response {
		return h.do("POST", "/api/v1/tokens", body, "Authorization", "Bearer "+plain)
	}
	if r := do(map[string]string{"name": "forever", "ttl": "876000h"}); r.status != 400 || !strings.Contains(string(r.body), "max_token_ttl") {
		t.Errorf("a 100-year token: %d %s", r.status, r.body)
	}
	for ttl, want := range map[string]time.Duration{"": 90 * 24 * time.Hour, "720h": 720 * time.Hour} {
		before := time.Now()
		r := do(map[string]string{"name": "deploy" + ttl, "ttl": ttl})
		if r.status != 201 {
			t.Fatalf("ttl %q: %d %s", ttl, r.status, r.body)
		}
		exp, err := time.Parse(time.RFC3339Nano, r.json(t)["expires"].(string))
		if err != nil || exp.Before(before.Add(want)) || exp.After(time.Now().Add(want)) {
			t.Errorf("ttl %q: expires %v (%v), want about %v from now", ttl, exp, err, want)
		}
	}
	for _, tc := range []struct {
		ttl, max time.Duration
		want     time.Duration
		ok       bool
	}{{0, 0, 0, true}, {time.Hour, 0, time.Hour, true}, {0, time.Hour, time.Hour, true}, {2 * time.Hour, time.Hour, 0, false}, {-1, time.Hour, 0, false}} {
		got, err := TokenLifetime(tc.ttl, tc.max)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("TokenLifetime(%v, %v) = %v, %v", tc.ttl, tc.max, got, err)
		}
	}
}

// The audit log is a hash chain: it verifies as written, across a restart
// and beside another writer (the CLI); an edited, removed or inserted line
// is reported where the chain breaks.
func TestAuditChain(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	// A line from before chaining, then two writers taking turns.
	if err := os.WriteFile(path, []byte(`{"time":"2026-01-01T00:00:00Z","actor":"old","action":"login","result":"ok"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func() *Audit {
		a, err := OpenAudit(AuditOptions{Path: path, AlertAt: 100, AlertWindow: time.Minute, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	server, cli := open(), open()
	for i := range 10 {
		w := server
		if i%3 == 0 {
			w = cli
		}
		w.Record(AuditRecord{Actor: "alice", Action: "placement.put", Target: fmt.Sprint(i), Result: "ok"})
	}
	_ = cli.Close()
	_ = server.Close()
	again := open()
	again.Record(AuditRecord{Actor: "bob", Action: "logout", Result: "ok"})
	_ = again.Close()

	verify := func(b []byte) error {
		var c AuditChain
		return c.Verify("audit.log", bytes.NewReader(b))
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c AuditChain
	if err := c.Verify("audit.log", bytes.NewReader(good)); err != nil || c.Lines != 12 || c.First != 1 || c.Last() != 11 {
		t.Fatalf("intact log: %v, %d lines, seq %d..%d", err, c.Lines, c.First, c.Last())
	}
	lines := strings.SplitAfter(string(good), "\n")
	lines = lines[:len(lines)-1] // the empty string after the last newline
	join := func(ls []string) []byte { return []byte(strings.Join(ls, "")) }
	edited := slices.Clone(lines)
	edited[5] = strings.Replace(edited[5], `"alice"`, `"mallory"`, 1)
	removed := slices.Concat(lines[:5], lines[6:])
	inserted := slices.Concat(lines[:5], []string{lines[4]}, lines[5:])
	torn := join(lines)
	torn = torn[:len(torn)-20]
	for name, tc := range map[string]struct {
		b    []byte
		line int
		want string
	}{
		"edited":   {join(edited), 7, "edited or removed"},
		"removed":  {join(removed), 6, "missing"},
		"inserted": {join(inserted), 6, "inserted"},
		"torn":     {torn, 12, "not a complete record"},
	} {
		err := verify(tc.b)
		var br *ChainBreak
		if !errors.As(err, &br) || br.Line != tc.line || !strings.Contains(br.Reason, tc.want) {
			t.Errorf("%s: %v, want line %d: %s", name, err, tc.line, tc.want)
		}
	}
}

// Every route of the admin listener against every role, and a token scoped
// to /metrics: the role's routes are served, the others are a 403 (and
// audited), whatever the body.
func TestRouteRoleMatrix(t *testing.T) {
	h := newHarness(t, true, nil) // testUser is an admin
	tokens := map[string]string{}
	for _, role := range []Role{RoleViewer, RoleEditor, RoleAdmin} {
		name := "u-" + string(role)
		if err := h.accounts.CreateUserWithRole(name, testPassword, "", role, PasswordPolicy{MinLength: 12}); err != nil {
			t.Fatal(err)
		}
		plain, _, err := h.accounts.CreateToken(name, "matrix", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tokens[string(role)] = plain
	}
	scoped, _, err := h.accounts.CreateTokenWith("u-admin", "prometheus", time.Hour, RoleViewer, ScopeMetrics)
	if err != nil {
		t.Fatal(err)
	}
	tokens["metrics-scope"] = scoped
	if err := h.store.Put(t.Context(), &tsubame.Placement{ID: "1", URLs: []string{"https://ad.example.com/1.js"}}); err != nil {
		t.Fatal(err)
	}
	// need: the weakest role that may; "" for the scoped token's one route.
	routes := []struct {
		method, path string
		body         any
		need         Role
	}{
		{"GET", "/metrics", nil, RoleViewer},
		{"GET", "/api/v1/session", nil, RoleViewer},
		{"GET", "/api/v1/placements", nil, RoleViewer},
		{"GET", "/api/v1/placements/1", nil, RoleViewer},
		{"GET", "/api/v1/export", nil, RoleViewer},
		{"GET", "/api/v1/config", nil, RoleViewer},
		{"GET", "/api/v1/accesslog", nil, RoleViewer},
		{"GET", "/api/v1/stats", nil, RoleViewer},
		{"PUT", "/api/v1/placements/2", map[string]any{"urls": []string{"https://ad.example.com/2.js"}}, RoleEditor},
		{"DELETE", "/api/v1/placements/2", nil, RoleEditor},
		{"POST", "/api/v1/import", `{"id":"3","urls":["https://ad.example.com/3.js"]}` + "\n", RoleEditor},
		{"POST", "/api/v1/purge", map[string]any{"all": true}, RoleEditor},
		{"GET", "/api/v1/tokens", nil, RoleAdmin},
		{"POST", "/api/v1/tokens", map[string]string{"name": "x", "ttl": "1h"}, RoleAdmin},
		{"DELETE", "/api/v1/tokens/000000000000", nil, RoleAdmin},
		{"GET", "/api/v1/users", nil, RoleAdmin},
		{"POST", "/api/v1/users", map[string]string{"user": "new", "password": testPassword}, RoleAdmin},
		{"PUT", "/api/v1/users/new/role", map[string]string{"role": "editor"}, RoleAdmin},
		{"DELETE", "/api/v1/users/nobody", nil, RoleAdmin},
		{"GET", "/debug/pprof/", nil, RoleAdmin},
		{"GET", "/debug/pprof/cmdline", nil, RoleAdmin},
		{"GET", "/debug/pprof/symbol", nil, RoleAdmin},
		{"POST", "/api/v1/logout", nil, RoleViewer},
	}
	for _, who := range []string{"viewer", "editor", "admin", "metrics-scope"} {
		for _, rt := range routes {
			r := h.do(rt.method, rt.path, rt.body, "Authorization", "Bearer "+tokens[who])
			allowed := Role(who).Allows(rt.need)
			if who == "metrics-scope" {
				allowed = rt.path == "/metrics"
			}
			switch {
			case allowed && (r.status == 401 || r.status == 403):
				t.Errorf("%s %s as %s: %d %s, want served", rt.method, rt.path, who, r.status, r.body)
			case !allowed && r.status != 403:
				t.Errorf("%s %s as %s: %d, want 403", rt.method, rt.path, who, r.status)
			}
		}
	}
	forbidden := 0
	h.s.auditLog.flush(true)
	for _, rec := range h.auditLines() {
		if rec.Action == "forbidden" {
			forbidden += max(rec.Repeated, 1)
		}
	}
	// viewer: 14 routes above its role; editor: 10; the scoped token: all but one.
	if want := 14 + 10 + len(routes) - 1; forbidden != want {
		t.Errorf("%d refusals audited, want %d", forbidden, want)
	}
}

// Roles guard themselves: a token's role stays within its user's (also
// after a demotion), nobody raises their own role, and the last admin can
// be neither deleted nor demoted.
func TestRoleRules(t *testing.T) {
	h := newHarness(t, true, nil)
	a := h.accounts
	if err := a.CreateUserWithRole("ed", testPassword, "", RoleEditor, PasswordPolicy{MinLength: 12}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.CreateTokenWith("ed", "up", time.Hour, RoleAdmin, ""); err == nil {
		t.Error("an editor's token got the admin role")
	}
	edTok, _, err := a.CreateToken("ed", "own", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if tok, ok := a.VerifyToken(edTok, time.Now()); !ok || tok.Role != RoleEditor {
		t.Errorf("an editor's default token: %+v", tok)
	}
	if err := a.SetRole("ed", RoleViewer); err != nil {
		t.Fatal(err)
	}
	if tok, _ := a.VerifyToken(edTok, time.Now()); tok.Role != RoleViewer {
		t.Errorf("after the demotion the token is %s", tok.Role)
	}
	if err := a.SetRole(testUser, RoleEditor); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
		t.Errorf("demoting the last admin: %v", err)
	}
	if err := a.DeleteUser(testUser); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
		t.Errorf("deleting the last admin: %v", err)
	}
	// Through the API: a new admin may then demote the first.
	adminTok, _, err := a.CreateToken(testUser, "adm", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	auth := []string{"Authorization", "Bearer " + adminTok}
	if r := h.do("POST", "/api/v1/users", map[string]string{"user": "second", "password": testPassword, "role": "admin"}, auth...); r.status != 201 {
		t.Fatalf("create admin: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/api/v1/users", map[string]string{"user": "third", "password": testPassword}, auth...); r.status != 201 || !strings.Contains(string(r.body), `"role":"viewer"`) {
		t.Errorf("a user made without a role: %d %s", r.status, r.body)
	}
	if r := h.do("PUT", "/api/v1/users/"+testUser+"/role", map[string]string{"role": "viewer"}, auth...); r.status != 200 {
		t.Errorf("demote self with another admin present: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/api/v1/users", nil, auth...); r.status != 403 {
		t.Errorf("the demoted admin's token still manages users: %d", r.status)
	}
	if r := h.do("POST", "/api/v1/tokens", map[string]string{"name": "t", "role": "superuser"}, auth...); r.status != 403 && r.status != 400 {
		t.Errorf("bad role: %d", r.status)
	}
	// Users and tokens from before roles existed are admins.
	raw := `{"users":[{"name":"legacy","password":"x","created":"2026-01-01T00:00:00Z"}],"tokens":[]}`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "users.json"), []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := OpenAccounts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r := old.RoleOf("legacy"); r != RoleAdmin {
		t.Errorf("a user from before roles: %q", r)
	}
}
