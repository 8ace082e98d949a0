package ads

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
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
