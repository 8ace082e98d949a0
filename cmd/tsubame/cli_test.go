package main

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Every command answers -h with its own synopsis and flags, on standard
// output, with exit 0; every flag names its value.
func TestEveryCommandsHelp(t *testing.T) {
	for i := range commands {
		c := &commands[i]
		args := append(strings.Fields(c.name), "-h")
		code, out, stderr := runCmd(t, nil, "", args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(out, "usage: tsubame "+c.name) {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", c.name, code, out, stderr)
			continue
		}
		// Its flags, and no other command's.
		own := map[string]bool{}
		c.flagSet().VisitAll(func(f *flag.Flag) {
			own[f.Name] = true
			if !strings.Contains(out, "\n  -"+f.Name) {
				t.Errorf("%s -h does not describe -%s", c.name, f.Name)
			}
			if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); !isBool {
				if name, _ := flag.UnquoteUsage(f); name != strings.ToUpper(name) && !strings.Contains(name, "|") && name != "metrics" {
					t.Errorf("%s -%s: the value's name %q is not written as a placeholder (`NAME` in its usage)", c.name, f.Name, name)
				}
			}
		})
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out, -1) {
			if !own[m[1]] {
				t.Errorf("%s -h describes -%s, which is not its flag", c.name, m[1])
			}
		}
	}
	// The admin commands used to share one set of flags.
	_, out, _ := runCmd(t, nil, "", "admin", "create-user", "-h")
	if strings.Contains(out, "-scope") || strings.Contains(out, "-ttl") || !strings.Contains(out, "-role ROLE") {
		t.Errorf("admin create-user -h:\n%s", out)
	}
	// tsubame help COMMAND is COMMAND -h.
	if code, out, _ := runCmd(t, nil, "", "help", "admin", "create-token"); code != 0 || !strings.HasPrefix(out, "usage: tsubame admin create-token -user NAME -name PURPOSE") &&
		!strings.HasPrefix(out, "usage: tsubame admin create-token -name PURPOSE -user NAME") {
		t.Errorf("help admin create-token: %d\n%s", code, out)
	}
}

// A group's help lists its commands; a missing or unknown subcommand is an
// error that lists them.
func TestGroupHelp(t *testing.T) {
	for _, g := range []string{"placements", "campaigns", "admin", "log", "pacing"} {
		cmds := group(g)
		for _, h := range []string{"-h", "--help", "help"} {
			code, out, stderr := runCmd(t, nil, "", g, h)
			if code != 0 || stderr != "" {
				t.Errorf("%s %s: exit %d, stderr %q", g, h, code, stderr)
			}
			for _, c := range cmds {
				if !strings.Contains(out, "  tsubame "+c.name+" ") {
					t.Errorf("%s %s does not list %s:\n%s", g, h, c.name, out)
				}
			}
		}
		code, _, stderr := runCmd(t, nil, "", g)
		if code != 2 || !strings.Contains(stderr, g+" needs a subcommand") || !strings.Contains(stderr, "tsubame "+cmds[0].name) {
			t.Errorf("%s alone: exit %d, %q", g, code, stderr)
		}
		code, _, stderr = runCmd(t, nil, "", g, "frob")
		if code != 2 || !strings.Contains(stderr, `unknown `+g+` subcommand "frob"`) || !strings.Contains(stderr, "tsubame "+cmds[0].name) {
			t.Errorf("%s frob: exit %d, %q", g, code, stderr)
		}
	}
	// report is a command and a group.
	code, out, _ := runCmd(t, nil, "", "report", "-h")
	if code != 0 || !strings.Contains(out, "-by DIM,...") || !strings.Contains(out, "tsubame report verify") || !strings.Contains(out, "tsubame report rebuild") {
		t.Errorf("report -h: %d\n%s", code, out)
	}
	if code, _, stderr := runCmd(t, nil, "", "report", "frob"); code != 2 || !strings.Contains(stderr, "tsubame report verify") {
		t.Errorf("report frob: %d %s", code, stderr)
	}
}

