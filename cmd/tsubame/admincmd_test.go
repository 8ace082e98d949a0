package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"tsubame/internal/admin"
)

// A user and a token made with the CLI work against a running server at
// once, and the changes are in the audit log.
func TestAdminCLI(t *testing.T) {
	env := testEnv(t)
	m := openMain(t, env, false)
	if m.adm.server.BootstrapToken() == "" {
		t.Fatal("no bootstrap token on a first start")
	}
	code, out, stderr := runCmd(t, env, "correct horse battery staple\n", "admin", "create-user", "-role", "editor", "alice")
	if code != 0 {
		t.Fatalf("create-user: %d %s", code, stderr)
	}
	secret := regexp.MustCompile(`TOTP secret .*: ([A-Z2-7]+)`).FindStringSubmatch(out)
	if secret == nil || !strings.Contains(out, "otpauth://totp/Tsubame:alice?") {
		t.Fatalf("create-user printed %q", out)
	}
	if code, _, stderr := runCmd(t, env, "correct horse battery staple\n", "admin", "create-user", "alice"); code == 0 || !strings.Contains(stderr, "exists") {
		t.Errorf("duplicate user: %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, env, "password\n", "admin", "create-user", "bob"); code != exitUsage ||
		strings.Count(stderr, "at least 12") != 1 {
		t.Errorf("weak password: %d %s", code, stderr)
	}
	if code, _, _ := runCmd(t, env, "", "admin", "create-user", "bob"); code != exitUsage {
		t.Errorf("no password: %d", code)
	}
	if code, _, stderr := runCmd(t, env, "correct horse battery staple\n", "admin", "create-user", "-no-totp", "bob"); code != exitUsage || !strings.Contains(stderr, "require_totp") {
		t.Errorf("-no-totp with require_totp: %d %s", code, stderr)
	}
	if code, out, _ := runCmd(t, env, "", "admin", "list-users"); code != 0 || out != "alice\n" {
		t.Errorf("list-users: %d %q", code, out)
	}

	// The running server accepts the new user's login at once.
	totpCode, _ := totp.GenerateCode(secret[1], time.Now())
	body := `{"user":"alice","password":"correct horse battery staple","totp":"` + totpCode + `"}`
	res, err := http.Post("http://"+m.AdminAddr()+"/api/v1/login", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("login as the CLI's user: %d", res.StatusCode)
	}
	session := res.Cookies()[0]

	code, token, stderr := runCmd(t, env, "", "admin", "create-token", "-user", "alice", "-name", "prometheus", "-ttl", "720h")
	if code != 0 || !strings.HasPrefix(token, "tsb_") {
		t.Fatalf("create-token: %d %q %s", code, token, stderr)
	}
	req, _ := http.NewRequest("GET", "http://"+m.AdminAddr()+"/api/v1/placements", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(token))
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("the CLI's token: %d", res.StatusCode)
	}

	if code, _, stderr := runCmd(t, env, "", "admin", "delete-user", "alice"); code != 0 {
		t.Fatalf("delete-user: %s", stderr)
	}
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("a deleted user's token: %d", res.StatusCode)
	}
	req, _ = http.NewRequest("GET", "http://"+m.AdminAddr()+"/api/v1/session", nil)
	req.Header.Set("Cookie", session.Name+"="+session.Value)
	if res, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("a deleted user's session: %d", res.StatusCode)
	}

	b, err := os.ReadFile(m.Config.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec admin.AuditRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		actions = append(actions, rec.Action+":"+rec.Result)
	}
	if got := strings.Join(actions, " "); got != "user.create:ok login:ok token.create:ok user.delete:ok auth:denied auth:denied" {
		t.Errorf("audit actions: %s", got)
	}
	if code, _, _ := runCmd(t, env, "", "admin", "frobnicate"); code != exitUsage {
		t.Errorf("unknown subcommand: %d", code)
	}

	// The server and the CLI wrote one hash chain; an edit breaks it.
	if code, out, stderr := runCmd(t, env, "", "admin", "verify-audit"); code != 0 || !strings.Contains(out, "audit log intact: 6 lines") {
		t.Fatalf("verify-audit: %d %q %s", code, out, stderr)
	}
	tampered := bytes.Replace(b, []byte(`"action":"login"`), []byte(`"action":"logout"`), 1)
	forged := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(forged, tampered, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, env, "", "admin", "verify-audit", forged); code != exitFailed || !strings.Contains(stderr, forged+":3: its link does not match") {
		t.Errorf("verify-audit of an edited log: %d %s", code, stderr)
	}

	// The last admin stays: it cannot be deleted.
	if code, _, stderr := runCmd(t, env, "correct horse battery staple\n", "admin", "create-user", "-role", "admin", "root"); code != 0 {
		t.Fatalf("create-user root: %s", stderr)
	}
	if code, _, stderr := runCmd(t, env, "", "admin", "delete-user", "root"); code == 0 || !strings.Contains(stderr, "last admin") {
		t.Errorf("deleting the last admin: %d %s", code, stderr)
	}
	if code, _, _ := runCmd(t, env, "correct horse battery staple\n", "admin", "create-user", "-role", "boss", "x"); code != exitUsage {
		t.Errorf("an unknown role: %d", code)
	}
}

