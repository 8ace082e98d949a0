package decision

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"tsubame"
)

// Engine keeps the decision index compiled from a CampaignStore: it
// compiles a new one when the store's version moves, off the request path,
// and swaps it in at once. Requests read the index with one atomic load.
type Engine struct {
	store    tsubame.CampaignStore
	counters Counters
	currency string
	log      *slog.Logger

	idx   atomic.Pointer[Index]
	mu    sync.Mutex // serialises Refresh
	stale bool       // under mu: compile even at the same version
	// held is the snapshot idx was compiled from and its version (written
	// under mu; Set reads it without): a recompile for the clock alone
	// (stale, the version unchanged) compiles it again rather than reading
	// the store.
	held  atomic.Pointer[heldSet]
	built atomic.Bool
	// behind is the compile running off the lock when patches crowd the
	// index (nil: none), and since the changes patched in after the set it
	// compiles (under mu): it is patched with them and swapped in.
	behind *behindCompile
	since  []tsubame.CampaignChange
	// Compiles and patches of the index, the compiles behind among them.
	compiles, patches, behinds atomic.Uint64
	// changed wakes Run: a feed's signal, or a write through this process.
	changed chan struct{}
	// primed is EngineOptions.Primed until the first refresh (under mu).
	primed *Primed
	// swapped, when set (by tests), is called with each index as it is
	// put in use, before anything else the refresh does.
	swapped func(*Index)
}

// EngineOptions configure an Engine.
type EngineOptions struct {
	// Counters keep budgets, limits and caps (NoCounters when nil).
	Counters Counters
	// Currency is the account currency (tsubame.DefaultCurrency when
	// empty): a campaign set in another is not compiled, since its amounts
	// would be logged and billed as this one's.
	Currency string
	Log      *slog.Logger
	// Primed, when set, is the first index if the store is still at its
	// version when the first refresh reads it: that refresh then neither
	// reads the set nor compiles it.
	Primed *Primed
}

// Primed is a campaign set, which its caller vouches is the store's at
// version, and its index, compiled before the store could be read: a
// restarted process's, from the set its predecessor served, while the
// predecessor still holds the embedded store's lock (cmd/tsubame's
// handover). Where the store has moved on, the first refresh reads it as
// without.
type Primed struct {
	set     *tsubame.CampaignSet
	version uint64
	idx     *Index
}

// Prime compiles set, the store's at version, for EngineOptions.Primed.
// It fails as Compile does.
func Prime(set *tsubame.CampaignSet, version uint64) (*Primed, error) {
	idx, err := Compile(set, Options{})
	if err != nil {
		return nil, err
	}
	return &Primed{set: set, version: version, idx: idx}, nil
}

// Version is the store's version the primed set is of.
func (p *Primed) Version() uint64 { return p.version }

// NewEngine returns an Engine over store with an empty index; Refresh (or
// Run) compiles the first.
func NewEngine(store tsubame.CampaignStore, opt EngineOptions) *Engine {
	e := &Engine{store: store, counters: opt.Counters, currency: cmp.Or(opt.Currency, tsubame.DefaultCurrency),
		log: opt.Log, changed: make(chan struct{}, 1), primed: opt.Primed}
	empty, _ := Compile(&tsubame.CampaignSet{}, Options{Counters: opt.Counters})
	e.idx.Store(empty)
	return e
}

// Index is the index in use. It is immutable: a request keeps the one it
// loaded to the end.
func (e *Engine) Index() *Index { return e.idx.Load() }

// Set returns the campaign set the index in use was compiled from and the
// store's version it was read at (nil before the first), shared: the
// caller must not modify it or its objects. A caller that compares the
// version with the store's has the stored set without reading it.
// It never waits on a refresh (a compile holds the engine's lock for
// seconds at a million line items).
func (e *Engine) Set() (*tsubame.CampaignSet, uint64) {
	if h := e.held.Load(); h != nil {
		return h.set, h.version
	}
	return nil, 0
}

// heldSet is the set and version Set returns.
type heldSet struct {
	set     *tsubame.CampaignSet
	version uint64
}

// IndexStats are what /metrics shows of the engine's index.
type IndexStats struct {
	LineItems int // in the index in use
	// Compiles of the whole set under the engine's lock (at start, after
	// an import or a gap in the store's log), patches with the writes, and
	// compiles behind the patches (off the lock).
	Compiles, Patches, CompilesBehind uint64
}

// Stats returns the engine's counts. It never waits on a refresh.
func (e *Engine) Stats() IndexStats {
	return IndexStats{LineItems: e.Index().Len(), Compiles: e.compiles.Load(), Patches: e.patches.Load(), CompilesBehind: e.behinds.Load()}
}