// The top-level usage shows every flag of every command: it is made from
// the same table as the parsing.
func TestUsageShowsEveryFlag(t *testing.T) {
	code, out, _ := runCmd(t, nil, "", "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for i := range commands {
		c := &commands[i]
		if !strings.Contains(flat, "tsubame "+c.name) {
			t.Errorf("the usage does not show %s", c.name)
		}
		c.flagSet().VisitAll(func(f *flag.Flag) {
			if !regexp.MustCompile(`tsubame ` + regexp.QuoteMeta(c.name) + ` [^\n]*?-` + f.Name + `\b`).MatchString(flat) {
				t.Errorf("the usage does not show %s -%s", c.name, f.Name)
			}
		})
	}
	for _, want := range []string{"-role ROLE", "-scope metrics", "tsubame restart [-config FILE] [-timeout DURATION]", "tsubame health"} {
		if !strings.Contains(flat, want) {
			t.Errorf("the usage does not show %q", want)
		}
	}
	for _, args := range [][]string{{"-v"}, {"--version"}, {"version"}} {
		if code, out, _ := runCmd(t, nil, "", args...); code != 0 || !strings.HasPrefix(out, "tsubame ") {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
}

// Flags may follow the arguments, as in `placements get 1 -config FILE`:
// that used to read the default configuration and answer from another
// store. "--" ends the flags; a flag of another command is an error.
func TestFlagsAfterArguments(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: "+filepath.Join(dir, "data")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The environment names another data directory: only -config finds the placement.
	other := []string{"TSUBAME_CONFIG=" + filepath.Join(dir, "none.yaml")}
	if err := os.WriteFile(filepath.Join(dir, "none.yaml"), []byte("data_dir: "+filepath.Join(dir, "elsewhere")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, other, "", "placements", "put", "7", "http://a.example.com/t.js", "-name", "Side", "-config", cfg); code != 0 {
		t.Fatalf("put with flags last: %d %s", code, stderr)
	}
	code, out, stderr := runCmd(t, other, "", "placements", "get", "7", "-config", cfg)
	if code != 0 || !strings.Contains(out, `"name": "Side"`) || !strings.Contains(out, "http://a.example.com/t.js") {
		t.Fatalf("get 7 -config: %d %s %s", code, out, stderr)
	}
	if code, _, _ := runCmd(t, other, "", "placements", "get", "7"); code != 1 {
		t.Fatal("the placement is in the data directory of $TSUBAME_CONFIG too: the test proves nothing")
	}
	if code, out, _ := runCmd(t, other, "", "placements", "get", "-config", cfg, "--", "7"); code != 0 || !strings.Contains(out, "Side") {
		t.Fatalf("get -- 7: %d %s", code, out)
	}
	// After "--", "-config" is an argument: one too many.
	if code, _, stderr := runCmd(t, other, "", "placements", "get", "7", "--", "-config", cfg); code != 2 || !strings.Contains(stderr, "too many arguments") {
		t.Fatalf("get 7 -- -config: %d %s", code, stderr)
	}
	code, _, stderr = runCmd(t, other, "", "admin", "create-user", "ann", "-scope", "metrics", "-config", cfg)
	if code != 2 || !strings.Contains(stderr, "flag provided but not defined: -scope") || !strings.Contains(stderr, "usage: tsubame admin create-user") {
		t.Fatalf("create-user -scope: %d %s", code, stderr)
	}
}

// tsubame health asks the public listener's /readyz (or /healthz) and says
// with its exit code whether the server is ready.
func TestHealthCommand(t *testing.T) {
	env := append(testEnv(t), "TSUBAME_LISTEN=127.0.0.1:"+freePort(t))
	openMain(t, env, true)
	code, out, stderr := runCmd(t, env, "", "health")
	if code != 0 || !strings.HasSuffix(out, "/readyz: ready\n") || !strings.Contains(out, "http://127.0.0.1:") {
		t.Fatalf("health: %d %q %q", code, out, stderr)
	}
	if code, out, _ := runCmd(t, env, "", "health", "-live"); code != 0 || !strings.HasSuffix(out, "/healthz: ok\n") {
		t.Fatalf("health -live: %d %q", code, out)
	}
	// -url is the listener's address; /readyz is added (/healthz with -live).
	public := "http://" + lookupEnv(env, "TSUBAME_LISTEN")
	if code, out, _ := runCmd(t, nil, "", "health", "-url", public); code != 0 || out != public+"/readyz: ready\n" {
		t.Fatalf("health -url: %d %q", code, out)
	}
	if code, out, _ := runCmd(t, nil, "", "health", "-live", "-url", public+"/"); code != 0 || out != public+"/healthz: ok\n" {
		t.Fatalf("health -live -url: %d %q", code, out)
	}
	for _, bad := range [][]string{{"-url", public + "/json"}, {"-live", "-url", public + "/readyz"}, {"-url", public + "/readyz?verbose"}} {
		if code, _, stderr := runCmd(t, nil, "", append([]string{"health"}, bad...)...); code != exitUsage || !strings.Contains(stderr, "-url") {
			t.Errorf("health %q: %d %s", bad, code, stderr)
		}
	}
	// A 200 that is not the server's answer (another server on the
	// port: the admin listener's dashboard, here) is not healthy.
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "<!doctype html><title>dashboard</title>")
	}))
	defer page.Close()
	if code, _, stderr := runCmd(t, nil, "", "health", "-url", page.URL); code != exitFailed || !strings.Contains(stderr, "is this the public listener?") {
		t.Errorf("health of another server: %d %s", code, stderr)
	}
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	defer notReady.Close()
	code, _, stderr = runCmd(t, nil, "", "health", "-url", notReady.URL)
	if code != 1 || !strings.Contains(stderr, "503 Service Unavailable: not ready") {
		t.Fatalf("health of a server not ready: %d %q", code, stderr)
	}
	// Nothing listening: exit 1, saying so.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	if code, _, stderr := runCmd(t, nil, "", "health", "-url", closed.URL); code != 1 || !strings.Contains(stderr, "connection refused") {
		t.Fatalf("health of nothing: %d %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, nil, "", "health", "-url", "ftp://127.0.0.1/"); code != 2 || !strings.Contains(stderr, "-url") {
		t.Fatalf("health -url ftp: %d %q", code, stderr)
	}
}

