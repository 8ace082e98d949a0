package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tsubame/internal/config"
	"tsubame/internal/h2call/fakeapi"
)

func TestRestartOnlyKeys(t *testing.T) {
	old, _, err := config.Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load("", []string{"TSUBAME_LISTEN=:9999", "TSUBAME_CACHE_TTL=5s", "TSUBAME_SERVER_HELLO_JSON=false",
		"TSUBAME_LOG_LEVEL=debug", "TSUBAME_ENDPOINTS_SAMPLE3_CACHE_CONTROL=no-store", "TSUBAME_SERVER_MAX_IN_FLIGHT_ADS=5"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(restartOnly(old, cfg), ","); got != "cache.ttl,listen" {
		t.Fatalf("restart-only keys = %s", got)
	}
	// With a TLS listener running, its certificates (and the sites') are
	// applied; its address and minimum version are not.
	withTLS := []string{"TSUBAME_TLS_LISTEN=:4443", "TSUBAME_TLS_CERT=a.crt", "TSUBAME_TLS_KEY=a.key"}
	if old, _, err = config.Load("", withTLS); err != nil {
		t.Fatal(err)
	}
	if cfg, _, err = config.Load("", append(withTLS, "TSUBAME_TLS_CERT=b.crt", "TSUBAME_TLS_KEY=b.key", "TSUBAME_TLS_MIN_VERSION=1.3")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(restartOnly(old, cfg), ","); got != "tls.min_version" {
		t.Fatalf("restart-only keys = %s", got)
	}
	// Turning TLS on needs a restart.
	if old, _, err = config.Load("", nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(restartOnly(old, cfg), ","); got != "tls.cert,tls.key,tls.listen,tls.min_version" {
		t.Fatalf("restart-only keys = %s", got)
	}
}

// SIGHUP under continuous load: a good configuration is applied at once
// with no failed request; a bad one is rejected with every error logged and
// the running one keeps serving; log lines still equal responses.
func TestReloadUnderLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tsubame.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`
endpoints:
  sample4: {source: store, access_log: file}
`)
	p := startBinary(t, "TSUBAME_CONFIG="+file)
	s4 := p.base + "/api/sample4.js?id=5&callback=Example.process"
	stop := make(chan struct{})
	run := load([]string{s4}, 4, stop)
	time.Sleep(300 * time.Millisecond)

	write(`
server: {hello_json: false}
cache: {ttl: 5s}
endpoints:
  sample4: {source: store, access_log: file}
  banner: {source: store, formats: [json]}
`)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	banner := p.base + "/api/banner.json?id=5"
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(banner)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("new endpoint not served after SIGHUP:\n%s", p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if resp, err := http.Get(p.base + "/json"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("hello_json: false not applied: %v %v", resp, err)
	}

	write(`
endpoints:
  sample4: {source: store, access_log: file, formats: [html]}
  broken: {source: nowhere}
`)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if resp, err := http.Get(banner); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a rejected configuration replaced the running one: %v %v", resp, err)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	run.Wait()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatal(err)
	}
	logs := p.logs.String()
	for _, want := range []string{"configuration reloaded", "cache.ttl", "configuration not reloaded", "endpoints.broken: source", "endpoints.sample4: formats"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	lines, _ := countFileLines(t, p.logDir)
	if ok := run.counts[s4].Load(); ok == 0 || run.bad.Load() != 0 || int64(lines) != ok {
		t.Fatalf("%d ok, %d bad, %d log lines", ok, run.bad.Load(), lines)
	}
}

// A restarted node loads the ids its predecessor used most before it
// serves, so its first requests do not all go to the store.
func TestWarmRestart(t *testing.T) {
	env := testEnv(t)
	cfg, err := loadConfig("", env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	first := &Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Demo: true}
	if err := first.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 30; i++ {
		get(t, fmt.Sprintf("http://%s/api/sample3.js?id=%d&callback=cb", first.PublicAddr(), i))
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := openMain(t, env, false)
	st := second.Cache.Stats()
	if st.Loads != 30 {
		t.Fatalf("warm-up loaded %d ids, want 30", st.Loads)
	}
	get(t, "http://"+second.PublicAddr()+"/api/sample3.js?id=7&callback=cb")
	if after := second.Cache.Stats(); after.Loads != 30 || after.Hits != st.Hits+1 {
		t.Fatalf("first request after the restart went to the store: %+v", after)
	}
}

// A reload rotates webhook.callback_token: the old token gets a 401, the new
// one is served, and the key is not reported as needing a restart.
func TestReloadRotatesCallbackToken(t *testing.T) {
	api, err := fakeapi.Start(fakeapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	oldToken, newToken := strings.Repeat("a", 40), strings.Repeat("b", 40)
	env := append(testEnv(t), "TSUBAME_WEBHOOK_API_URL="+api.URL, "TSUBAME_WEBHOOK_API_H2C=true")
	m := openMain(t, append(env, "TSUBAME_WEBHOOK_CALLBACK_TOKEN="+oldToken), false)
	post := func(token string) int {
		req, _ := http.NewRequest("POST", "http://"+m.PublicAddr()+"/callback", strings.NewReader(`{"messages":"1"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := post(oldToken), post(newToken); a != 200 || b != 401 {
		t.Fatalf("before the reload: old token %d, new token %d; want 200, 401", a, b)
	}
	cfg, err := loadConfig("", append(env, "TSUBAME_WEBHOOK_CALLBACK_TOKEN="+newToken), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	restart, err := m.Reload(cfg)
	if err != nil || len(restart) != 0 {
		t.Fatalf("Reload: %v, needs restart %v", err, restart)
	}
	if a, b := post(oldToken), post(newToken); a != 401 || b != 200 {
		t.Fatalf("after the reload: old token %d, new token %d; want 401, 200", a, b)
	}
}

// An endpoint serving .xml answers VAST 4 from the cache, with the
// configured impression tracker; a reload that adds .xml where the cache
// keeps no VAST payloads is refused (restart instead).
func TestVASTEndpoint(t *testing.T) {
	env := append(testEnv(t), "TSUBAME_ENDPOINTS_VIDEO_SOURCE=store", "TSUBAME_ENDPOINTS_VIDEO_FORMATS=xml",
		"TSUBAME_VAST_IMPRESSION_URL=https://imp.example.com/i?id={id}")
	m := openMain(t, env, true)
	base := "http://" + m.PublicAddr()
	resp, err := http.Get(base + "/api/video.xml?id=7")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/xml; charset=utf-8" ||
		!strings.Contains(string(body), `<Ad id="7-1" sequence="1"><Wrapper><AdSystem>Tsubame</AdSystem><Impression><![CDATA[https://imp.example.com/i?id=7]]></Impression><VASTAdTagURI><![CDATA[http://ad13.example.com/tag.js]]></VASTAdTagURI>`) {
		t.Fatalf("video.xml: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if code, _ := get(t, base+"/api/video.js?id=7&callback=cb"); code != 404 {
		t.Errorf("video.js: %d (the endpoint serves only xml)", code)
	}

	plain := openMain(t, testEnv(t), true)
	cfg, _, err := config.LoadValid("", append(testEnv(t), "TSUBAME_ENDPOINTS_SAMPLE3_FORMATS=js,xml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Reload(cfg); err == nil || !strings.Contains(err.Error(), ".xml") || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("reload adding .xml to a cache without VAST: %v", err)
	}
}
