// Package cache is the in-process cache of placements: a decorator over a
// tsubame.Store that implements tsubame.Store itself, so every backend gets
// the same cache and the same conformance suite covers both.
//
// What it adds over a map with a TTL:
//   - entries hold the ready-encoded payload, so a hit costs no encoding;
//   - one loader per key: N concurrent misses on a key cause one store read;
//   - negative caching: unknown ids are remembered (as the not-found payload);
//   - stale-while-revalidate: an entry past its TTL is still served while one
//     background read refreshes it;
//   - stale-if-error: while the store fails, the last value keeps being served
//     for up to StaleIfError past its TTL, and the failures are counted;
//   - invalidation by id and by dependency key (e.g. "campaign:42");
//   - a bound in bytes, with W-TinyLFU eviction (otter).
//
// It owns caching only: it imports the domain and render (for the payload encoders), never a store backend, a listener or config (arch_test.go).
package cache

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/maypok86/otter/v2"
	"github.com/maypok86/otter/v2/stats"

	"tsubame"
	"tsubame/internal/render"
)

// Options configure a Cache. Zero values take the documented defaults.
type Options struct {
	// MaxBytes bounds the estimated memory held by entries. Default 100 MiB.
	MaxBytes uint64
	// TTL is how long a found placement is served without asking the store.
	// Default 60s.
	TTL time.Duration
	// NegativeTTL is the same for unknown ids. Default 10s.
	NegativeTTL time.Duration
	// StaleIfError is how long past its TTL an entry may still be served
	// while refreshing it fails. Default 10m; NoStaleIfError turns it off.
	StaleIfError time.Duration
	// RetryInterval is the wait between refresh attempts of a stale entry
	// whose last refresh failed. Default 1s.
	RetryInterval time.Duration
	// LoadTimeout bounds one store read. Default 1s.
	LoadTimeout time.Duration
	// BreakerFailures consecutive failed store reads open the circuit: for
	// BreakerCooldown, reads fail at once instead of waiting on a store that
	// is down or hung, so requests for unknown ids do not pile up. Then one
	// read is let through to probe. Defaults 5 and 1s; a negative
	// BreakerFailures disables the breaker.
	BreakerFailures int
	BreakerCooldown time.Duration
	// MaxLoads bounds the store reads in flight for distinct missing ids (an
	// intentional bottleneck: a flood of unknown ids cannot swamp the
	// store). A miss waits up to LoadWait for a slot, then fails with
	// EUNAVAILABLE. Default 256 and 100ms; per shard for a sharded store.
	MaxLoads int
	LoadWait time.Duration
	// Encoders make the payloads an entry keeps, one per encoding in use
	// (render.Encoders): Entry.Payloads[e] for an encoder with an Encode,
	// its NotFound payload for an unknown id. At least one is required.
	Encoders [render.MaxEncodings]render.Encoder
	// Logger receives refresh failures. Default slog.Default().
	Logger *slog.Logger
}

// Defaults are the options a zero value takes: the cache owns them, and
// the configuration's defaults (cache: in defaults.yaml) are checked
// against them.
var Defaults = Options{
	MaxBytes:        100 << 20,
	TTL:             60 * time.Second,
	NegativeTTL:     10 * time.Second,
	StaleIfError:    10 * time.Minute,
	RetryInterval:   time.Second,
	LoadTimeout:     time.Second,
	BreakerFailures: 5,
	BreakerCooldown: time.Second,
	MaxLoads:        256,
	LoadWait:        100 * time.Millisecond,
}

// NoStaleIfError is the StaleIfError that turns stale-if-error off (a zero
// StaleIfError takes the default).
const NoStaleIfError time.Duration = -1

