// Package systemd holds the systemd unit (tsubame.service) and its checks.
package systemd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tsubame/internal/config"
)

// unit is a parsed unit file: section -> key -> values in order.
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a setting: %q", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u unit) one(t *testing.T, key string) string {
	t.Helper()
	vs := u["Service"][key]
	if len(vs) != 1 {
		t.Fatalf("[Service] %s: %q, want one value", key, vs)
	}
	return vs[0]
}

// The unit passes systemd's own checker, with ExecStart pointed at an
// existing binary (systemd-analyze checks that it is executable).
func TestUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("systemd-analyze is not installed (Debian package systemd; make test installs it)")
		}
		t.Fatal("systemd-analyze is needed (Debian package systemd; make test installs it)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("tsubame.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "ExecStart=/usr/local/bin/tsubame serve\n") {
		t.Fatal("ExecStart is not /usr/local/bin/tsubame serve")
	}
	path := filepath.Join(t.TempDir(), "tsubame.service")
	b = []byte(strings.Replace(string(b), "ExecStart=/usr/local/bin/tsubame", "ExecStart="+self, 1))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The unit matches the server: systemd follows its notifications, its
// environment names real configuration keys, it waits longer than the
// server drains, and it allows more descriptors than connections.
func TestUnitMatchesServer(t *testing.T) {
	u := readUnit(t, "tsubame.service")
	for key, want := range map[string]string{
		"Type":            "notify",
		"NotifyAccess":    "main",
		"ExecReload":      "/bin/kill -HUP $MAINPID",
		"User":            "tsubame",
		"StateDirectory":  "tsubame",
		"LogsDirectory":   "tsubame",
		"NoNewPrivileges": "yes",
		"ProtectSystem":   "strict",
		"PrivateTmp":      "yes",
	} {
		if got := u.one(t, key); got != want {
			t.Errorf("%s=%s, want %s", key, got, want)
		}
	}
	var environ []string
	for _, e := range u["Service"]["Environment"] {
		environ = append(environ, strings.Trim(e, `"`))
	}
	// Without the file it names (not installed here), the variables alone.
	var vars []string
	for _, e := range environ {
		if !strings.HasPrefix(e, config.EnvConfigFile+"=") {
			vars = append(vars, e)
		}
	}
	cfg, warnings, err := config.Load("", vars)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the unit's environment: %v %q", err, warnings)
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatalf("the unit's environment: %v", errs)
	}
	if cfg.DataDir != "/var/lib/"+u.one(t, "StateDirectory") {
		t.Errorf("data_dir %s is not the StateDirectory", cfg.DataDir)
	}
	if cfg.AccessLog.Dir != "/var/log/"+u.one(t, "LogsDirectory") {
		t.Errorf("access_log.dir %s is not the LogsDirectory", cfg.AccessLog.Dir)
	}
	if !strings.HasPrefix(cfg.AccessLog.FallbackDir, cfg.DataDir+"/") {
		t.Errorf("access_log.fallback_dir %s is not writable under the unit (PrivateTmp would discard it)", cfg.AccessLog.FallbackDir)
	}

	stop, err := time.ParseDuration(u.one(t, "TimeoutStopSec"))
	if err != nil {
		t.Fatal(err)
	}
	if stop < cfg.Server.ShutdownTimeout+10*time.Second {
		t.Errorf("TimeoutStopSec=%v leaves too little beyond server.shutdown_timeout %v to close the logs", stop, cfg.Server.ShutdownTimeout)
	}
	nofile, err := strconv.Atoi(u.one(t, "LimitNOFILE"))
	if err != nil {
		t.Fatal(err)
	}
	if nofile < cfg.Server.MaxConns+1024 {
		t.Errorf("LimitNOFILE=%d, below server.max_conns %d and a margin", nofile, cfg.Server.MaxConns)
	}
	watchdog, err := time.ParseDuration(u.one(t, "WatchdogSec"))
	if err != nil || watchdog < 10*time.Second {
		t.Errorf("WatchdogSec=%v (%v): too short for a busy machine", watchdog, err)
	}
}
