package config_test

import (
	"fmt"
	"strings"
	"testing"
)

// admin.socket: empty is admin.sock in admin.dir, off is none, and a path
// longer than a Unix socket's may be is reported with the limit.
func TestAdminSocket(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"TSUBAME_DATA_DIR=/srv/ts"}, "/srv/ts/admin/admin.sock"},
		{[]string{"TSUBAME_ADMIN_DIR=/var/lib/ts-admin"}, "/var/lib/ts-admin/admin.sock"},
		{[]string{"TSUBAME_ADMIN_SOCKET=/run/tsubame/ctl.sock"}, "/run/tsubame/ctl.sock"},
		{[]string{"TSUBAME_ADMIN_SOCKET=off", "TSUBAME_ADMIN_LISTEN="}, ""},
	} {
		cfg := load(t, "", tc.env...)
		if got := cfg.AdminSocketPath(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.env, got, tc.want)
		}
		if errs := cfg.Validate(); len(errs) != 0 {
			t.Errorf("%v: %v", tc.env, errs)
		}
		if got, want := cfg.Resolved().Admin.Socket, tc.want; got != want && !(want == "" && got == "off") {
			t.Errorf("%v: resolved %q", tc.env, got)
		}
	}
	long := "/srv/" + strings.Repeat("x", 100)
	for _, env := range []string{"TSUBAME_ADMIN_SOCKET=" + long + "/a.sock", "TSUBAME_DATA_DIR=" + long} {
		errs := fmt.Sprint(load(t, "", env).Validate())
		if !strings.Contains(errs, "admin.socket: ") || !strings.Contains(errs, "at most 107") {
			t.Errorf("%s: %s", env, errs)
		}
	}
}