func (o *Options) setDefaults() {
	d := Defaults
	if o.MaxBytes == 0 {
		o.MaxBytes = d.MaxBytes
	}
	if o.TTL <= 0 {
		o.TTL = d.TTL
	}
	if o.NegativeTTL <= 0 {
		o.NegativeTTL = d.NegativeTTL
	}
	if o.StaleIfError < 0 {
		o.StaleIfError = 0
	} else if o.StaleIfError == 0 {
		o.StaleIfError = d.StaleIfError
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = d.RetryInterval
	}
	if o.LoadTimeout <= 0 {
		o.LoadTimeout = d.LoadTimeout
	}
	if o.BreakerFailures == 0 {
		o.BreakerFailures = d.BreakerFailures
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = d.BreakerCooldown
	}
	if o.MaxLoads <= 0 {
		o.MaxLoads = d.MaxLoads
	}
	if o.LoadWait <= 0 {
		o.LoadWait = d.LoadWait
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Entry is the cached result of looking up one id. Entries are shared by all
// readers and must not be modified.
type Entry struct {
	// Payloads are the encoded documents to write, by encoding: the
	// placement's payload, or the encoder's NotFound when Found is false
	// (nil for an encoding not in use).
	Payloads [render.MaxEncodings][]byte
	// Found reports whether the store had the placement.
	Found bool

	placement  *tsubame.Placement // nil when !Found
	gen        uint64             // tells this load's dependency registrations apart from later ones
	freshUntil int64              // monotonic nanoseconds, see now()
}

// Stats is a snapshot of the cache's counters.
type Stats struct {
	Hits          uint64        // lookups answered from a fresh entry
	Misses        uint64        // lookups that found no entry and waited for a load
	Stale         uint64        // lookups answered from an entry past its TTL
	Loads         uint64        // store reads that succeeded (found or not found)
	LoadErrors    uint64        // store reads that failed
	RefreshErrors uint64        // background refreshes that failed (a stale value kept being served)
	Evictions     uint64        // entries dropped for size or expiry
	Invalidations uint64        // entries dropped by Invalidate or InvalidateDep
	Revalidations uint64        // Revalidate calls (every entry made due for a refresh)
	ShortCircuits uint64        // store reads refused at once while the circuit was open
	LoadsRefused  uint64        // misses refused because MaxLoads reads were in flight for LoadWait
	BreakerOpen   bool          // a circuit is open now
	OpenShards    int           // shards of the store whose circuit is open now
	Entries       int           // current number of entries
	Bytes         uint64        // current estimated weight of entries
	LoadTime      time.Duration // total time spent in store reads
}

// Cache is a tsubame.Store that caches another one. It is safe for
// concurrent use. Writes go to the store and then invalidate the id, so a
// reader in the same process never sees a replaced value after the write
// returns.
type Cache struct {
	store  tsubame.Store
	opt    Options
	c      *otter.Cache[string, *Entry]
	loader otter.Loader[string, *Entry]
	deps   depIndex

	gen           atomic.Uint64
	staleGen      atomic.Uint64  // entries of this generation or older are due for a refresh (Revalidate)
	counter       *stats.Counter // striped: hits and misses are counted on the hot path
	stale         atomic.Uint64
	refreshErrors atomic.Uint64
	invalidations atomic.Uint64
	revalidations atomic.Uint64

	// One circuit breaker and one pool of reads per shard of the store
	// (tsubame.Sharded: a Redis Cluster master), so that a dead shard costs
	// only its own ids. A store that is not sharded is one shard.
	sharded       tsubame.Sharded
	shards        [maxShards]shard
	loadsRefused  atomic.Uint64
	shortCircuits atomic.Uint64
}

// maxShards bounds the shards told apart; beyond it shards share (a
// cluster's masters are counted in tens, and a promoted replica is a new
// shard).
const maxShards = 64

// shard is one shard's breaker and read pool.
type shard struct {
	loads     chan struct{} // slots for store reads in flight; made on first use
	once      sync.Once
	failures  atomic.Int64 // consecutive failed store reads
	openUntil atomic.Int64 // now() until which the circuit is open
	_         [32]byte     // shards apart on cache lines
}

var (
	_ tsubame.Store       = (*Cache)(nil)
	_ tsubame.Invalidator = (*Cache)(nil)
)

// entryOverhead approximates the bytes an entry costs beyond its payload and
// placement strings: the otter node, the Entry and the Placement structs.
const entryOverhead = 256

// New returns a Cache over store.
func New(store tsubame.Store, opt Options) (*Cache, error) {
	opt.setDefaults()
	used := false
	for _, e := range opt.Encoders {
		if e.Encode != nil && e.NotFound == nil {
			return nil, tsubame.Errorf(tsubame.EINVALID, "cache: an encoder without its NotFound payload")
		}
		used = used || e.Encode != nil
	}
	if !used {
		return nil, tsubame.Errorf(tsubame.EINVALID, "cache: no encoder")
	}
	c := &Cache{store: store, opt: opt, counter: stats.NewCounter()}
	c.sharded, _ = store.(tsubame.Sharded)
	c.deps.m = make(map[string]map[string]uint64)
	c.loader = loader{c}
	oc, err := otter.New(&otter.Options[string, *Entry]{
		MaximumWeight: opt.MaxBytes,
		Weigher:       weigh,
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, *Entry]) time.Duration {
			return c.ttl(e.Value) + opt.StaleIfError
		}),
		RefreshCalculator: refresher{c},
		OnDeletion:        c.onDeletion,
		Logger:            &otterLogger{l: opt.Logger},
	})
	if err != nil {
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "cache: bad options")
	}
	c.c = oc
	return c, nil
}