func TestLocalURL(t *testing.T) {
	for addr, want := range map[string]string{
		":4000":            "http://127.0.0.1:4000/readyz",
		"[::]:4000":        "http://127.0.0.1:4000/readyz",
		"0.0.0.0:4000":     "http://127.0.0.1:4000/readyz",
		"10.0.0.5:4000":    "http://10.0.0.5:4000/readyz",
		"[2001:db8::1]:80": "http://[2001:db8::1]:80/readyz",
		"ads.example:8080": "http://ads.example:8080/readyz",
	} {
		if got, err := localURL(addr, "/readyz"); err != nil || got != want {
			t.Errorf("localURL(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
}

// Root running a command that writes on a data directory another user
// owns is refused, naming the user: the files would be root's, and the
// server could not read them (an unreadable accounts file refuses every
// new login). Reading commands run.
func TestRootOnAnotherUsersDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs as root only (it gives the data directory to another user)")
	}
	env := testEnv(t)
	dir := lookupEnv(env, "TSUBAME_DATA_DIR")
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, env, "a long and unusual passphrase 71\n", "admin", "create-user", "alice")
	if code != exitUsage || !strings.Contains(stderr, "running as root on data_dir "+dir+", which belongs to") ||
		!strings.Contains(stderr, "sudo -u ") {
		t.Fatalf("create-user as root: %d %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "admin", "users.json")); !os.IsNotExist(err) {
		t.Fatalf("users.json was written: %v", err)
	}
	// Even listing the users would make the admin directory, root's.
	if code, _, _ := runCmd(t, env, "", "admin", "list-users"); code != exitUsage {
		t.Fatalf("list-users as root: %d", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "admin")); !os.IsNotExist(err) {
		t.Fatalf("the admin directory was made: %v", err)
	}
	if code, _, stderr := runCmd(t, env, "", "check-config"); code != 0 {
		t.Fatalf("check-config as root: %d %s", code, stderr)
	}
}

// log export reads the store itself: beside a running server on the
// embedded store it says to stop the server (not, as it did, to change
// placements through the admin API).
func TestLogExportBesideServer(t *testing.T) {
	env := testEnv(t)
	openMain(t, env, true)
	code, _, stderr := runCmd(t, env, "", "log", "export")
	if code != exitFailed || !strings.Contains(stderr, "exported with the server stopped") || strings.Contains(stderr, "placements") {
		t.Fatalf("log export beside a server: %d %s", code, stderr)
	}
}

// Before the first start (no data directory, no access log) the reports
// answer with no rows, and a rebuild counts nothing, instead of failing on
// the missing directories.
func TestReportBeforeFirstStart(t *testing.T) {
	root := t.TempDir()
	env := []string{"TSUBAME_DATA_DIR=" + filepath.Join(root, "data"), "TSUBAME_ACCESS_LOG_DIR=" + filepath.Join(root, "logs")}
	if code, _, stderr := runCmd(t, env, "", "report", "rebuild"); code != 0 || !strings.Contains(stderr, "0 lines read") {
		t.Fatalf("report rebuild: %d %s", code, stderr)
	}
	if code, out, stderr := runCmd(t, env, "", "report", "-by", "line_item"); code != 0 || !strings.Contains(out, "(no rows)") {
		t.Fatalf("report: %d %q %s", code, out, stderr)
	}
}

// A value the flag package refuses says how it is written; a report
// error has one prefix.
func TestFlagValueHints(t *testing.T) {
	code, _, stderr := runCmd(t, testEnv(t), "", "admin", "create-token", "-user", "a", "-name", "b", "-ttl", "5")
	if code != exitUsage || !strings.Contains(stderr, `invalid value "5" for flag -ttl: parse error (a number and a unit: 500ms, 30s, 2m, 720h)`) {
		t.Errorf("-ttl 5: %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, nil, "", "pacing", "simulate", "-nodes", "two", "x.yaml"); code != exitUsage || !strings.Contains(stderr, "(a whole number)") {
		t.Errorf("-nodes two: %d %s", code, stderr)
	}
	code, _, stderr = runCmd(t, testEnv(t), "", "report", "-from", "2026-11-27")
	if code != exitUsage || strings.Contains(stderr, "tsubame: tsubame") || !strings.HasPrefix(stderr, "tsubame: report: ") {
		t.Errorf("report -from 2026-11-27: %d %s", code, stderr)
	}
}

// restart and log reopen signal only a tsubame server of the pid file's
// owner: a pid file naming another process (here a sleep; in the field a
// daemon, or a reused pid) is refused, and the process is left alone.
func TestSignalsOnlyAServer(t *testing.T) {
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	env := testEnv(t)
	dataDir := lookupEnv(env, "TSUBAME_DATA_DIR")
	if err := os.WriteFile(filepath.Join(dataDir, PIDFile), []byte(strconv.Itoa(sleep.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"restart", "-timeout", "5s"}, {"log", "reopen"}} {
		code, _, stderr := runCmd(t, env, "", args...)
		if code != exitFailed || !strings.Contains(stderr, "is not a tsubame server of the file's owner: not signalled") {
			t.Errorf("%v: %d %s", args, code, stderr)
		}
	}
	if err := sleep.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process the pid file named was signalled: %v", err)
	}
}

// The bootstrap token's file is made new: a link or a file planted there
// by someone who can write the directory does not receive the token.
func TestWriteSecretFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "theirs")
	if err := os.WriteFile(target, []byte("before\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, BootstrapTokenFile)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := writeSecretFile(path, "secret\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "before\n" {
		t.Errorf("the link's target got %q", b)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token file: %v %v", fi.Mode(), err)
	}
	// A planted file readable by others is replaced, not reused.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := writeSecretFile(path, "secret\n"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token file over a planted one: %v %v", fi.Mode(), err)
	}
}