// Counters returns the Counters the engine's indexes ask (nil when none
// were given).
func (e *Engine) Counters() Counters { return e.counters }

// Ready reports whether an index has been compiled from the store.
func (e *Engine) Ready() bool { return e.built.Load() }

// Changed tells the engine the store may have changed (a feed's signal or
// a write through this process): Run refreshes at once. It never blocks.
func (e *Engine) Changed() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// warmer is Counters that lease budgets ahead of a new index's first
// decisions (budget.Counters).
type warmer interface {
	Warm(ctx context.Context, ix, prev *Index) int
}

// Refresh builds a new index if the store's version differs from the
// index's (or none was built yet), and reports whether it did. On an error
// the index in use stays. Where the store logs its writes
// (tsubame.CampaignChanges), the index in use is patched with the objects
// that changed (Index.Patch): a change to one line item of a
// million is in use in milliseconds. A whole compile comes at start, after
// an import or a gap in the log, and when the patches have used the room
// the compile left. At the same version, a refresh for the clock (Run's,
// when a flight has started or ended) patches the index with no change:
// an idle node reads one version a refresh, not the whole set.
func (e *Engine) Refresh(ctx context.Context) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, err := e.store.CampaignsVersion(ctx)
	if err != nil {
		return false, err
	}
	whole := false // a Snapshot, not the set held nor the log from it
	_, version := e.Set()
	if e.built.Load() && v == version {
		// The same number may be another set: the store emptied and
		// written again (tsubame.CampaignHistory).
		if h, ok := e.store.(tsubame.CampaignHistory); ok {
			if whole, err = h.HistoryChanged(ctx, v); err != nil {
				return false, err
			}
		}
		if !whole && !e.stale {
			return false, nil
		}
	}
	primed := e.takePrimed(v)
	var set versionedSet
	if primed != nil {
		set = versionedSet{CampaignSet: primed.set, version: v}
	} else if set, err = e.read(ctx, v, whole); err != nil {
		return false, err
	}
	v = cmp.Or(set.version, v)
	if c := cmp.Or(set.Currency, tsubame.DefaultCurrency); c != e.currency {
		return false, tsubame.Errorf(tsubame.EINVALID, "the stored campaigns are in %s and ads.currency is %s: import them in %s (or set ads.currency)", c, e.currency, e.currency)
	}
	start := time.Now()
	how := "compiled"
	var idx *Index
	if set.patch {
		idx, err = e.idx.Load().Patch(set.CampaignSet, set.changes, Options{Counters: e.counters})
		if err != nil && e.log != nil {
			// A whole compile tells what is wrong, or builds it.
			e.log.Warn("cannot patch the decision index; compiling it whole", "version", v, "err", err)
		}
		how = "patched"
	}
	if primed != nil && !primed.idx.Stale(start) {
		idx, how = primed.idx, "compiled from the previous process's campaigns"
		if e.counters != nil {
			idx.counters = e.counters // in use from here on, not before
		}
		e.compiles.Add(1) // a whole compile, made earlier
	} else if idx == nil {
		how = "compiled"
		if idx, err = Compile(set.CampaignSet, Options{Counters: e.counters}); err != nil {
			return false, err
		}
		e.behind, e.since = nil, nil // a compile behind would be older than this one
		e.compiles.Add(1)
	} else {
		e.patches.Add(1)
		if e.behind != nil {
			e.since = append(e.since, set.changes...)
		} else if idx.Crowded() {
			e.behind = &behindCompile{}
			go e.compileBehind(context.WithoutCancel(ctx), e.behind, set.CampaignSet, v)
		}
	}
	level := slog.LevelDebug // a refresh for the clock
	if !e.built.Load() || v != version {
		level = slog.LevelInfo
	}
	w, warm := e.counters.(warmer)
	if warm && !e.built.Load() {
		// The first index: leases for its line items before it serves
		// (and before /readyz says ready).
		w.Warm(ctx, idx, nil)
	}
	// The set before the index it was compiled from: a reader that finds a
	// line item in the index (a decision) then finds it in the set (the
	// admin's explain, its statuses), never an index newer than the set.
	e.held.Store(&heldSet{set.CampaignSet, v})
	e.swap(ctx, idx)
	e.stale = false
	if e.log != nil {
		e.log.Log(ctx, level, "decision index "+how, "version", v, "line_items", idx.Len(), "changes", len(set.changes), "took", time.Since(start).Round(time.Microsecond))
	}
	e.built.Store(true)
	return true, nil
}

