package decision

import (
	"fmt"
	"testing"
	"time"

	"tsubame"
)

// TestCandidateLists checks the filing that spares a request the scan of
// every line item: each line item in one list per value of its first
// keying dimension, and a request reaching only the lists of its values.
func TestCandidateLists(t *testing.T) {
	set := &tsubame.CampaignSet{
		Advertisers: []*tsubame.Advertiser{{ID: "a", Name: "A"}},
		Campaigns:   []*tsubame.Campaign{{ID: "c", Advertiser: "a"}},
		Creatives: []*tsubame.Creative{{ID: "cr", Advertiser: "a", Format: tsubame.FormatBanner, W: 1, H: 1,
			Image: "https://cdn.example.com/a.png", Click: "https://example.com/", Status: tsubame.StatusApproved}},
	}
	targets := []tsubame.Criteria{
		{Placements: []string{"top", "side"}, Sites: []string{"example.com"}, Countries: []string{"JP"}},
		{Sites: []string{"news.example.com", "example.com", "other.org"}, Countries: []string{"JP"}},
		{Countries: []string{"JP", "US"}, Devices: []string{"mobile"}},
		{Devices: []string{"mobile"}, KeyValues: map[string][]string{"k": {"v"}}},
		{Regions: []string{"JP-13"}, OS: []string{"ios"}, Devices: []string{"mobile"}},
		{Hours: &tsubame.HourRange{From: 1, To: 2}, KeyValues: map[string][]string{"k": {"v"}}},
	}
	for i, c := range targets {
		set.LineItems = append(set.LineItems, &tsubame.LineItem{ID: fmt.Sprint("li-", i), Campaign: "c", Priority: 1 + i,
			Weight: 1, Creatives: []string{"cr"}, Targeting: tsubame.Targeting{Criteria: c}})
	}
	ix, err := Compile(set, Options{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	filed := map[string][]string{} // list -> line items in it
	name := func(d int, id uint32) string {
		for k, v := range ix.dicts[d] {
			if v == id {
				return k
			}
		}
		return "?"
	}
	for k, d := range keyDims {
		for id, p := range ix.keyed[k] {
			for _, lines := range p {
				for _, i := range lines {
					filed[name(d, id)] = append(filed[name(d, id)], ix.lines[i].ID)
				}
			}
		}
	}
	for _, lines := range ix.open {
		for _, i := range lines {
			filed["open"] = append(filed["open"], ix.lines[i].ID)
		}
	}
	want := map[string][]string{
		"top": {"li-0"}, "side": {"li-0"}, // placements first, whatever else is targeted
		"example.com": {"li-1"}, "other.org": {"li-1"}, // news.example.com is reached through example.com
		"JP": {"li-2"}, "US": {"li-2"},
		"mobile": {"li-3"}, "JP-13": {"li-4"}, // the region before the OS and the device
		"open": {"li-5"}, // no dimension of lists targeted
	}
	if fmt.Sprint(filed) != fmt.Sprint(want) {
		t.Fatalf("filed %v, want %v", filed, want)
	}

	tests := []struct {
		req  Request
		want int // lists reached, the open one included
	}{
		{Request{Placement: "top", Site: "a.news.example.com", Country: "JP"}, 3}, // top, example.com, JP
		{Request{Placement: "bottom", Site: "example.org", Country: "FR"}, 0},
		{Request{Site: "other.org"}, 1},
		{Request{Region: "JP-13", Device: "mobile", OS: "android"}, 2},
	}
	s := ix.newScratch()
	for _, tt := range tests {
		ix.resolve(&tt.req, s)
		if got := len(s.lists) - 1; got != tt.want || s.lists[len(s.lists)-1] != &ix.open {
			t.Errorf("%+v reaches %d lists besides the open one, want %d", tt.req, got, tt.want)
		}
	}
}
