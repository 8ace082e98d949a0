package tsubame_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"tsubame"
)

// importFile is the import format in JSON: amounts as strings and
// as numbers, pacing bare and with weights, every targeting key.
const importFile = `{
  "currency": "JPY",
  "advertisers": [{"id": "adv-1", "name": "Acme", "domains": ["acme.example"]}],
  "campaigns": [
    {"id": "c-1", "name": "Winter sale — 冬のセール", "advertiser": "adv-1", "start": "2026-12-01T00:00:00+09:00", "end": "2027-01-01T00:00:00+09:00",
     "budget": {"total": "100000", "daily": 5000.5}, "pacing": "frontloaded"},
    {"id": "c-2", "advertiser": "adv-1", "timezone": "UTC",
     "pacing": {"mode": "even", "hour_weights": [0,0,0,0,0,0,1,2,3,3,3,3,3,3,3,3,3,3,3,3,2,1,0,0]}}
  ],
  "creatives": [
    {"id": "cr-1", "name": "Medium rectangle", "advertiser": "adv-1", "format": "banner", "w": 300, "h": 250, "image": "https://cdn.acme.example/a.png",
     "click": "https://acme.example/", "categories": ["IAB2"], "status": "approved"},
    {"id": "cr-2", "advertiser": "adv-1", "format": "video", "w": 640, "h": 360, "duration": 15, "mimes": ["video/mp4"],
     "media": "https://cdn.acme.example/v.mp4", "click": "https://acme.example/v"}
  ],
  "line_items": [
    {"id": "li-1", "name": "Top of the news, mobile", "campaign": "c-1", "priority": 4, "weight": 3, "cpm": 250.5, "creatives": ["cr-1", "cr-2"],
     "limits": {"impressions": {"total": 1000000, "daily": 40000}},
     "frequency": [{"impressions": 3, "per": "1h"}, {"impressions": 10, "per": "24h"}],
     "deals": ["d-1"],
     "targeting": {"placements": ["top"], "sites": ["news.example"], "apps": ["com.example.app"], "countries": ["JP"],
       "regions": ["JP-13"], "devices": ["mobile"], "os": ["ios"], "browsers": ["safari"], "hours": {"from": 9, "to": 18},
       "weekdays": ["mon", "fri"], "keyvalues": {"section": ["sports", "news"]},
       "exclude": {"sites": ["bad.example"], "keyvalues": {"kids": ["1"]}}}},
    {"id": "li-2", "campaign": "c-2", "priority": 16, "weight": 1, "cpm": "0.000001", "creatives": ["cr-1"]}
  ]
}`

