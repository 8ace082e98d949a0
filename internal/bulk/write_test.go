package bulk_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/bulk"
	"tsubame/internal/campaigngen"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
	"tsubame/internal/store/storetest"
)

// meanwhile is a Redis store on which another node writes right after an
// import read the set: while the import checks and writes its file.
type meanwhile struct {
	*redis.Store
	write func()
}

func (m *meanwhile) Snapshot(ctx context.Context) (*tsubame.CampaignSet, uint64, error) {
	set, v, err := m.Store.Snapshot(ctx)
	if m.write != nil {
		m.write()
		m.write = nil
	}
	return set, v, err
}

// TestWriteKeepsWritesMadeMeanwhile: an import on Redis never undoes a
// write another node made while the file was checked and written, and is
// not refused for one it does not touch: a merge is resolved again with
// it and written (the staged objects it changed written again, not the
// file), a replace keeps another node's delete of an object the file does
// not name; a write to an object the file names, or one a replace would
// remove, refuses the import (ECONFLICT naming it) and leaves the store as
// that write left it.
func TestWriteKeepsWritesMadeMeanwhile(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redis.Open(redis.Options{Addrs: []string{srv.Addr}, KeyPrefix: "meanwhile:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	stored := campaigngen.Set(1, campaigngen.Size{LineItems: 6_000}, time.Now())
	reset := func(t *testing.T) {
		t.Helper()
		if err := st.ReplaceAll(ctx, stored); err != nil {
			t.Fatal(err)
		}
	}
	// The file: line item 0 re-weighted, and a new line item on campaign
	// 1's first line item's campaign.
	edited := *stored.LineItems[0]
	edited.Weight = edited.Weight%100 + 1
	added := *stored.LineItems[1]
	added.ID = "li-added"
	file := func(t *testing.T, set *tsubame.CampaignSet) *bulk.CampaignFile {
		t.Helper()
		b, err := json.Marshal(set)
		if err != nil {
			t.Fatal(err)
		}
		f, err := bulk.ReadCampaigns(strings.NewReader(string(b)), "edit.json", bulk.CampaignsJSON)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	edit := file(t, &tsubame.CampaignSet{LineItems: []*tsubame.LineItem{&edited, &added}})
	paused := func(li *tsubame.LineItem) *tsubame.LineItem {
		p := *li
		p.Status = tsubame.StatusPaused
		return &p
	}
	put := func(o tsubame.CampaignObject) func() {
		return func() {
			if err := st.PutObject(ctx, o); err != nil {
				t.Error(err)
			}
		}
	}
	var unusedCampaign tsubame.Campaign // line item 1's campaign's twin
	for _, c := range stored.Campaigns {
		if c.ID == stored.LineItems[1].Campaign {
			unusedCampaign = *c
		}
	}
	unusedCampaign.ID = "camp-unused"

	t.Run("a merge keeps another node's writes", func(t *testing.T) {
		reset(t)
		other := paused(stored.LineItems[2])
		newCampaign := unusedCampaign
		newCampaign.ID = "camp-new-meanwhile"
		srv.CLI(t, "config", "resetstat")
		m := &meanwhile{Store: st, write: func() { put(other)(); put(&newCampaign)() }}
		if _, err := edit.Write(ctx, m, false); err != nil {
			t.Fatal(err)
		}
		got, _, err := st.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := stored.Apply([]tsubame.CampaignChange{
			{Kind: tsubame.KindLineItem, ID: edited.ID, Object: &edited},
			{Kind: tsubame.KindLineItem, ID: added.ID, Object: &added},
			{Kind: tsubame.KindLineItem, ID: other.ID, Object: other},
			{Kind: tsubame.KindCampaign, ID: newCampaign.ID, Object: &newCampaign},
		})
		want.Sort()
		storetest.SameSet(t, got, want)
		// 6,001 line items and the rest staged in 16 pages, the other
		// node's two writes, then the two objects they wrote staged again
		// (a page of each kind), not the file (16 pages more).
		if hset := commandCalls(t, srv, "hset"); hset > 16+2+2 {
			t.Fatalf("%d HSETs: the import was written again for two writes made meanwhile", hset)
		}
	})

	for _, c := range []struct {
		name     string
		file     *bulk.CampaignFile
		replace  bool
		write    tsubame.CampaignObject // made meanwhile, and kept
		conflict string                 // named by the ECONFLICT
	}{
		{"a merge changing what another node paused", edit, false, paused(stored.LineItems[0]), edited.ID},
		{"a replace removing what another node added", file(t, stored), true, &unusedCampaign, unusedCampaign.ID},
	} {
		t.Run(c.name, func(t *testing.T) {
			reset(t)
			m := &meanwhile{Store: st, write: put(c.write)}
			_, err := c.file.Write(ctx, m, c.replace)
			if tsubame.ErrorCode(err) != tsubame.ECONFLICT || !strings.Contains(err.Error(), strconv.Quote(c.conflict)) {
				t.Fatalf("got %v, want ECONFLICT naming %q", err, c.conflict)
			}
			got, _, err := st.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := stored.Apply([]tsubame.CampaignChange{{Kind: c.write.Kind(), ID: c.write.ObjectID(), Object: c.write}})
			want.Sort()
			storetest.SameSet(t, got, want)
		})
	}

	t.Run("a replace keeps another node's delete", func(t *testing.T) {
		reset(t)
		if err := st.PutObject(ctx, &unusedCampaign); err != nil {
			t.Fatal(err)
		}
		m := &meanwhile{Store: st, write: func() {
			if err := st.DeleteObject(ctx, tsubame.KindCampaign, unusedCampaign.ID); err != nil {
				t.Error(err)
			}
		}}
		if _, err := file(t, stored).Write(ctx, m, true); err != nil {
			t.Fatal(err)
		}
		got, _, err := st.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		storetest.SameSet(t, got, stored)
	})

	t.Run("a merge naming a campaign deleted meanwhile", func(t *testing.T) {
		reset(t)
		if err := st.PutObject(ctx, &unusedCampaign); err != nil {
			t.Fatal(err)
		}
		onIt := added
		onIt.Campaign = unusedCampaign.ID
		m := &meanwhile{Store: st, write: func() {
			if err := st.DeleteObject(ctx, tsubame.KindCampaign, unusedCampaign.ID); err != nil {
				t.Error(err)
			}
		}}
		_, err := file(t, &tsubame.CampaignSet{LineItems: []*tsubame.LineItem{&onIt}}).Write(ctx, m, false)
		if tsubame.ErrorCode(err) != tsubame.EINVALID || !strings.Contains(err.Error(), unusedCampaign.ID) {
			t.Fatalf("got %v, want EINVALID naming the campaign deleted", err)
		}
		if _, err := st.GetObject(ctx, tsubame.KindLineItem, onIt.ID); tsubame.ErrorCode(err) != tsubame.ENOTFOUND {
			t.Fatalf("the refused import's line item reads back: %v", err)
		}
	})
}

// commandCalls is Redis's count of calls of command (INFO commandstats).
func commandCalls(t *testing.T, srv *redistest.Server, command string) int {
	t.Helper()
	for _, line := range strings.Split(srv.CLI(t, "info", "commandstats"), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			n, _ := strconv.Atoi(calls)
			return n
		}
	}
	return 0
}
