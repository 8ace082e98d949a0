package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame"
)

// RunCampaigns runs the CampaignStore part of the suite. newStore returns
// an empty store and arranges for it to be closed when the test ends.
func RunCampaigns(t *testing.T, newStore func(t *testing.T) tsubame.CampaignStore) {
	t.Run("Empty", func(t *testing.T) { testCampaignsEmpty(t, newStore(t)) })
	t.Run("RoundTripEveryField", func(t *testing.T) { testCampaignsRoundTrip(t, newStore(t)) })
	t.Run("MoneyExact", func(t *testing.T) { testCampaignsMoney(t, newStore(t)) })
	t.Run("GetListEachKind", func(t *testing.T) { testCampaignsGetList(t, newStore(t)) })
	t.Run("PutChecksTheSet", func(t *testing.T) { testCampaignsPut(t, newStore(t)) })
	t.Run("DeleteKeepsReferences", func(t *testing.T) { testCampaignsDelete(t, newStore(t)) })
	t.Run("CallerOwnsValues", func(t *testing.T) { testCampaignsOwnership(t, newStore(t)) })
	t.Run("ReplaceAllOrNothing", func(t *testing.T) { testCampaignsReplaceAtomic(t, newStore(t)) })
	t.Run("VersionCountsWrites", func(t *testing.T) { testCampaignsVersion(t, newStore(t)) })
	t.Run("WritesAtAVersion", func(t *testing.T) { testCampaignsWriteAt(t, newStore(t)) })
	t.Run("ConcurrentWritesAtOneVersion", func(t *testing.T) { testCampaignsWriteAtRace(t, newStore(t)) })
	t.Run("ConcurrentReadersSeeWholeSets", func(t *testing.T) { testCampaignsConcurrent(t, newStore(t)) })
	t.Run("FeedSignalsWrites", func(t *testing.T) { testCampaignsFeed(t, newStore(t)) })
}

// FullCampaignSet returns a valid set in which every field of every kind
// is set (not zero), so that a round trip through a store shows any field
// it drops. Its objects are sorted by id, as Snapshot returns them.
func FullCampaignSet() *tsubame.CampaignSet {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	end := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	weights := make([]int, 24)
	for i := range weights {
		weights[i] = 1 + i%3
	}
	crit := func(tag string) tsubame.Criteria {
		return tsubame.Criteria{
			Placements: []string{"top-" + tag, "side-" + tag},
			Sites:      []string{tag + ".example.com"},
			Apps:       []string{"com.example." + tag},
			Countries:  []string{"JP", "US"},
			Regions:    []string{"JP-13"},
			Devices:    []string{"mobile", "tablet"},
			OS:         []string{"ios", "android"},
			Browsers:   []string{"safari"},
			Hours:      &tsubame.HourRange{From: 22, To: 6},
			Weekdays:   []string{"sat", "sun"},
			KeyValues:  map[string][]string{"section": {"sports", tag}, "age": {"30-39"}},
		}
	}
	excl := crit("excluded")
	return &tsubame.CampaignSet{
		Currency: "JPY",
		Advertisers: []*tsubame.Advertiser{
			{ID: "adv-1", Name: "Acme 株式会社", Domains: []string{"acme.example", "shop.acme.example"}},
			{ID: "adv-2", Name: "Other", Domains: []string{"other.example"}, Status: tsubame.StatusArchived},
		},
		Campaigns: []*tsubame.Campaign{
			{ID: "c-1", Name: "Winter sale — 冬のセール", Advertiser: "adv-1", Start: start, End: end, Timezone: "America/New_York",
				Budget: tsubame.Budget{Total: 1_000_000_000_000, Daily: 25_500_001},
				Pacing: tsubame.Pacing{Mode: tsubame.PacingEven, HourWeights: weights}},
			{ID: "c-2", Advertiser: "adv-2", Start: start, End: end, Timezone: "UTC",
				Budget: tsubame.Budget{Total: 1, Daily: 1}, Pacing: tsubame.Pacing{Mode: tsubame.PacingASAP}, Status: tsubame.StatusPaused},
		},
		Creatives: []*tsubame.Creative{
			{ID: "cr-banner", Name: "Medium rectangle", Advertiser: "adv-1", Format: tsubame.FormatBanner, W: 300, H: 250,
				Image: "https://cdn.acme.example/300x250.png", Click: "https://acme.example/landing?utm=1",
				Categories: []string{"IAB1", "IAB19-29"}, App: "com.acme.shop", Status: tsubame.StatusApproved},
			{ID: "cr-html", Advertiser: "adv-2", Format: tsubame.FormatBanner, W: 728, H: 90,
				HTML: "<div class=\"ad\">\n\t<a href=\"#\">Buy</a>\n</div>", Click: "http://other.example/",
				Categories: []string{"IAB3"}, Status: tsubame.StatusPending},
			{ID: "cr-video", Advertiser: "adv-1", Format: tsubame.FormatVideo, W: 1920, H: 1080, Duration: 30,
				MIMEs: []string{"video/mp4", "application/x-mpegURL"}, Media: "https://cdn.acme.example/v.mp4",
				Click: "https://acme.example/video", Categories: []string{"IAB2-1"}, Status: tsubame.StatusRejected,
				Reason: "The video's sound starts at full volume.\nLower it, then send it again.", Archived: true},
		},
		LineItems: []*tsubame.LineItem{
			{ID: "li-1", Name: "Top, \"mobile\"", Campaign: "c-1", Status: tsubame.StatusPaused, Priority: 1, Weight: 3, CPM: 1_250_000,
				Creatives: []string{"cr-banner", "cr-video"}, Start: start.Add(24 * time.Hour), End: end.Add(-time.Hour),
				Limits:    tsubame.Limits{Impressions: tsubame.ImpressionLimits{Total: 1_000_000, Daily: 50_000}},
				Frequency: []tsubame.FrequencyCap{{Impressions: 3, Per: tsubame.Duration(time.Hour)}, {Impressions: 10, Per: tsubame.Duration(24 * time.Hour)}},
				Deals:     []string{"deal-1", "deal-2"},
				Targeting: tsubame.Targeting{Criteria: crit("li1"), Exclude: &excl}},
			{ID: "li-2", Campaign: "c-2", Priority: 16, Weight: 1, CPM: 1,
				Creatives: []string{"cr-html"}, Start: start, End: end,
				Limits:    tsubame.Limits{Impressions: tsubame.ImpressionLimits{Total: 10, Daily: 1}},
				Frequency: []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(90 * time.Minute)}},
				Deals:     []string{"deal-3"},
				Targeting: tsubame.Targeting{Criteria: crit("li2"), Exclude: &excl}},
		},
	}
}

