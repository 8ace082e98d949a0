package decision_test

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/campaigngen"
	"tsubame/internal/decision"
)

// refuse is Counters that refuse the line items it names, and a tenth of
// the others by their id (the same ones every time).
type refuse struct{ ids []string }

func (r refuse) Allow(l *decision.Line, _ *decision.Request, _ int, _ time.Time) bool {
	if slices.Contains(r.ids, l.ID) {
		return false
	}
	if len(r.ids) > 0 {
		return true
	}
	h := fnv.New32a()
	h.Write([]byte(l.ID))
	return h.Sum32()%10 != 0
}

func TestExplainTellsTheFirstRule(t *testing.T) {
	var f fixture
	top := func(l *tsubame.LineItem) *tsubame.LineItem {
		l.Targeting.Placements = []string{"top"}
		return l
	}
	top(f.single("capped", 1, 1))
	top(f.single("won", 2, 1))
	top(f.single("sibling", 2, 1))
	top(f.single("house", 5, 1))
	top(f.single("paused", 1, 1)).Status = tsubame.StatusPaused
	top(f.single("archived", 1, 1)).Status = tsubame.StatusArchived
	top(f.single("campaign-paused", 1, 1))
	f.set.Campaigns[len(f.set.Campaigns)-1].Status = tsubame.StatusPaused
	top(f.single("campaign-archived", 1, 1))
	f.set.Campaigns[len(f.set.Campaigns)-1].Status = tsubame.StatusArchived
	top(f.single("advertiser-archived", 1, 1))
	f.set.Advertisers[len(f.set.Advertisers)-1].Status = tsubame.StatusArchived
	top(f.single("pending", 1, 1))
	f.set.Creatives[len(f.set.Creatives)-1].Status = tsubame.StatusPending
	top(f.single("later", 1, 1)).Start = compiledAt.Add(time.Hour)
	top(f.single("over", 1, 1)).End = compiledAt.Add(-time.Hour)
	top(f.single("us", 1, 1)).Targeting.Countries = []string{"US"}
	top(f.single("mobile", 1, 1)).Targeting.Devices = []string{"mobile"}
	top(f.single("sports", 1, 1)).Targeting.KeyValues = map[string][]string{"section": {"sports"}}
	top(f.single("tuesday", 1, 1)).Targeting.Weekdays = []string{"tue"}
	top(f.single("leader", 1, 1))
	f.set.Creatives[len(f.set.Creatives)-1].W = 728
	f.single("anywhere", 3, 1).Targeting.Countries = []string{"KR"}
	f.single("side", 1, 1).Targeting.Placements = []string{"side"}

	ix, err := decision.Compile(&f.set, decision.Options{Now: compiledAt, Counters: refuse{ids: []string{"capped"}}})
	if err != nil {
		t.Fatal(err)
	}
	req := func() *decision.Request {
		return &decision.Request{Placement: "top", Country: "JP", Device: "desktop", Time: compiledAt,
			KeyValues: []decision.KeyValue{{Key: "section", Value: "news"}}, Format: tsubame.FormatBanner, W: 300, H: 250}
	}
	ex := ix.Explain(&f.set, req(), rand.New(rand.NewPCG(7, 7)))
	got := map[string]decision.Why{}
	for _, l := range ex.Lines {
		got[l.ID] = l.Why
	}
	winner := ids(ix.Decide(req(), nil, rand.New(rand.NewPCG(7, 7))))
	if len(winner) != 1 || ids(ex.Decisions)[0] != winner[0] || got[winner[0]] != decision.WhyWon || ex.Lines[0].ID != winner[0] {
		t.Fatalf("Decide chose %v; Explain %v, its lines %+v", winner, ids(ex.Decisions), ex.Lines)
	}
	loser := map[string]string{"won": "sibling", "sibling": "won"}[winner[0]]
	want := map[string]decision.Why{
		winner[0]: decision.WhyWon, loser: decision.WhyLostDraw, "capped": decision.WhyRefused,
		"house": decision.WhyLowerPriority, "paused": decision.WhyPaused, "pending": decision.WhyNoApprovedCreative,
		"archived": decision.WhyArchived, "campaign-paused": decision.WhyCampaignPaused,
		"campaign-archived": decision.WhyCampaignArchived, "advertiser-archived": decision.WhyAdvertiserArchived,
		"later": decision.WhyNotStarted, "over": decision.WhyEnded, "us": decision.WhyCountry,
		"mobile": decision.WhyDevice, "sports": decision.WhyKeyValues, "tuesday": decision.WhyWeekday,
		"leader": decision.WhyNoCreativeFits, "anywhere": decision.WhyCountry,
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: %v (%s), want %v", id, got[id], got[id].Text(), w)
		}
	}
	if _, ok := got["side"]; ok || len(got) != len(want) {
		t.Errorf("lines %v, want those of placement top: %v", got, want)
	}
	if len(ex.Eligible) != 1 || !slices.Equal(ex.Eligible[0], []string{"sibling", "won"}) {
		t.Errorf("eligible %v, want [[sibling won]]", ex.Eligible)
	}
}

