package redis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/cache"
	"tsubame/internal/render"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
	"tsubame/internal/store/storetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// open returns a store on addrs under a prefix of its own, so subtests
// sharing one server do not see each other's keys.
func open(t testing.TB, addrs []string, prefix string) *redis.Store {
	t.Helper()
	s, err := redis.Open(redis.Options{Addrs: addrs, KeyPrefix: prefix, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func uniquePrefix(t *testing.T) string {
	return fmt.Sprintf("t%d:%s:", time.Now().UnixNano(), t.Name())
}

func runSuites(t *testing.T, addrs []string) {
	storetest.Run(t, func(t *testing.T) tsubame.Store { return open(t, addrs, uniquePrefix(t)) })
	storetest.RunLog(t, func(t *testing.T) storetest.LogStore { return open(t, addrs, uniquePrefix(t)) })
	storetest.RunResults(t, func(t *testing.T) storetest.ResultStore { return open(t, addrs, uniquePrefix(t)) })
	storetest.RunCampaigns(t, func(t *testing.T) tsubame.CampaignStore { return open(t, addrs, uniquePrefix(t)) })
	// Two clients on one prefix: two nodes sharing the store.
	storetest.RunDedupe(t, func(t *testing.T) (a, b tsubame.Deduper) {
		prefix := uniquePrefix(t)
		return open(t, addrs, prefix), open(t, addrs, prefix)
	})
	storetest.RunFrequency(t, func(t *testing.T) (a, b, c tsubame.FrequencyCounter) { // three nodes
		prefix := uniquePrefix(t)
		return open(t, addrs, prefix), open(t, addrs, prefix), open(t, addrs, prefix)
	})
	storetest.RunQuota(t, func(t *testing.T) []tsubame.Quotas { return openQuotas(t, addrs) }) // three nodes
	storetest.RunOutcomes(t, func(t *testing.T) (a, b tsubame.Outcomes) {                      // two nodes
		prefix := uniquePrefix(t)
		return open(t, addrs, prefix), open(t, addrs, prefix)
	})
	storetest.RunAssets(t, func(t *testing.T) (a, b tsubame.Assets) { // two nodes
		prefix := uniquePrefix(t)
		return open(t, addrs, prefix), open(t, addrs, prefix)
	})
}

func TestConformanceStandalone(t *testing.T) {
	srv := redistest.Start(t)
	runSuites(t, []string{srv.Addr})
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node cluster; skipped in -short mode")
	}
	c := redistest.StartCluster(t)
	runSuites(t, c.Addrs()[:2]) // two seeds: the client finds the rest
	t.Run("CampaignSetInOneSlot", func(t *testing.T) {
		prefix := uniquePrefix(t)
		s := open(t, c.Addrs()[:1], prefix)
		if err := s.ReplaceAll(t.Context(), storetest.FullCampaignSet()); err != nil {
			t.Fatal(err)
		}
		// The keys the package comment documents, all on one slot (one
		// script writes them all).
		tag := prefix + "{" + prefix + "campaigns}:"
		gen := strings.TrimSpace(c.MasterOf(t, tag+"gen").CLI(t, "get", tag+"gen"))
		var slots []string
		for _, k := range []string{"version", "currency", "gen", "log", "g:" + gen + ":advertisers", "g:" + gen + ":campaigns",
			"g:" + gen + ":creatives", "g:" + gen + ":line_items"} {
			key := tag + k
			if got := strings.TrimSpace(c.MasterOf(t, key).CLI(t, "exists", key)); got != "1" {
				t.Fatalf("key %q: exists = %s", key, got)
			}
			slots = append(slots, strings.TrimSpace(c.Nodes[0].CLI(t, "cluster", "keyslot", key)))
		}
		if len(slices.Compact(slices.Clone(slots))) != 1 {
			t.Fatalf("campaign keys on slots %v", slots)
		}
	})
}

// Writes by one process reach another's campaign watcher, which reads the
// new version after the signal; after a reconnect the watcher is told to
// read the set again (writes meanwhile were not announced to it).
func TestCampaignFeedAcrossProcessesAndReconnect(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix(t)
	writer := open(t, []string{srv.Addr}, prefix)
	watcher := open(t, []string{srv.Addr}, prefix)
	storetest.WatchCampaignsWith(t, watcher, watcher, writer)

	signals := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- watcher.WatchCampaigns(ctx, func() { signals <- struct{}{} }) }()
	defer func() { cancel(); <-done }()
	// Subscribed once a write is signalled.
	for seen := false; !seen; {
		if err := writer.PutObject(ctx, &tsubame.Advertiser{ID: "probe", Name: "Probe"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-signals:
			seen = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	for range len(signals) {
		<-signals
	}
	srv.Restart(t) // both connections break; the watcher resubscribes
	select {
	case <-signals:
	case <-time.After(10 * time.Second):
		t.Fatal("no signal after the subscription came back")
	}
}

// recorder is an Invalidator that remembers what it was told.
type recorder struct {
	mu   sync.Mutex
	ids  []string
	deps []string
	all  int
	// revalidated counts Revalidate calls.
	revalidated int
	got         chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 100)} }

func (r *recorder) Invalidate(id string) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *recorder) InvalidateDep(dep string) {
	r.mu.Lock()
	r.deps = append(r.deps, dep)
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *recorder) InvalidateAll() {
	r.mu.Lock()
	r.all++
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *recorder) Revalidate() {
	r.mu.Lock()
	r.revalidated++
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *recorder) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.got:
		case <-time.After(5 * time.Second):
			t.Fatal("invalidation not delivered within 5s")
		}
	}
}

