package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tsubame/internal/certs/certstest"
)

// The real binary's process log says at start what is on, one line per
// subsystem, and every line of it has the one configured format (JSON
// here): no line of the standard log package's own format among them.
func TestStartupLogOneLinePerSubsystem(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir)
	def := ca.Issue(t, dir, "default", "ads.test", "127.0.0.1")
	pub := ca.Issue(t, dir, "pub", "pub.test")
	conf := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(conf, []byte(`
log: {format: json}
tls:
  listen: 127.0.0.1:`+freePort(t)+`
  cert: `+def.CertFile+`
  key: `+def.KeyFile+`
sites:
  pub:
    hosts: [pub.test]
    tls_cert: `+pub.CertFile+`
    tls_key: `+pub.KeyFile+`
    endpoints:
      tag: {source: store}
webhook:
  line: {channel_secret: a-line-channel-secret}
rtb:
  notice_url: http://bidder.example
  exchanges:
    ssp: {seat: Agency1, token_header: X-Exchange-Token, token: a-token-of-16-chars}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "TSUBAME_CONFIG="+conf, "TSUBAME_ADMIN_LISTEN=127.0.0.1:"+freePort(t))
	waitLog(t, p, `"msg":"serving"`)

	count := map[string]int{}
	for line := range strings.SplitSeq(p.logs.String(), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue // the bootstrap token's banner, for the operator at the console
		}
		var rec struct {
			Msg   string `json:"msg"`
			Level string `json:"level"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Msg == "" || rec.Level == "" {
			t.Errorf("a line of another format: %q", line)
		}
		count[rec.Msg]++
	}
	for _, msg := range []string{"store", "public listener", "sites", "tls", "admin", "access log", "webhooks", "rtb", "reports", "serving"} {
		if count[msg] != 1 {
			t.Errorf("%d lines %q at start, want 1", count[msg], msg)
		}
	}
	if count["kafka"] != 0 {
		t.Error(`a "kafka" line, with the shipper off`)
	}
	for _, want := range []string{`"names":"pub"`, `"platforms":"line"`, `"exchanges":"ssp"`, `"default_certificate":true`, `"site_certificates":1`} {
		if !strings.Contains(p.logs.String(), want) {
			t.Errorf("the start's log lacks %s:\n%s", want, p.logs)
		}
	}
	// Every line that is not a record is the banner: the bootstrap token.
	for line := range strings.SplitSeq(p.logs.String(), "\n") {
		if line != "" && !strings.HasPrefix(line, "{") && !strings.HasPrefix(line, "No admin user") &&
			!strings.HasPrefix(line, "(it works once") && !strings.HasPrefix(line, "    ") {
			t.Errorf("a line of another format: %q", line)
		}
	}
	if strings.Contains(p.logs.String(), "a-line-channel-secret") || strings.Contains(p.logs.String(), "a-token-of-16-chars") {
		t.Error("a secret in the log")
	}
}
