package cache_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/cache"
	"tsubame/internal/render"
	"tsubame/internal/store/memory"
	"tsubame/internal/store/storetest"
)

// flakyStore wraps a real memory store, counting reads and failing or
// slowing them on demand. It is the only stand-in here: it models a backend
// outage, which a memory store cannot have by itself.
type flakyStore struct {
	tsubame.Store
	gets  atomic.Int64
	fail  atomic.Bool
	delay atomic.Int64 // nanoseconds
	// gate, when set, holds every read until it is closed.
	gate atomic.Pointer[chan struct{}]
}

func (s *flakyStore) Get(ctx context.Context, id string) (*tsubame.Placement, error) {
	s.gets.Add(1)
	if g := s.gate.Load(); g != nil {
		select {
		case <-*g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if d := time.Duration(s.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s.fail.Load() {
		return nil, errors.New("connection refused")
	}
	return s.Store.Get(ctx, id)
}

func options() cache.Options {
	return cache.Options{
		Encoders: render.Encoders(render.EncoderOptions{}, []render.Format{render.FormatJSONP}),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func newCache(t testing.TB, opt cache.Options) (*cache.Cache, *flakyStore) {
	t.Helper()
	fs := &flakyStore{Store: memory.New()}
	c, err := cache.New(fs, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, fs
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) tsubame.Store {
		c, _ := newCache(t, options())
		return c
	})
}

func lookup(t *testing.T, c *cache.Cache, id string) *cache.Entry {
	t.Helper()
	e, err := c.Lookup(t.Context(), []byte(id))
	if err != nil {
		t.Fatalf("Lookup(%q): %v", id, err)
	}
	return e
}

func TestHitServesEncodedPayload(t *testing.T) {
	c, fs := newCache(t, options())
	if err := fs.Store.Put(t.Context(), storetest.Placement("1", 2)); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		e := lookup(t, c, "1")
		want := `{"urls":["http://ad1.example.com/1/tag.js","http://ad2.example.com/1/tag.js"]}`
		if !e.Found || string(e.Payloads[render.EncodingJSON]) != want {
			t.Fatalf("entry = %v %s", e.Found, e.Payloads[render.EncodingJSON])
		}
	}
	if n := fs.gets.Load(); n != 1 {
		t.Fatalf("store read %d times for 5 lookups, want 1", n)
	}
	st := c.Stats()
	if st.Hits != 4 || st.Misses != 1 || st.Loads != 1 {
		t.Fatalf("stats = %+v, want 4 hits, 1 miss, 1 load", st)
	}
}

// 1000 concurrent misses on one key cause exactly one store read.
func TestStampedeOneRead(t *testing.T) {
	c, fs := newCache(t, options())
	if err := fs.Store.Put(t.Context(), storetest.Placement("hot", 1)); err != nil {
		t.Fatal(err)
	}
	fs.delay.Store(int64(50 * time.Millisecond))
	const n = 1000
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			<-start
			e, err := c.Lookup(context.Background(), []byte("hot"))
			if err == nil && !e.Found {
				err = errors.New("not found")
			}
			if err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := fs.gets.Load(); got != 1 {
		t.Fatalf("%d concurrent misses caused %d store reads, want 1", n, got)
	}
}

func TestNegativeCaching(t *testing.T) {
	opt := options()
	opt.NegativeTTL = 50 * time.Millisecond
	opt.StaleIfError = -1
	c, fs := newCache(t, opt)
	for range 3 {
		if e := lookup(t, c, "missing"); e.Found || string(e.Payloads[render.EncodingJSON]) != string(render.NotFoundPayload) {
			t.Fatalf("entry for unknown id = %+v", e)
		}
	}
	if n := fs.gets.Load(); n != 1 {
		t.Fatalf("unknown id read %d times, want 1 (negative entry)", n)
	}
	// A placement created through the cache is visible at once.
	if err := c.Put(t.Context(), storetest.Placement("missing", 1)); err != nil {
		t.Fatal(err)
	}
	if e := lookup(t, c, "missing"); !e.Found {
		t.Fatal("Put through the cache did not invalidate the negative entry")
	}
	// Created behind the cache's back: visible once the negative TTL is over.
	if err := fs.Store.Put(t.Context(), storetest.Placement("later", 1)); err != nil {
		t.Fatal(err)
	}
	_ = fs.Store.Delete(t.Context(), "later")
	lookup(t, c, "later")
	if err := fs.Store.Put(t.Context(), storetest.Placement("later", 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return lookup(t, c, "later").Found })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWritesInvalidate(t *testing.T) {
	c, _ := newCache(t, options())
	ctx := t.Context()
	if err := c.Put(ctx, storetest.Placement("1", 1)); err != nil {
		t.Fatal(err)
	}
	lookup(t, c, "1")
	if err := c.Put(ctx, storetest.Placement("1", 3)); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Get(ctx, "1"); err != nil || len(p.URLs) != 3 {
		t.Fatalf("after Put, Get = %+v, %v", p, err)
	}
	if err := c.PutMany(ctx, []*tsubame.Placement{storetest.Placement("1", 2)}); err != nil {
		t.Fatal(err)
	}
	if e := lookup(t, c, "1"); string(e.Payloads[render.EncodingJSON]) != string(render.AppendPayload(nil, storetest.Placement("1", 2))) {
		t.Fatalf("after PutMany payload = %s", e.Payloads[render.EncodingJSON])
	}
	if err := c.Delete(ctx, "1"); err != nil {
		t.Fatal(err)
	}
	if e := lookup(t, c, "1"); e.Found {
		t.Fatal("deleted placement still served")
	}
}

func TestInvalidateDep(t *testing.T) {
	c, fs := newCache(t, options())
	ctx := t.Context()
	for i := range 10 {
		p := storetest.Placement(fmt.Sprint(i), 1)
		if i%2 == 0 {
			p.Deps = []string{"campaign:42"}
		}
		if err := fs.Store.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
		lookup(t, c, p.ID)
	}
	before := fs.gets.Load()
	c.InvalidateDep("campaign:42")
	for i := range 10 {
		lookup(t, c, fmt.Sprint(i))
	}
	if got := fs.gets.Load() - before; got != 5 {
		t.Fatalf("after InvalidateDep %d ids were reloaded, want the 5 that declared the dep", got)
	}
	// Reloaded entries registered again: a second invalidation works too.
	c.InvalidateDep("campaign:42")
	lookup(t, c, "0")
	if got := fs.gets.Load() - before; got != 6 {
		t.Fatalf("second InvalidateDep did not drop id 0 (reads %d)", got)
	}
	c.InvalidateDep("campaign:unknown") // no-op
}

// Past its TTL an entry is served at once while one background read refreshes it.
func TestStaleWhileRevalidate(t *testing.T) {
	opt := options()
	opt.TTL = 30 * time.Millisecond
	opt.LoadTimeout = time.Hour
	c, fs := newCache(t, opt)
	ctx := t.Context()
	if err := fs.Store.Put(ctx, storetest.Placement("1", 1)); err != nil {
		t.Fatal(err)
	}
	lookup(t, c, "1")
	if err := fs.Store.Put(ctx, storetest.Placement("1", 2)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond)
	// The store holds every read until the gate opens, and loads may take
	// an hour: a lookup that waited for the refresh would not return.
	gate := make(chan struct{})
	fs.gate.Store(&gate)
	if e := lookup(t, c, "1"); string(e.Payloads[render.EncodingJSON]) != string(render.AppendPayload(nil, storetest.Placement("1", 1))) {
		t.Fatalf("stale lookup returned %s, want the old value", e.Payloads[render.EncodingJSON])
	}
	close(gate)
	fresh := string(render.AppendPayload(nil, storetest.Placement("1", 2)))
	waitFor(t, func() bool { return string(lookup(t, c, "1").Payloads[render.EncodingJSON]) == fresh })
	if st := c.Stats(); st.Stale == 0 {
		t.Fatalf("stale lookups not counted: %+v", st)
	}
}

// While the store fails, the last value keeps being served and failures are
// counted; an id never seen gets EUNAVAILABLE; recovery is automatic.
func TestStaleIfError(t *testing.T) {
	opt := options()
	opt.TTL = 20 * time.Millisecond
	opt.RetryInterval = 10 * time.Millisecond
	opt.StaleIfError = time.Minute
	c, fs := newCache(t, opt)
	ctx := t.Context()
	if err := fs.Store.Put(ctx, storetest.Placement("1", 1)); err != nil {
		t.Fatal(err)
	}
	want := string(lookup(t, c, "1").Payloads[render.EncodingJSON])
	fs.fail.Store(true)
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if e := lookup(t, c, "1"); string(e.Payloads[render.EncodingJSON]) != want {
			t.Fatalf("during the outage got %s", e.Payloads[render.EncodingJSON])
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := c.Stats()
	if st.RefreshErrors == 0 || st.Stale == 0 {
		t.Fatalf("outage not visible in stats: %+v", st)
	}
	// Retries are paced: about one per RetryInterval, not one per lookup.
	if st.RefreshErrors > 60 {
		t.Fatalf("%d refresh attempts in 300ms with a 10ms retry interval", st.RefreshErrors)
	}
	_, err := c.Lookup(ctx, []byte("never-seen"))
	if tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("unknown id during outage: %v, want EUNAVAILABLE", err)
	}
	if err := fs.Store.Put(ctx, storetest.Placement("1", 2)); err != nil {
		t.Fatal(err)
	}
	fs.fail.Store(false)
	waitFor(t, func() bool { return len(lookup(t, c, "1").Payloads[render.EncodingJSON]) > len(want) })
}

// Past TTL+StaleIfError an entry is gone: the outage becomes visible.
func TestStaleIfErrorBound(t *testing.T) {
	opt := options()
	opt.TTL = 10 * time.Millisecond
	opt.StaleIfError = 30 * time.Millisecond
	c, fs := newCache(t, opt)
	if err := fs.Store.Put(t.Context(), storetest.Placement("1", 1)); err != nil {
		t.Fatal(err)
	}
	lookup(t, c, "1")
	fs.fail.Store(true)
	waitFor(t, func() bool {
		_, err := c.Lookup(t.Context(), []byte("1"))
		return tsubame.ErrorCode(err) == tsubame.EUNAVAILABLE
	})
}

func TestBoundedByBytes(t *testing.T) {
	opt := options()
	opt.MaxBytes = 64 << 10
	c, fs := newCache(t, opt)
	var batch []*tsubame.Placement
	for i := range 2000 {
		batch = append(batch, storetest.Placement(fmt.Sprint(i), 4))
	}
	if err := fs.Store.PutMany(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	for _, p := range batch {
		lookup(t, c, p.ID)
	}
	waitFor(t, func() bool { return c.Stats().Bytes <= opt.MaxBytes })
	if st := c.Stats(); st.Evictions == 0 || st.Entries >= 2000 {
		t.Fatalf("64 KiB cache holds %d entries (%d bytes), %d evictions", st.Entries, st.Bytes, st.Evictions)
	}
}

func TestLoadTimeout(t *testing.T) {
	opt := options()
	opt.LoadTimeout = 20 * time.Millisecond
	c, fs := newCache(t, opt)
	// A read that never ends: only the load timeout lets the lookup return.
	gate := make(chan struct{})
	fs.gate.Store(&gate)
	defer close(gate)
	_, err := c.Lookup(t.Context(), []byte("slow"))
	if tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("slow store: %v, want EUNAVAILABLE", err)
	}
}

var sink atomic.Pointer[cache.Entry]

func BenchmarkLookupHit(b *testing.B) {
	c, fs := newCache(b, options())
	if err := fs.Store.Put(b.Context(), storetest.Placement("1", 2)); err != nil {
		b.Fatal(err)
	}
	id := []byte("1")
	ctx := context.Background()
	if _, err := c.Lookup(ctx, id); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var last *cache.Entry
		for pb.Next() {
			e, err := c.Lookup(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			last = e
		}
		sink.Store(last)
	})
}

// After BreakerFailures failed reads, reads fail at once for the cooldown
// (no pile-up behind a hung store), then one probe goes through; success
// closes the circuit.
func TestCircuitBreaker(t *testing.T) {
	opt := options()
	opt.LoadTimeout = 50 * time.Millisecond
	opt.BreakerFailures = 3
	opt.BreakerCooldown = 200 * time.Millisecond
	c, fs := newCache(t, opt)
	if err := fs.Store.Put(t.Context(), storetest.Placement("ok", 1)); err != nil {
		t.Fatal(err)
	}
	fs.delay.Store(int64(time.Second)) // hung store: every read times out
	for i := range 3 {
		if _, err := c.Lookup(t.Context(), []byte(fmt.Sprint("u", i))); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	reads := fs.gets.Load()
	for i := range 100 {
		if _, err := c.Lookup(t.Context(), []byte(fmt.Sprint("v", i))); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
			t.Fatalf("open circuit: %v", err)
		}
	}
	// Failing fast means not reading the hung store (each read would wait
	// out its second).
	if fs.gets.Load() != reads {
		t.Fatalf("100 lookups with the circuit open reached the store %d times", fs.gets.Load()-reads)
	}
	if st := c.Stats(); !st.BreakerOpen || st.ShortCircuits != 100 {
		t.Fatalf("stats %+v", st)
	}
	fs.delay.Store(0)
	time.Sleep(250 * time.Millisecond)
	if e, err := c.Lookup(t.Context(), []byte("ok")); err != nil || !e.Found {
		t.Fatalf("after the cooldown the probe should succeed: %v", err)
	}
	if c.Stats().BreakerOpen {
		t.Fatal("circuit still open after a successful probe")
	}
}

// At most MaxLoads store reads run at once; a miss that finds no slot within
// LoadWait fails fast instead of queueing behind a slow store.
func TestLoadPoolBounds(t *testing.T) {
	opt := options()
	opt.MaxLoads = 4
	opt.LoadWait = 20 * time.Millisecond
	opt.BreakerFailures = -1
	c, fs := newCache(t, opt)
	fs.delay.Store(int64(300 * time.Millisecond))
	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	for i := range 40 {
		wg.Go(func() {
			_, err := c.Lookup(t.Context(), []byte(fmt.Sprint("id", i)))
			switch {
			case err == nil:
				ok.Add(1)
			case tsubame.ErrorCode(err) == tsubame.EUNAVAILABLE:
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 4 || refused.Load() != 36 || fs.gets.Load() != 4 {
		t.Fatalf("%d served, %d refused, %d store reads; want 4, 36, 4", ok.Load(), refused.Load(), fs.gets.Load())
	}
	if st := c.Stats(); st.LoadsRefused != 36 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHottestAndWarm(t *testing.T) {
	c, fs := newCache(t, options())
	var ps []*tsubame.Placement
	for i := range 50 {
		ps = append(ps, storetest.Placement(fmt.Sprint(i), 1))
	}
	if err := fs.Store.PutMany(t.Context(), ps); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		for range 1 + (i%5)*10 { // ids ending in 4 and 9 are used most
			lookup(t, c, fmt.Sprint(i))
		}
	}
	lookup(t, c, "missing") // negative entries are not worth warming
	hot := c.Hottest(10)
	if len(hot) != 10 {
		t.Fatalf("Hottest(10) = %v", hot)
	}
	for _, id := range hot {
		if id == "missing" {
			t.Fatal("negative entry among the hottest")
		}
	}
	fresh, fs2 := newCache(t, options())
	if err := fs2.Store.PutMany(t.Context(), ps); err != nil {
		t.Fatal(err)
	}
	if n := fresh.Warm(t.Context(), hot, 4); n != 10 {
		t.Fatalf("warmed %d", n)
	}
	before := fs2.gets.Load()
	for _, id := range hot {
		lookup(t, fresh, id)
	}
	if fs2.gets.Load() != before {
		t.Fatal("warmed ids still went to the store")
	}
}

// Revalidate (a change feed that may have missed writes) keeps every entry
// and serves it, while each is read again from the store: a value changed
// behind the cache's back shows up, and while the store fails the cached
// values keep being served, with reads paced by RetryInterval.
func TestRevalidateKeepsServingWhileTheStoreFails(t *testing.T) {
	opt := options()
	opt.TTL = time.Hour // only Revalidate makes entries due
	opt.RetryInterval = 20 * time.Millisecond
	c, fs := newCache(t, opt)
	ctx := t.Context()
	const n = 50
	old := map[string]string{}
	for i := range n {
		id := fmt.Sprint(i)
		if err := fs.Store.Put(ctx, storetest.Placement(id, 1)); err != nil {
			t.Fatal(err)
		}
		old[id] = string(lookup(t, c, id).Payloads[render.EncodingJSON])
	}
	// Changed behind the cache (an announcement it missed), then the store fails.
	for i := range n {
		if err := fs.Store.Put(ctx, storetest.Placement(fmt.Sprint(i), 2)); err != nil {
			t.Fatal(err)
		}
	}
	fs.fail.Store(true)
	before := fs.gets.Load()
	c.Revalidate()
	if st := c.Stats(); st.Entries != n || st.Revalidations != 1 {
		t.Fatalf("after Revalidate: %+v", st)
	}
	// Every id still answers, with its cached value, for a while.
	for range 10 {
		for id, want := range old {
			if got := string(lookup(t, c, id).Payloads[render.EncodingJSON]); got != want {
				t.Fatalf("id %s during the outage: %s", id, got)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fs.gets.Load() == before {
		t.Fatal("no entry was read again")
	}
	if st := c.Stats(); st.RefreshErrors == 0 || st.Stale == 0 {
		t.Fatalf("the failed refreshes are not visible: %+v", st)
	}
	// The store answers again: every id gets its new value.
	fs.fail.Store(false)
	for id, was := range old {
		waitFor(t, func() bool { return string(lookup(t, c, id).Payloads[render.EncodingJSON]) != was })
	}
	// Fresh again: hits, no more reads.
	reads := fs.gets.Load()
	for id := range old {
		lookup(t, c, id)
	}
	if fs.gets.Load() != reads {
		t.Fatalf("%d reads after the refresh", fs.gets.Load()-reads)
	}
}

// shardedStore splits ids over two shards by their first letter ("d..."
// is shard 1, the dead one) and fails or hangs shard 1 on demand.
type shardedStore struct {
	*flakyStore
	deadGets atomic.Int64
	hang     atomic.Bool
}

func (s *shardedStore) Shard(id string) int {
	if strings.HasPrefix(id, "d") {
		return 1
	}
	return 0
}

func (s *shardedStore) Get(ctx context.Context, id string) (*tsubame.Placement, error) {
	if s.Shard(id) == 1 {
		s.deadGets.Add(1)
		if s.hang.Load() {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, errors.New("dial tcp: connection refused")
	}
	return s.flakyStore.Get(ctx, id)
}

// A dead shard opens its own breaker and fills its own read pool; the other
// shard's ids keep loading, however many reads the dead one has failed.
func TestBreakerAndPoolPerShard(t *testing.T) {
	opt := options()
	opt.BreakerFailures = 3
	opt.BreakerCooldown = time.Hour
	opt.MaxLoads = 2
	opt.LoadWait = time.Millisecond
	opt.LoadTimeout = time.Hour // a hung read ends with its request
	ss := &shardedStore{flakyStore: &flakyStore{Store: memory.New()}}
	c, err := cache.New(ss, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	for i := range 100 {
		if err := ss.Store.Put(ctx, storetest.Placement(fmt.Sprint("live", i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	// Dead-shard reads interleaved with live ones: the live successes do
	// not keep the dead shard's breaker closed.
	for i := range 50 {
		if _, err := c.Lookup(ctx, []byte(fmt.Sprint("dead", i))); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
			t.Fatalf("dead id: %v", err)
		}
		if e := lookup(t, c, fmt.Sprint("live", i)); !e.Found {
			t.Fatal("live id not found")
		}
	}
	if n := ss.deadGets.Load(); n != 3 {
		t.Fatalf("the dead shard was read %d times; its breaker should open after 3", n)
	}
	if st := c.Stats(); st.OpenShards != 1 || st.ShortCircuits != 47 {
		t.Fatalf("stats %+v", st)
	}

	// A hung shard fills its own pool, not the other's.
	c2, err := cache.New(ss, func() cache.Options { o := opt; o.BreakerFailures = -1; return o }())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Close() })
	ss.hang.Store(true)
	hung, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { _, _ = c2.Lookup(hung, []byte(fmt.Sprint("dead-hung", i))) })
	}
	waitFor(t, func() bool { return ss.deadGets.Load() == 5 })
	if _, err := c2.Lookup(ctx, []byte("dead-more")); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("a third read of the hung shard: %v, want a refusal (its pool of 2 is full)", err)
	}
	for i := 50; i < 100; i++ {
		if e := lookup(t, c2, fmt.Sprint("live", i)); !e.Found {
			t.Fatal("live id not found while the other shard hangs")
		}
	}
	cancel()
	wg.Wait()
}