// Writes by one process reach the watchers of others; after a reconnect the
// watcher marks everything for revalidation.
func TestWatchDeliversWritesAndRevalidatesAfterReconnect(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix(t)
	writer := open(t, []string{srv.Addr}, prefix)
	watcher := open(t, []string{srv.Addr}, prefix)
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- watcher.Watch(ctx, rec) }()
	defer func() { cancel(); <-done }()
	time.Sleep(200 * time.Millisecond) // let it subscribe

	if err := writer.PutMany(ctx, []*tsubame.Placement{storetest.Placement("a", 1), storetest.Placement("b", 1)}); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 2)
	if err := writer.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := writer.Publish(ctx, []string{"z"}, []string{"campaign:7"}, false); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 3)
	rec.mu.Lock()
	ids, deps := append([]string(nil), rec.ids...), append([]string(nil), rec.deps...)
	rec.mu.Unlock()
	sort.Strings(ids)
	if fmt.Sprint(ids) != "[a a b z]" || fmt.Sprint(deps) != "[campaign:7]" {
		t.Fatalf("ids %v deps %v", ids, deps)
	}

	srv.Restart(t) // the subscription breaks; writes meanwhile are lost to it
	rec.wait(t, 1)
	rec.mu.Lock()
	all, revalidated := rec.all, rec.revalidated
	rec.mu.Unlock()
	if revalidated != 1 || all != 0 {
		t.Fatalf("after resubscribing: Revalidate ran %d times (want 1), InvalidateAll %d (want 0: nothing is dropped)", revalidated, all)
	}
	// The writer's own connection broke too: its first write may fail once
	// (a write is not retried blindly); a retry goes through.
	deadline := time.Now().Add(5 * time.Second)
	for err := writer.Put(ctx, storetest.Placement("c", 1)); err != nil; err = writer.Put(ctx, storetest.Placement("c", 1)) {
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rec.wait(t, 1)
}