func weigh(key string, e *Entry) uint32 {
	w := entryOverhead + len(key)
	for _, p := range e.Payloads {
		w += len(p)
	}
	if p := e.placement; p != nil {
		w += len(p.ID) + len(p.Name)
		for _, u := range p.URLs {
			w += 16 + len(u)
		}
		for _, d := range p.Deps {
			w += 16 + len(d)
		}
	}
	return uint32(min(w, 1<<31))
}

func (c *Cache) ttl(e *Entry) time.Duration {
	if e.Found {
		return c.opt.TTL
	}
	return c.opt.NegativeTTL
}

// epoch anchors now(): time.Since reads the monotonic clock, so entry
// freshness does not jump with the wall clock.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }

// Lookup returns the entry for id. id is only read during the call (it may
// point into a reused request buffer). A fresh entry costs no allocation; a
// miss waits for the one load of id in flight; an entry past its TTL is
// returned at once while a background refresh runs. The error is
// EUNAVAILABLE when the store fails and nothing usable is cached.
func (c *Cache) Lookup(ctx context.Context, id []byte) (*Entry, error) {
	// The unsafe string only lives for this map probe: GetIfPresent neither
	// keeps the key nor starts a refresh with it.
	if e, ok := c.c.GetIfPresent(unsafe.String(unsafe.SliceData(id), len(id))); ok && c.fresh(e) {
		c.counter.RecordHits(1)
		return e, nil
	}
	return c.slowLookup(ctx, string(id))
}

// slowLookup goes through otter's Get, which owns the key, joins or starts
// the single load of a missing key and refreshes an entry past its TTL.
func (c *Cache) slowLookup(ctx context.Context, id string) (*Entry, error) {
	e, err := c.c.Get(ctx, id, c.loader)
	if err != nil {
		c.counter.RecordMisses(1)
		return nil, err
	}
	if c.fresh(e) {
		// Loaded for us, or refreshed by someone else meanwhile.
		c.counter.RecordMisses(1)
	} else {
		c.stale.Add(1)
	}
	return e, nil
}

// fresh reports whether e may be served without asking the store: within
// its TTL and loaded after the last Revalidate.
func (c *Cache) fresh(e *Entry) bool {
	return now() < e.freshUntil && e.gen > c.staleGen.Load()
}

