package config_test

import (
	"slices"
	"strings"
	"testing"

	"tsubame/internal/certs/certstest"
)

// admin.hosts reaches the admin listener's options from YAML and from the
// environment; entries that are not a bare host name or address are
// reported.
func TestAdminHosts(t *testing.T) {
	if got := load(t, "admin: {hosts: [admin.example.com, 10.0.0.5]}\n").Admin.Options().Hosts; !slices.Equal(got, []string{"admin.example.com", "10.0.0.5"}) {
		t.Errorf("from YAML: %q", got)
	}
	if got := load(t, "", "TSUBAME_ADMIN_HOSTS=a.example,b.example").Admin.Options().Hosts; !slices.Equal(got, []string{"a.example", "b.example"}) {
		t.Errorf("from the environment: %q", got)
	}
	if errs := load(t, "").Validate(); len(errs) != 0 {
		t.Fatalf("defaults: %v", errs)
	}
	cfg := load(t, "admin: {hosts: [\"admin.example.com:4001\", \"*.example.com\", \"https://a.example\", \"x@a.example\", \"::1\", \"[::1]\", \"a.example.\"]}\n")
	var text strings.Builder
	for _, e := range cfg.Validate() {
		text.WriteString(e.Error() + "\n")
	}
	for _, bad := range []string{"admin.example.com:4001", "*.example.com", "https://a.example", "x@a.example"} {
		if !strings.Contains(text.String(), `admin.hosts: "`+bad+`"`) {
			t.Errorf("%q not reported:\n%s", bad, text.String())
		}
	}
	if strings.Count(text.String(), "admin.hosts") != 4 {
		t.Errorf("valid names reported too:\n%s", text.String())
	}
}

// A TLS listener with certificates for sites only has nothing to present
// to a client that sends no server name: valid, but warned about, saying
// what such a client gets and how to give it a certificate. A default pair
// silences the warning.
func TestRiskNoDefaultCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir)
	def := ca.Issue(t, dir, "default", "ads.example")
	news := ca.Issue(t, dir, "news", "news.example", "*.news.example")
	sites := "sites:\n  news: {hosts: [news.example, \"*.news.example\"], tls_cert: " + news.CertFile + ", tls_key: " + news.KeyFile + "}\n"

	cfg := load(t, "tls: {listen: \":4443\"}\n"+sites)
	if errs := cfg.Validate(); len(errs) != 0 {
		t.Fatalf("sites' certificates only: %v", errs)
	}
	risks := strings.Join(cfg.Risks(), "\n")
	for _, want := range []string{`tls.listen ":4443" has no default certificate`, "sends no server name", "handshake",
		"news.example, *.news.example", "set tls.cert and tls.key"} {
		if !strings.Contains(risks, want) {
			t.Errorf("no %q in the risks:\n%s", want, risks)
		}
	}

	cfg = load(t, "tls: {listen: \":4443\", cert: "+def.CertFile+", key: "+def.KeyFile+"}\n"+sites)
	if errs := cfg.Validate(); len(errs) != 0 {
		t.Fatalf("with a default pair: %v", errs)
	}
	if r := cfg.Risks(); len(r) != 0 {
		t.Errorf("with a default pair: %q", r)
	}
	// Certificates without a TLS listener are an error, not a risk.
	if r := load(t, sites).Risks(); len(r) != 0 {
		t.Errorf("without tls.listen: %q", r)
	}
}
