package main

import (
	"fmt"
	"net/http"
	"os"
	"os/user"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
)

// Rotating an operator's credentials with the CLI against a running server:
// a new password (and TOTP secret) ends the user's dashboard sessions and
// refuses the old password; list-tokens shows the tokens without their
// secrets; delete-token revokes one at once. Each change is audited.
func TestAdminRotateCredentials(t *testing.T) {
	env := testEnv(t)
	m := openMain(t, env, false)
	base := "http://" + m.AdminAddr()
	// The audit log names the CLI's user by its uid, whatever $USER says.
	t.Setenv("USER", "mallory")
	const first, second = "correct horse battery staple", "a second and different passphrase"
	code, out, stderr := runCmd(t, env, first+"\n", "admin", "create-user", "-role", "admin", "alice")
	if code != 0 {
		t.Fatalf("create-user: %d %s", code, stderr)
	}
	secret := regexp.MustCompile(`TOTP secret .*: ([A-Z2-7]+)`).FindStringSubmatch(out)[1]

	// login answers the status and, on success, the session cookie. A
	// step's code is taken once: the three logins that succeed use the
	// codes of the step before, the step of and the step after their time
	// (each within the server's window, and each later than the last).
	login := func(password, secret string, step int) (int, *http.Cookie) {
		t.Helper()
		code, err := totp.GenerateCode(secret, time.Now().Add(time.Duration(step)*30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		body := `{"user":"alice","password":"` + password + `","totp":"` + code + `"}`
		res, err := http.Post(base+"/api/v1/login", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return res.StatusCode, nil
		}
		return 200, res.Cookies()[0]
	}
	get := func(path string, auth func(*http.Request)) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		auth(req)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	withCookie := func(c *http.Cookie) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Cookie", c.Name+"="+c.Value) }
	}
	withToken := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}

	status, session := login(first, secret, -1)
	if status != 200 || get("/api/v1/placements", withCookie(session)) != 200 {
		t.Fatalf("login: %d", status)
	}
	code, token, stderr := runCmd(t, env, "", "admin", "create-token", "-user", "alice", "-name", "deploy", "-ttl", "720h")
	if code != 0 {
		t.Fatalf("create-token: %s", stderr)
	}
	token = strings.TrimSpace(token)
	id := strings.Split(token, "_")[1]

	// list-tokens: the id, user and name, never the secret.
	code, out, _ = runCmd(t, env, "", "admin", "list-tokens")
	if code != 0 || !regexp.MustCompile(`(?m)^`+id+` +alice +deploy +admin +- +20`).MatchString(out) || strings.Contains(out, token) {
		t.Fatalf("list-tokens: %d\n%s", code, out)
	}

	// A new password: the session ends, the old password is refused, the
	// new one works with the same TOTP secret, and the token stays.
	if code, out, stderr := runCmd(t, env, second+"\n", "admin", "set-password", "alice"); code != 0 || strings.Contains(out, "TOTP secret") {
		t.Fatalf("set-password: %d %s %s", code, out, stderr)
	}
	if got := get("/api/v1/placements", withCookie(session)); got != 401 {
		t.Errorf("a session begun with the old password: %d, want 401", got)
	}
	if status, _ := login(first, secret, 0); status != 401 {
		t.Errorf("login with the old password: %d", status)
	}
	status, session = login(second, secret, 0)
	if status != 200 {
		t.Fatalf("login with the new password: %d", status)
	}
	if got := get("/api/v1/placements", withToken(token)); got != 200 {
		t.Errorf("the token after a new password: %d", got)
	}

	// A new TOTP secret too: the old secret's codes are refused.
	code, out, _ = runCmd(t, env, second+"\n", "admin", "set-password", "-new-totp", "alice")
	renewed := regexp.MustCompile(`TOTP secret .*: ([A-Z2-7]+)`).FindStringSubmatch(out)
	if code != 0 || renewed == nil || renewed[1] == secret {
		t.Fatalf("set-password -new-totp: %d %s", code, out)
	}
	if got := get("/api/v1/placements", withCookie(session)); got != 401 {
		t.Errorf("a session after a new TOTP secret: %d, want 401", got)
	}
	if status, _ := login(second, secret, 1); status != 401 {
		t.Errorf("login with the old TOTP secret: %d", status)
	}
	if status, _ := login(second, renewed[1], 1); status != 200 {
		t.Errorf("login with the new TOTP secret: %d", status)
	}

	if code, _, stderr := runCmd(t, env, "", "admin", "list-tokens", "-user", "nobody"); code != exitFailed || !strings.Contains(stderr, `no user "nobody"`) {
		t.Errorf("list-tokens -user nobody: %d %s", code, stderr)
	}
	// delete-token revokes at once; the whole token names it too.
	if code, out, stderr := runCmd(t, env, "", "admin", "delete-token", token); code != 0 || !strings.Contains(out, "deleted API token "+id) {
		t.Fatalf("delete-token: %d %s %s", code, out, stderr)
	}
	if got := get("/api/v1/placements", withToken(token)); got != 401 {
		t.Errorf("a deleted token: %d", got)
	}
	if code, _, stderr := runCmd(t, env, "", "admin", "delete-token", id); code != exitFailed || !strings.Contains(stderr, "no token") {
		t.Errorf("delete-token twice: %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, env, second+"\n", "admin", "set-password", "nobody"); code != exitFailed || !strings.Contains(stderr, `no user "nobody"`) {
		t.Errorf("set-password of nobody: %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, env, "short\n", "admin", "set-password", "alice"); code != exitUsage || !strings.Contains(stderr, "at least 12") {
		t.Errorf("a weak new password: %d %s", code, stderr)
	}

	b, err := os.ReadFile(m.Config.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	actor := fmt.Sprintf(`"actor":"cli:%s(uid %d)"`, currentUserName(t), os.Getuid())
	if strings.Contains(string(b), "mallory") || strings.Count(string(b), actor) < 5 {
		t.Errorf("the CLI's lines do not name it as %s:\n%s", actor, b)
	}
	for _, want := range []string{`"action":"user.password","target":"alice"`, `"action":"user.password+totp","target":"alice"`,
		`"action":"token.delete","target":"` + id + `"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the audit log lacks %s", want)
		}
	}
	if code, out, _ := runCmd(t, env, "", "admin", "verify-audit"); code != 0 || !strings.Contains(out, "intact") {
		t.Errorf("verify-audit: %d %s", code, out)
	}
}

func currentUserName(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}
