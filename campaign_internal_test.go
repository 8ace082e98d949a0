package tsubame

import (
	"testing"
	"time"
)

// TestProbeBuildsNoPath: Validate first checks each object under a probe,
// which only tells whether it has a problem. For a valid object (nearly
// all of a set, compiled at every start) the probe builds no path and
// allocates nothing: not the paths under a line item's targeting, its
// key-values and frequency caps, nor the replacer a creative's html is
// checked with. An object with a problem still has it reported by the
// probe, and then under its path.
func TestProbeBuildsNoPath(t *testing.T) {
	criteria := func() Criteria {
		return Criteria{
			Placements: []string{"top", "side"}, Sites: []string{"news.example"}, Apps: []string{"com.example.app"},
			Countries: []string{"JP"}, Regions: []string{"JP-13"}, Devices: []string{"mobile"},
			OS: []string{"ios"}, Browsers: []string{"safari"}, Hours: &HourRange{From: 8, To: 20},
			Weekdays: []string{"mon", "tue"}, KeyValues: map[string][]string{"section": {"sports", "news"}, "tier": {"gold"}},
		}
	}
	exclude := criteria()
	exclude.KeyValues = map[string][]string{"section": {"adult"}}
	li := &LineItem{
		ID: "li-1", Name: "Top", Campaign: "c-1", Priority: 8, Weight: 1, CPM: 2_000_000,
		Creatives: []string{"cr-1"}, Start: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		Limits:    Limits{Impressions: ImpressionLimits{Total: 1000, Daily: 100}},
		Frequency: []FrequencyCap{{Impressions: 3, Per: Duration(time.Hour)}, {Impressions: 10, Per: Duration(24 * time.Hour)}},
		Deals:     []string{"deal-1"},
		Targeting: Targeting{Criteria: criteria(), Exclude: &exclude},
	}
	cr := &Creative{ID: "cr-1", Name: "Banner", Advertiser: "adv-1", Format: FormatBanner, W: 300, H: 250,
		HTML: "<a href=x>ad</a>", Click: "https://shop.example/", Reason: "checked"}
	for _, o := range []CampaignObject{li, cr} {
		if ps := ObjectProblems(o, ""); len(ps) > 0 {
			t.Fatalf("%s %s: %v", o.Kind(), o.ObjectID(), ps)
		}
		var probe checker
		if n := testing.AllocsPerRun(100, func() {
			probe = checker{probe: true}
			o.check(&probe, "")
		}); n != 0 {
			t.Errorf("%s %s: the probe of a valid object allocates %v times, want 0", o.Kind(), o.ObjectID(), n)
		}
		if len(probe.ps) != 0 {
			t.Errorf("%s: the probe found %v", o.ObjectID(), probe.ps)
		}
	}

	li.Targeting.Exclude.KeyValues["section"] = nil
	li.Frequency[1].Per = Duration(time.Millisecond)
	probe := checker{probe: true}
	if li.check(&probe, ""); len(probe.ps) != 2 {
		t.Fatalf("the probe of a line item with two problems found %v", probe.ps)
	}
	want := map[string]bool{`.frequency[1].per`: true, `.targeting.exclude.keyvalues["section"]`: true}
	for _, p := range ObjectProblems(li, "") {
		if !want["."+p.Path] {
			t.Errorf("problem at %q, want one of %v", p.Path, want)
		}
		delete(want, "."+p.Path)
	}
	if len(want) > 0 {
		t.Errorf("not reported: %v", want)
	}
}