// swap puts idx in use (under mu), once the first index is built: it
// serves at once, and the budgets lease for its new line items and
// flights beside it (their first decisions wait for the top-up, or pass
// them over): a slow store never holds a campaign's pause or edit back.
func (e *Engine) swap(ctx context.Context, idx *Index) {
	prev := e.idx.Swap(idx)
	if e.swapped != nil {
		e.swapped(idx)
	}
	if w, ok := e.counters.(warmer); ok && e.built.Load() {
		go w.Warm(context.WithoutCancel(ctx), idx, prev)
	}
}

// takePrimed returns the primed set and index for the first refresh when
// the store is at its version v (under mu), and drops it either way: a
// later refresh reads the store.
func (e *Engine) takePrimed(v uint64) *Primed {
	p := e.primed
	if p == nil || e.built.Load() {
		return nil
	}
	e.primed = nil
	if p.version != v {
		if e.log != nil {
			e.log.Info("the previous process's campaigns are not the store's: reading the store", "version", p.version, "store_version", v)
		}
		return nil
	}
	return p
}

// behindCompile names one compile behind.
type behindCompile struct{}

// compileBehind compiles set, at version v, off the lock: the patches
// since used half the room the last compile left (Index.Crowded),
// and a compile under the lock would hold every change back for its
// seconds (7 s at a million line items). Once done, it is patched with the
// changes made meanwhile and swapped in, unless a compile under the lock
// came first.
func (e *Engine) compileBehind(ctx context.Context, b *behindCompile, set *tsubame.CampaignSet, v uint64) {
	start := time.Now()
	idx, err := Compile(set, Options{Counters: e.counters})
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.behind != b {
		return
	}
	since := e.since
	e.behind, e.since = nil, nil
	if err == nil && len(since) > 0 {
		var nx *Index
		held, _ := e.Set()
		if nx, err = idx.Patch(held, since, Options{Counters: e.counters}); nx == nil && err == nil {
			return // more changes than the room: the next refresh compiles under the lock
		}
		idx = nx
	}
	if err != nil {
		if e.log != nil {
			e.log.Warn("cannot compile the decision index behind the patches; they go on", "version", v, "err", err)
		}
		return
	}
	e.swap(ctx, idx)
	e.behinds.Add(1)
	if e.log != nil {
		e.log.Info("decision index compiled behind the patches", "version", v, "line_items", idx.Len(), "changes_since", len(since), "took", time.Since(start).Round(time.Microsecond))
	}
}

// versionedSet is a set and the version it was read at (0: the version
// read before), and whether it is the index's set with changes made
// (patch): what Patch builds from.
type versionedSet struct {
	*tsubame.CampaignSet
	version uint64
	patch   bool
	changes []tsubame.CampaignChange
}

// read returns the set at version v to compile (under mu): the one read
// last when v is its version (a refresh for the clock); the writes since
// applied to it, where the store logs them; else, or when whole, a
// Snapshot.
func (e *Engine) read(ctx context.Context, v uint64, whole bool) (versionedSet, error) {
	if held, version := e.Set(); held != nil && e.built.Load() && !whole {
		if v == version {
			return versionedSet{CampaignSet: held, patch: true}, nil
		}
		if log, ok := e.store.(tsubame.CampaignChanges); ok {
			changes, now, ok, err := log.ChangedSince(ctx, version)
			if err != nil {
				return versionedSet{}, err
			}
			if ok {
				return versionedSet{held.Apply(changes), now, true, changes}, nil
			}
		}
	}
	set, v, err := e.store.Snapshot(ctx)
	if err != nil {
		return versionedSet{}, err
	}
	return versionedSet{CampaignSet: set, version: v}, nil
}

// Run refreshes every interval and whenever Changed is called, until ctx
// ends. Flights start and end with time, not with writes: when one has
// since the index was built (Index.Stale), the interval also
// refreshes at the same version, so that a line item whose flight has
// ended leaves the index and one whose flight started is leased for.
// Errors are logged, and the index in use stays until a refresh
// succeeds.
func (e *Engine) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.changed:
		}
		if e.idx.Load().Stale(time.Now()) {
			e.mu.Lock()
			e.stale = true // flights move with the clock
			e.mu.Unlock()
		}
		_, err := e.Refresh(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing && e.log != nil {
				e.log.Error("cannot refresh the decision index; serving the one in use", "err", err)
			}
			failing = true
		case err == nil:
			if failing && e.log != nil {
				e.log.Info("decision index refreshes again")
			}
			failing = false
		}
	}
}
