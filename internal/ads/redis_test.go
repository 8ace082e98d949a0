package ads_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/campaigngen"
	"tsubame/internal/decision"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
)

// Three nodes, each with its own connection to one real Redis: every
// impression and click, fetched 8 times at once across them, is counted
// exactly once.
func TestRepeatsCountOnceAcrossNodesOnRedis(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	f := newFixture(t)
	var nodes []*node
	for i := range 3 {
		st, err := redis.Open(redis.Options{Addrs: []string{srv.Addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if i == 0 {
			set, _, err := f.store.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := st.ReplaceAll(context.Background(), set); err != nil {
				t.Fatal(err)
			}
		}
		nodes = append(nodes, f.startOn(t, st, nodeOpts{}))
	}
	countOnce(t, nodes...)
}

// countingRedis counts the whole-set reads of a Redis store.
type countingRedis struct {
	*redis.Store
	snapshots atomic.Int64
}

func (s *countingRedis) Snapshot(ctx context.Context) (*tsubame.CampaignSet, uint64, error) {
	s.snapshots.Add(1)
	return s.Store.Snapshot(ctx)
}

// Three nodes on one Redis holding 20,000 line items each read the set
// once; a change to one line item reaches every node's index through the
// store's log of writes (the changed object alone), and a whole replace
// makes them read the set again. Each node patches its index with the
// change rather than compiling it whole.
func TestEnginesFollowChangesOnRedis(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	ctx := t.Context()
	now := time.Now()
	set := campaigngen.Set(3, campaigngen.Size{LineItems: 20_000}, now)
	var stores []*countingRedis
	var engines []*decision.Engine
	for i := range 3 {
		st, err := redis.Open(redis.Options{Addrs: []string{srv.Addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if i == 0 {
			if err := st.ReplaceAll(ctx, set); err != nil {
				t.Fatal(err)
			}
		}
		cs := &countingRedis{Store: st}
		stores = append(stores, cs)
		engines = append(engines, decision.NewEngine(cs, decision.EngineOptions{}))
	}
	refreshAll := func() {
		t.Helper()
		for i, e := range engines {
			if _, err := e.Refresh(ctx); err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
		}
	}
	refreshAll()
	li := *set.LineItems[1234]
	li.Weight = 99
	if err := stores[0].PutObject(ctx, &li); err != nil {
		t.Fatal(err)
	}
	if err := stores[1].DeleteObject(ctx, tsubame.KindLineItem, set.LineItems[77].ID); err != nil {
		t.Fatal(err)
	}
	var prev []*decision.Index
	for _, e := range engines {
		prev = append(prev, e.Index())
	}
	refreshAll()
	for i, e := range engines {
		// Patched, not compiled: the changed line item is the one the
		// new index compiled.
		if fresh := slices.Collect(e.Index().Fresh(prev[i])); len(fresh) != 1 || fresh[0].ID != li.ID {
			t.Fatalf("node %d: the index compiled %d line items again for two changes, want the one changed", i, len(fresh))
		}
		l, ok := e.Index().LineByID(li.ID)
		if !ok || l.Weight != 99 {
			t.Fatalf("node %d: line item %s in the index %v, weight %v; want 99", i, li.ID, ok, l)
		}
		if _, ok := e.Index().LineByID(set.LineItems[77].ID); ok || e.Index().Len() != 20_000-1 {
			t.Fatalf("node %d: %d line items, the deleted one still in: %v", i, e.Index().Len(), ok)
		}
		if n := stores[i].snapshots.Load(); n != 1 {
			t.Fatalf("node %d read the whole set %d times for two changes, want once", i, n)
		}
	}
	set.LineItems = set.LineItems[:100]
	if err := stores[2].ReplaceAll(ctx, set); err != nil {
		t.Fatal(err)
	}
	refreshAll()
	for i, e := range engines {
		if n := e.Index().Len(); n != 100 || stores[i].snapshots.Load() != 2 {
			t.Fatalf("node %d after a replace: %d line items after %d reads, want 100 after 2", i, n, stores[i].snapshots.Load())
		}
	}
}

// A Redis emptied (FLUSHALL, a restart without persistence) and written
// again starts its versions from zero: the engine that held version 1 of
// the lost set reads the new set at version 1 (or past it, by its log)
// rather than keep the old one.
func TestEngineFollowsAnEmptiedRedis(t *testing.T) {
	for _, past := range []bool{false, true} {
		t.Run(map[bool]string{false: "at the same version", true: "a write past it"}[past], func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := t.Context()
			st, err := redis.Open(redis.Options{Addrs: []string{srv.Addr}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			now := time.Now()
			old, next := campaigngen.Set(1, campaigngen.Size{LineItems: 300}, now), campaigngen.Set(2, campaigngen.Size{LineItems: 200}, now)
			for _, li := range next.LineItems {
				li.ID = "new-" + li.ID
			}
			if err := st.ReplaceAll(ctx, old); err != nil {
				t.Fatal(err)
			}
			e := decision.NewEngine(st, decision.EngineOptions{})
			if _, err := e.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			_, v := e.Set()
			srv.CLI(t, "flushall")
			if err := st.ReplaceAll(ctx, next); err != nil {
				t.Fatal(err)
			}
			if past {
				if err := st.PutObject(ctx, next.Advertisers[0]); err != nil {
					t.Fatal(err)
				}
			} else if nv, _ := st.CampaignsVersion(ctx); nv != v {
				t.Fatalf("the new set is at version %d, the engine's at %d: the case is not made", nv, v)
			}
			if _, err := e.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if _, ok := e.Index().LineByID(next.LineItems[0].ID); !ok || e.Index().Len() != 200 {
				t.Fatalf("after the store was emptied and written again: %d line items, the new set's first in: %v", e.Index().Len(), ok)
			}
		})
	}
}
