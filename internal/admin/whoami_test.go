package admin

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"tsubame/internal/store/memory"
)

// whoami answers 200 to anyone, and tells a stranger nothing but that they
// are not logged in: the page asks on every load, and a 401 there would
// be an error in the browser's console.
func TestWhoami(t *testing.T) {
	h := newHarness(t, true, nil)
	keys := func(m map[string]any) []string {
		var k []string
		for key := range m {
			k = append(k, key)
		}
		slices.Sort(k)
		return k
	}
	notLoggedIn := func(what string, r response) {
		t.Helper()
		if m := r.json(t); r.status != 200 || len(m) != 1 || m["user"] != nil || !slices.Equal(keys(m), []string{"user"}) {
			t.Errorf("%s: %d %s, want 200 {\"user\":null}", what, r.status, r.body)
		}
	}
	notLoggedIn("no credentials", h.do("GET", "/api/v1/whoami", nil))

	// A session cookie the server no longer knows (it restarted, the
	// session ended): cleared, not audited as an attack.
	r := h.do("GET", "/api/v1/whoami", nil, "Cookie", SessionCookie+"=gone")
	notLoggedIn("a stale cookie", r)
	var cleared bool
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		cleared = cleared || c.Name == SessionCookie && c.MaxAge < 0
	}
	if !cleared {
		t.Errorf("a stale cookie is not cleared: %v", r.header["Set-Cookie"])
	}

	// A token that fails is audited, as on every route.
	notLoggedIn("a wrong token", h.do("GET", "/api/v1/whoami", nil, "Authorization", "Bearer tsb_wrong"))
	var denied []string
	for _, rec := range h.auditLines() {
		if rec.Target == "/api/v1/whoami" {
			denied = append(denied, rec.Action+" "+rec.Result)
		}
	}
	if !slices.Equal(denied, []string{"auth denied"}) {
		t.Errorf("audited for whoami: %v, want the wrong token alone", denied)
	}

	// A token for /metrics reads nothing else, not even its user.
	scoped, _, err := h.accounts.CreateTokenWith(testUser, "prometheus", time.Hour, RoleViewer, ScopeMetrics)
	if err != nil {
		t.Fatal(err)
	}
	notLoggedIn("a token scoped to /metrics", h.do("GET", "/api/v1/whoami", nil, "Authorization", "Bearer "+scoped))

	// A session: the user, role, CSRF token and the features (none here:
	// no stats, campaigns, reports or forecasts).
	cookie, csrf := h.login()
	m := h.do("GET", "/api/v1/whoami", nil, "Cookie", SessionCookie+"="+cookie).json(t)
	if m["user"] != testUser || m["role"] != "admin" || m["csrf_token"] != csrf {
		t.Errorf("a session: %v", m)
	}
	if f, _ := m["features"].(map[string]any); len(f) != 7 || f["stats"] != false || f["campaigns"] != false || f["reports"] != false || f["forecast"] != false {
		t.Errorf("features %v", m["features"])
	}
	// What the page therefore does not ask: the stats routes say why.
	if r := h.do("GET", "/api/v1/stats", nil, "Cookie", SessionCookie+"="+cookie); r.status != 404 || r.json(t)["error"] != "this server keeps no live stats" {
		t.Errorf("stats without a sampler: %d %s", r.status, r.body)
	}
	// A token has no CSRF token to give.
	if err := h.accounts.CreateUserWithRole("watcher", testPassword, "", RoleViewer, PasswordPolicy{MinLength: 12}); err != nil {
		t.Fatal(err)
	}
	plain, _, err := h.accounts.CreateToken("watcher", "ci", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	m = h.do("GET", "/api/v1/whoami", nil, "Authorization", "Bearer "+plain).json(t)
	if m["user"] != "watcher" || m["role"] != "viewer" || m["csrf_token"] != nil {
		t.Errorf("a viewer's token: %v", m)
	}
}

// The features list what the server was given, so that the page asks for
// nothing that would answer 404.
func TestWhoamiFeatures(t *testing.T) {
	h := newHarness(t, true, func(o *Options) {
		o.Sample = func() Sample { return Sample{} }
		o.Campaigns = memory.New()
	})
	cookie, _ := h.login()
	f, _ := h.do("GET", "/api/v1/whoami", nil, "Cookie", SessionCookie+"="+cookie).json(t)["features"].(map[string]any)
	want := map[string]any{"stats": true, "endpoints": true, "campaigns": true, "budgets": false, "reports": false}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("features %v, want %v", f, want)
			break
		}
	}
}
