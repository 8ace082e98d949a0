package redis_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/campaigngen"
	"tsubame/internal/store/redis/redistest"
	"tsubame/internal/store/storetest"
)

// commandStats returns Redis's count of calls per command (INFO
// commandstats), lower-case names without the cmdstat_ prefix.
func commandStats(t *testing.T, srv *redistest.Server) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, line := range strings.Split(srv.CLI(t, "info", "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(calls)
	}
	return out
}

// TestCampaignSetInPages: no command reads or writes the whole set, so
// that an import or a node's read of a large set never holds Redis (and
// the budgets and caps beside it): 6,000 line items are written and read
// 500 a command, and the set read is the set written.
func TestCampaignSetInPages(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, "pages:")
	set := campaigngen.Set(1, campaigngen.Size{LineItems: 6_000}, time.Now())
	srv.CLI(t, "config", "resetstat")
	if err := s.ReplaceAll(t.Context(), set); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	set.Sort()
	storetest.SameSet(t, got, set)
	stats := commandStats(t, srv)
	for _, whole := range []string{"hgetall", "hvals", "hkeys"} {
		if stats[whole] > 0 {
			t.Errorf("%s called %d times: a command of the whole hash", whole, stats[whole])
		}
	}
	// 6,000 line items, 300 campaigns, 36 creatives, 12 advertisers: at
	// least 12 + 1 + 1 + 1 pages each way.
	if stats["hset"] < 15 || stats["hscan"] < 15 {
		t.Errorf("%d HSET and %d HSCAN for %d objects: not in pages of 500", stats["hset"], stats["hscan"], set.Len())
	}
	if stats["evalsha"]+stats["eval"] > 2 {
		t.Errorf("%d scripts for one import and one read", stats["evalsha"]+stats["eval"])
	}
}

// TestChangedSince: the log tells a node that holds the set at a version
// what changed since, each object once at its state now, and says when
// the node must read the whole set again (a replace since, or a log that
// no longer reaches back).
func TestChangedSince(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, "log:")
	ctx := t.Context()
	set := storetest.FullCampaignSet()
	if err := s.ReplaceAll(ctx, set); err != nil {
		t.Fatal(err)
	}
	v0, err := s.CampaignsVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if changes, v, ok, err := s.ChangedSince(ctx, v0); err != nil || !ok || len(changes) != 0 || v != v0 {
		t.Fatalf("nothing written: %v changes, version %d, %v, %v", changes, v, ok, err)
	}
	li := *set.LineItems[0]
	li.Weight = 7
	for range 2 { // one object written twice
		if err := s.PutObject(ctx, &li); err != nil {
			t.Fatal(err)
		}
	}
	adv := &tsubame.Advertiser{ID: "new-adv", Name: "New"}
	if err := s.PutObject(ctx, adv); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteObject(ctx, tsubame.KindAdvertiser, "new-adv"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutObject(ctx, &tsubame.Advertiser{ID: "kept", Name: "Kept"}); err != nil {
		t.Fatal(err)
	}
	changes, v, ok, err := s.ChangedSince(ctx, v0)
	if err != nil || !ok || v != v0+5 {
		t.Fatalf("version %d (want %d), %v, %v", v, v0+5, ok, err)
	}
	var got []string
	for _, c := range changes {
		desc := fmt.Sprintf("%s %s deleted", c.Kind, c.ID)
		if c.Object != nil {
			desc = fmt.Sprintf("%s %s", c.Kind, c.ID)
		}
		got = append(got, desc)
		if l, isLine := c.Object.(*tsubame.LineItem); isLine && l.Weight != 7 {
			t.Errorf("line item %s read at weight %d, want 7", l.ID, l.Weight)
		}
	}
	want := []string{"advertiser kept", "advertiser new-adv deleted", "line_item " + li.ID}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	// Applied to the set read at v0, they make the set read now.
	old, _, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applied := set.Apply(changes)
	applied.Sort()
	storetest.SameSet(t, applied, old) // the set at v0 with the changes is the set now

	// A replace since: read the whole set.
	if err := s.ReplaceAll(ctx, set); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := s.ChangedSince(ctx, v); ok || err != nil {
		t.Fatalf("a replace since: ok %v, %v; want false", ok, err)
	}
	// A log trimmed past the version: read the whole set.
	v, _ = s.CampaignsVersion(ctx)
	for i := range 3 {
		if err := s.PutObject(ctx, &tsubame.Advertiser{ID: fmt.Sprint("a", i), Name: "A"}); err != nil {
			t.Fatal(err)
		}
	}
	srv.CLI(t, "xtrim", "log:{log:campaigns}:log", "maxlen", "1")
	if _, _, ok, err := s.ChangedSince(ctx, v); ok || err != nil {
		t.Fatalf("a log trimmed past the version: ok %v, %v; want false", ok, err)
	}
	if _, _, ok, err := s.ChangedSince(ctx, v+2); !ok || err != nil {
		t.Fatalf("the log's last write: ok %v, %v; want true", ok, err)
	}
}