// loader reads placements from the store for otter. Load runs for missing
// keys (one call per key at a time), Reload for refreshes of stale ones.
type loader struct{ c *Cache }

func (l loader) Load(ctx context.Context, id string) (*Entry, error) {
	return l.c.load(ctx, id)
}

func (l loader) Reload(ctx context.Context, id string, _ *Entry) (*Entry, error) {
	e, err := l.c.load(ctx, id)
	if err != nil {
		l.c.refreshErrors.Add(1)
	}
	return e, err
}

// errCircuitOpen is returned while the breaker refuses store reads.
var errCircuitOpen = tsubame.Errorf(tsubame.EUNAVAILABLE, "placement store unavailable")

// errTooManyLoads is returned when no store read slot frees in time.
var errTooManyLoads = tsubame.Errorf(tsubame.EUNAVAILABLE, "too many placement reads at once, retry later")

// shardOf returns the breaker and read pool of id's shard.
func (c *Cache) shardOf(id string) *shard {
	n := 0
	if c.sharded != nil {
		n = c.sharded.Shard(id) % maxShards
	}
	sh := &c.shards[n]
	sh.once.Do(func() { sh.loads = make(chan struct{}, c.opt.MaxLoads) })
	return sh
}

// acquireLoad takes a read slot of sh, waiting up to LoadWait.
func (c *Cache) acquireLoad(ctx context.Context, sh *shard) bool {
	select {
	case sh.loads <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(c.opt.LoadWait)
	defer t.Stop()
	select {
	case sh.loads <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	c.loadsRefused.Add(1)
	return false
}

func (c *Cache) load(ctx context.Context, id string) (*Entry, error) {
	sh := c.shardOf(id)
	if c.opt.BreakerFailures > 0 && now() < sh.openUntil.Load() {
		c.shortCircuits.Add(1)
		return nil, errCircuitOpen
	}
	if !c.acquireLoad(ctx, sh) {
		return nil, errTooManyLoads
	}
	defer func() { <-sh.loads }()
	ctx, cancel := context.WithTimeout(ctx, c.opt.LoadTimeout)
	defer cancel()
	// The generation is taken before the read: a read that started before
	// a Revalidate yields an entry that is due for a refresh already.
	gen := c.gen.Add(1)
	start := time.Now()
	p, err := c.store.Get(ctx, id)
	if err != nil && !tsubame.IsNotFound(err) {
		c.counter.RecordLoadFailure(time.Since(start))
		if n := sh.failures.Add(1); c.opt.BreakerFailures > 0 && n >= int64(c.opt.BreakerFailures) {
			// Open (again, if this was the probe after a cooldown).
			sh.openUntil.Store(now() + int64(c.opt.BreakerCooldown))
		}
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "placement store unavailable")
	}
	if sh.failures.Load() != 0 {
		sh.failures.Store(0)
	}
	c.counter.RecordLoadSuccess(time.Since(start))
	e := &Entry{gen: gen}
	if err != nil {
		for i, enc := range c.opt.Encoders {
			e.Payloads[i] = enc.NotFound
		}
	} else {
		e.Found, e.placement = true, p
		for i, enc := range c.opt.Encoders {
			if enc.Encode != nil {
				e.Payloads[i] = enc.Encode(nil, p)
			}
		}
		// Registered before otter stores the entry: an InvalidateDep racing
		// with this load invalidates the key, and otter then discards the load.
		c.deps.add(id, e.gen, p.Deps)
	}
	e.freshUntil = now() + int64(c.ttl(e))
	return e, nil
}

// refresher tells otter when an entry is due for a background refresh: at
// the end of its TTL, and RetryInterval after a failed refresh, so a failing
// store sees one attempt per key per interval rather than one per request.
type refresher struct{ c *Cache }

func (r refresher) RefreshAfterCreate(e otter.Entry[string, *Entry]) time.Duration {
	return r.c.ttl(e.Value)
}

func (r refresher) RefreshAfterUpdate(e otter.Entry[string, *Entry], _ *Entry) time.Duration {
	return r.c.ttl(e.Value)
}

func (r refresher) RefreshAfterReload(e otter.Entry[string, *Entry], _ *Entry) time.Duration {
	return r.c.ttl(e.Value)
}

func (r refresher) RefreshAfterReloadFailure(otter.Entry[string, *Entry], error) time.Duration {
	return r.c.opt.RetryInterval
}

func (c *Cache) onDeletion(ev otter.DeletionEvent[string, *Entry]) {
	if ev.WasEvicted() {
		c.counter.RecordEviction(weigh(ev.Key, ev.Value))
	}
	if p := ev.Value.placement; p != nil {
		c.deps.remove(ev.Key, ev.Value.gen, p.Deps)
	}
}

// Invalidate drops the entry for id, so the next lookup reads the store.
func (c *Cache) Invalidate(id string) {
	if _, ok := c.c.Invalidate(id); ok {
		c.invalidations.Add(1)
	}
}

// InvalidateDep drops every entry whose placement declared dep.
func (c *Cache) InvalidateDep(dep string) {
	for _, id := range c.deps.take(dep) {
		c.Invalidate(id)
	}
}

// Revalidate marks every entry as due for a refresh: its next lookup
// serves it and reads the store in the background (one read per id), as
// for an entry past its TTL; while the store fails it keeps being served,
// up to StaleIfError. Entries loaded from here on are fresh as usual.
func (c *Cache) Revalidate() {
	c.staleGen.Store(c.gen.Load())
	for id := range c.c.Keys() {
		c.c.SetRefreshableAfter(id, time.Nanosecond) // now (0 would mean "never")
	}
	c.revalidations.Add(1)
}

// InvalidateAll drops every entry.
func (c *Cache) InvalidateAll() {
	n := c.c.EstimatedSize()
	c.c.InvalidateAll()
	c.invalidations.Add(uint64(n))
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	s := c.counter.Snapshot()
	open := 0
	if c.opt.BreakerFailures > 0 {
		t := now()
		for i := range c.shards {
			if t < c.shards[i].openUntil.Load() {
				open++
			}
		}
	}
	return Stats{
		Hits:          s.Hits,
		Misses:        s.Misses,
		Stale:         c.stale.Load(),
		Loads:         s.LoadSuccesses,
		LoadErrors:    s.LoadFailures,
		RefreshErrors: c.refreshErrors.Load(),
		Evictions:     s.Evictions,
		Invalidations: c.invalidations.Load(),
		Revalidations: c.revalidations.Load(),
		ShortCircuits: c.shortCircuits.Load(),
		LoadsRefused:  c.loadsRefused.Load(),
		BreakerOpen:   open > 0,
		OpenShards:    open,
		Entries:       c.c.EstimatedSize(),
		Bytes:         c.c.WeightedSize(),
		LoadTime:      s.TotalLoadTime,
	}
}

// Get returns a copy of the placement with the given id, through the cache.
func (c *Cache) Get(ctx context.Context, id string) (*tsubame.Placement, error) {
	if err := tsubame.ValidID(id); err != nil {
		return nil, err
	}
	e, err := c.Lookup(ctx, []byte(id))
	if err != nil {
		return nil, err
	}
	if !e.Found {
		return nil, tsubame.Errorf(tsubame.ENOTFOUND, "placement %q not found", id)
	}
	return e.placement.Clone(), nil
}

// Put writes p to the store, then drops its cached entry.
func (c *Cache) Put(ctx context.Context, p *tsubame.Placement) error {
	err := c.store.Put(ctx, p)
	if err == nil {
		c.Invalidate(p.ID)
	}
	return err
}

// PutMany writes ps to the store, then drops their cached entries.
func (c *Cache) PutMany(ctx context.Context, ps []*tsubame.Placement) error {
	err := c.store.PutMany(ctx, ps)
	if err == nil {
		for _, p := range ps {
			c.Invalidate(p.ID)
		}
	}
	return err
}

// Delete removes the placement from the store, then drops its cached entry.
func (c *Cache) Delete(ctx context.Context, id string) error {
	err := c.store.Delete(ctx, id)
	if err == nil || tsubame.IsNotFound(err) {
		c.Invalidate(id)
	}
	return err
}

// List reads the store directly: pages are not cached.
func (c *Cache) List(ctx context.Context, after string, limit int) ([]*tsubame.Placement, error) {
	return c.store.List(ctx, after, limit)
}

// IDs reads the store directly.
func (c *Cache) IDs(ctx context.Context) ([]string, error) { return c.store.IDs(ctx) }

// Close stops the cache's goroutines and closes the store.
func (c *Cache) Close() error {
	c.c.InvalidateAll()
	c.c.StopAllGoroutines()
	return c.store.Close()
}

// depIndex maps dependency keys to the ids whose cached placements declared
// them. Each registration carries the generation of the load that made it,
// so the deletion of an old entry never removes a newer entry's registration.
// It is touched on loads, deletions and InvalidateDep, never on hits.
type depIndex struct {
	mu sync.Mutex
	m  map[string]map[string]uint64 // dep -> id -> gen
}

func (d *depIndex) add(id string, gen uint64, deps []string) {
	if len(deps) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dep := range deps {
		ids := d.m[dep]
		if ids == nil {
			ids = make(map[string]uint64)
			d.m[dep] = ids
		}
		ids[id] = gen
	}
}

func (d *depIndex) remove(id string, gen uint64, deps []string) {
	if len(deps) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dep := range deps {
		if ids := d.m[dep]; ids != nil && ids[id] == gen {
			delete(ids, id)
			if len(ids) == 0 {
				delete(d.m, dep)
			}
		}
	}
}

func (d *depIndex) take(dep string) []string {
	d.mu.Lock()
	ids := d.m[dep]
	delete(d.m, dep)
	d.mu.Unlock()
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	return out
}

// otterLogger routes otter's internal reports (failed background
// refreshes, recovered panics) to the process logger, which bounds repeats
// (a store that is down fails one refresh per key per RetryInterval; each
// is counted in Stats).
type otterLogger struct{ l *slog.Logger }

func (o *otterLogger) Warn(ctx context.Context, msg string, err error) {
	o.l.WarnContext(ctx, "cache: "+msg, "err", err)
}

func (o *otterLogger) Error(ctx context.Context, msg string, err error) {
	o.l.ErrorContext(ctx, "cache: "+msg, "err", err)
}

// Hottest returns up to n ids of found placements, the most used first (by
// the eviction policy's frequency estimate), for warming a restarted node.
func (c *Cache) Hottest(n int) []string {
	out := make([]string, 0, min(n, c.c.EstimatedSize()))
	for e := range c.c.Hottest() {
		if len(out) >= n {
			break
		}
		if e.Value.Found {
			out = append(out, e.Key)
		}
	}
	return out
}

// Warm loads ids into the cache, workers at a time, until done or ctx ends,
// so a restarted node does not send its whole traffic to the store at once.
// It returns how many ids were loaded.
func (c *Cache) Warm(ctx context.Context, ids []string, workers int) int {
	var loaded atomic.Int64
	next := make(chan string)
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for id := range next {
				if _, err := c.Lookup(ctx, []byte(id)); err == nil {
					loaded.Add(1)
				}
			}
		})
	}
feed:
	for _, id := range ids {
		select {
		case next <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return int(loaded.Load())
}

// Placement returns the cached placement, nil for an unknown id. It is
// shared by every reader and must not be modified; a new Entry (a new
// pointer) replaces it when the placement changes.
func (e *Entry) Placement() *tsubame.Placement { return e.placement }
