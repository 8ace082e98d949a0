package decision_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/decision"
)

type reference struct {
	campaigns map[string]*tsubame.Campaign
	creatives map[string]*tsubame.Creative
}

func newReference(set *tsubame.CampaignSet) *reference {
	ref := &reference{campaigns: map[string]*tsubame.Campaign{}, creatives: map[string]*tsubame.Creative{}}
	for _, c := range set.Campaigns {
		ref.campaigns[c.ID] = c
	}
	for _, c := range set.Creatives {
		ref.creatives[c.ID] = c
	}
	return ref
}

// qualifies is the reference the index must agree with: the targeting
// rules applied to one line item by a plain reading of the model, with no
// index, no interning and no masks.
func (ref *reference) qualifies(l *tsubame.LineItem, r *decision.Request) bool {
	camp := ref.campaigns[l.Campaign]
	for _, w := range [][2]time.Time{{camp.Start, camp.End}, {l.Start, l.End}} {
		if !w[0].IsZero() && r.Time.Before(w[0]) || !w[1].IsZero() && !r.Time.Before(w[1]) {
			return false
		}
	}
	creative := false
	for _, id := range l.Creatives {
		c := ref.creatives[id]
		if c.Status == tsubame.StatusApproved &&
			(r.Format == "" || c.Format == r.Format) && (r.W == 0 || c.W == r.W) && (r.H == 0 || c.H == r.H) {
			creative = true
		}
	}
	if !creative {
		return false
	}
	if len(l.Deals) > 0 && !slices.ContainsFunc(r.Deals, func(d string) bool { return slices.Contains(l.Deals, d) }) {
		return false
	}
	loc, _ := camp.Location()
	t := r.Time.In(loc)
	inHours := func(h *tsubame.HourRange) bool {
		if h.From < h.To {
			return t.Hour() >= h.From && t.Hour() < h.To
		}
		return t.Hour() >= h.From || t.Hour() < h.To
	}
	site := func(s string) bool { return r.Site == s || strings.HasSuffix(r.Site, "."+s) }
	eq := func(v string) func(string) bool { return func(s string) bool { return s == v } }
	kv := func(key, val string) bool {
		return slices.Contains(r.KeyValues, decision.KeyValue{Key: key, Value: val})
	}
	// lists pairs each list of c with the test of one of its values.
	lists := func(c *tsubame.Criteria) [][2]any {
		return [][2]any{
			{c.Placements, eq(r.Placement)}, {c.Sites, site}, {c.Apps, eq(r.App)}, {c.Countries, eq(r.Country)},
			{c.Regions, eq(r.Region)}, {c.Devices, eq(r.Device)}, {c.OS, eq(r.OS)}, {c.Browsers, eq(r.Browser)},
			{c.Weekdays, eq(tsubame.Weekdays[t.Weekday()])},
		}
	}
	c := &l.Targeting.Criteria
	for _, p := range lists(c) {
		list, match := p[0].([]string), p[1].(func(string) bool)
		if len(list) > 0 && !slices.ContainsFunc(list, match) {
			return false
		}
	}
	if c.Hours != nil && !inHours(c.Hours) {
		return false
	}
	for key, vals := range c.KeyValues {
		if !slices.ContainsFunc(vals, func(v string) bool { return kv(key, v) }) {
			return false
		}
	}
	if x := l.Targeting.Exclude; x != nil {
		for _, p := range lists(x) {
			if slices.ContainsFunc(p[0].([]string), p[1].(func(string) bool)) {
				return false
			}
		}
		if x.Hours != nil && inHours(x.Hours) {
			return false
		}
		for key, vals := range x.KeyValues {
			if slices.ContainsFunc(vals, func(v string) bool { return kv(key, v) }) {
				return false
			}
		}
	}
	return true
}

// TestIndexAgreesWithReference checks, over the benchmark's world, that
// the index reaches exactly the line items a scan of the set would: a
// request gets an answer exactly when some line item qualifies, and the
// answer is a qualifying line item of the highest priority that has any.
func TestIndexAgreesWithReference(t *testing.T) {
	set := benchSet(3_000)
	ix, err := decision.Compile(set, decision.Options{Now: compiledAt})
	if err != nil {
		t.Fatal(err)
	}
	ref := newReference(set)
	rnd := rand.New(rand.NewPCG(8, 8))
	served := 0
	for i, r := range benchRequests(600) {
		r.Count = 1
		best := tsubame.MaxPriority + 1
		eligible := map[string]bool{}
		for _, l := range set.LineItems {
			if l.Priority <= best && ref.qualifies(l, &r) {
				if l.Priority < best {
					best = l.Priority
					clear(eligible)
				}
				eligible[l.ID] = true
			}
		}
		got := ix.Decide(&r, nil, rnd)
		switch {
		case len(eligible) == 0 && len(got) != 0:
			t.Fatalf("request %d (%+v): served %s, but no line item qualifies", i, r, got[0].Line.ID)
		case len(eligible) > 0 && len(got) != 1:
			t.Fatalf("request %d (%+v): served nothing, but %d line items of priority %d qualify", i, r, len(eligible), best)
		case len(got) == 1 && !eligible[got[0].Line.ID]:
			t.Fatalf("request %d (%+v): served %s of priority %d; qualifying at priority %d: %v", i, r, got[0].Line.ID, got[0].Line.Priority, best, eligible)
		}
		served += len(got)
	}
	if served < 300 {
		t.Fatalf("only %d of 600 requests served: the world is too narrow to test much", served)
	}
}