// A write of one object reads the few objects it names, not the set:
// pausing one of 6,000 line items scans nothing, and a write that breaks
// a reference is still refused; a campaign moved to another advertiser is
// checked against the whole set (its line items' creatives).
func TestPutReadsItsNeighbours(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, "put:")
	ctx := t.Context()
	set := campaigngen.Set(1, campaigngen.Size{LineItems: 6_000}, time.Now())
	if err := s.ReplaceAll(ctx, set); err != nil {
		t.Fatal(err)
	}
	srv.CLI(t, "config", "resetstat")
	li := *set.LineItems[4321]
	li.Status = tsubame.StatusPaused
	if err := s.PutObject(ctx, &li); err != nil {
		t.Fatal(err)
	}
	if stats := commandStats(t, srv); stats["hscan"] > 0 || stats["hmget"] > 3 {
		t.Fatalf("a line item's pause read %d pages of the set and %d HMGETs", stats["hscan"], stats["hmget"])
	}
	got, err := s.GetObject(ctx, tsubame.KindLineItem, li.ID)
	if err != nil || got.(*tsubame.LineItem).Status != tsubame.StatusPaused {
		t.Fatalf("read back %+v, %v", got, err)
	}
	// A line item's delete reads it alone too (nothing names a line item).
	srv.CLI(t, "config", "resetstat")
	gone := set.LineItems[1234].ID
	if err := s.DeleteObject(ctx, tsubame.KindLineItem, gone); err != nil {
		t.Fatal(err)
	}
	if stats := commandStats(t, srv); stats["hscan"] > 0 || stats["hmget"] > 1 {
		t.Fatalf("a line item's delete read %d pages of the set and %d HMGETs", stats["hscan"], stats["hmget"])
	}
	if _, err := s.GetObject(ctx, tsubame.KindLineItem, gone); tsubame.ErrorCode(err) != tsubame.ENOTFOUND {
		t.Fatalf("the deleted line item reads back: %v", err)
	}
	if err := s.DeleteObject(ctx, tsubame.KindLineItem, gone); tsubame.ErrorCode(err) != tsubame.ENOTFOUND {
		t.Fatalf("a second delete: %v, want ENOTFOUND", err)
	}
	bad := li
	bad.Creatives = []string{set.Creatives[0].ID} // another advertiser's, unless the same
	if set.Creatives[0].Advertiser == set.Campaigns[0].Advertiser {
		bad.Creatives = []string{set.Creatives[len(set.Creatives)-1].ID}
	}
	bad.Campaign = set.Campaigns[0].ID
	if err := s.PutObject(ctx, &bad); tsubame.ErrorCode(err) != tsubame.EINVALID || !strings.Contains(err.Error(), "belongs to advertiser") {
		t.Fatalf("a creative of another advertiser: %v", err)
	}
	bad.Campaign = "no-such-campaign"
	if err := s.PutObject(ctx, &bad); tsubame.ErrorCode(err) != tsubame.EINVALID || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("a campaign that does not exist: %v", err)
	}
	// A campaign with line items, moved to another advertiser: its line
	// items' creatives are the old advertiser's.
	var camp tsubame.Campaign
	for _, c := range set.Campaigns {
		if c.ID == set.LineItems[0].Campaign {
			camp = *c
		}
	}
	camp.Advertiser = set.Advertisers[(1+advIndex(set, camp.Advertiser))%len(set.Advertisers)].ID
	if err := s.PutObject(ctx, &camp); tsubame.ErrorCode(err) != tsubame.EINVALID || !strings.Contains(err.Error(), "belongs to advertiser") {
		t.Fatalf("a campaign moved away from its line items' creatives: %v", err)
	}
}

func advIndex(set *tsubame.CampaignSet, id string) int {
	for i, a := range set.Advertisers {
		if a.ID == id {
			return i
		}
	}
	return 0
}

// The log is read in pages: 1,100 writes since a version (more than two
// pages of 500) are all found, each object once.
func TestChangedSinceAcrossPages(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, "pages:")
	ctx := t.Context()
	if err := s.ReplaceAll(ctx, storetest.FullCampaignSet()); err != nil {
		t.Fatal(err)
	}
	v0, err := s.CampaignsVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const writes = 1_100
	for i := range writes {
		if err := s.PutObject(ctx, &tsubame.Advertiser{ID: fmt.Sprint("a-", i%1_050), Name: fmt.Sprint("A", i)}); err != nil {
			t.Fatal(err)
		}
	}
	changes, v, ok, err := s.ChangedSince(ctx, v0)
	if err != nil || !ok || v != v0+writes || len(changes) != 1_050 {
		t.Fatalf("%d changes at version %d (want 1050 at %d), %v, %v", len(changes), v, v0+writes, ok, err)
	}
	for _, c := range changes {
		if a, isAdv := c.Object.(*tsubame.Advertiser); !isAdv || (a.ID == "a-7" && a.Name != "A1057") {
			t.Fatalf("change %+v", c)
		}
	}
}

