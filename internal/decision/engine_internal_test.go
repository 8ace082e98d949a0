package decision

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/campaigngen"
	"tsubame/internal/store/memory"
)

// countingStore counts the whole-set reads of a campaign store.
type countingStore struct {
	tsubame.CampaignStore
	snapshots atomic.Int64
}

func (s *countingStore) Snapshot(ctx context.Context) (*tsubame.CampaignSet, uint64, error) {
	s.snapshots.Add(1)
	return s.CampaignStore.Snapshot(ctx)
}

// TestRecompileForTheClockReadsNoSet: flights end with the clock, so the
// engine refreshes at the same version (Run, when a flight's start or end
// has passed); it patches the index over the set it read last, and reads
// the store's again only when the version moves. An idle node reads a
// version per refresh, not a million line items.
func TestRecompileForTheClockReadsNoSet(t *testing.T) {
	ctx := t.Context()
	store := &countingStore{CampaignStore: memory.New()}
	end := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	set := &tsubame.CampaignSet{
		Advertisers: []*tsubame.Advertiser{{ID: "a", Name: "A"}},
		Campaigns:   []*tsubame.Campaign{{ID: "c", Advertiser: "a"}},
		Creatives: []*tsubame.Creative{{ID: "cr", Advertiser: "a", Format: tsubame.FormatBanner, W: 1, H: 1,
			Image: "https://cdn.example.com/a.png", Click: "https://example.com/", Status: tsubame.StatusApproved}},
		LineItems: []*tsubame.LineItem{
			{ID: "ends", Campaign: "c", Priority: 1, Weight: 1, Creatives: []string{"cr"}, End: end},
			{ID: "stays", Campaign: "c", Priority: 1, Weight: 1, Creatives: []string{"cr"}},
		},
	}
	if err := store.ReplaceAll(ctx, set); err != nil {
		t.Fatal(err)
	}
	e := NewEngine(store, EngineOptions{})
	if _, err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.Index().Len(); n != 2 || store.snapshots.Load() != 1 {
		t.Fatalf("%d line items after %d reads, want 2 after 1", n, store.snapshots.Load())
	}
	if built, err := e.Refresh(ctx); built || err != nil {
		t.Fatalf("a refresh at the same version compiled (%v, %v)", built, err)
	}
	for time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond) // until the flight is over
	}
	e.mu.Lock()
	e.stale = true // what Run does when the index is Stale
	e.mu.Unlock()
	if built, err := e.Refresh(ctx); !built || err != nil {
		t.Fatalf("the recompile for the clock did not compile (%v, %v)", built, err)
	}
	if _, ok := e.Index().LineByID("ends"); ok || e.Index().Len() != 1 {
		t.Fatalf("%d line items after the flight's end, want 1 (stays)", e.Index().Len())
	}
	if n := store.snapshots.Load(); n != 1 {
		t.Fatalf("the recompile for the clock read the set: %d reads, want 1", n)
	}
	li := *set.LineItems[1]
	li.Weight = 5
	if err := store.PutObject(ctx, &li); err != nil {
		t.Fatal(err)
	}
	if built, err := e.Refresh(ctx); !built || err != nil {
		t.Fatalf("a write did not recompile (%v, %v)", built, err)
	}
	if l, ok := e.Index().LineByID("stays"); !ok || l.Weight != 5 || store.snapshots.Load() != 2 {
		t.Fatalf("after a write: %v in the index, %d reads; want weight 5 after 2 reads", ok, store.snapshots.Load())
	}
}

// loggingStore logs the writes of a memory store as Redis does
// (tsubame.CampaignChanges): the objects each changed, by version.
type loggingStore struct {
	tsubame.CampaignStore
	mu  sync.Mutex
	log []loggedWrite
}

type loggedWrite struct {
	version uint64
	kind    tsubame.CampaignKind
	id      string
}

func (s *loggingStore) PutObject(ctx context.Context, o tsubame.CampaignObject) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.CampaignStore.PutObject(ctx, o); err != nil {
		return err
	}
	v, err := s.CampaignStore.CampaignsVersion(ctx)
	s.log = append(s.log, loggedWrite{v, o.Kind(), o.ObjectID()})
	return err
}

func (s *loggingStore) ChangedSince(ctx context.Context, version uint64) ([]tsubame.CampaignChange, uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, err := s.CampaignStore.CampaignsVersion(ctx)
	if err != nil {
		return nil, 0, false, err
	}
	var out []tsubame.CampaignChange
	for _, w := range s.log {
		if w.version > version {
			o, err := s.CampaignStore.GetObject(ctx, w.kind, w.id)
			if err != nil {
				return nil, 0, false, err
			}
			out = append(out, tsubame.CampaignChange{Kind: w.kind, ID: w.id, Object: o})
		}
	}
	return out, now, true, nil
}

