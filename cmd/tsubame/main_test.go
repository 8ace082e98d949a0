package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/admin"
	"tsubame/internal/config"
)

const wantID1 = `Example.process({"urls":["http://ad1.example.com/tag.js","http://ad2.example.com/tag.js"]});`

// loadConfig is env.load for tests: the configuration of environ, its
// warnings written to stderr.
func loadConfig(path string, environ []string, stderr io.Writer) (*config.Config, error) {
	return (&env{configPath: path, environ: environ, stderr: stderr, readOnly: true}).load()
}

// testEnv is a configuration for a server on random loopback ports with its
// data in a fresh temporary directory.
func testEnv(t *testing.T) []string {
	return []string{
		"TSUBAME_LISTEN=127.0.0.1:0",
		"TSUBAME_ADMIN_LISTEN=127.0.0.1:0",
		"TSUBAME_DATA_DIR=" + t.TempDir(),
		"TSUBAME_ACCESS_LOG_DIR=" + t.TempDir(),
	}
}

// openMain starts the real Main, as serve does, and closes it with the test.
func openMain(t *testing.T, env []string, demo bool) *Main {
	t.Helper()
	cfg, err := loadConfig("", env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Demo: demo, Console: io.Discard}
	if err := m.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return getAs(t, http.DefaultClient, url, "")
}

