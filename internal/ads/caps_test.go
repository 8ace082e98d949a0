package ads_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/budget"
	"tsubame/internal/store/memory"
)

// countingCaps counts the calls that reach the frequency store.
type countingCaps struct {
	tsubame.FrequencyCounter
	calls atomic.Int64
}

func (c *countingCaps) Read(ctx context.Context, visitor string, rec *tsubame.FrequencyRecord) error {
	c.calls.Add(1)
	return c.FrequencyCounter.Read(ctx, visitor, rec)
}

func (c *countingCaps) Update(ctx context.Context, u *tsubame.FrequencyUpdate, rec *tsubame.FrequencyRecord) (bool, error) {
	c.calls.Add(1)
	return c.FrequencyCounter.Update(ctx, u, rec)
}

// A decision reads its visitor's caps once, however many capped line items
// it weighs: with ten capped line items above li-top, each 1 per hour, a
// visitor's first ten decisions each serve a capped one in one or two
// store calls (the take that reads, and a take of one the record allows
// when the first was full), and the eleventh, with all ten full, serves
// li-top after one call, not ten.
func TestDecideReadsTheVisitorOnce(t *testing.T) {
	b, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	var top *tsubame.LineItem
	for _, li := range set.LineItems {
		if li.ID == "li-top" {
			top = li
		}
	}
	for i := range 10 {
		capped := *top
		capped.ID, capped.Priority = fmt.Sprint("li-capped-", i), top.Priority-1
		capped.Frequency = []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Hour)}}
		set.LineItems = append(set.LineItems, &capped)
	}
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	fc := &countingCaps{FrequencyCounter: st}
	f := &fixture{store: st, keys: newFixture(t).keys}
	n := f.startOn(t, st, nodeOpts{counters: budget.New(fc, budget.Options{})})
	seen := map[string]bool{}
	for i := range 11 {
		before := fc.calls.Load()
		_, ds := decide(t, n, "placement=top&uid=u-1")
		calls := fc.calls.Load() - before
		if len(ds) != 1 {
			t.Fatalf("decision %d: %+v", i, ds)
		}
		li := ds[0].LineItem
		switch {
		case i < 10 && (!strings.HasPrefix(li, "li-capped-") || seen[li]):
			t.Fatalf("decision %d: %s, want a capped line item not served before (served %v)", i, li, seen)
		case i < 10 && (calls < 1 || calls > 2):
			t.Fatalf("decision %d: %d store calls, want 1 or 2", i, calls)
		case i == 10 && (li != "li-top" || calls != 1):
			t.Fatalf("decision %d, all ten capped line items full: %s after %d store calls, want li-top after 1", i, li, calls)
		}
		seen[li] = true
	}
}