func TestImportFileShape(t *testing.T) {
	var set tsubame.CampaignSet
	if err := json.Unmarshal([]byte(importFile), &set); err != nil {
		t.Fatal(err)
	}
	if err := set.Validate(); err != nil {
		t.Fatalf("the example is valid: %v", err)
	}
	c := set.Campaigns[0]
	if c.Budget.Total != 100_000*tsubame.MicrosPerUnit || c.Budget.Daily != 5_000_500_000 || c.Pacing.Mode != "frontloaded" {
		t.Fatalf("campaign read as %+v", c)
	}
	if loc, err := c.Location(); err != nil || loc.String() != tsubame.DefaultTimezone {
		t.Fatalf("default time zone: %v, %v", loc, err)
	}
	if !c.Start.Equal(time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)) {
		t.Fatalf("start read as %v", c.Start)
	}
	li := set.LineItems[0]
	if li.CPM != 250_500_000 || time.Duration(li.Frequency[1].Per) != 24*time.Hour || li.Targeting.Exclude.Sites[0] != "bad.example" ||
		li.Targeting.Hours.To != 18 || li.Targeting.KeyValues["section"][1] != "news" {
		t.Fatalf("line item read as %+v", li)
	}
	if set.LineItems[1].CPM != 1 {
		t.Fatalf("cpm \"0.000001\" read as %d micro-units", set.LineItems[1].CPM)
	}
	// Written back and read again, nothing changes; amounts are strings.
	out, err := json.Marshal(&set)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"cpm":"250.5"`, `"daily":"5000.5"`, `"pacing":"frontloaded"`, `"per":"24h"`, `"hour_weights":[0,0,0`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("export lacks %s: %s", want, out)
		}
	}
	var again tsubame.CampaignSet
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatal(err)
	}
	out2, _ := json.Marshal(&again)
	if string(out) != string(out2) {
		t.Fatalf("a second round trip differs:\n%s\n%s", out, out2)
	}
	// Deep copies share nothing.
	cl := set.Clone()
	cl.LineItems[0].Targeting.Exclude.KeyValues["kids"][0] = "0"
	cl.Campaigns[1].Pacing.HourWeights[0] = 9
	if set.LineItems[0].Targeting.Exclude.KeyValues["kids"][0] != "1" || set.Campaigns[1].Pacing.HourWeights[0] != 0 {
		t.Fatal("Clone shares memory with the original")
	}
}

func validSet(t *testing.T) *tsubame.CampaignSet {
	t.Helper()
	var set tsubame.CampaignSet
	if err := json.Unmarshal([]byte(importFile), &set); err != nil {
		t.Fatal(err)
	}
	return &set
}

// Each rule, broken alone, is reported at its path.
func TestValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(s *tsubame.CampaignSet)
		path   string
	}{
		{"currency", func(s *tsubame.CampaignSet) { s.Currency = "usd" }, "currency"},
		{"advertiser id", func(s *tsubame.CampaignSet) { s.Advertisers[0].ID = "a b" }, `advertisers[0] (id "a b").id`},
		{"advertiser name", func(s *tsubame.CampaignSet) { s.Advertisers[0].Name = "" }, `advertisers[0] (id "adv-1").name`},
		{"advertiser domain", func(s *tsubame.CampaignSet) { s.Advertisers[0].Domains = []string{"Acme.example"} }, `advertisers[0] (id "adv-1").domains[0]`},
		{"advertiser status", func(s *tsubame.CampaignSet) { s.Advertisers[0].Status = "paused" }, `advertisers[0] (id "adv-1").status: "paused" is not one of active, archived`},
		{"nil entry", func(s *tsubame.CampaignSet) { s.Advertisers = append(s.Advertisers, nil) }, `advertisers[1]`},
		{"duplicate id", func(s *tsubame.CampaignSet) { s.Creatives[1].ID = "cr-1" }, `creatives[1] (id "cr-1").id`},
		{"campaign advertiser", func(s *tsubame.CampaignSet) { s.Campaigns[0].Advertiser = "adv-9" }, `campaigns[0] (id "c-1").advertiser`},
		{"campaign name", func(s *tsubame.CampaignSet) { s.Campaigns[0].Name = "Spring\tsale" }, `campaigns[0] (id "c-1").name`},
		{"creative name", func(s *tsubame.CampaignSet) { s.Creatives[0].Name = strings.Repeat("x", 257) }, `creatives[0] (id "cr-1").name`},
		{"line item name", func(s *tsubame.CampaignSet) { s.LineItems[0].Name = "top\u2028banner" }, `line_items[0] (id "li-1").name`},
		{"campaign window", func(s *tsubame.CampaignSet) { s.Campaigns[0].End = s.Campaigns[0].Start }, `campaigns[0] (id "c-1").end`},
		{"campaign status", func(s *tsubame.CampaignSet) { s.Campaigns[0].Status = "stopped" }, `campaigns[0] (id "c-1").status: "stopped" is not one of active, paused, archived`},
		{"time zone", func(s *tsubame.CampaignSet) { s.Campaigns[0].Timezone = "Asia/Atlantis" }, `campaigns[0] (id "c-1").timezone`},
		{"local time zone", func(s *tsubame.CampaignSet) { s.Campaigns[0].Timezone = "Local" }, `campaigns[0] (id "c-1").timezone`},
		{"negative budget", func(s *tsubame.CampaignSet) { s.Campaigns[0].Budget.Total = -1 }, `campaigns[0] (id "c-1").budget.total`},
		{"daily over total", func(s *tsubame.CampaignSet) { s.Campaigns[0].Budget.Daily = s.Campaigns[0].Budget.Total + 1 }, `campaigns[0] (id "c-1").budget.daily`},
		{"budget past exact counting", func(s *tsubame.CampaignSet) { s.Campaigns[0].Budget.Total = tsubame.MaxQuotaUnits + 1 }, `campaigns[0] (id "c-1").budget.total: 9007199254.740992 is more than a budget may be`},
		{"pacing mode", func(s *tsubame.CampaignSet) { s.Campaigns[0].Pacing.Mode = "fast" }, `campaigns[0] (id "c-1").pacing.mode`},
		{"hour weights", func(s *tsubame.CampaignSet) { s.Campaigns[1].Pacing.HourWeights = []int{1, 2} }, `campaigns[1] (id "c-2").pacing.hour_weights`},
		{"asap weights", func(s *tsubame.CampaignSet) { s.Campaigns[1].Pacing.Mode = "asap" }, `campaigns[1] (id "c-2").pacing.hour_weights`},
		{"format", func(s *tsubame.CampaignSet) { s.Creatives[0].Format = "native" }, `creatives[0] (id "cr-1").format`},
		{"banner both", func(s *tsubame.CampaignSet) { s.Creatives[0].HTML = "<b>x</b>" }, `creatives[0] (id "cr-1"): a banner has an image URL or html, not both`},
		{"banner none", func(s *tsubame.CampaignSet) { s.Creatives[0].Image = "" }, `creatives[0] (id "cr-1"): a banner needs`},
		{"image scheme", func(s *tsubame.CampaignSet) { s.Creatives[0].Image = "ftp://cdn.example/a.png" }, `creatives[0] (id "cr-1").image`},
		{"click scheme", func(s *tsubame.CampaignSet) { s.Creatives[0].Click = "javascript:alert(1)" }, `creatives[0] (id "cr-1").click`},
		{"click relative", func(s *tsubame.CampaignSet) { s.Creatives[0].Click = "/landing" }, `creatives[0] (id "cr-1").click`},
		{"click missing", func(s *tsubame.CampaignSet) { s.Creatives[0].Click = "" }, `creatives[0] (id "cr-1").click`},
		{"click too long", func(s *tsubame.CampaignSet) {
			s.Creatives[0].Click = "https://acme.example/" + strings.Repeat("q", tsubame.MaxClickLength)
		}, `creatives[0] (id "cr-1").click`},
		{"size", func(s *tsubame.CampaignSet) { s.Creatives[0].W = 0 }, `creatives[0] (id "cr-1").w`},
		{"category", func(s *tsubame.CampaignSet) { s.Creatives[0].Categories = []string{"IAB0"} }, `creatives[0] (id "cr-1").categories[0]`},
		{"category past 26", func(s *tsubame.CampaignSet) { s.Creatives[0].Categories = []string{"IAB27"} }, `creatives[0] (id "cr-1").categories[0]`},
		{"status", func(s *tsubame.CampaignSet) { s.Creatives[0].Status = "live" }, `creatives[0] (id "cr-1").status`},
		{"reason too long", func(s *tsubame.CampaignSet) { s.Creatives[0].Reason = strings.Repeat("x", tsubame.MaxReasonLength+1) }, `creatives[0] (id "cr-1").reason`},
		{"reason control character", func(s *tsubame.CampaignSet) { s.Creatives[0].Reason = "bad\x1b[31m" }, `creatives[0] (id "cr-1").reason`},
		{"video media", func(s *tsubame.CampaignSet) { s.Creatives[1].Media = "" }, `creatives[1] (id "cr-2").media`},
		{"video mime", func(s *tsubame.CampaignSet) { s.Creatives[1].MIMEs = []string{"mp4"} }, `creatives[1] (id "cr-2").mimes[0]`},
		{"video duration", func(s *tsubame.CampaignSet) { s.Creatives[1].Duration = 0 }, `creatives[1] (id "cr-2").duration`},
		{"line item campaign", func(s *tsubame.CampaignSet) { s.LineItems[0].Campaign = "c-9" }, `line_items[0] (id "li-1").campaign`},
		{"line item status", func(s *tsubame.CampaignSet) { s.LineItems[0].Status = "stopped" }, `line_items[0] (id "li-1").status`},
		{"creative missing", func(s *tsubame.CampaignSet) { s.LineItems[0].Creatives[1] = "cr-9" }, `line_items[0] (id "li-1").creatives[1]`},
		{"creative twice", func(s *tsubame.CampaignSet) { s.LineItems[0].Creatives[1] = "cr-1" }, `line_items[0] (id "li-1").creatives[1]`},
		{"no creative", func(s *tsubame.CampaignSet) { s.LineItems[0].Creatives = nil }, `line_items[0] (id "li-1").creatives`},
		{"foreign creative", func(s *tsubame.CampaignSet) {
			s.Advertisers = append(s.Advertisers, &tsubame.Advertiser{ID: "adv-2", Name: "B"})
			s.Creatives[1].Advertiser = "adv-2"
		}, `line_items[0] (id "li-1").creatives[1]: creative "cr-2" belongs to advertiser "adv-2"`},
		{"priority low", func(s *tsubame.CampaignSet) { s.LineItems[0].Priority = 0 }, `line_items[0] (id "li-1").priority`},
		{"priority high", func(s *tsubame.CampaignSet) { s.LineItems[0].Priority = 17 }, `line_items[0] (id "li-1").priority`},
		{"weight", func(s *tsubame.CampaignSet) { s.LineItems[0].Weight = 0 }, `line_items[0] (id "li-1").weight`},
		{"cpm", func(s *tsubame.CampaignSet) { s.LineItems[0].CPM = -1 }, `line_items[0] (id "li-1").cpm`},
		{"cpm past the bound", func(s *tsubame.CampaignSet) { s.LineItems[0].CPM = tsubame.MaxCPM + 1 },
			`line_items[0] (id "li-1").cpm: 1000000.000001 is more than a CPM may be (1000000: reports add spend up exactly`},
		{"cpm at the int64 maximum", func(s *tsubame.CampaignSet) { s.LineItems[0].CPM = math.MaxInt64 },
			`line_items[0] (id "li-1").cpm: 9223372036854.775807 is more than a CPM may be`},
		{"line item window", func(s *tsubame.CampaignSet) {
			s.LineItems[0].Start = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
			s.LineItems[0].End = s.LineItems[0].Start.Add(-time.Second)
		}, `line_items[0] (id "li-1").end`},
		{"daily limit", func(s *tsubame.CampaignSet) { s.LineItems[0].Limits.Impressions.Daily = 2_000_000 }, `line_items[0] (id "li-1").limits.impressions.daily`},
		{"limit past exact counting", func(s *tsubame.CampaignSet) {
			s.LineItems[0].Limits.Impressions = tsubame.ImpressionLimits{Total: tsubame.MaxQuotaUnits + 1, Daily: 5}
		}, `line_items[0] (id "li-1").limits.impressions: more than 9007199254740991 impressions`},
		{"frequency per", func(s *tsubame.CampaignSet) {
			s.LineItems[0].Frequency[0].Per = tsubame.Duration(500 * time.Millisecond)
		}, `line_items[0] (id "li-1").frequency[0].per`},
		{"frequency count", func(s *tsubame.CampaignSet) { s.LineItems[0].Frequency[1].Impressions = 0 }, `line_items[0] (id "li-1").frequency[1].impressions`},
		{"deal id", func(s *tsubame.CampaignSet) { s.LineItems[0].Deals = []string{"d 1"} }, `line_items[0] (id "li-1").deals[0]`},
		{"placement id", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Placements = []string{"top/1"} }, `line_items[0] (id "li-1").targeting.placements[0]`},
		{"site", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Sites = []string{"http://news.example"} }, `line_items[0] (id "li-1").targeting.sites[0]`},
		{"country", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Countries = []string{"jp"} }, `line_items[0] (id "li-1").targeting.countries[0]`},
		{"os case", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.OS = []string{"iOS"} }, `line_items[0] (id "li-1").targeting.os[0]`},
		{"browser case", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Browsers = []string{"Mobile Safari"} }, `line_items[0] (id "li-1").targeting.browsers[0]`},
		{"region", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Regions = []string{"JP13"} }, `line_items[0] (id "li-1").targeting.regions[0]`},
		{"device", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Devices = []string{"phone"} }, `line_items[0] (id "li-1").targeting.devices[0]`},
		{"os", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.OS = []string{"Mac OS"} }, `line_items[0] (id "li-1").targeting.os[0]`},
		{"hours", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Hours.From = 18 }, `line_items[0] (id "li-1").targeting.hours`},
		{"hours range", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Hours.To = 25 }, `line_items[0] (id "li-1").targeting.hours.to`},
		{"weekday", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Weekdays = []string{"Monday"} }, `line_items[0] (id "li-1").targeting.weekdays[0]`},
		{"kv key", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.KeyValues["a b"] = []string{"x"} }, `line_items[0] (id "li-1").targeting.keyvalues["a b"]`},
		{"kv values", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.KeyValues["empty"] = nil }, `line_items[0] (id "li-1").targeting.keyvalues["empty"]`},
		{"exclude", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Exclude.Countries = []string{"XXX"} }, `line_items[0] (id "li-1").targeting.exclude.countries[0]`},
		{"control bytes", func(s *tsubame.CampaignSet) { s.LineItems[0].Targeting.Browsers = []string{"Safari\n"} }, `line_items[0] (id "li-1").targeting.browsers[0]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSet(t)
			tc.break_(s)
			err := s.Validate()
			ps := tsubame.ProblemsOf(err)
			if tsubame.ErrorCode(err) != tsubame.EINVALID || len(ps) == 0 {
				t.Fatalf("Validate = %v, want EINVALID problems", err)
			}
			if !strings.HasPrefix(ps[0].Path+": "+ps[0].Message, tc.path) {
				t.Fatalf("first problem %q: %q, want it at %q (all: %v)", ps[0].Path, ps[0].Message, tc.path, err)
			}
			if !strings.Contains(tsubame.ErrorMessage(err), tc.path) {
				t.Fatalf("client message %q does not name %q", tsubame.ErrorMessage(err), tc.path)
			}
		})
	}
}