// TestExplainAgreesWithDecide runs 1,000 random requests against a
// generated campaign set: Explain, given the same random source, answers
// what Decide answers, names its winners won among the eligible, and gives
// every other candidate a reason.
func TestExplainAgreesWithDecide(t *testing.T) {
	now := compiledAt
	size := campaigngen.Size{LineItems: 3_000}
	set := campaigngen.Set(42, size, now)
	for i, l := range set.LineItems { // some left out of the index, for LeftOut
		if i%50 == 0 {
			l.Status = tsubame.StatusPaused
		}
	}
	ix, err := decision.Compile(set, decision.Options{Now: now, Counters: refuse{}})
	if err != nil {
		t.Fatal(err)
	}
	gen := campaigngen.Requests(43, size, 1_000, now)
	r := rand.New(rand.NewPCG(44, 44))
	var filled, empty int
	for n, g := range gen {
		mk := func() *decision.Request {
			req := &decision.Request{Placement: g.Placement, Site: g.Site, Country: g.Country, Region: g.Region,
				Device: g.Device, OS: g.OS, Browser: g.Browser, Deals: g.Deals, Time: g.Time, Count: 1 + n%3}
			if n%2 == 0 { // every other request drops the site, so that more run-of-network lines match
				req.Site = ""
			}
			if n%5 == 0 { // a size no creative has: no fill
				req.W, req.H = 1, 1
			}
			for _, kv := range g.KeyValues {
				req.KeyValues = append(req.KeyValues, decision.KeyValue{Key: kv[0], Value: kv[1]})
			}
			return req
		}
		seed := r.Uint64()
		want := ix.Decide(mk(), nil, rand.New(rand.NewPCG(seed, 1)))
		ex := ix.Explain(set, mk(), rand.New(rand.NewPCG(seed, 1)))
		if len(want) == 0 {
			empty++
		} else {
			filled++
		}
		if !slices.Equal(ids(want), ids(ex.Decisions)) || len(want) != len(ex.Eligible) {
			t.Fatalf("request %d: Decide %v, Explain %v (eligible %v)", n, ids(want), ids(ex.Decisions), ex.Eligible)
		}
		for k, d := range want {
			if ex.Decisions[k].Creative.ID != d.Creative.ID {
				t.Fatalf("request %d slot %d: Decide's creative %s, Explain's %s", n, k, d.Creative.ID, ex.Decisions[k].Creative.ID)
			}
			if !slices.Contains(ex.Eligible[k], d.Line.ID) {
				t.Fatalf("request %d slot %d: winner %s not among the eligible %v", n, k, d.Line.ID, ex.Eligible[k])
			}
		}
		won := 0
		for _, l := range ex.Lines {
			switch {
			case l.Why == decision.WhyEligible:
				t.Fatalf("request %d: line item %s has no reason", n, l.ID)
			case l.Why == decision.WhyWon:
				if l.Slot < 0 || l.Slot >= len(want) || want[l.Slot].Line.ID != l.ID {
					t.Fatalf("request %d: %s won slot %d, Decide answered %v", n, l.ID, l.Slot, ids(want))
				}
				won++
			}
		}
		if won != len(want) {
			t.Fatalf("request %d: %d lines won, Decide answered %v", n, won, ids(want))
		}
	}
	if filled < 100 || empty < 10 {
		t.Fatalf("%d requests filled, %d not: the mix tests too little", filled, empty)
	}
}