// TestWholeChecksUseTheCopy: a delete of a campaign (checked against every
// line item) is checked against the process's copy of the set brought to
// the store's version with the log, without reading the set: a copy behind
// the store, or holding an object newer than its version, still finds the
// line item moved onto the campaign since; a copy the log cannot bring to
// the store's version is not used.
func TestWholeChecksUseTheCopy(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, "copy:")
	ctx := t.Context()
	set := campaigngen.Set(1, campaigngen.Size{LineItems: 6_000}, time.Now())
	if err := s.ReplaceAll(ctx, set); err != nil {
		t.Fatal(err)
	}
	before, v0, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// An empty campaign of the first line item's advertiser, then that
	// line item moved onto it.
	li := *set.LineItems[0]
	var camp tsubame.Campaign
	for _, c := range set.Campaigns {
		if c.ID == li.Campaign {
			camp = *c
		}
	}
	camp.ID = "empty-then-used"
	if err := s.PutObject(ctx, &camp); err != nil {
		t.Fatal(err)
	}
	li.Campaign = camp.ID
	if err := s.PutObject(ctx, &li); err != nil {
		t.Fatal(err)
	}
	after, _, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		held  *tsubame.CampaignSet
		at    uint64
		whole bool // read the set rather than use the copy
	}{
		{"a copy two writes behind", before, v0, false},
		{"a copy holding objects newer than its version", after, v0, false},
		{"a copy from a version the store never reached", before, v0 + 1_000_000, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.UseCampaignCopy(func() (*tsubame.CampaignSet, uint64) { return c.held, c.at })
			srv.CLI(t, "config", "resetstat")
			err := s.DeleteObject(ctx, tsubame.KindCampaign, camp.ID)
			if tsubame.ErrorCode(err) != tsubame.ECONFLICT || !strings.Contains(err.Error(), li.ID) {
				t.Fatalf("deleting a campaign with a line item: %v, want ECONFLICT naming %q", err, li.ID)
			}
			if scans := commandStats(t, srv)["hscan"]; (scans > 0) != c.whole {
				t.Fatalf("%d pages of the set read (whole read expected: %v)", scans, c.whole)
			}
		})
	}
	// Once the line item moves back, the campaign goes, checked on the copy.
	s.UseCampaignCopy(func() (*tsubame.CampaignSet, uint64) { return before, v0 })
	if err := s.PutObject(ctx, set.LineItems[0]); err != nil {
		t.Fatal(err)
	}
	srv.CLI(t, "config", "resetstat")
	if err := s.DeleteObject(ctx, tsubame.KindCampaign, camp.ID); err != nil {
		t.Fatal(err)
	}
	if scans := commandStats(t, srv)["hscan"]; scans > 0 {
		t.Fatalf("the delete read %d pages of the set", scans)
	}
	if _, err := s.GetObject(ctx, tsubame.KindCampaign, camp.ID); tsubame.ErrorCode(err) != tsubame.ENOTFOUND {
		t.Fatalf("the deleted campaign reads back: %v", err)
	}
	// A campaign still used is refused on the copy too.
	used := set.LineItems[1].Campaign
	if err := s.DeleteObject(ctx, tsubame.KindCampaign, used); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
		t.Fatalf("deleting a used campaign: %v, want ECONFLICT", err)
	}
}

// TestCopyOfAnotherHistory: a copy at version v of a history Redis lost
// (emptied: FLUSHALL, a restart without persistence) is not used once the
// new history reaches v, or passes it without a replace after v: the same
// number is another set. The campaign the new history's line item names
// is not deleted.
func TestCopyOfAnotherHistory(t *testing.T) {
	for _, past := range []bool{false, true} {
		t.Run(map[bool]string{false: "at the copy's version", true: "one write past it"}[past], func(t *testing.T) {
			srv := redistest.Start(t)
			s := open(t, []string{srv.Addr}, "history:")
			ctx := t.Context()
			set := campaigngen.Set(1, campaigngen.Size{LineItems: 50}, time.Now())
			var empty tsubame.Campaign
			for _, c := range set.Campaigns {
				if c.ID == set.LineItems[0].Campaign {
					empty = *c
				}
			}
			empty.ID = "empty"
			set.Campaigns = append(set.Campaigns, &empty)
			if err := s.ReplaceAll(ctx, set); err != nil {
				t.Fatal(err)
			}
			held, v, err := s.Snapshot(ctx) // what the engine holds
			if err != nil {
				t.Fatal(err)
			}
			s.UseCampaignCopy(func() (*tsubame.CampaignSet, uint64) { return held, v })
			srv.CLI(t, "flushall")
			again := set.Clone()
			again.LineItems[0].Campaign = empty.ID // the new history uses it
			if err := s.ReplaceAll(ctx, again); err != nil {
				t.Fatal(err)
			}
			if past {
				if err := s.PutObject(ctx, again.Advertisers[0]); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.DeleteObject(ctx, tsubame.KindCampaign, empty.ID); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
				t.Fatalf("deleting a campaign the new history's line item names: %v, want ECONFLICT", err)
			}
		})
	}
}