// getAs gets url with client, sending userAgent unless it is empty (Go's
// own then), and returns the status and body.
func getAs(t *testing.T, client *http.Client, url, userAgent string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if userAgent != "" {
		req.Header.Set("User-Agent", userAgent)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestMainServesDemoPlacements(t *testing.T) {
	m := openMain(t, testEnv(t), true)
	base := "http://" + m.PublicAddr()
	for _, ep := range []string{"sample1", "sample2", "sample3"} {
		if code, body := get(t, base+"/api/"+ep+".js?id=1&callback=Example.process"); code != 200 || body != wantID1 {
			t.Errorf("%s: %d %s", ep, code, body)
		}
	}
	if _, body := get(t, base+"/api/sample3.js?id=1000&callback=cb"); body != `cb({"urls":["http://ad1999.example.com/tag.js","http://ad2000.example.com/tag.js"]});` {
		t.Errorf("id 1000: %s", body)
	}
	if code, body := get(t, base+"/api/sample1.js?id=555&callback=Example.process"); code != 200 || body != wantID1 {
		t.Errorf("sample1 must serve the fixed value whatever the id: %d %s", code, body)
	}
	if code, _ := get(t, base+"/api/sample3.js?id=1001&callback=cb"); code != 404 {
		t.Errorf("id 1001: %d, want 404", code)
	}
	if _, body := get(t, base+"/json"); body != `{"message":"Hello, World!"}` {
		t.Errorf("/json: %s", body)
	}
	// Ad responses are not cacheable by default: every request must reach the log.
	if resp, err := http.Get(base + "/api/sample3.js?id=1&callback=cb"); err != nil || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("sample3 Cache-Control: %v %v, want no-store", resp, err)
	} else {
		resp.Body.Close()
	}
	// Load balancers probe the serving port.
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("public /readyz: %d %q", code, body)
	}
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("public /healthz: %d %q", code, body)
	}
	// Without webhook.callback_token, /callback is not served at all.
	if resp, err := http.Post(base+"/callback", "application/json", strings.NewReader(`{"messages":"1"}`)); err != nil || resp.StatusCode != 404 {
		t.Errorf("POST /callback without a configured token: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	admin := "http://" + m.AdminAddr()
	if code, _ := get(t, admin+"/healthz"); code != 200 {
		t.Errorf("healthz %d", code)
	}
	if code, _ := get(t, admin+"/readyz"); code != 200 {
		t.Errorf("readyz %d", code)
	}
	if code, _ := get(t, admin+"/metrics"); code != 401 {
		t.Errorf("metrics without a token: %d, want 401", code)
	}
	token := adminToken(t, m)
	req, _ := http.NewRequest("GET", admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tsubame_cache_lookups_total{result="hit"}`, `tsubame_http_requests_total{code="200",endpoint="sample3"} 3`,
		`tsubame_http_requests_total{code="404",endpoint="sample3"} 1`, `tsubame_http_request_duration_seconds_bucket{code="200",endpoint="json",le="+Inf"} 1`,
		`tsubame_cache_load_seconds_total`, `tsubame_admin_auth_failures_total`, "go_goroutines"} {
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("metrics %d: no %s", resp.StatusCode, want)
		}
	}

	// A write in the server's process reaches the cached endpoint at once.
	get(t, base+"/api/sample3.js?id=1&callback=cb")
	if err := m.Store.Put(t.Context(), &tsubame.Placement{ID: "1", URLs: []string{"https://changed.example.com/t.js"}}); err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, base+"/api/sample3.js?id=1&callback=cb"); body != `cb({"urls":["https://changed.example.com/t.js"]});` {
		t.Errorf("after a write sample3 serves %s", body)
	}
}

func TestDemoLeavesAFilledStoreAlone(t *testing.T) {
	env := testEnv(t)
	code, _, stderr := runCmd(t, env, "", "placements", "put", "1", "https://mine.example.com/a.js")
	if code != 0 {
		t.Fatalf("put: %s", stderr)
	}
	m := openMain(t, env, true)
	if _, body := get(t, "http://"+m.PublicAddr()+"/api/sample3.js?id=1&callback=cb"); body != `cb({"urls":["https://mine.example.com/a.js"]});` {
		t.Fatalf("demo overwrote a placement: %s", body)
	}
	if code, _ := get(t, "http://"+m.PublicAddr()+"/api/sample3.js?id=2&callback=cb"); code != 404 {
		t.Fatal("demo loaded into a store that was not empty")
	}
}

func runCmd(t *testing.T, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(stdin), &out, &errb, env)
	return code, out.String(), errb.String()
}

func TestPlacementsCLI(t *testing.T) {
	env := testEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "in.jsonl")
	in := `{"id":"a","urls":["http://a.example.com/1.js"]}
{"id":"b","urls":["http://b.example.com/1.js","http://b.example.com/2.js"],"deps":["campaign:9"]}
`
	if err := os.WriteFile(file, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, env, "", "placements", "import", file); code != 0 || !strings.Contains(stderr, "imported 2") {
		t.Fatalf("import: %d %s", code, stderr)
	}
	// CSV from standard input.
	if code, _, stderr := runCmd(t, env, "c,http://c.example.com/x.js\n", "placements", "import", "-format", "csv", "-"); code != 0 {
		t.Fatalf("csv import: %s", stderr)
	}
	code, out, _ := runCmd(t, env, "", "placements", "get", "b")
	if code != 0 || !strings.Contains(out, `"campaign:9"`) || !strings.Contains(out, `"http://b.example.com/2.js"`) {
		t.Fatalf("get: %d %s", code, out)
	}
	if code, _, stderr := runCmd(t, env, "", "placements", "put", "-name", "Top", "-dep", "site:1", "d", "https://d.example.com/t.js"); code != 0 {
		t.Fatalf("put: %s", stderr)
	}
	if code, _, stderr := runCmd(t, env, "", "placements", "delete", "a"); code != 0 {
		t.Fatalf("delete: %s", stderr)
	}
	if code, _, stderr := runCmd(t, env, "", "placements", "get", "a"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Fatalf("get deleted: %d %s", code, stderr)
	}
	code, out, _ = runCmd(t, env, "", "placements", "export")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[0], `"id":"b"`) || !strings.Contains(lines[2], `"name":"Top"`) {
		t.Fatalf("export: %d\n%s", code, out)
	}
	exported := filepath.Join(dir, "out.jsonl")
	if code, _, stderr := runCmd(t, env, "", "placements", "export", exported); code != 0 {
		t.Fatalf("export to file: %s", stderr)
	}
	data, _ := os.ReadFile(exported)
	if string(data) != out {
		t.Fatalf("file export differs from stdout export")
	}

	// A file with bad lines is refused whole, with line numbers.
	bad := `{"id":"e","urls":["http://e.example.com/1.js"]}
{"id":"f","urls":["not a url"]}
{"id":"g"
`
	code, _, stderr := runCmd(t, env, bad, "placements", "import")
	if code != 2 || !strings.Contains(stderr, "line 2:") || !strings.Contains(stderr, "line 3:") || !strings.Contains(stderr, "nothing imported") {
		t.Fatalf("bad import: %d %s", code, stderr)
	}
	if code, _, _ := runCmd(t, env, "", "placements", "get", "e"); code != 1 {
		t.Fatal("a line of a refused file was imported")
	}
	// Invalid put.
	if code, _, _ := runCmd(t, env, "", "placements", "put", "x", "javascript:alert(1)"); code != 2 {
		t.Fatalf("invalid put exit %d, want 2", code)
	}
}

// While a server holds the embedded store, the data commands go through
// its control socket (TestDataCommandsThroughServer has the rest); with no
// socket to use, they say at once what to do, naming admin.socket.
func TestCLIFailsFastWhileServerRuns(t *testing.T) {
	env := testEnv(t)
	openMain(t, env, true)
	code, out, stderr := runCmd(t, env, "", "placements", "get", "1")
	if code != 0 || !strings.Contains(out, "http://ad1.example.com/tag.js") || !strings.Contains(stderr, "going through its control socket") {
		t.Fatalf("get through the running server: %d %s %s", code, out, stderr)
	}
	// A second server on the same data directory names it.
	code, _, stderr = runCmd(t, env, "", "serve")
	if code == 0 || !strings.Contains(stderr, "is in use by another tsubame server") || !strings.Contains(stderr, "TSUBAME_DATA_DIR") {
		t.Fatalf("a second serve: %d %s", code, stderr)
	}

	// A server with admin.socket: off. A CLI that waited for the file would
	// never return while the server holds it: the exit status and the
	// message are the proof.
	off := append(testEnv(t), "TSUBAME_ADMIN_SOCKET=off")
	openMain(t, off, true)
	sockPath := filepath.Join(lookupEnv(off, "TSUBAME_DATA_DIR"), "admin", admin.SocketName)
	for _, tc := range []struct {
		env    []string
		socket string
	}{
		{off, "control socket, which these commands would go through, is off (admin.socket)"},
		{withoutEnv(off, "TSUBAME_ADMIN_SOCKET"), "no control socket answers at " + sockPath + " (admin.socket)"},
	} {
		for _, args := range [][]string{{"placements", "get", "1"}, {"placements", "put", "1", "http://a.example.com/"}, {"placements", "export"},
			{"campaigns", "export"}} {
			code, _, stderr := runCmd(t, tc.env, "", args...)
			if code != 1 || !strings.Contains(stderr, "in use by another process") || !strings.Contains(stderr, "admin API") ||
				!strings.Contains(stderr, tc.socket) {
				t.Errorf("%v: %d %s", args, code, stderr)
			}
		}
	}
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen: nowhere\nstore: {type: oracle}\ncache: {ttl: 0s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, nil, "", "check-config", "-config", bad)
	if code != 2 || !strings.Contains(stderr, "3 problem(s)") {
		t.Fatalf("bad config: %d %s", code, stderr)
	}
	for _, key := range []string{"listen:", "store.type:", "cache.ttl:"} {
		if !strings.Contains(stderr, key) {
			t.Errorf("check-config does not report %s: %s", key, stderr)
		}
	}
	// TSUBAME_CONFIG names the file when -config is absent.
	if code, _, _ := runCmd(t, []string{config.EnvConfigFile + "=" + bad}, "", "check-config"); code != 2 {
		t.Fatal("TSUBAME_CONFIG ignored")
	}
	code, out, stderr := runCmd(t, []string{"TSUBAME_LISTEN=127.0.0.1:9999", "TSUBAME_LINE_CHANNEL_SECRET=s3cret-value", "TSUBAME_DATA_DIR=/srv/tsubame",
		"TSUBAME_WEBHOOK_API_TOKEN=t0ken-value", "TSUBAME_ACCESS_LOG_KAFKA_BROKERS=127.0.0.1:9092",
		"TSUBAME_ACCESS_LOG_KAFKA_SASL_MECHANISM=SCRAM-SHA-256", "TSUBAME_ACCESS_LOG_KAFKA_SASL_USERNAME=ship",
		"TSUBAME_ACCESS_LOG_KAFKA_SASL_PASSWORD=kafka-pa55"}, "", "check-config", "-print")
	if strings.Contains(out, "s3cret-value") || strings.Contains(out, "t0ken-value") || strings.Contains(out, "kafka-pa55") ||
		strings.Count(out, "(redacted)") != 3 {
		t.Fatalf("secrets not redacted:\n%s", out)
	}
	if code != 0 || !strings.Contains(out, "listen: 127.0.0.1:9999") || !strings.Contains(out, "ttl: 1m0s") || !strings.Contains(stderr, "configuration ok") {
		t.Fatalf("check-config -print: %d\n%s\n%s", code, out, stderr)
	}
	// Paths left empty show as the paths in use.
	for _, want := range []string{"    dir: /srv/tsubame/admin\n", "    audit_log: /srv/tsubame/admin/audit.log\n",
		"        path: /srv/tsubame/tsubame.db\n", "    dead_letter: /srv/tsubame/webhook-deadletter.jsonl\n",
		"        state_file: logs/.kafka-ship.json\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("check-config -print does not show %q", want)
		}
	}
}

func TestUsageAndVersion(t *testing.T) {
	if code, _, _ := runCmd(t, nil, ""); code != 2 {
		t.Fatal("no command: want exit 2")
	}
	if code, _, stderr := runCmd(t, nil, "", "frobnicate"); code != 2 || !strings.Contains(stderr, "unknown command") {
		t.Fatal("unknown command")
	}
	if code, out, _ := runCmd(t, nil, "", "version"); code != 0 || !strings.HasPrefix(out, "tsubame ") || strings.Contains(out, "License") {
		t.Fatalf("version: %q", out)
	}
	code, out, _ := runCmd(t, nil, "", "version", "-v")
	if code != 0 || !strings.Contains(out, "Apache License, Version 2.0") || !strings.Contains(out, "dep github.com/valyala/fasthttp ") {
		t.Fatalf("version -v: %q", out)
	}
	if code, _, _ := runCmd(t, nil, "", "placements", "frob"); code != 2 {
		t.Fatal("unknown placements subcommand")
	}
	if code, _, stderr := runCmd(t, []string{"TSUBAME_STORE=memory"}, "", "placements", "get", "1"); code != 2 || !strings.Contains(stderr, "memory") {
		t.Fatalf("memory store CLI: %d %s", code, stderr)
	}
}

// The real binary, started as a user would, serves under load and exits 0 on
// SIGTERM without failing a request it accepted.
func TestBinarySIGTERMUnderLoad(t *testing.T) {
	p := startBinary(t)
	url := p.base + "/api/sample3.js?id=1&callback=Example.process"
	stop := make(chan struct{})
	defer close(stop)
	run := load([]string{url}, 4, stop)
	time.Sleep(300 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.logs)
	}
	run.Wait()
	if run.counts[url].Load() == 0 || run.bad.Load() != 0 {
		t.Fatalf("%d good and %d bad responses", run.counts[url].Load(), run.bad.Load())
	}
	if !strings.Contains(p.logs.String(), "msg=stopped") {
		t.Fatalf("no clean stop in the log:\n%s", p.logs)
	}
}

// freePort returns a loopback port free now and never returned before in
// this test process: the kernel may hand a just-closed port out again, and
// two listeners of one server (listen, admin.listen) must differ.
func freePort(t *testing.T) string {
	t.Helper()
	givenMu.Lock()
	defer givenMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !given[port] {
			given[port] = true
			return fmt.Sprint(port)
		}
	}
}

var (
	givenMu sync.Mutex
	given   = map[int]bool{}
)

func TestRunServeStopsOnContext(t *testing.T) {
	env := append(testEnv(t), "TSUBAME_LISTEN=127.0.0.1:"+freePort(t))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() { done <- run(ctx, []string{"serve"}, nil, io.Discard, &errb, env) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d: %s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// adminToken creates an admin user and an API token for it, as `tsubame
// admin create-user` and POST /api/v1/tokens would, and returns the token.
func adminToken(t *testing.T, m *Main) string {
	t.Helper()
	accounts, err := admin.OpenAccounts(m.Config.AdminDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := accounts.CreateUser("ops", "correct horse battery staple", "", admin.PasswordPolicy{MinLength: 12}); err != nil {
		t.Fatal(err)
	}
	token, _, err := accounts.CreateToken("ops", "test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}