// Every problem comes at once, in the file's order.
func TestValidateReportsEveryProblem(t *testing.T) {
	s := validSet(t)
	for i := range 5 {
		li := s.LineItems[1].Clone()
		li.ID = fmt.Sprintf("li-x%d", i)
		li.CPM = tsubame.Money(-i - 1)
		s.LineItems = append(s.LineItems, li)
	}
	s.Currency = "yen"
	s.Creatives[0].Status = "live"
	err := s.Validate()
	ps := tsubame.ProblemsOf(err)
	if len(ps) != 7 {
		t.Fatalf("%d problems, want 7: %v", len(ps), err)
	}
	if ps[0].Path != "currency" || ps[1].Path != `creatives[0] (id "cr-1").status` || ps[6].Path != `line_items[6] (id "li-x4").cpm` {
		t.Fatalf("problems out of order or misnamed: %v", err)
	}
	if !strings.HasPrefix(tsubame.ErrorMessage(err), "7 problems:\n") {
		t.Fatalf("message %q", tsubame.ErrorMessage(err))
	}
}

// Put refuses a change that breaks the set and leaves it as it was.
func TestSetPutAndDelete(t *testing.T) {
	s := validSet(t)
	before, _ := json.Marshal(s)
	moved := s.Creatives[0].Clone()
	moved.Advertiser = "adv-9"
	if err := s.Put(moved); tsubame.ErrorCode(err) != tsubame.EINVALID || !strings.Contains(err.Error(), `advertiser "adv-9" does not exist`) {
		t.Fatalf("Put of a creative of an unknown advertiser: %v", err)
	}
	if err := s.Put(&tsubame.LineItem{ID: "li-3"}); tsubame.ErrorCode(err) != tsubame.EINVALID || len(tsubame.ProblemsOf(err)) < 4 {
		t.Fatalf("Put of an empty line item: %v", err)
	}
	if err := s.Put(nil); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("Put(nil): %v", err)
	}
	var nilLI *tsubame.LineItem
	if err := s.Put(nilLI); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("Put((*LineItem)(nil)): %v", err)
	}
	if after, _ := json.Marshal(s); string(after) != string(before) {
		t.Fatal("a refused Put changed the set")
	}
	li := s.LineItems[1].Clone()
	li.Priority = 2
	if err := s.Put(li); err != nil {
		t.Fatal(err)
	}
	li.Priority = 3 // the set holds its own copy
	if got := s.Object(tsubame.KindLineItem, "li-2").(*tsubame.LineItem).Priority; got != 2 || len(s.LineItems) != 2 {
		t.Fatalf("after replacing li-2: priority %d, %d line items", got, len(s.LineItems))
	}
	if err := s.Delete(tsubame.KindCreative, "cr-2"); tsubame.ErrorCode(err) != tsubame.ECONFLICT || !strings.Contains(err.Error(), `line_item "li-1"`) {
		t.Fatalf("Delete of a creative in use: %v", err)
	}
	if err := s.Delete(tsubame.KindLineItem, "li-9"); tsubame.ErrorCode(err) != tsubame.ENOTFOUND {
		t.Fatalf("Delete of a missing line item: %v", err)
	}
	if err := s.Delete(tsubame.KindLineItem, "li-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(tsubame.KindCreative, "cr-2"); err != nil {
		t.Fatalf("Delete of a creative no longer in use: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateObjectAlone(t *testing.T) {
	err := (&tsubame.Creative{ID: "cr", Advertiser: "a", Format: "banner", W: 1, H: 1, Image: "https://x.example/a.png", Click: "https://x.example/"}).Validate()
	if err != nil {
		t.Fatal(err)
	}
	err = (&tsubame.Campaign{ID: "c", Advertiser: "a", Timezone: "Nowhere/City"}).Validate()
	if ps := tsubame.ProblemsOf(err); len(ps) != 1 || ps[0].Path != `campaign "c".timezone` {
		t.Fatalf("Validate = %v", err)
	}
}

func TestPacingJSON(t *testing.T) {
	for _, in := range []string{`"asap"`, `{"mode":"even","hour_weights":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}`} {
		var p tsubame.Pacing
		if err := json.Unmarshal([]byte(in), &p); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(p)
		if err != nil || string(out) != in {
			t.Fatalf("%s came back as %s, %v", in, out, err)
		}
	}
}

// A CPM at MaxCPM is accepted, a micro-unit more is not; at the bound, a
// report's spend (thousandths of a micro-unit: the sum of the impressions'
// CPMs in micro-units, in an int64) holds millions of impressions, and a
// whole budget's worth of spend at any CPM.
func TestCPMBound(t *testing.T) {
	s := validSet(t)
	s.LineItems[0].CPM = tsubame.MaxCPM
	if err := s.Validate(); err != nil {
		t.Fatalf("a CPM at the bound: %v", err)
	}
	if got, err := tsubame.ParseMoney("1000000"); err != nil || got != tsubame.MaxCPM {
		t.Fatalf("the documented bound 1000000 is %v, %v; MaxCPM is %v", got, err, tsubame.MaxCPM)
	}
	s.LineItems[0].CPM++
	if err := s.Validate(); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("a CPM past the bound: %v", err)
	}
	const impressions = 9_000_000
	if int64(tsubame.MaxCPM) > math.MaxInt64/impressions {
		t.Fatalf("%d impressions at MaxCPM overflow a report's spend", impressions)
	}
	if tsubame.MaxQuotaUnits > math.MaxInt64/1000 {
		t.Fatal("a whole budget's spend, in thousandths of a micro-unit, overflows a report")
	}
}

