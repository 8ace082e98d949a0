package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tsubame/internal/store/redis/redistest"
)

// getWith is get with an Authorization bearer token.
func getWith(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitUntil polls cond until it holds, failing after a generous deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricLine returns the sample line of the named metric without labels.
func metricLine(t *testing.T, adminURL, name string) string {
	t.Helper()
	code, body := get(t, adminURL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return ""
}

// lastStatsPoint returns the newest point of the admin's stats API (nil
// before the first).
func lastStatsPoint(t *testing.T, adminURL, token string) map[string]any {
	t.Helper()
	code, body := getWith(t, adminURL+"/api/v1/stats", token)
	var out struct {
		Points []map[string]any `json:"points"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("/api/v1/stats: %d %s", code, body)
	}
	if len(out.Points) == 0 {
		return nil
	}
	return out.Points[len(out.Points)-1]
}

// Redis is stopped under a running server: the node rides the outage out
// on its cache, so it stays ready on both listeners (a load balancer must
// not pull every node at once) while the store's state is reported apart:
// /readyz?verbose (the public one naming no address), tsubame_store_up and
// the admin's stats. A cached id is still served, an uncached one gets a
// 503. When Redis is back, the store is reported up again.
func TestStoreDownNodeStaysReady(t *testing.T) {
	rs := redistest.Start(t)
	env := append(redisEnv(t, rs.Addr), "TSUBAME_STORE_PROBE_INTERVAL=200ms", "TSUBAME_ADMIN_METRICS_PUBLIC=true")
	m := openMain(t, env, true)
	base, adminURL := "http://"+m.PublicAddr(), "http://"+m.AdminAddr()
	token := adminToken(t, m)
	cached := base + "/api/sample3.js?id=1&callback=Example.process"
	if code, body := get(t, cached); code != 200 || body != wantID1 {
		t.Fatalf("cached id before the outage: %d %s", code, body)
	}
	if code, _ := get(t, base+"/api/sample4.js?id=2&callback=cb"); code != 200 { // the file access log in use
		t.Fatalf("sample4 before the outage: %d", code)
	}
	for _, u := range []string{base, adminURL} {
		if code, body := get(t, u+"/readyz?verbose"); code != 200 || !strings.Contains(body, "[+]store ok (reported, not required)\n") ||
			!strings.Contains(body, "[+]access_log_file ok\n") || !strings.Contains(body, "[+]cache_warm ok\n") || !strings.HasSuffix(body, "\nready\n") {
			t.Fatalf("%s/readyz?verbose before the outage: %d %q", u, code, body)
		}
	}
	if line := metricLine(t, adminURL, "tsubame_store_up"); line != "tsubame_store_up 1" {
		t.Fatalf("before the outage: %s", line)
	}

	rs.Kill()
	waitUntil(t, "the public /readyz?verbose reports the store down", func() bool {
		_, body := get(t, base+"/readyz?verbose")
		return strings.Contains(body, "[-]store failed (reported, not required)\n")
	})
	for _, u := range []string{base, adminURL} {
		if code, body := get(t, u+"/readyz"); code != 200 || body != "ready\n" {
			t.Errorf("%s/readyz with Redis down: %d %q, want 200 ready", u, code, body)
		}
	}
	port := rs.Addr[strings.LastIndexByte(rs.Addr, ':')+1:]
	if code, body := get(t, base+"/readyz?verbose"); code != 200 || !strings.HasSuffix(body, "\nready\n") || strings.Contains(body, port) || strings.Contains(body, "127.0.0.1") {
		t.Errorf("public /readyz?verbose with Redis down: %d %q (ready, and no address)", code, body)
	}
	if code, body := get(t, adminURL+"/readyz?verbose"); code != 200 || !strings.Contains(body, "[-]store failed: down for ") || !strings.HasSuffix(body, "\nready\n") {
		t.Errorf("admin /readyz?verbose with Redis down: %d %q (ready, and why the store failed)", code, body)
	}
	if line := metricLine(t, adminURL, "tsubame_store_up"); line != "tsubame_store_up 0" {
		t.Errorf("with Redis down: %s", line)
	}
	if line := metricLine(t, adminURL, "tsubame_ready"); line != "tsubame_ready 1" {
		t.Errorf("with Redis down: %s", line)
	}
	waitUntil(t, "the admin's stats report the store down", func() bool {
		p := lastStatsPoint(t, adminURL, token)
		return p != nil && p["store_up"] == false && p["ready"] == true
	})
	if code, body := get(t, cached); code != 200 || body != wantID1 {
		t.Errorf("cached id with Redis down: %d %s", code, body)
	}
	if code, _ := get(t, base+"/api/sample3.js?id=777&callback=cb"); code != 503 {
		t.Errorf("uncached id with Redis down: %d, want 503", code)
	}

	rs.Restart(t)
	waitUntil(t, "tsubame_store_up is 1 again", func() bool {
		return metricLine(t, adminURL, "tsubame_store_up") == "tsubame_store_up 1"
	})
	if code, body := get(t, base+"/readyz?verbose"); code != 200 || !strings.Contains(body, "[+]store ok") {
		t.Errorf("public /readyz?verbose with Redis back: %d %q", code, body)
	}
}

// An access log that cannot write (its file is /dev/full: every write
// fails with ENOSPC) makes the node not ready on both listeners; the
// verbose answers say which check failed, the admin's says why.
func TestUnwritableAccessLogNotReady(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system: cannot make a real write fail")
	}
	logDir := t.TempDir()
	if err := os.Symlink("/dev/full", filepath.Join(logDir, "access.log")); err != nil {
		t.Fatal(err)
	}
	env := append(testEnv(t), "TSUBAME_ACCESS_LOG_DIR="+logDir, "TSUBAME_ACCESS_LOG_FALLBACK_DIR="+t.TempDir(),
		"TSUBAME_ACCESS_LOG_DURABILITY=async", "TSUBAME_SERVER_SHUTDOWN_TIMEOUT=2s", "TSUBAME_ADMIN_METRICS_PUBLIC=true")
	m := openMain(t, env, true)
	base, adminURL := "http://"+m.PublicAddr(), "http://"+m.AdminAddr()
	if code, _ := get(t, base+"/api/sample4.js?id=1&callback=cb"); code != 200 {
		t.Fatalf("sample4: %d", code)
	}
	waitUntil(t, "the public /readyz answers 503", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == 503
	})
	if code, body := get(t, adminURL+"/readyz"); code != 503 || body != "not ready\n" {
		t.Errorf("admin /readyz: %d %q, want 503 not ready", code, body)
	}
	if code, body := get(t, base+"/readyz?verbose"); code != 503 || !strings.Contains(body, "[-]access_log_file failed\n") ||
		!strings.Contains(body, "[+]store ok") || strings.Contains(body, "space") {
		t.Errorf("public /readyz?verbose: %d %q", code, body)
	}
	if code, body := get(t, adminURL+"/readyz?verbose"); code != 503 || !strings.Contains(body, "[-]access_log_file failed: ") ||
		!strings.Contains(body, "no space left on device") {
		t.Errorf("admin /readyz?verbose: %d %q", code, body)
	}
	if line := metricLine(t, adminURL, "tsubame_ready"); line != "tsubame_ready 0" {
		t.Errorf("with the log failing: %s", line)
	}
}