// Redis down: cached ids keep being served (stale-if-error), unknown ids get
// a fast EUNAVAILABLE, and everything recovers by itself.
func TestOutageStaleIfErrorAndRecovery(t *testing.T) {
	srv := redistest.Start(t)
	store := open(t, []string{srv.Addr}, uniquePrefix(t))
	c, err := cache.New(store, cache.Options{Encoders: render.Encoders(render.EncoderOptions{}, []render.Format{render.FormatJSONP}),
		TTL: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond, LoadTimeout: 200 * time.Millisecond,
		BreakerFailures: 3, BreakerCooldown: 300 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Put(ctx, storetest.Placement("1", 2)); err != nil {
		t.Fatal(err)
	}
	want := string(render.AppendPayload(nil, storetest.Placement("1", 2)))
	if e, err := c.Lookup(ctx, []byte("1")); err != nil || string(e.Payloads[render.EncodingJSON]) != want {
		t.Fatal(err)
	}
	for _, outage := range []struct {
		name       string
		down, back func()
	}{
		{"killed", srv.Kill, func() { srv.Restart(t); _ = store.Put(ctx, storetest.Placement("1", 2)) }},
		{"hung", srv.Pause, srv.Resume},
	} {
		outage.down()
		time.Sleep(100 * time.Millisecond) // past the TTL
		before := c.Stats().ShortCircuits
		for i := range 20 {
			e, err := c.Lookup(ctx, []byte("1"))
			if err != nil || string(e.Payloads[render.EncodingJSON]) != want {
				t.Fatalf("%s: cached id during the outage: %v", outage.name, err)
			}
			_, err = c.Lookup(ctx, []byte(fmt.Sprint("unknown-", outage.name, i)))
			if tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
				t.Fatalf("%s: unknown id during the outage: %v", outage.name, err)
			}
		}
		// Fast means not asking Redis: after three failures the breaker
		// answers at once (a probe after each cooldown may still wait).
		if n := c.Stats().ShortCircuits - before; n < 10 {
			t.Fatalf("%s: %d of 20 unknown-id lookups short-circuited during the outage", outage.name, n)
		}
		outage.back()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := c.Lookup(ctx, []byte(fmt.Sprint("after-", outage.name)))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no recovery: %v", outage.name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if st := c.Stats(); st.ShortCircuits == 0 || st.RefreshErrors == 0 || st.Stale == 0 {
		t.Fatalf("outage not visible in stats: %+v", st)
	}
}

// Killing a master: the replica takes over and the store keeps working.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node cluster; skipped in -short mode")
	}
	cl := redistest.StartCluster(t)
	prefix := uniquePrefix(t)
	store := open(t, cl.Addrs()[:1], prefix)
	ctx := context.Background()
	var ps []*tsubame.Placement
	for i := range 300 {
		ps = append(ps, storetest.Placement(fmt.Sprint(i), 1))
	}
	if err := store.PutMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	victim := cl.MasterOf(t, prefix+"p:0")
	victim.WaitReplicated(t) // else the replica promoted may not have placement 0 yet
	victim.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := store.Get(ctx, "0")
		if err == nil && p.ID == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("placement 0 not readable after its master died: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Right after a failover the nodes' views of the cluster converge by
	// gossip, and a topology scan may still meet a stale one: an operation
	// may fail once (the caller is told and retries), but not for long.
	eventually := func(what string, op func() error) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := op()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after failover: %v", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, p := range ps {
		eventually("read "+p.ID, func() error { _, err := store.Get(ctx, p.ID); return err })
	}
	eventually("write", func() error { return store.Put(ctx, storetest.Placement("new", 1)) })
	eventually("list", func() error {
		page, err := store.List(ctx, "", 1000)
		if err == nil && len(page) != 301 {
			err = fmt.Errorf("%d placements listed, want 301", len(page))
		}
		return err
	})
}