// TestCompileBehindThePatches: writes one line item at a time, each
// patched in; once the patches crowd the index, the engine compiles the
// set again off the lock and brings it up to date with the writes made
// meanwhile, so that it never runs out of room and compiles under the
// lock (which would hold each change back for a compile's seconds). The
// index ends as the store's set.
func TestCompileBehindThePatches(t *testing.T) {
	ctx := t.Context()
	store := &loggingStore{CampaignStore: memory.New()}
	set := campaigngen.Set(4, campaigngen.Size{LineItems: 400}, time.Now())
	if err := store.ReplaceAll(ctx, set); err != nil {
		t.Fatal(err)
	}
	e := NewEngine(store, EngineOptions{})
	if _, err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	room := 400/8 + 64
	weights := map[string]int{}
	for i := range 4 * room {
		li := set.LineItems[i%len(set.LineItems)].Clone()
		li.Weight = 1 + i
		weights[li.ID] = li.Weight
		if err := store.PutObject(ctx, li); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			continue // some writes come while a compile runs behind
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			e.mu.Lock()
			behind := e.behind != nil
			e.mu.Unlock()
			if !behind {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the compile behind never ended")
			}
		}
	}
	if c, p, b := e.compiles.Load(), e.patches.Load(), e.behinds.Load(); c != 1 || p != uint64(4*room) || b < 3 {
		t.Fatalf("%d compiles under the lock, %d patches, %d compiles behind; want 1, %d, at least 3", c, p, b, 4*room)
	}
	for id, w := range weights {
		if l, ok := e.Index().LineByID(id); !ok || l.Weight != w {
			t.Fatalf("%s: in the index %v, %+v; want weight %d", id, ok, l, w)
		}
	}
	if n := e.Index().Len(); n != 400 {
		t.Fatalf("%d line items in the index, want 400", n)
	}
}

// An index in use is never newer than the set Set returns: the admin's
// explain reads the set and the index one after the other, and lists no
// candidate of a line item the decision served. The check runs as each
// new index is put in use, before Refresh goes on.
func TestSetIsNeverOlderThanTheIndex(t *testing.T) {
	ctx := t.Context()
	store := memory.New()
	set := &tsubame.CampaignSet{
		Advertisers: []*tsubame.Advertiser{{ID: "a", Name: "A"}},
		Campaigns:   []*tsubame.Campaign{{ID: "c", Advertiser: "a"}},
		Creatives: []*tsubame.Creative{{ID: "cr", Advertiser: "a", Format: tsubame.FormatBanner, W: 1, H: 1,
			Image: "https://cdn.example.com/a.png", Click: "https://example.com/", Status: tsubame.StatusApproved}},
		LineItems: []*tsubame.LineItem{{ID: "li-0", Campaign: "c", Priority: 1, Weight: 1, Creatives: []string{"cr"}}},
	}
	if err := store.ReplaceAll(ctx, set); err != nil {
		t.Fatal(err)
	}
	e := NewEngine(store, EngineOptions{})
	swaps := 0
	e.swapped = func(ix *Index) {
		swaps++
		held, _ := e.Set()
		have := map[string]bool{}
		if held != nil {
			for _, li := range held.LineItems {
				have[li.ID] = true
			}
		}
		for _, l := range ix.lines {
			if !have[l.ID] {
				t.Errorf("swap %d: %s is in the index put in use and not in the engine's set", swaps, l.ID)
			}
		}
	}
	for i := range 5 {
		if i > 0 {
			li := *set.LineItems[0]
			li.ID = "li-" + strconv.Itoa(i)
			if err := store.PutObject(ctx, &li); err != nil {
				t.Fatal(err)
			}
		}
		if built, err := e.Refresh(ctx); !built || err != nil {
			t.Fatalf("refresh %d: %v, %v", i, built, err)
		}
	}
	if swaps != 5 {
		t.Fatalf("%d indexes put in use, want 5", swaps)
	}
}

// refuseAll is Counters that let no line item serve, and that record
// the indexes they are asked to lease for (a warmer).
type refuseAll struct{ warmed *[]*Index }

func (refuseAll) Allow(*Line, *Request, int, time.Time) bool { return false }

func (r refuseAll) Warm(_ context.Context, ix, prev *Index) int {
	if prev == nil {
		*r.warmed = append(*r.warmed, ix)
	}
	return 0
}