// TestNoFillCause: DecideWhy tells why it filled nothing, the furthest a
// request got.
func TestNoFillCause(t *testing.T) {
	var f fixture
	f.single("jp", 1, 1).Targeting = tsubame.Targeting{Criteria: tsubame.Criteria{Placements: []string{"top"}, Countries: []string{"JP"}}}
	f.single("capped", 1, 1).Targeting.Placements = []string{"side"}
	ix, err := decision.Compile(&f.set, decision.Options{Now: compiledAt, Counters: refuse{ids: []string{"capped"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  decision.Request
		want decision.NoFill
	}{
		{decision.Request{Placement: "top", Country: "JP"}, decision.Filled},
		{decision.Request{Placement: "nowhere", Country: "JP"}, decision.NoFillPlacement},
		{decision.Request{Placement: "top", Country: "US"}, decision.NoFillTargeting},
		{decision.Request{Placement: "top", Country: "JP", W: 728, H: 90}, decision.NoFillCreative},
		{decision.Request{Placement: "side"}, decision.NoFillCapped},
	} {
		req := c.req
		req.Time = compiledAt
		out, why := ix.DecideWhy(&req, nil, nil)
		if why != c.want || (len(out) > 0) != (c.want == decision.Filled) {
			t.Errorf("%+v: %v (%d decisions), want %v", c.req, why, len(out), c.want)
		}
	}
}

// Archiving a campaign, or the advertiser of another, takes their line
// items out of a patched index with the reason Status gives; restoring
// them brings them back.
func TestArchivedCampaignAndAdvertiser(t *testing.T) {
	var f fixture
	f.single("by-campaign", 1, 1)
	f.single("by-advertiser", 1, 1)
	f.campaign("c-also", "a-by-advertiser", "")
	f.lineItem("also", "c-also", 1, 1, "cr-by-advertiser")
	ix := f.compile(t)
	if ix.Len() != 3 {
		t.Fatalf("the index holds %d line items, want 3", ix.Len())
	}
	status := func(ix *decision.Index, set *tsubame.CampaignSet) map[string]string {
		got := map[string]string{}
		sl := decision.NewSet(set)
		for _, li := range set.LineItems {
			got[li.ID] = fmt.Sprint(ix.Status(sl, li, compiledAt))
		}
		return got
	}
	camp := f.set.Campaigns[0].Clone()
	camp.Status = tsubame.StatusArchived
	adv := f.set.Advertisers[1].Clone()
	adv.Status = tsubame.StatusArchived
	changes := []tsubame.CampaignChange{{Kind: tsubame.KindCampaign, ID: camp.ID, Object: camp}, {Kind: tsubame.KindAdvertiser, ID: adv.ID, Object: adv}}
	set := f.set.Apply(changes)
	archived, err := ix.Patch(set, changes, decision.Options{Now: compiledAt})
	if err != nil || archived == nil {
		t.Fatalf("Patch: %v, %v", archived, err)
	}
	want := map[string]string{"by-campaign": "[campaign_archived]", "by-advertiser": "[advertiser_archived]", "also": "[advertiser_archived]"}
	if got := status(archived, set); !maps.Equal(got, want) || archived.Len() != 0 {
		t.Errorf("archived: %d line items indexed, status %v, want none, %v", archived.Len(), got, want)
	}
	if full, err := decision.Compile(set, decision.Options{Now: compiledAt}); err != nil || full.Len() != 0 {
		t.Errorf("compiled whole: %v line items, %v", full.Len(), err)
	}
	if got := archived.Decide(&decision.Request{Placement: "top", Time: compiledAt}, nil, nil); len(got) != 0 {
		t.Errorf("archived, decided %v", ids(got))
	}

	camp, adv = camp.Clone(), adv.Clone()
	camp.Status, adv.Status = "", tsubame.StatusActive
	changes = []tsubame.CampaignChange{{Kind: tsubame.KindCampaign, ID: camp.ID, Object: camp}, {Kind: tsubame.KindAdvertiser, ID: adv.ID, Object: adv}}
	set = set.Apply(changes)
	restored, err := archived.Patch(set, changes, decision.Options{Now: compiledAt})
	if err != nil || restored == nil {
		t.Fatalf("Patch: %v, %v", restored, err)
	}
	want = map[string]string{"by-campaign": "[]", "by-advertiser": "[]", "also": "[]"}
	if got := status(restored, set); !maps.Equal(got, want) || restored.Len() != 3 {
		t.Errorf("restored: %d line items indexed, status %v, want 3, %v", restored.Len(), got, want)
	}
}

// Archiving an approved creative takes it out of a patched index, and
// a line item left with no other with it (no_approved_creative, whose
// detail names the archived creative), while it stays approved; restoring
// it serves it again.
func TestArchivedCreative(t *testing.T) {
	var f fixture
	f.single("only", 1, 1)
	f.single("two", 1, 1)
	f.creative("cr-other", "a-two")
	f.set.LineItems[1].Creatives = append(f.set.LineItems[1].Creatives, "cr-other")
	ix := f.compile(t)
	req := &decision.Request{Placement: "top", Time: compiledAt}
	archive := func(ix *decision.Index, set *tsubame.CampaignSet, archived bool, ids ...string) (*decision.Index, *tsubame.CampaignSet) {
		t.Helper()
		var changes []tsubame.CampaignChange
		for _, id := range ids {
			c := set.Object(tsubame.KindCreative, id).(*tsubame.Creative).Clone()
			c.Archived = archived
			changes = append(changes, tsubame.CampaignChange{Kind: tsubame.KindCreative, ID: id, Object: c})
		}
		set = set.Apply(changes)
		nx, err := ix.Patch(set, changes, decision.Options{Now: compiledAt})
		if err != nil || nx == nil {
			t.Fatalf("Patch: %v, %v", nx, err)
		}
		if full, err := decision.Compile(set, decision.Options{Now: compiledAt}); err != nil || full.Len() != nx.Len() {
			t.Fatalf("compiled whole: %d line items (%v), patched %d", full.Len(), err, nx.Len())
		}
		return nx, set
	}
	served := func(ix *decision.Index) map[string]bool {
		got := map[string]bool{}
		rnd := rand.New(rand.NewPCG(3, 3))
		for range 200 {
			for _, d := range ix.Decide(req, nil, rnd) {
				got[d.Creative.ID] = true
			}
		}
		return got
	}

	archived, set := archive(ix, &f.set, true, "cr-only", "cr-two")
	sl := decision.NewSet(set)
	only := set.LineItems[0]
	if got := archived.Status(sl, only, compiledAt); !slices.Equal(got, []decision.Why{decision.WhyNoApprovedCreative}) {
		t.Errorf("only's status %v, want [no_approved_creative]", got)
	}
	if d := sl.Detail(only, decision.WhyNoApprovedCreative); !strings.Contains(d, "archived") || !strings.Contains(d, "cr-only") {
		t.Errorf("only's detail %q, want it to say cr-only is archived", d)
	}
	if got := served(archived); !maps.Equal(got, map[string]bool{"cr-other": true}) {
		t.Errorf("archived: served %v, want only cr-other", got)
	}
	if c := set.Object(tsubame.KindCreative, "cr-only").(*tsubame.Creative); c.Status != tsubame.StatusApproved {
		t.Errorf("archived creative's status %q, want it kept approved", c.Status)
	}
	if d := decision.NewSet(&f.set).Detail(only, decision.WhyNoApprovedCreative); d != decision.WhyNoApprovedCreative.Text() {
		t.Errorf("with nothing archived, the detail is %q, want %q", d, decision.WhyNoApprovedCreative.Text())
	}

	restored, set := archive(archived, set, false, "cr-only", "cr-two")
	if got := restored.Status(decision.NewSet(set), set.LineItems[0], compiledAt); len(got) != 0 {
		t.Errorf("restored: only's status %v, want none", got)
	}
	if got := served(restored); !got["cr-only"] || !got["cr-two"] || !got["cr-other"] {
		t.Errorf("restored: served %v, want every creative", got)
	}
}
