package budget_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame/internal/accesslog"
	"tsubame/internal/ads"
	"tsubame/internal/budget"
	"tsubame/internal/server"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
	"tsubame/internal/track"
)

// The tests here run what a deployment runs: servers with the ads routes,
// each with its own Redis client, decision engine and Counters, on one
// real Redis, asked over HTTP by concurrent clients.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startNodes starts n servers on the Redis at addr, with the test
// campaigns put in it, and returns their base URLs and Counters. Their
// Takes may wait for timeout: under -race, hundreds of requests in
// flight on two cores can hold one longer than the default 50 ms, and a
// Take that times out is a decision lost to the cap, not what these tests
// count.
func startNodes(t *testing.T, addr string, n int, timeout time.Duration) ([]string, []*budget.Counters) {
	t.Helper()
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	signer, err := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	var counters []*budget.Counters
	for i := range n {
		st, err := redis.Open(redis.Options{Addrs: []string{addr}, KeyPrefix: prefix, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		if i == 0 {
			if err := st.ReplaceAll(t.Context(), campaigns(t)); err != nil {
				t.Fatal(err)
			}
		}
		c := budget.New(st, budget.Options{Timeout: timeout, Log: quiet})
		counters = append(counters, c)
		eng := ads.NewEngine(st, ads.EngineOptions{Counters: c, Currency: "JPY"})
		if _, err := eng.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		svc, err := ads.New(ads.Options{Engine: eng, Signer: signer, Currency: "JPY", TTL: time.Hour,
			CookieName: "tsubame_uid", CookieMaxAge: time.Hour, Dedupe: st})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := accesslog.OpenFile(accesslog.FileOptions{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		log := accesslog.New(sink, accesslog.Options{})
		srv, err := server.New(server.Options{Routes: svc.Routes(log)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			<-done
			_ = log.Close(ctx)
		})
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls, counters
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}

// lineItem asks node for a decision on placement top for visitor user and
// returns its line item ("" for no decision).
func lineItem(node, user string) (string, error) {
	resp, err := client.Get(node + "/api/decide?placement=top&uid=" + user)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	switch resp.StatusCode {
	case http.StatusNoContent:
		return "", nil
	case http.StatusOK:
	default:
		return "", fmt.Errorf("%d %s", resp.StatusCode, body)
	}
	var out struct {
		Decisions []struct {
			LineItem string `json:"line_item"`
		} `json:"decisions"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Decisions) != 1 {
		return "", fmt.Errorf("decisions %s (%v)", body, err)
	}
	return out.Decisions[0].LineItem, nil
}

// A cap of 3 per hour gives every visitor exactly 3 across nodes: 30
// visitors, each asking 12 times at once, the requests spread over three
// nodes on one Redis. li-capped (priority 1) serves 3 of each visitor's
// 12, li-open (priority 2, no cap) the other 9.
func TestFrequencyCapAcrossNodes(t *testing.T) {
	srv := redistest.Start(t)
	nodes, counters := startNodes(t, srv.Addr, 3, 10*time.Second)
	const visitors, requests = 30, 12
	var mu sync.Mutex
	got := map[string]map[string]int{} // visitor -> line item -> decisions
	start := make(chan struct{})
	var wg sync.WaitGroup
	for v := range visitors {
		user := fmt.Sprint("u-", v)
		got[user] = map[string]int{}
		for r := range requests {
			node := nodes[(v+r)%len(nodes)]
			wg.Go(func() {
				<-start
				li, err := lineItem(node, user)
				if err != nil {
					t.Errorf("%s on %s: %v", user, node, err)
					return
				}
				mu.Lock()
				got[user][li]++
				mu.Unlock()
			})
		}
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, c := range counters {
		if n := c.Errors(); n != 0 {
			t.Errorf("node %d: %d Takes failed", i, n)
		}
	}
	capped, open := 0, 0
	for user, byLine := range got {
		if byLine["li-capped"] != 3 || byLine["li-open"] != requests-3 || len(byLine) != 2 {
			t.Errorf("%s: %v, want li-capped 3 and li-open %d", user, byLine, requests-3)
		}
		capped += byLine["li-capped"]
		open += byLine["li-open"]
	}
	t.Logf("%d visitors × %d requests over %d nodes: li-capped %d, li-open %d", visitors, requests, len(nodes), capped, open)
}

// With Redis gone the capped line item stops serving and the uncapped one
// goes on, on every node; when Redis is back the capped one serves again
// by itself.
func TestFrequencyCapsStopWithTheStore(t *testing.T) {
	srv := redistest.Start(t)
	nodes, counters := startNodes(t, srv.Addr, 3, 10*time.Second) // a dead Redis refuses at once
	want := func(node, user, li string) {
		t.Helper()
		got, err := lineItem(node, user)
		if err != nil || got != li {
			t.Fatalf("%s on %s: %q (%v), want %s", user, node, got, err, li)
		}
	}
	for i, node := range nodes {
		want(node, fmt.Sprint("u-before-", i), "li-capped")
	}
	srv.Kill()
	for i, node := range nodes {
		for j := range 3 {
			want(node, fmt.Sprintf("u-down-%d-%d", i, j), "li-open")
		}
	}
	for i, c := range counters {
		if n := c.Errors(); n != 3 {
			t.Fatalf("node %d: %d Takes failed with Redis down, want 3", i, n)
		}
	}
	srv.Restart(t)
	for i, node := range nodes {
		deadline := time.Now().Add(30 * time.Second)
		for n := 0; ; n++ {
			li, err := lineItem(node, fmt.Sprintf("u-back-%d-%d", i, n))
			if err != nil {
				t.Fatal(err)
			}
			if li == "li-capped" {
				break
			}
			if li != "li-open" {
				t.Fatalf("%s answered %q", node, li)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still serves no capped line item 30s after Redis came back", node)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
