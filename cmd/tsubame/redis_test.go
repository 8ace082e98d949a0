package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/redis/redistest"
)

func redisEnv(t *testing.T, addr string) []string {
	return append(testEnv(t), "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+addr,
		"TSUBAME_STORE_REDIS_KEY_PREFIX="+fmt.Sprintf("t%d:", time.Now().UnixNano()))
}

func body(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Three nodes share one Redis (standalone, then a 6-node cluster). A write
// on one reaches the in-process cache of the others through pub/sub; the
// delay is measured and reported.
func TestThreeNodeInvalidation(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		threeNodes(t, redistest.Start(t).Addr)
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 6-node cluster; skipped in -short mode")
		}
		c := redistest.StartCluster(t)
		threeNodes(t, strings.Join(c.Addrs()[:3], ","))
	})
}

func threeNodes(t *testing.T, addrs string) {
	env := redisEnv(t, addrs)
	var nodes []*Main
	for range 3 {
		nodes = append(nodes, openMain(t, env, false))
	}
	if err := nodes[0].Store.Put(t.Context(), &tsubame.Placement{ID: "x", URLs: []string{"http://v0.example.com/t.js"}}); err != nil {
		t.Fatal(err)
	}
	url := func(m *Main) string { return "http://" + m.PublicAddr() + "/api/sample3.js?id=x&callback=cb" }
	want := func(v int) string { return fmt.Sprintf(`cb({"urls":["http://v%d.example.com/t.js"]});`, v) }
	for _, m := range nodes { // warm every cache (TTL 60s: only invalidation can change it now)
		if got := body(t, url(m)); got != want(0) {
			t.Fatalf("warm-up: %s", got)
		}
	}
	var delays []time.Duration
	const writes = 40
	for v := 1; v <= writes; v++ {
		writer := nodes[v%3]
		start := time.Now()
		if err := writer.Store.Put(t.Context(), &tsubame.Placement{ID: "x", URLs: []string{fmt.Sprintf("http://v%d.example.com/t.js", v)}}); err != nil {
			t.Fatal(err)
		}
		for _, m := range nodes {
			if m == writer {
				continue
			}
			for body(t, url(m)) != want(v) {
				if time.Since(start) > 30*time.Second {
					t.Fatalf("write %d not visible on another node after 30s", v)
				}
				time.Sleep(100 * time.Microsecond)
			}
			delays = append(delays, time.Since(start))
		}
	}
	slices.Sort(delays)
	p50, p99 := delays[len(delays)/2], delays[len(delays)*99/100]
	t.Logf("invalidation across 3 nodes: %d observations, p50 %v, p99 %v, max %v", len(delays), p50, p99, delays[len(delays)-1])
}

// With Redis the CLI writes while servers run, and their caches follow.
func TestCLIWritesReachRunningServer(t *testing.T) {
	srv := redistest.Start(t)
	env := redisEnv(t, srv.Addr)
	m := openMain(t, env, false)
	var lines []string
	for i := range 20000 {
		lines = append(lines, fmt.Sprintf(`{"id":"%d","urls":["http://a.example.com/%d.js"]}`, i, i))
	}
	file := filepath.Join(t.TempDir(), "p.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, env, "", "placements", "import", file)
	if code != 0 || !strings.Contains(stderr, "imported 20000") {
		t.Fatalf("import: %d %s", code, stderr)
	}
	t.Log(strings.TrimSpace(stderr))
	u := "http://" + m.PublicAddr() + "/api/sample3.js?id=7&callback=cb"
	if got := body(t, u); got != `cb({"urls":["http://a.example.com/7.js"]});` {
		t.Fatalf("after import: %s", got)
	}
	if code, _, stderr := runCmd(t, env, "", "placements", "put", "7", "https://changed.example.com/x.js"); code != 0 {
		t.Fatal(stderr)
	}
	deadline := time.Now().Add(5 * time.Second)
	for body(t, u) != `cb({"urls":["https://changed.example.com/x.js"]});` {
		if time.Now().After(deadline) {
			t.Fatal("the running server kept serving the old value")
		}
		time.Sleep(time.Millisecond)
	}
	code, out, _ := runCmd(t, env, "", "placements", "export")
	if code != 0 || strings.Count(out, "\n") != 20000 {
		t.Fatalf("export: %d, %d lines", code, strings.Count(out, "\n"))
	}
}
