package config_test

import (
	"slices"
	"strings"
	"testing"
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