// With admin.tls_cert and admin.tls_key the admin listener speaks TLS only,
// and says so with Strict-Transport-Security.
func TestAdminTLS(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)

	m := openMain(t, append(testEnv(t), "TSUBAME_ADMIN_TLS_CERT="+certFile, "TSUBAME_ADMIN_TLS_KEY="+keyFile), false)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	res, err := client.Get("https://" + m.AdminAddr() + "/api/v1/setup")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Strict-Transport-Security") == "" {
		t.Errorf("over TLS: %d, HSTS %q", res.StatusCode, res.Header.Get("Strict-Transport-Security"))
	}
	if res, err := http.Get("http://" + m.AdminAddr() + "/healthz"); err == nil {
		res.Body.Close()
		if res.StatusCode == 200 {
			t.Error("plain HTTP served beside TLS")
		}
	}
	// A missing key file stops the start with the key's name.
	cfg, err := loadConfig("", append(testEnv(t), "TSUBAME_ADMIN_TLS_CERT="+certFile, "TSUBAME_ADMIN_TLS_KEY="+keyFile+".missing"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m2 := &Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Console: io.Discard}
	if err := m2.Open(t.Context()); err == nil || !strings.Contains(err.Error(), "admin.tls_cert") {
		t.Errorf("missing key: %v", err)
	}
}

// alertHook is a local HTTPS receiver for admin.alert_webhook (Slack's
// {"text": ...} body); env points the server at it and trusts its CA.
type alertHook struct {
	mu    sync.Mutex
	texts []string
	env   []string
}

func startAlertHook(t *testing.T, path string) *alertHook {
	t.Helper()
	h := &alertHook{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Text string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.texts = append(h.texts, body.Text)
		h.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	h.env = []string{"TSUBAME_ADMIN_ALERT_WEBHOOK=" + srv.URL + path, "TSUBAME_ADMIN_ALERT_WEBHOOK_CA_FILE=" + ca}
	return h
}

// got is every text received so far, one a line.
func (h *alertHook) got() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.texts, "\n")
}

// With admin.alert_webhook, a user made with the CLI and a token made
// through the running server's API each reach the webhook (an HTTPS
// server whose CA is given by admin.alert_webhook_ca_file).
func TestAdminAlertWebhook(t *testing.T) {
	hook := startAlertHook(t, "/hooks/secret-path")
	env := append(testEnv(t), hook.env...)
	m := openMain(t, env, false)
	if code, _, stderr := runCmd(t, env, "correct horse battery staple\n", "admin", "create-user", "carol"); code != 0 {
		t.Fatalf("create-user: %d %s", code, stderr)
	}
	token := adminToken(t, m)
	req, _ := http.NewRequest("POST", "http://"+m.AdminAddr()+"/api/v1/tokens", strings.NewReader(`{"name":"deploy","ttl":"1h"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create token: %v %v", err, resp)
	}
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := hook.got()
		if strings.Contains(got, `user "carol" created by cli`) && strings.Contains(got, "API token") && strings.Contains(got, "created by token:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alerts received: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The webhook's URL is a secret: never in the process log.
	if out, _ := os.ReadFile(m.Config.AuditLogPath()); strings.Contains(string(out), "secret-path") {
		t.Error("the webhook URL is in the audit log")
	}
}

// verify-audit without arguments follows the chain through every file of
// the configured log (closed files oldest first, then the active file),
// and names the file whose checkpoint shows one missing.
func TestVerifyAuditAcrossRotatedFiles(t *testing.T) {
	env := testEnv(t)
	cfg, err := loadConfig("", env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := admin.OpenAudit(admin.AuditOptions{Path: cfg.AuditLogPath(), MaxSize: 1024, AlertAt: 100, AlertWindow: time.Minute,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		a.Record(admin.AuditRecord{Actor: "alice", Action: "placement.put", Target: fmt.Sprint(i), Result: "ok"})
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := admin.AuditFiles(cfg.AuditLogPath())
	if err != nil || len(files) < 4 {
		t.Fatalf("%v %v", files, err)
	}
	want := fmt.Sprintf("audit log intact: %d lines in %d file(s), chained lines 1 to %d\n", 40+len(files)-1, len(files), 40+len(files)-1)
	if code, out, stderr := runCmd(t, env, "", "admin", "verify-audit"); code != 0 || out != want {
		t.Fatalf("verify-audit: %d %q (want %q) %s", code, out, want, stderr)
	}
	if err := os.Remove(files[1]); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, env, "", "admin", "verify-audit"); code != exitFailed ||
		!strings.Contains(stderr, filepath.Base(files[2])+":1: sequence number") || !strings.Contains(stderr, "lines are missing before it") {
		t.Fatalf("verify-audit with a file missing: %d %s", code, stderr)
	}
}
