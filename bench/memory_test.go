package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"tsubame"
)

// The memory scenarios' accounts are valid and limit everything: every
// line item has an impression limit, every campaign a budget, paced asap.
func TestMemoryAccounts(t *testing.T) {
	for name, set := range map[string]*tsubame.CampaignSet{"rtb": limitAll(rtbSet()), "decide": limitAll(decideSet())} {
		if err := set.Validate(); err != nil {
			t.Fatalf("%s: the set does not validate: %v", name, err)
		}
		for _, c := range set.Campaigns {
			if c.Budget.Total == 0 || c.Budget.Daily == 0 || c.Pacing.Mode != tsubame.PacingASAP {
				t.Fatalf("%s: campaign %s: budget %+v, pacing %q", name, c.ID, c.Budget, c.Pacing.Mode)
			}
		}
		for _, l := range set.LineItems {
			if l.Limits.Impressions.Total == 0 || l.Limits.Impressions.Daily == 0 {
				t.Fatalf("%s: line item %s has no limit", name, l.ID)
			}
		}
	}
}

// rtb-memory's bid requests are JSON, distinct, spread over the apps and
// sites, and fit for the Lua long strings of wrk's script.
func TestMemoryRTBBodies(t *testing.T) {
	bodies := memoryRTBBodies()
	ids, where := map[string]bool{}, map[string]bool{}
	for _, b := range bodies {
		var r struct {
			ID  string `json:"id"`
			App *struct {
				Bundle string `json:"bundle"`
			} `json:"app"`
			Site *struct {
				Domain string `json:"domain"`
			} `json:"site"`
		}
		if err := json.Unmarshal([]byte(b), &r); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		if strings.Contains(b, "]=]") {
			t.Fatalf("a body closes the script's long string: %s", b)
		}
		ids[r.ID] = true
		switch {
		case r.App != nil:
			where["app:"+r.App.Bundle] = true
		case r.Site != nil:
			where["site:"+r.Site.Domain] = true
		}
	}
	if len(ids) != memoryRTBRequests || len(where) < (rtbApps+rtbSites)*3/4 {
		t.Fatalf("%d distinct ids of %d, %d apps and sites of %d", len(ids), memoryRTBRequests, len(where), rtbApps+rtbSites)
	}
}

// Growth is the largest anon RSS over the last window less the largest
// over the first after the warm-up: a sawtooth alike in both is no
// growth, memory that grows with the holds is, per hold.
func TestMemoryGrowth(t *testing.T) {
	run := func(perHold int64) memoryRun {
		m := memoryRun{D: 10 * time.Minute}
		for k := int64(1); k <= 300; k++ {
			holds := 1000 * k
			saw := (k % 7) << 20 // the heap's sawtooth: up to 6 MiB
			m.Samples = append(m.Samples, memorySample{At: time.Duration(k) * 2 * time.Second, Anon: 100<<20 + saw + perHold*holds, Holds: holds})
		}
		return m
	}
	flat, growing := run(0), run(400)
	if flat.Window() != time.Minute || len(flat.First()) != 30 || len(flat.Last()) != 30 {
		t.Fatalf("window %v, %d and %d samples in the windows", flat.Window(), len(flat.First()), len(flat.Last()))
	}
	if g := flat.Growth(); g != 0 {
		t.Errorf("a sawtooth alone grew by %d bytes", g)
	}
	// From the end of the first window (60,000 holds at 2 min) to the end
	// (300,000): 240,000 holds of 400 bytes, give or take the sawtooth.
	if h, g := growing.Held(), growing.Growth(); h != 240_000 || g < 400*240_000-6<<20 || g > 400*240_000+6<<20 {
		t.Errorf("held %d, grew %d bytes (%.1f a hold), want 240,000 holds of 400 bytes", h, g, growing.PerHold())
	}
}