// TestCommandTimeout: a command whose caller set no deadline is still bounded
// by Options.Timeout (through the deadline shared by such commands), with or
// without the write delay that gathers commands into one write.
func TestCommandTimeout(t *testing.T) {
	srv := redistest.Start(t)
	for _, delay := range []time.Duration{0, 200 * time.Microsecond} {
		t.Run(fmt.Sprint("max_flush_delay=", delay), func(t *testing.T) {
			s, err := redis.Open(redis.Options{Addrs: []string{srv.Addr}, KeyPrefix: uniquePrefix(t),
				// Generous: the reads below must all succeed on a busy
				// machine (100 ms failed one run under stress-ng).
				Timeout: 2 * time.Second, MaxFlushDelay: delay, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p := &tsubame.Placement{ID: "1", URLs: []string{"http://ad.example.com/t.js"}}
			if err := s.Put(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			// Concurrent reads with no deadline of their own share contexts
			// and all succeed while the server answers.
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for range 64 {
				wg.Go(func() {
					got, err := s.Get(context.Background(), "1")
					if err == nil && got.URLs[0] != p.URLs[0] {
						err = fmt.Errorf("got %v", got.URLs)
					}
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			// A stopped server never answers: without the bound the read
			// would wait until the server resumes and then succeed.
			srv.Pause()
			_, err = s.Get(context.Background(), "1")
			srv.Resume()
			if tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
				t.Fatalf("read from a stopped server: %v, want an EUNAVAILABLE error", err)
			}
		})
	}
}

// Shard names the master serving each id: ids on one master share a shard,
// ids on different masters do not, and after a failover the dead master's
// ids move to a new shard (the promoted replica's).
func TestShardFollowsTheMasters(t *testing.T) {
	c := redistest.StartCluster(t)
	prefix := uniquePrefix(t)
	s := open(t, c.Addrs(), prefix)
	masters := map[int]string{}
	byMaster := map[string]int{}
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprint("id", i)
		shard, master := s.Shard(ids[i]), c.MasterOf(t, prefix+"p:"+ids[i]).Addr
		if m, ok := masters[shard]; ok && m != master {
			t.Fatalf("shard %d holds ids of %s and %s", shard, m, master)
		}
		if sh, ok := byMaster[master]; ok && sh != shard {
			t.Fatalf("master %s has ids in shards %d and %d", master, sh, shard)
		}
		masters[shard], byMaster[master] = master, shard
	}
	if len(masters) != 3 {
		t.Fatalf("60 ids on %d shards, want the 3 masters", len(masters))
	}

	victim := c.MasterOf(t, prefix+"p:"+ids[0])
	old := s.Shard(ids[0])
	victim.Kill()
	deadline := time.Now().Add(60 * time.Second)
	for s.Shard(ids[0]) == old {
		if time.Now().After(deadline) {
			t.Fatal("the dead master's ids never moved to another shard")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.WaitOK(t)
	promoted := c.MasterOf(t, prefix+"p:"+ids[0]).Addr
	for _, id := range ids {
		if c.MasterOf(t, prefix+"p:"+id).Addr == promoted && s.Shard(id) != s.Shard(ids[0]) {
			t.Fatalf("%s is on the promoted master %s but in shard %d, not %d", id, promoted, s.Shard(id), s.Shard(ids[0]))
		}
	}
}

func TestShardStandaloneIsOne(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, uniquePrefix(t))
	for i := range 100 {
		if sh := s.Shard(fmt.Sprint(i)); sh != 0 {
			t.Fatalf("standalone id %d in shard %d", i, sh)
		}
	}
}

// The event ids are the keys the package comment names, each expiring by
// itself after its ttl (rounded up to a millisecond); in a cluster they
// spread over the masters.
func TestDedupeKeys(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix(t)
	s := open(t, []string{srv.Addr}, prefix)
	for _, tc := range []struct {
		id       string
		ttl      time.Duration
		min, max int
	}{
		{"imp:d-1", time.Minute, 1, 60000},
		{"clk:d-1", time.Nanosecond, -2, 1}, // 1 ms: gone (-2) or about to go
	} {
		if ok, err := s.FirstSeen(t.Context(), tc.id, tc.ttl); err != nil || !ok {
			t.Fatalf("FirstSeen(%q) = %v, %v", tc.id, ok, err)
		}
		pttl, err := strconv.Atoi(strings.TrimSpace(srv.CLI(t, "pttl", prefix+"seen:"+tc.id)))
		if err != nil || pttl < tc.min || pttl > tc.max || pttl == -1 {
			t.Fatalf("key %q: PTTL %d (%v), want %d..%d and never without expiry", prefix+"seen:"+tc.id, pttl, err, tc.min, tc.max)
		}
	}
}

func TestDedupeSpreadsOverTheCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node cluster; skipped in -short mode")
	}
	c := redistest.StartCluster(t)
	prefix := uniquePrefix(t)
	s := open(t, c.Addrs()[:1], prefix)
	masters := map[string]bool{}
	for i := range 30 {
		id := fmt.Sprint("imp:d-", i)
		if ok, err := s.FirstSeen(t.Context(), id, time.Minute); err != nil || !ok {
			t.Fatalf("FirstSeen(%q) = %v, %v", id, ok, err)
		}
		m := c.MasterOf(t, prefix+"seen:"+id)
		if got := strings.TrimSpace(m.CLI(t, "exists", prefix+"seen:"+id)); got != "1" {
			t.Fatalf("%q not on the master of its slot %s", id, m.Addr)
		}
		masters[m.Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("30 event ids on %d masters, want all 3", len(masters))
	}
}

// BenchmarkFirstSeen against a local server: one round trip per call,
// pipelined with the other goroutines' (rueidis).
func BenchmarkFirstSeen(b *testing.B) {
	srv := redistest.Start(b)
	for _, p := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%dxCPU", p), func(b *testing.B) {
			s := open(b, []string{srv.Addr}, fmt.Sprintf("bench%d:", time.Now().UnixNano()))
			storetest.BenchFirstSeen(b, s, p)
		})
	}
}
