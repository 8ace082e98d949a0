package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	// An unknown variable: the loader's warning is a record too.
	p := startBinary(t, "TSUBAME_CONFIG="+conf, "TSUBAME_ADMIN_LISTEN=127.0.0.1:"+freePort(t), "TSUBAME_NO_SUCH_KEY=1")
	waitLog(t, p, `"msg":"serving"`)

	// The server has no terminal: every line is a record, the bootstrap
	// token's notice too, which names the file the token is in.
	count := map[string]int{}
	var tokenFile string
	for line := range strings.SplitSeq(strings.TrimSpace(p.logs.String()), "\n") {
		var rec struct {
			Msg       string `json:"msg"`
			Level     string `json:"level"`
			TokenFile string `json:"token_file"`
			TTL       any    `json:"ttl"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Msg == "" || rec.Level == "" {
			t.Errorf("a line of another format: %q", line)
		}
		count[rec.Msg]++
		if rec.TokenFile != "" {
			tokenFile = rec.TokenFile
		}
		if _, isNumber := rec.TTL.(float64); isNumber {
			t.Errorf("a duration as nanoseconds: %s", line)
		}
	}
	for _, msg := range []string{"store", "cache", "public listener", "sites", "tls listener", "admin listener", "ads and tracking",
		"access log", "webhooks", "rtb bidder", "reports", "serving"} {
		if count[msg] != 1 {
			t.Errorf("%d lines %q at start, want 1", count[msg], msg)
		}
	}
	if count["kafka shipper"] != 0 {
		t.Error(`a "kafka shipper" line, with the shipper off`)
	}
	// No TCF vendor id: said once, that where GDPR applies no visitor is kept.
	if n := strings.Count(p.logs.String(), `"msg":"ads.tcf_vendor_id is not set: where GDPR applies`); n != 1 {
		t.Errorf("%d lines at start saying that ads.tcf_vendor_id is not set, want 1", n)
	}
	for _, want := range []string{`"level":"WARN","msg":"unknown environment variable TSUBAME_NO_SUCH_KEY`, `"names":"pub"`, `"platforms":"line"`, `"exchanges":"ssp"`, `"default_certificate":true`,
		`"site_certificates":1`, `"ttl":"1m0s"`} {
		if !strings.Contains(p.logs.String(), want) {
			t.Errorf("the start's log lacks %s:\n%s", want, p.logs)
		}
	}
	// The token is in its file (the server's user only), not in the log;
	// the file goes with the process.
	if tokenFile != filepath.Join(p.dataDir, "admin", BootstrapTokenFile) {
		t.Fatalf("the bootstrap notice names %q", tokenFile)
	}
	token, err := os.ReadFile(tokenFile)
	if fi, _ := os.Stat(tokenFile); err != nil || len(strings.TrimSpace(string(token))) < 20 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token file: %q %v", token, err)
	}
	for _, secret := range []string{strings.TrimSpace(string(token)), "a-line-channel-secret", "a-token-of-16-chars"} {
		if strings.Contains(p.logs.String(), secret) {
			t.Errorf("a secret in the log: %s", secret)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tokenFile); !os.IsNotExist(err) {
		t.Errorf("the token file outlived the process: %v", err)
	}
}