// A budget written as 0 is refused at its path, saying how to write no
// cap; left out, it is no cap; a field a budget does not take is an error.
func TestBudgetWrittenAsZero(t *testing.T) {
	for _, tc := range []struct {
		budget, want string
	}{
		{`{"total": "0"}`, `campaigns[0] (id "c-1").budget.total: 0 is no budget: for no cap, leave total out`},
		{`{"total": "100", "daily": 0}`, `campaigns[0] (id "c-1").budget.daily: 0 is no budget: for no cap, leave daily out`},
		{`{"total": "0.000000"}`, `budget.total: 0 is no budget`},
		{`{"daily": "5"}`, ""},
		{`{}`, ""},
		{`{"daily": null}`, ""},
	} {
		set := validSet(t)
		var b tsubame.Budget
		if err := json.Unmarshal([]byte(tc.budget), &b); err != nil {
			t.Fatalf("%s: %v", tc.budget, err)
		}
		set.Campaigns[0].Budget = b
		err := set.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.budget, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.budget, err, tc.want)
		}
	}
	var b tsubame.Budget
	for in, want := range map[string]string{
		`{"totl": "5"}`:          "json: field totl: unknown field",
		`{"total": "1.2345678"}`: "json: field total: amount",
	} {
		if err := json.Unmarshal([]byte(in), &b); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	// What a budget is written as is what it reads back as.
	out, _ := json.Marshal(tsubame.Budget{Total: 5 * tsubame.MicrosPerUnit})
	if err := json.Unmarshal(out, &b); err != nil || b != (tsubame.Budget{Total: 5 * tsubame.MicrosPerUnit}) {
		t.Errorf("%s read back as %+v, %v", out, b, err)
	}
}