// unsetFields returns the fields (paths with [] for any index) that are
// zero in every object of v's kind, following structs, pointers, slices and
// maps: a fixture proves that it sets every field somewhere.
func unsetFields(v reflect.Value) []string {
	set, zero := map[string]bool{}, map[string]bool{}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		switch {
		case v.Kind() == reflect.Pointer && !v.IsNil():
			walk(v.Elem(), path)
		case v.Kind() == reflect.Struct && v.Type() != reflect.TypeFor[time.Time]():
			for i := range v.NumField() {
				if f := v.Type().Field(i); f.IsExported() {
					walk(v.Field(i), path+"."+f.Name)
				}
			}
		case (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() > 0:
			set[path] = true
			if v.Kind() == reflect.Map {
				for _, k := range v.MapKeys() {
					walk(v.MapIndex(k), path+"[]")
				}
			} else {
				for i := range v.Len() {
					walk(v.Index(i), path+"[]")
				}
			}
		case v.IsZero():
			zero[path] = true
		default:
			set[path] = true
		}
	}
	walk(v, "set")
	var out []string
	for p := range zero {
		if !set[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameSet compares two sets field by field (times by instant, through
// their JSON form, which is the import file's).
func sameSet(t *testing.T, got, want *tsubame.CampaignSet) {
	t.Helper()
	if g, w := asJSON(t, got), asJSON(t, want); g != w {
		t.Fatalf("set differs\n got: %s\nwant: %s", g, w)
	}
}

// SameSet fails t unless got and want are the same set, compared as
// sameSet does, naming where their JSON forms first differ (large sets).
func SameSet(t *testing.T, got, want *tsubame.CampaignSet) {
	t.Helper()
	g, w := asJSON(t, got), asJSON(t, want)
	if g == w {
		return
	}
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	at := func(s string) string { return s[max(i-100, 0):min(i+100, len(s))] }
	t.Fatalf("sets differ at byte %d of %d/%d\n got: …%s…\nwant: …%s…", i, len(g), len(w), at(g), at(w))
}

func mustReplace(t *testing.T, s tsubame.CampaignStore, set *tsubame.CampaignSet) {
	t.Helper()
	if err := s.ReplaceAll(ctx(t), set); err != nil {
		t.Fatalf("ReplaceAll: %v", err)
	}
}

func snapshot(t *testing.T, s tsubame.CampaignStore) (*tsubame.CampaignSet, uint64) {
	t.Helper()
	set, v, err := s.Snapshot(ctx(t))
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return set, v
}

func testCampaignsEmpty(t *testing.T, s tsubame.CampaignStore) {
	set, v := snapshot(t, s)
	if set == nil || set.Len() != 0 || v != 0 {
		t.Fatalf("empty store: snapshot %+v at version %d", set, v)
	}
	for _, k := range tsubame.CampaignKinds {
		if list, err := s.ListObjects(ctx(t), k); err != nil || len(list) != 0 {
			t.Fatalf("ListObjects(%s) = %v, %v", k, list, err)
		}
		_, err := s.GetObject(ctx(t), k, "nope")
		wantCode(t, err, tsubame.ENOTFOUND)
	}
	_, err := s.ListObjects(ctx(t), tsubame.CampaignKind(99))
	wantCode(t, err, tsubame.EINVALID)
	_, err = s.GetObject(ctx(t), tsubame.CampaignKind(0), "x")
	wantCode(t, err, tsubame.EINVALID)
	wantCode(t, s.DeleteObject(ctx(t), tsubame.CampaignKind(5), "x"), tsubame.EINVALID)
}

func testCampaignsRoundTrip(t *testing.T, s tsubame.CampaignStore) {
	want := FullCampaignSet()
	if zero := unsetFields(reflect.ValueOf(want)); len(zero) > 0 {
		t.Fatalf("the fixture leaves fields zero: %v", zero)
	}
	mustReplace(t, s, want)
	got, _ := snapshot(t, s)
	sameSet(t, got, want)
	// Every instant is kept, whatever zone it was written in.
	if !got.Campaigns[0].Start.Equal(want.Campaigns[0].Start) {
		t.Fatalf("start %v, want %v", got.Campaigns[0].Start, want.Campaigns[0].Start)
	}
	// Objects written one by one read back the same too.
	s2 := want.Clone()
	s2.LineItems[0].ID = "li-3"
	if err := s.PutObject(ctx(t), s2.LineItems[0]); err != nil {
		t.Fatal(err)
	}
	li, err := tsubame.GetCampaignObject[*tsubame.LineItem](ctx(t), s, "li-3")
	if err != nil {
		t.Fatal(err)
	}
	if g, w := asJSON(t, li), asJSON(t, s2.LineItems[0]); g != w {
		t.Fatalf("line item read back\n got: %s\nwant: %s", g, w)
	}
}

func testCampaignsMoney(t *testing.T, s tsubame.CampaignStore) {
	set := FullCampaignSet()
	amounts := []string{"0.000001", "0.1", "1.25", "999999.890123", tsubame.MaxCPM.String()} // up to the largest CPM
	base := set.LineItems[1]
	set.LineItems = set.LineItems[:1]
	for i, a := range amounts {
		m, err := tsubame.ParseMoney(a)
		if err != nil {
			t.Fatal(err)
		}
		li := base.Clone()
		li.ID = fmt.Sprintf("money-%d", i)
		li.CPM = m
		set.LineItems = append(set.LineItems, li)
	}
	set.Campaigns[0].Budget = tsubame.Budget{Total: tsubame.MaxQuotaUnits, Daily: 1} // the largest a budget may be
	mustReplace(t, s, set)
	got, _ := snapshot(t, s)
	for i, a := range amounts {
		li := got.Object(tsubame.KindLineItem, fmt.Sprintf("money-%d", i)).(*tsubame.LineItem)
		if li.CPM.String() != a {
			t.Fatalf("cpm %s came back as %s (%d micro-units)", a, li.CPM, int64(li.CPM))
		}
	}
	if got.Campaigns[0].Budget.Total != tsubame.MaxQuotaUnits {
		t.Fatalf("largest budget came back as %d", got.Campaigns[0].Budget.Total)
	}
}

func testCampaignsGetList(t *testing.T, s tsubame.CampaignStore) {
	set := FullCampaignSet()
	// Written in reverse order: lists come back in id order.
	rev := set.Clone()
	slices.Reverse(rev.Advertisers)
	slices.Reverse(rev.Creatives)
	slices.Reverse(rev.LineItems)
	mustReplace(t, s, rev)
	for _, k := range tsubame.CampaignKinds {
		list, err := s.ListObjects(ctx(t), k)
		if err != nil {
			t.Fatal(err)
		}
		want := set.Objects(k)
		if len(list) != len(want) {
			t.Fatalf("%s: %d listed, want %d", k.Plural(), len(list), len(want))
		}
		for i := range list {
			if g, w := asJSON(t, list[i]), asJSON(t, want[i]); g != w {
				t.Fatalf("%s[%d]\n got: %s\nwant: %s", k.Plural(), i, g, w)
			}
			o, err := s.GetObject(ctx(t), k, want[i].ObjectID())
			if err != nil || asJSON(t, o) != asJSON(t, want[i]) {
				t.Fatalf("GetObject(%s, %s) = %v, %v", k, want[i].ObjectID(), o, err)
			}
		}
	}
	advs, err := tsubame.ListCampaignObjects[*tsubame.Advertiser](ctx(t), s)
	if err != nil || len(advs) != 2 || advs[0].ID != "adv-1" || advs[1].Name != "Other" {
		t.Fatalf("ListCampaignObjects[*Advertiser] = %v, %v", advs, err)
	}
	c, err := tsubame.GetCampaignObject[*tsubame.Campaign](ctx(t), s, "c-2")
	if err != nil || c.Advertiser != "adv-2" {
		t.Fatalf("GetCampaignObject[*Campaign] = %v, %v", c, err)
	}
	_, err = tsubame.GetCampaignObject[*tsubame.Creative](ctx(t), s, "c-2")
	wantCode(t, err, tsubame.ENOTFOUND)
}

func testCampaignsPut(t *testing.T, s tsubame.CampaignStore) {
	// Built from nothing, one object at a time, in reference order.
	set := FullCampaignSet()
	for _, k := range tsubame.CampaignKinds {
		for _, o := range set.Objects(k) {
			if err := s.PutObject(ctx(t), o); err != nil {
				t.Fatalf("PutObject(%s %s): %v", k, o.ObjectID(), err)
			}
		}
	}
	got, _ := snapshot(t, s)
	sameSet(t, got, &tsubame.CampaignSet{Advertisers: set.Advertisers, Campaigns: set.Campaigns, Creatives: set.Creatives, LineItems: set.LineItems})

	// Replacing keeps the latest.
	adv := set.Advertisers[0].Clone()
	adv.Name = "Acme renamed"
	if err := s.PutObject(ctx(t), adv); err != nil {
		t.Fatal(err)
	}
	if a, err := tsubame.GetCampaignObject[*tsubame.Advertiser](ctx(t), s, "adv-1"); err != nil || a.Name != "Acme renamed" {
		t.Fatalf("after replacing: %v, %v", a, err)
	}

	// Invalid objects and broken references are refused with every problem.
	for _, tc := range []struct {
		o    tsubame.CampaignObject
		want []string
	}{
		{&tsubame.LineItem{ID: "li-x", Campaign: "c-1", Priority: 17, Weight: 0, CPM: -1, Creatives: []string{"cr-banner"}},
			[]string{`line_item "li-x".priority`, `line_item "li-x".weight`, `line_item "li-x".cpm`}},
		{&tsubame.LineItem{ID: "li-x", Campaign: "c-none", Priority: 1, Weight: 1, Creatives: []string{"cr-banner", "cr-none"}},
			[]string{`.campaign: campaign "c-none" does not exist`, `.creatives[1]: creative "cr-none" does not exist`}},
		{&tsubame.LineItem{ID: "li-x", Campaign: "c-1", Priority: 1, Weight: 1, Creatives: []string{"cr-html"}},
			[]string{`.creatives[0]: creative "cr-html" belongs to advertiser "adv-2", not to the campaign's advertiser "adv-1"`}},
		// Moving a campaign to another advertiser strands its line item's creatives.
		{&tsubame.Campaign{ID: "c-1", Advertiser: "adv-2"},
			[]string{`line_item "li-1".creatives[0]: creative "cr-banner" belongs to advertiser "adv-1", not to the campaign's advertiser "adv-2"`}},
		// Its fields and its references at once, not a round each.
		{&tsubame.LineItem{ID: "li-x", Campaign: "c-none", Priority: 17, Weight: 1, Creatives: []string{"cr-none"}},
			[]string{`line_item "li-x".priority`, `line_item "li-x".campaign: campaign "c-none" does not exist`, `line_item "li-x".creatives[0]: creative "cr-none" does not exist`}},
		{&tsubame.Creative{ID: "cr-x", Advertiser: "adv-1", Format: "gif", Click: "javascript:alert(1)", Status: "live"},
			[]string{`creative "cr-x".format`, `creative "cr-x".click`, `creative "cr-x".status`, `creative "cr-x".w`}},
		{&tsubame.Advertiser{ID: "bad id", Name: ""}, []string{`advertiser "bad id".id`, `advertiser "bad id".name`}},
	} {
		before, v := snapshot(t, s)
		err := s.PutObject(ctx(t), tc.o)
		wantCode(t, err, tsubame.EINVALID)
		msg := err.Error()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("PutObject(%s %s): %q does not say %q", tc.o.Kind(), tc.o.ObjectID(), msg, w)
			}
		}
		if len(tsubame.ProblemsOf(err)) < len(tc.want) {
			t.Errorf("ProblemsOf = %v, want at least %d", tsubame.ProblemsOf(err), len(tc.want))
		}
		after, v2 := snapshot(t, s)
		if v2 != v {
			t.Errorf("a refused write moved the version from %d to %d", v, v2)
		}
		sameSet(t, after, before)
	}
}

func testCampaignsDelete(t *testing.T, s tsubame.CampaignStore) {
	mustReplace(t, s, FullCampaignSet())
	for _, tc := range []struct {
		k    tsubame.CampaignKind
		id   string
		uses string
	}{
		{tsubame.KindAdvertiser, "adv-1", `campaign "c-1", creative "cr-banner", creative "cr-video"`},
		{tsubame.KindCampaign, "c-1", `line_item "li-1"`},
		{tsubame.KindCreative, "cr-video", `line_item "li-1"`},
	} {
		err := s.DeleteObject(ctx(t), tc.k, tc.id)
		wantCode(t, err, tsubame.ECONFLICT)
		if !strings.Contains(err.Error(), tc.uses) {
			t.Fatalf("deleting %s %s: %v does not name %s", tc.k, tc.id, err, tc.uses)
		}
	}
	// From the leaves up, everything goes.
	set := FullCampaignSet()
	for _, k := range slices.Backward(tsubame.CampaignKinds) {
		for _, o := range set.Objects(k) {
			if err := s.DeleteObject(ctx(t), k, o.ObjectID()); err != nil {
				t.Fatalf("DeleteObject(%s %s): %v", k, o.ObjectID(), err)
			}
			_, err := s.GetObject(ctx(t), k, o.ObjectID())
			wantCode(t, err, tsubame.ENOTFOUND)
			wantCode(t, s.DeleteObject(ctx(t), k, o.ObjectID()), tsubame.ENOTFOUND)
		}
	}
	got, _ := snapshot(t, s)
	if got.Len() != 0 {
		t.Fatalf("after deleting everything: %s", asJSON(t, got))
	}
}

func testCampaignsOwnership(t *testing.T, s tsubame.CampaignStore) {
	set := FullCampaignSet()
	mustReplace(t, s, set)
	set.LineItems[0].Creatives[0] = "mutated"
	set.LineItems[0].Targeting.KeyValues["section"][0] = "mutated"
	set.LineItems[0].Targeting.Exclude.Hours.From = 3
	set.Campaigns[0].Pacing.HourWeights[0] = 99
	li := FullCampaignSet().LineItems[1]
	li.ID = "li-own"
	if err := s.PutObject(ctx(t), li); err != nil {
		t.Fatal(err)
	}
	li.Targeting.Countries[0] = "XX"

	got, _ := snapshot(t, s)
	want := FullCampaignSet()
	own := want.LineItems[1].Clone()
	own.ID = "li-own"
	want.LineItems = append(want.LineItems, own)
	sameSet(t, got, want) // nothing the caller changed after writing reached the store

	got.LineItems[0].Deals[0] = "mutated"
	got.Advertisers[0].Domains[0] = "mutated.example"
	o, err := s.GetObject(ctx(t), tsubame.KindLineItem, "li-own")
	if err != nil {
		t.Fatal(err)
	}
	o.(*tsubame.LineItem).Targeting.Exclude.Weekdays[0] = "mon"
	list, err := s.ListObjects(ctx(t), tsubame.KindCampaign)
	if err != nil {
		t.Fatal(err)
	}
	list[0].(*tsubame.Campaign).Pacing.HourWeights[1] = 77
	again, _ := snapshot(t, s)
	sameSet(t, again, want) // nor anything changed in what it handed out
}

func testCampaignsReplaceAtomic(t *testing.T, s tsubame.CampaignStore) {
	old := FullCampaignSet()
	mustReplace(t, s, old)
	_, v := snapshot(t, s)

	bad := FullCampaignSet()
	bad.Advertisers = bad.Advertisers[:1] // adv-2 gone: c-2 and cr-html point nowhere
	bad.Currency = "yen"
	bad.LineItems[0].CPM = -5
	bad.LineItems[1].Priority = 0
	bad.Creatives[0].Status = "live"
	bad.Campaigns = append(bad.Campaigns, bad.Campaigns[0].Clone()) // a duplicate id
	bad.Campaigns[0].Timezone = "Mars/Olympus"
	err := s.ReplaceAll(ctx(t), bad)
	wantCode(t, err, tsubame.EINVALID)
	wantProblems := []string{
		"currency: ",
		`campaigns[0] (id "c-1").timezone: `,
		`campaigns[2] (id "c-1").id: the same id as campaigns[0]`,
		`campaigns[1] (id "c-2").advertiser: advertiser "adv-2" does not exist`,
		`creatives[0] (id "cr-banner").status: `,
		`creatives[1] (id "cr-html").advertiser: advertiser "adv-2" does not exist`,
		`line_items[0] (id "li-1").cpm: must not be negative`,
		`line_items[1] (id "li-2").priority: must be 1 to 16, not 0`,
	}
	msg := err.Error()
	for _, w := range wantProblems {
		if !strings.Contains(msg, w) {
			t.Errorf("ReplaceAll error does not report %q:\n%s", w, msg)
		}
	}
	if n := len(tsubame.ProblemsOf(err)); n != len(wantProblems) {
		t.Errorf("%d problems reported, want %d:\n%s", n, len(wantProblems), msg)
	}
	got, v2 := snapshot(t, s)
	if v2 != v {
		t.Fatalf("a refused replace moved the version from %d to %d", v, v2)
	}
	sameSet(t, got, old)

	// A valid replace drops what the new set does not name.
	small := &tsubame.CampaignSet{Advertisers: []*tsubame.Advertiser{{ID: "only", Name: "Only"}}}
	mustReplace(t, s, small)
	got, _ = snapshot(t, s)
	sameSet(t, got, small)
	_, err = s.GetObject(ctx(t), tsubame.KindLineItem, "li-1")
	wantCode(t, err, tsubame.ENOTFOUND)
}

func testCampaignsVersion(t *testing.T, s tsubame.CampaignStore) {
	version := func() uint64 {
		t.Helper()
		v, err := s.CampaignsVersion(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := version(); v != 0 {
		t.Fatalf("new store at version %d", v)
	}
	set := FullCampaignSet()
	mustReplace(t, s, set)
	if v := version(); v != 1 {
		t.Fatalf("after one replace: version %d", v)
	}
	if err := s.PutObject(ctx(t), set.Advertisers[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteObject(ctx(t), tsubame.KindLineItem, "li-2"); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != 3 {
		t.Fatalf("after three writes: version %d", v)
	}
	_ = s.DeleteObject(ctx(t), tsubame.KindLineItem, "li-2")        // not found
	_ = s.DeleteObject(ctx(t), tsubame.KindAdvertiser, "adv-1")     // in use
	_ = s.PutObject(ctx(t), &tsubame.Advertiser{ID: "x"})           // invalid
	_ = s.ReplaceAll(ctx(t), &tsubame.CampaignSet{Currency: "usd"}) // invalid
	if v := version(); v != 3 {
		t.Fatalf("refused writes moved the version to %d", v)
	}
	if _, v := snapshot(t, s); v != 3 {
		t.Fatalf("Snapshot at version %d, CampaignsVersion 3", v)
	}
}

// A write made against a version (a merge import resolved against a
// snapshot, a pause of a line item read at a version) is refused when
// another write came in between, and undoes nothing of it: the lost pause
// of issue 48, where an import checked the version, a pause landed, and
// the import's set overwrote it.
func testCampaignsWriteAt(t *testing.T, s tsubame.CampaignStore) {
	// A store never written is at version 0: a write at 0 is the first
	// (the demo campaigns load so, once).
	if err := s.ReplaceAllAt(ctx(t), FullCampaignSet(), 0); err != nil {
		t.Fatalf("ReplaceAllAt version 0 of a new store: %v", err)
	}
	wantCode(t, s.ReplaceAllAt(ctx(t), FullCampaignSet(), 0), tsubame.ECONFLICT)
	base, v := snapshot(t, s)
	if v != 1 {
		t.Fatalf("the first write is version %d", v)
	}

	// An import resolves its file against base...
	merged := base.Clone()
	merged.LineItems[1].Weight = 77
	// ...and meanwhile another node pauses li-1.
	li, err := tsubame.GetCampaignObject[*tsubame.LineItem](ctx(t), s, "li-1")
	if err != nil {
		t.Fatal(err)
	}
	li.Status = tsubame.StatusPaused
	if err := s.PutObject(ctx(t), li); err != nil {
		t.Fatal(err)
	}
	paused, vp := snapshot(t, s)
	if vp != v+1 {
		t.Fatalf("a put moved the version from %d to %d", v, vp)
	}
	wantCode(t, s.ReplaceAllAt(ctx(t), merged, v), tsubame.ECONFLICT)
	wantCode(t, s.PutObjectAt(ctx(t), merged.LineItems[1], v), tsubame.ECONFLICT)
	wantCode(t, s.ReplaceAllAt(ctx(t), merged, v+100), tsubame.ECONFLICT) // a version never reached
	got, vg := snapshot(t, s)
	if vg != vp {
		t.Fatalf("refused writes moved the version from %d to %d", vp, vg)
	}
	sameSet(t, got, paused)
	if !got.LineItems[0].Paused() {
		t.Fatal("the pause was undone")
	}

	// At the version it read, a write is made, once.
	if err := s.PutObjectAt(ctx(t), merged.LineItems[1], vp); err != nil {
		t.Fatalf("PutObjectAt the stored version: %v", err)
	}
	wantCode(t, s.PutObjectAt(ctx(t), merged.LineItems[1], vp), tsubame.ECONFLICT)
	_, vp2 := snapshot(t, s)
	again := paused.Clone()
	again.LineItems[0].Weight = 5
	if err := s.ReplaceAllAt(ctx(t), again, vp2); err != nil {
		t.Fatalf("ReplaceAllAt the stored version: %v", err)
	}
	got, vg = snapshot(t, s)
	if vg != vp2+1 {
		t.Fatalf("ReplaceAllAt moved the version from %d to %d", vp2, vg)
	}
	sameSet(t, got, again)

	// A write at the right version is still checked: refused as invalid,
	// with nothing written.
	bad := again.Clone()
	bad.LineItems[0].Priority = 0
	wantCode(t, s.ReplaceAllAt(ctx(t), bad, vg), tsubame.EINVALID)
	wantCode(t, s.PutObjectAt(ctx(t), bad.LineItems[0], vg), tsubame.EINVALID)
	if _, v := snapshot(t, s); v != vg {
		t.Fatalf("refused writes moved the version from %d to %d", vg, v)
	}
}

// Writers that all read one version race to write at it: exactly one
// wins, whichever the backend, and the set is the winner's whole.
func testCampaignsWriteAtRace(t *testing.T, s tsubame.CampaignStore) {
	const writers = 8
	mustReplace(t, s, variant(1))
	_, v := snapshot(t, s)
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			if w%2 == 0 {
				errs[w] = s.ReplaceAllAt(ctx(t), variant(10+w), v)
				return
			}
			errs[w] = s.PutObjectAt(ctx(t), &tsubame.Advertiser{ID: fmt.Sprintf("racer-%d", w), Name: "racer"}, v)
		})
	}
	wg.Wait()
	winner := -1
	for w, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both wrote at version %d", winner, w, v)
		case err == nil:
			winner = w
		default:
			wantCode(t, err, tsubame.ECONFLICT)
		}
	}
	if winner < 0 {
		t.Fatal("no writer wrote")
	}
	got, vg := snapshot(t, s)
	if vg != v+1 {
		t.Fatalf("one write moved the version from %d to %d", v, vg)
	}
	want := variant(1)
	if winner%2 == 0 {
		want = variant(10 + winner)
	} else {
		want.Advertisers = append(want.Advertisers, &tsubame.Advertiser{ID: fmt.Sprintf("racer-%d", winner), Name: "racer"})
		want.Sort()
	}
	sameSet(t, got, want)
}

// variant returns the full set with every name and price marked by n, so a
// reader can tell which of several sets it saw, and whether it saw a mix.
func variant(n int) *tsubame.CampaignSet {
	set := FullCampaignSet()
	for _, a := range set.Advertisers {
		a.Name = fmt.Sprintf("variant %d", n)
	}
	for _, l := range set.LineItems {
		l.Weight = n
	}
	return set
}

func testCampaignsConcurrent(t *testing.T, s tsubame.CampaignStore) {
	const writers, rounds, readers = 3, 30, 4
	mustReplace(t, s, variant(1))
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, writers+readers+1)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				if err := s.ReplaceAll(ctx(t), variant(1+(w+r)%3)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() { // single writes race the replaces
		for r := range rounds {
			a := &tsubame.Advertiser{ID: fmt.Sprintf("extra-%d", r), Name: "extra"}
			if err := s.PutObject(ctx(t), a); err != nil {
				errs <- err
				return
			}
		}
	})
	var readersWG sync.WaitGroup
	for range readers {
		readersWG.Go(func() {
			var last uint64
			for {
				select {
				case <-done:
					return
				default:
				}
				set, v, err := s.Snapshot(ctx(t))
				if err != nil {
					errs <- err
					return
				}
				if v < last {
					errs <- fmt.Errorf("version went back from %d to %d", last, v)
					return
				}
				last = v
				if err := set.Validate(); err != nil {
					errs <- fmt.Errorf("snapshot at version %d is invalid: %w", v, err)
					return
				}
				marks := map[string]bool{}
				for _, a := range set.Advertisers {
					if a.Name != "extra" {
						marks[a.Name] = true
					}
				}
				for _, l := range set.LineItems {
					marks[fmt.Sprintf("variant %d", l.Weight)] = true
				}
				if len(marks) != 1 {
					errs <- fmt.Errorf("snapshot at version %d mixes sets: %v", v, marks)
					return
				}
				if _, err := s.ListObjects(ctx(t), tsubame.KindLineItem); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readersWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v, err := s.CampaignsVersion(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(1 + writers*rounds + rounds); v != want {
		t.Fatalf("after %d writes version %d", want, v)
	}
}

func testCampaignsFeed(t *testing.T, s tsubame.CampaignStore) {
	feed, ok := s.(tsubame.CampaignFeed)
	if !ok {
		t.Skip("a store of one process: no feed")
	}
	WatchCampaignsWith(t, feed, s, s)
}

// WatchCampaignsWith checks that writes through writer reach feed's
// watcher as signals after which watched reads the new version. writer may
// be another connection (another process's view) of the same data.
func WatchCampaignsWith(t *testing.T, feed tsubame.CampaignFeed, watched, writer tsubame.CampaignStore) {
	t.Helper()
	signals := make(chan struct{}, 100)
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- feed.WatchCampaigns(wctx, func() { signals <- struct{}{} }) }()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("WatchCampaigns returned %v, want context.Canceled", err)
		}
	}()
	// Until the subscription is up writes go unseen: write until one is.
	set := FullCampaignSet()
	seen := false
	for i := 0; i < 100 && !seen; i++ {
		mustReplace(t, writer, set)
		select {
		case <-signals:
			seen = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !seen {
		t.Fatal("no signal after 100 writes")
	}
	for range len(signals) {
		<-signals
	}
	for _, write := range []func() error{
		func() error { return writer.PutObject(ctx(t), &tsubame.Advertiser{ID: "new", Name: "New"}) },
		func() error { return writer.DeleteObject(ctx(t), tsubame.KindAdvertiser, "new") },
		func() error { return writer.ReplaceAll(ctx(t), FullCampaignSet()) },
	} {
		if err := write(); err != nil {
			t.Fatal(err)
		}
		want, err := writer.CampaignsVersion(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-signals:
		case <-time.After(5 * time.Second):
			t.Fatal("write not signalled within 5s")
		}
		if v, err := watched.CampaignsVersion(ctx(t)); err != nil || v < want {
			t.Fatalf("after the signal the watcher reads version %d (%v), want %d", v, err, want)
		}
	}
}