// TestPrimedIndexAtTheStoresVersion: a restarted process compiles the set
// its predecessor served before it can read the store (EngineOptions.
// Primed). The first refresh takes that index, without reading the set,
// when the store is at the primed version, and decides with the engine's
// Counters from then on, which lease for it before it serves (Warm) as for
// any first index; at another version it reads the store; a primed
// index whose flights moved with the clock meanwhile is compiled again
// from the primed set, still without a read.
func TestPrimedIndexAtTheStoresVersion(t *testing.T) {
	ctx := t.Context()
	newSet := func(start time.Time) *tsubame.CampaignSet {
		return &tsubame.CampaignSet{
			Advertisers: []*tsubame.Advertiser{{ID: "a", Name: "A"}},
			Campaigns:   []*tsubame.Campaign{{ID: "c", Advertiser: "a"}},
			Creatives: []*tsubame.Creative{{ID: "cr", Advertiser: "a", Format: tsubame.FormatBanner, W: 1, H: 1,
				Image: "https://cdn.example.com/a.png", Click: "https://example.com/", Status: tsubame.StatusApproved}},
			LineItems: []*tsubame.LineItem{
				{ID: "now", Campaign: "c", Priority: 1, Weight: 1, Creatives: []string{"cr"}},
				{ID: "soon", Campaign: "c", Priority: 2, Weight: 1, Creatives: []string{"cr"}, Start: start},
			},
		}
	}
	open := func(t *testing.T, set *tsubame.CampaignSet) (*countingStore, uint64) {
		t.Helper()
		store := &countingStore{CampaignStore: memory.New()}
		if err := store.ReplaceAll(ctx, set); err != nil {
			t.Fatal(err)
		}
		v, err := store.CampaignsVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return store, v
	}
	decide := func(e *Engine) int {
		return len(e.Index().Decide(&Request{Placement: "top"}, nil, nil))
	}

	t.Run("at its version", func(t *testing.T) {
		set := newSet(time.Now().Add(time.Hour))
		store, v := open(t, set)
		p, err := Prime(set, v)
		if err != nil {
			t.Fatal(err)
		}
		var warmed []*Index
		e := NewEngine(store, EngineOptions{Counters: refuseAll{&warmed}, Primed: p})
		if built, err := e.Refresh(ctx); !built || err != nil {
			t.Fatalf("first refresh: %v, %v", built, err)
		}
		if e.Index() != p.idx || store.snapshots.Load() != 0 {
			t.Fatalf("the primed index is not in use (%d reads of the set)", store.snapshots.Load())
		}
		if len(warmed) != 1 || warmed[0] != p.idx {
			t.Fatalf("leased for %d first indexes, want the primed one", len(warmed))
		}
		if st := e.Stats(); st.Compiles != 1 || st.Patches != 0 {
			t.Fatalf("stats %+v: the primed index is a compile", st)
		}
		if held, hv := e.Set(); held != set || hv != v {
			t.Fatalf("held set %p at %d, want the primed %p at %d", held, hv, set, v)
		}
		if n := decide(e); n != 0 {
			t.Fatalf("%d decisions with Counters that refuse all: the primed index does not ask the engine's", n)
		}
		li := *set.LineItems[0]
		li.Weight = 3
		if err := store.PutObject(ctx, &li); err != nil {
			t.Fatal(err)
		}
		if built, err := e.Refresh(ctx); !built || err != nil || store.snapshots.Load() != 1 {
			t.Fatalf("after a write: %v, %v, %d reads; want a compile from 1 read", built, err, store.snapshots.Load())
		}
	})

	t.Run("at another version", func(t *testing.T) {
		set := newSet(time.Now().Add(time.Hour))
		store, v := open(t, set)
		p, err := Prime(set, v-1)
		if err != nil {
			t.Fatal(err)
		}
		e := NewEngine(store, EngineOptions{Primed: p})
		if built, err := e.Refresh(ctx); !built || err != nil {
			t.Fatalf("first refresh: %v, %v", built, err)
		}
		if e.Index() == p.idx || store.snapshots.Load() != 1 {
			t.Fatalf("the primed index of version %d is in use at the store's %d (%d reads)", v-1, v, store.snapshots.Load())
		}
		if n := decide(e); n != 1 {
			t.Fatalf("%d decisions, want 1", n)
		}
	})

	t.Run("moved with the clock", func(t *testing.T) {
		start := time.Now().Add(300 * time.Millisecond).Truncate(time.Second).Add(time.Second)
		set := newSet(start)
		store, v := open(t, set)
		p, err := Prime(set, v)
		if err != nil {
			t.Fatal(err)
		}
		for time.Now().Before(start) {
			time.Sleep(50 * time.Millisecond) // until "soon" has started
		}
		e := NewEngine(store, EngineOptions{Primed: p})
		if built, err := e.Refresh(ctx); !built || err != nil {
			t.Fatalf("first refresh: %v, %v", built, err)
		}
		if e.Index() == p.idx || store.snapshots.Load() != 0 {
			t.Fatalf("the stale primed index is in use, or the set was read (%d reads)", store.snapshots.Load())
		}
		if _, ok := e.Index().LineByID("soon"); !ok {
			t.Fatal(`"soon", started since the primed compile, is not in the index`)
		}
	})
}
