package decision_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/decision"
)

// compiledAt is the time every test set is compiled at: a Monday, 01:00
// UTC, 10:00 in Tokyo.
var compiledAt = time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)

// fixture builds campaign sets: one advertiser, campaign and approved
// 300×250 banner per line item unless a test says otherwise.
type fixture struct{ set tsubame.CampaignSet }

func (f *fixture) advertiser(id string) {
	f.set.Advertisers = append(f.set.Advertisers, &tsubame.Advertiser{ID: id, Name: id})
}

func (f *fixture) campaign(id, adv, tz string) *tsubame.Campaign {
	c := &tsubame.Campaign{ID: id, Advertiser: adv, Timezone: tz}
	f.set.Campaigns = append(f.set.Campaigns, c)
	return c
}

func (f *fixture) creative(id, adv string, cats ...string) *tsubame.Creative {
	c := &tsubame.Creative{
		ID: id, Advertiser: adv, Format: tsubame.FormatBanner, W: 300, H: 250,
		Image: "https://cdn.example.com/" + id + ".png", Click: "https://example.com/" + id,
		Categories: cats, Status: tsubame.StatusApproved,
	}
	f.set.Creatives = append(f.set.Creatives, c)
	return c
}

func (f *fixture) lineItem(id, camp string, prio, weight int, creatives ...string) *tsubame.LineItem {
	l := &tsubame.LineItem{ID: id, Campaign: camp, Priority: prio, Weight: weight, CPM: 2 * tsubame.MicrosPerUnit, Creatives: creatives}
	f.set.LineItems = append(f.set.LineItems, l)
	return l
}

// single adds advertiser, campaign, creative and line item named after id.
func (f *fixture) single(id string, prio, weight int, cats ...string) *tsubame.LineItem {
	f.advertiser("a-" + id)
	f.campaign("c-"+id, "a-"+id, "")
	f.creative("cr-"+id, "a-"+id, cats...)
	return f.lineItem(id, "c-"+id, prio, weight, "cr-"+id)
}

func (f *fixture) compile(t testing.TB) *decision.Index {
	t.Helper()
	ix, err := decision.Compile(&f.set, decision.Options{Now: compiledAt})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return ix
}

func ids(ds []decision.Decision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Line.ID)
	}
	return out
}

func TestTargeting(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	base := decision.Request{
		Placement: "top", Site: "news.example.com", App: "com.example.app", Country: "JP", Region: "JP-13",
		Device: "mobile", OS: "ios", Browser: "safari",
		KeyValues: []decision.KeyValue{{"section", "sports"}, {"lang", "ja"}},
		Time:      compiledAt, // Monday 10:00 in Tokyo
	}
	type req = decision.Request
	tests := []struct {
		name  string
		tz    string
		tg    tsubame.Targeting
		deals []string
		edit  func(r *req)
		want  bool
	}{
		{name: "no targeting", want: true},
		{name: "placement any-of", tg: tg(func(c *tsubame.Criteria) { c.Placements = []string{"side", "top"} }), want: true},
		{name: "placement other", tg: tg(func(c *tsubame.Criteria) { c.Placements = []string{"side"} }), want: false},
		{name: "placement excluded", tg: ex(func(c *tsubame.Criteria) { c.Placements = []string{"top"} }), want: false},
		{name: "placement exclude other", tg: ex(func(c *tsubame.Criteria) { c.Placements = []string{"side"} }), want: true},
		{name: "site exact", tg: tg(func(c *tsubame.Criteria) { c.Sites = []string{"news.example.com"} }), want: true},
		{name: "site suffix", tg: tg(func(c *tsubame.Criteria) { c.Sites = []string{"example.com"} }), want: true},
		{name: "site deeper target", tg: tg(func(c *tsubame.Criteria) { c.Sites = []string{"a.news.example.com"} }), want: false},
		{name: "site suffix by label only", tg: tg(func(c *tsubame.Criteria) { c.Sites = []string{"ws.example.com"} }), want: false},
		{name: "site suffix and domain listed", tg: tg(func(c *tsubame.Criteria) { c.Sites = []string{"news.example.com", "example.com"} }), want: true},
		{name: "site no site in request", tg: tg(func(c *tsubame.Criteria) { c.Sites = []string{"example.com"} }), edit: func(r *req) { r.Site = "" }, want: false},
		{name: "site excluded by suffix", tg: ex(func(c *tsubame.Criteria) { c.Sites = []string{"example.com"} }), want: false},
		{name: "site exclude other", tg: ex(func(c *tsubame.Criteria) { c.Sites = []string{"other.com"} }), want: true},
		{name: "app", tg: tg(func(c *tsubame.Criteria) { c.Apps = []string{"com.example.app"} }), want: true},
		{name: "app other", tg: tg(func(c *tsubame.Criteria) { c.Apps = []string{"com.other"} }), want: false},
		{name: "app excluded", tg: ex(func(c *tsubame.Criteria) { c.Apps = []string{"com.example.app"} }), want: false},
		{name: "country", tg: tg(func(c *tsubame.Criteria) { c.Countries = []string{"US", "JP"} }), want: true},
		{name: "country other", tg: tg(func(c *tsubame.Criteria) { c.Countries = []string{"US"} }), want: false},
		{name: "country unknown in request", tg: tg(func(c *tsubame.Criteria) { c.Countries = []string{"JP"} }), edit: func(r *req) { r.Country = "" }, want: false},
		{name: "country excluded", tg: ex(func(c *tsubame.Criteria) { c.Countries = []string{"JP"} }), want: false},
		{name: "region", tg: tg(func(c *tsubame.Criteria) { c.Regions = []string{"JP-13"} }), want: true},
		{name: "region other", tg: tg(func(c *tsubame.Criteria) { c.Regions = []string{"JP-27"} }), want: false},
		{name: "region excluded", tg: ex(func(c *tsubame.Criteria) { c.Regions = []string{"JP-13"} }), want: false},
		{name: "device", tg: tg(func(c *tsubame.Criteria) { c.Devices = []string{"mobile", "tablet"} }), want: true},
		{name: "device other", tg: tg(func(c *tsubame.Criteria) { c.Devices = []string{"desktop"} }), want: false},
		{name: "device excluded", tg: ex(func(c *tsubame.Criteria) { c.Devices = []string{"mobile"} }), want: false},
		{name: "os", tg: tg(func(c *tsubame.Criteria) { c.OS = []string{"ios"} }), want: true},
		{name: "os other", tg: tg(func(c *tsubame.Criteria) { c.OS = []string{"android"} }), want: false},
		{name: "os excluded", tg: ex(func(c *tsubame.Criteria) { c.OS = []string{"ios"} }), want: false},
		{name: "browser", tg: tg(func(c *tsubame.Criteria) { c.Browsers = []string{"safari"} }), want: true},
		{name: "browser other", tg: tg(func(c *tsubame.Criteria) { c.Browsers = []string{"chrome"} }), want: false},
		{name: "browser excluded", tg: ex(func(c *tsubame.Criteria) { c.Browsers = []string{"safari"} }), want: false},
		{name: "hours in Tokyo", tg: hours(9, 11), want: true},           // 10:00 JST
		{name: "hours in UTC", tz: "UTC", tg: hours(9, 11), want: false}, // 01:00 UTC
		{name: "hours end excluded", tg: hours(8, 10), want: false},
		{name: "hours across midnight, late", tz: "UTC", tg: hours(22, 6), edit: func(r *req) { r.Time = at("2026-11-23T23:30:00Z") }, want: true},
		{name: "hours across midnight, early", tz: "UTC", tg: hours(22, 6), want: true},
		{name: "hours across midnight, outside", tz: "UTC", tg: hours(22, 6), edit: func(r *req) { r.Time = at("2026-11-23T12:00:00Z") }, want: false},
		{name: "hours to 24", tz: "UTC", tg: hours(20, 24), edit: func(r *req) { r.Time = at("2026-11-23T23:59:59Z") }, want: true},
		{name: "hours excluded", tg: tsubame.Targeting{Exclude: &tsubame.Criteria{Hours: &tsubame.HourRange{From: 10, To: 11}}}, want: false},
		{name: "weekday in Tokyo", tg: days("mon"), edit: func(r *req) { r.Time = at("2026-11-22T23:30:00Z") }, want: true}, // Sunday UTC, Monday 08:30 JST
		{name: "weekday in UTC", tz: "UTC", tg: days("mon"), edit: func(r *req) { r.Time = at("2026-11-22T23:30:00Z") }, want: false},
		{name: "weekday in New York", tz: "America/New_York", tg: days("sun"), want: true},                                                                                                                      // Sunday 20:00 EST
		{name: "weekday and hours across midnight, next day", tz: "UTC", tg: tsubame.Targeting{Criteria: tsubame.Criteria{Weekdays: []string{"sun"}, Hours: &tsubame.HourRange{From: 22, To: 6}}}, want: false}, // Monday 01:00 UTC
		{name: "weekday and hours across midnight, same day", tz: "UTC", tg: tsubame.Targeting{Criteria: tsubame.Criteria{Weekdays: []string{"mon"}, Hours: &tsubame.HourRange{From: 22, To: 6}}}, want: true},
		{name: "weekday excluded", tg: tsubame.Targeting{Exclude: &tsubame.Criteria{Weekdays: []string{"mon"}}}, want: false},
		{name: "weekday and hours", tz: "UTC", tg: tsubame.Targeting{Criteria: tsubame.Criteria{Weekdays: []string{"mon"}, Hours: &tsubame.HourRange{From: 0, To: 2}}}, want: true},
		{name: "keyvalue", tg: kv("section", "news", "sports"), want: true},
		{name: "keyvalue other value", tg: kv("section", "news"), want: false},
		{name: "keyvalue missing key", tg: kv("genre", "rock"), want: false},
		{name: "keyvalues every key", tg: tg(func(c *tsubame.Criteria) {
			c.KeyValues = map[string][]string{"section": {"sports"}, "lang": {"ja", "en"}}
		}), want: true},
		{name: "keyvalues one key fails", tg: tg(func(c *tsubame.Criteria) {
			c.KeyValues = map[string][]string{"section": {"sports"}, "lang": {"en"}}
		}), want: false},
		{name: "keyvalue value of another key", tg: kv("lang", "sports"), want: false},
		{name: "keyvalue excluded", tg: ex(func(c *tsubame.Criteria) { c.KeyValues = map[string][]string{"lang": {"ja"}} }), want: false},
		{name: "keyvalue exclude other", tg: ex(func(c *tsubame.Criteria) { c.KeyValues = map[string][]string{"lang": {"en"}} }), want: true},
		{name: "deal offered", deals: []string{"d-1", "d-2"}, edit: func(r *req) { r.Deals = []string{"d-9", "d-2"} }, want: true},
		{name: "deal not offered", deals: []string{"d-1"}, edit: func(r *req) { r.Deals = []string{"d-2"} }, want: false},
		{name: "deal, none offered", deals: []string{"d-1"}, want: false},
		{name: "no deals, deals offered", edit: func(r *req) { r.Deals = []string{"d-1"} }, want: true},
		{name: "format and size", edit: func(r *req) { r.Format, r.W, r.H = "banner", 300, 250 }, want: true},
		{name: "format other", edit: func(r *req) { r.Format = "video" }, want: false},
		{name: "size other", edit: func(r *req) { r.W, r.H = 728, 90 }, want: false},
		{name: "everything", tz: "Asia/Tokyo", tg: tsubame.Targeting{
			Criteria: tsubame.Criteria{
				Placements: []string{"top"}, Sites: []string{"example.com"}, Apps: []string{"com.example.app"},
				Countries: []string{"JP"}, Regions: []string{"JP-13"}, Devices: []string{"mobile"}, OS: []string{"ios"},
				Browsers: []string{"safari"}, Hours: &tsubame.HourRange{From: 9, To: 18}, Weekdays: []string{"mon", "tue"},
				KeyValues: map[string][]string{"section": {"sports"}},
			},
			Exclude: &tsubame.Criteria{Sites: []string{"bad.example.com"}, Countries: []string{"US"}},
		}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fixture
			l := f.single("li", 1, 1)
			f.set.Campaigns[0].Timezone = tt.tz
			l.Targeting = tt.tg
			l.Deals = tt.deals
			ix := f.compile(t)
			r := base
			if tt.edit != nil {
				tt.edit(&r)
			}
			got := ix.Decide(&r, nil, rand.New(rand.NewPCG(1, 2)))
			if (len(got) == 1) != tt.want {
				t.Fatalf("served %v, want served %v", ids(got), tt.want)
			}
		})
	}
}

func tg(set func(c *tsubame.Criteria)) tsubame.Targeting {
	var t tsubame.Targeting
	set(&t.Criteria)
	return t
}

func ex(set func(c *tsubame.Criteria)) tsubame.Targeting {
	var t tsubame.Targeting
	t.Exclude = &tsubame.Criteria{}
	set(t.Exclude)
	return t
}

func hours(from, to int) tsubame.Targeting {
	return tsubame.Targeting{Criteria: tsubame.Criteria{Hours: &tsubame.HourRange{From: from, To: to}}}
}

func days(d ...string) tsubame.Targeting {
	return tsubame.Targeting{Criteria: tsubame.Criteria{Weekdays: d}}
}

func kv(key string, vals ...string) tsubame.Targeting {
	return tsubame.Targeting{Criteria: tsubame.Criteria{KeyValues: map[string][]string{key: vals}}}
}

func TestPriority(t *testing.T) {
	tests := []struct {
		name    string
		country string
		count   int
		want    []string
	}{
		{name: "highest priority first", country: "JP", want: []string{"p1"}},
		{name: "next priority when the first does not qualify", country: "US", want: []string{"p3"}},
		{name: "lower priorities fill the remaining slots", country: "JP", count: 2, want: []string{"p1", "p3"}},
		{name: "no line item qualifies", country: "FR", want: nil},
	}
	var f fixture
	f.single("p1", 1, 1).Targeting = tg(func(c *tsubame.Criteria) { c.Countries = []string{"JP"} })
	f.single("p3", 3, 1).Targeting = tg(func(c *tsubame.Criteria) { c.Countries = []string{"JP", "US"} })
	f.single("p16", 16, 1_000_000).Targeting = tg(func(c *tsubame.Criteria) { c.Countries = []string{"DE"} })
	ix := f.compile(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(7, 7))
			for range 100 {
				got := ids(ix.Decide(&decision.Request{Placement: "top", Country: tt.country, Time: compiledAt, Count: tt.count}, nil, rnd))
				if fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestWeights(t *testing.T) {
	var f fixture
	f.single("three", 5, 3)
	f.single("one", 5, 1)
	f.single("later", 6, 100)
	ix := f.compile(t)
	rnd := rand.New(rand.NewPCG(2026, 30))
	const n = 20_000
	served := map[string]int{}
	out := make([]decision.Decision, 0, 1)
	for range n {
		out = ix.Decide(&decision.Request{Placement: "top", Time: compiledAt}, out[:0], rnd)
		if len(out) != 1 {
			t.Fatalf("got %d decisions", len(out))
		}
		served[out[0].Line.ID]++
	}
	if share := float64(served["three"]) / n; share < 0.73 || share > 0.77 {
		t.Fatalf("the 3:1 pair served %v: share %.4f, want 0.75 ± 0.02", served, share)
	}
	if served["later"] != 0 {
		t.Fatalf("a lower priority served while a higher one qualified: %v", served)
	}
}

func TestSeparation(t *testing.T) {
	var f fixture
	f.advertiser("a")
	f.campaign("c-a", "a", "")
	f.creative("cr-a1", "a", "IAB3")
	f.creative("cr-a2", "a", "IAB4")
	f.lineItem("a1", "c-a", 1, 1, "cr-a1")
	f.lineItem("a2", "c-a", 1, 1, "cr-a2")
	f.single("b", 1, 1, "IAB1", "IAB2")
	f.single("c", 1, 1, "IAB2")
	f.single("d", 2, 1, "IAB1")
	f.single("e", 2, 1, "IAB7")
	f.single("g", 3, 1) // no category
	ix := f.compile(t)
	// With b (IAB1, IAB2) chosen, c and d cannot join: a, b, e, g. With c
	// chosen instead: a, c, d, e, g.
	tests := []struct {
		count, least, most int
	}{
		{1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {4, 4, 4}, {16, 4, 5},
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.count), func(t *testing.T) {
			sizes := map[int]bool{}
			for range 200 {
				got := ix.Decide(&decision.Request{Placement: "top", Time: compiledAt, Count: tt.count}, nil, rnd)
				if len(got) < tt.least || len(got) > tt.most {
					t.Fatalf("count %d: got %v, want %d to %d decisions", tt.count, ids(got), tt.least, tt.most)
				}
				sizes[len(got)] = true
				advs, cats := map[string]bool{}, map[string]bool{}
				for _, d := range got {
					if advs[d.Line.Advertiser] {
						t.Fatalf("advertiser %s twice in %v", d.Line.Advertiser, ids(got))
					}
					advs[d.Line.Advertiser] = true
					for _, c := range d.Creative.Categories {
						if cats[c] {
							t.Fatalf("category %s twice in %v", c, ids(got))
						}
						cats[c] = true
					}
					if d.Creative.Advertiser != d.Line.Advertiser {
						t.Fatalf("creative %s of %s served for line item %s", d.Creative.ID, d.Creative.Advertiser, d.Line.ID)
					}
				}
				for i := 1; i < len(got); i++ {
					if got[i].Line.Priority < got[i-1].Line.Priority {
						t.Fatalf("priorities out of order: %v", ids(got))
					}
				}
			}
			if len(sizes) != tt.most-tt.least+1 {
				t.Fatalf("answer sizes seen %v, want each of %d to %d", sizes, tt.least, tt.most)
			}
		})
	}
}

func TestFlightsAndStatus(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		name  string
		edit  func(f *fixture)
		when  time.Time
		lines int // in the index
		serve bool
	}{
		{name: "open flight", when: compiledAt, lines: 1, serve: true},
		{name: "campaign ended", edit: func(f *fixture) { f.set.Campaigns[0].End = compiledAt }, when: compiledAt, lines: 0},
		{name: "line item ended", edit: func(f *fixture) { f.set.LineItems[0].End = compiledAt.Add(-time.Second) }, when: compiledAt, lines: 0},
		{name: "line item ends later", edit: func(f *fixture) { f.set.LineItems[0].End = compiledAt.Add(day) }, when: compiledAt.Add(day - 1), lines: 1, serve: true},
		{name: "line item ended after compiling", edit: func(f *fixture) { f.set.LineItems[0].End = compiledAt.Add(day) }, when: compiledAt.Add(day), lines: 1, serve: false},
		{name: "campaign starts later", edit: func(f *fixture) { f.set.Campaigns[0].Start = compiledAt.Add(day) }, when: compiledAt, lines: 1, serve: false},
		{name: "campaign has started", edit: func(f *fixture) { f.set.Campaigns[0].Start = compiledAt.Add(day) }, when: compiledAt.Add(day), lines: 1, serve: true},
		{name: "windows do not meet", edit: func(f *fixture) {
			f.set.Campaigns[0].End = compiledAt.Add(day)
			f.set.LineItems[0].Start = compiledAt.Add(2 * day)
		}, when: compiledAt, lines: 0},
		{name: "line item paused", edit: func(f *fixture) { f.set.LineItems[0].Status = tsubame.StatusPaused }, when: compiledAt, lines: 0},
		{name: "line item active", edit: func(f *fixture) { f.set.LineItems[0].Status = tsubame.StatusActive }, when: compiledAt, lines: 1, serve: true},
		{name: "line item archived", edit: func(f *fixture) { f.set.LineItems[0].Status = tsubame.StatusArchived }, when: compiledAt, lines: 0},
		{name: "campaign paused", edit: func(f *fixture) { f.set.Campaigns[0].Status = tsubame.StatusPaused }, when: compiledAt, lines: 0},
		{name: "campaign active", edit: func(f *fixture) { f.set.Campaigns[0].Status = tsubame.StatusActive }, when: compiledAt, lines: 1, serve: true},
		{name: "campaign archived", edit: func(f *fixture) { f.set.Campaigns[0].Status = tsubame.StatusArchived }, when: compiledAt, lines: 0},
		{name: "advertiser archived", edit: func(f *fixture) { f.set.Advertisers[0].Status = tsubame.StatusArchived }, when: compiledAt, lines: 0},
		{name: "advertiser active", edit: func(f *fixture) { f.set.Advertisers[0].Status = tsubame.StatusActive }, when: compiledAt, lines: 1, serve: true},
		{name: "creative pending", edit: func(f *fixture) { f.set.Creatives[0].Status = tsubame.StatusPending }, when: compiledAt, lines: 0},
		{name: "creative rejected", edit: func(f *fixture) { f.set.Creatives[0].Status = tsubame.StatusRejected }, when: compiledAt, lines: 0},
		{name: "creative archived", edit: func(f *fixture) { f.set.Creatives[0].Archived = true }, when: compiledAt, lines: 0},
		{name: "creative status empty is pending", edit: func(f *fixture) { f.set.Creatives[0].Status = "" }, when: compiledAt, lines: 0},
		{name: "excluded every hour", edit: func(f *fixture) {
			f.set.LineItems[0].Targeting.Exclude = &tsubame.Criteria{Hours: &tsubame.HourRange{From: 0, To: 24}}
		}, when: compiledAt, lines: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fixture
			f.single("li", 1, 1)
			if tt.edit != nil {
				tt.edit(&f)
			}
			ix := f.compile(t)
			if ix.Len() != tt.lines {
				t.Fatalf("index holds %d line items, want %d", ix.Len(), tt.lines)
			}
			got := ix.Decide(&decision.Request{Placement: "top", Time: tt.when}, nil, nil)
			if (len(got) == 1) != tt.serve {
				t.Fatalf("served %v, want served %v", ids(got), tt.serve)
			}
		})
	}
}

func TestOnlyApprovedCreativesServe(t *testing.T) {
	var f fixture
	f.single("li", 1, 1)
	f.creative("cr-pending", "a-li").Status = tsubame.StatusPending
	f.creative("cr-ok", "a-li")
	f.set.LineItems[0].Creatives = append(f.set.LineItems[0].Creatives, "cr-pending", "cr-ok")
	ix := f.compile(t)
	rnd := rand.New(rand.NewPCG(5, 5))
	seen := map[string]int{}
	for range 1000 {
		for _, d := range ix.Decide(&decision.Request{Placement: "top", Time: compiledAt}, nil, rnd) {
			seen[d.Creative.ID]++
		}
	}
	if seen["cr-pending"] != 0 || seen["cr-li"] == 0 || seen["cr-ok"] == 0 {
		t.Fatalf("creatives served: %v", seen)
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		set  func() *tsubame.CampaignSet
	}{
		{"no set", func() *tsubame.CampaignSet { return nil }},
		{"priority out of range", func() *tsubame.CampaignSet {
			var f fixture
			f.single("li", 17, 1)
			return &f.set
		}},
		{"missing campaign", func() *tsubame.CampaignSet {
			var f fixture
			f.single("li", 1, 1).Campaign = "nowhere"
			return &f.set
		}},
		{"creative of another advertiser", func() *tsubame.CampaignSet {
			var f fixture
			f.single("x", 1, 1)
			f.single("y", 1, 1).Creatives = []string{"cr-x"}
			return &f.set
		}},
		{"unknown time zone", func() *tsubame.CampaignSet {
			var f fixture
			f.single("li", 1, 1)
			f.set.Campaigns[0].Timezone = "Mars/Olympus"
			return &f.set
		}},
		{"zero weight", func() *tsubame.CampaignSet {
			var f fixture
			f.single("li", 1, 0)
			return &f.set
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, err := decision.Compile(tt.set(), decision.Options{Now: compiledAt})
			if err == nil || ix != nil {
				t.Fatalf("Compile = %v, %v; want an error", ix, err)
			}
			if code := tsubame.ErrorCode(err); code != tsubame.EINVALID {
				t.Fatalf("error code %q (%v), want %q", code, err, tsubame.EINVALID)
			}
		})
	}
}

// denyCounters refuses the line items it names and records what it is
// asked.
type denyCounters struct {
	deny  map[string]bool
	mu    sync.Mutex
	asked []string
}

func (d *denyCounters) Allow(l *decision.Line, _ *decision.Request, _ int, _ time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, l.ID)
	return !d.deny[l.ID]
}

func TestCountersAreAsked(t *testing.T) {
	tests := []struct {
		name  string
		deny  []string
		count int
		want  string // served
		asked string
	}{
		{name: "allowed", want: "[first]", asked: "[first]"},
		{name: "denied: the next priority", deny: []string{"first"}, want: "[next]", asked: "[first next]"},
		{name: "denied: the other of the same priority", deny: []string{"next"}, count: 2, want: "[first other]", asked: "[first next other]"},
		{name: "all denied", deny: []string{"first", "next", "other", "never"}, want: "[]", asked: "[first next other never]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fixture
			f.single("first", 1, 1)
			f.single("next", 2, 1_000_000) // drawn first while it qualifies
			f.single("other", 2, 1)
			f.single("never", 3, 1).Targeting = tg(func(c *tsubame.Criteria) { c.Countries = []string{"JP"} })
			f.single("lowest", 4, 1).Targeting = tg(func(c *tsubame.Criteria) { c.Countries = []string{"US"} })
			counters := &denyCounters{deny: map[string]bool{}}
			for _, id := range tt.deny {
				counters.deny[id] = true
			}
			ix, err := decision.Compile(&f.set, decision.Options{Now: compiledAt, Counters: counters})
			if err != nil {
				t.Fatal(err)
			}
			// A fixed seed: "next" outweighs "other" a million to one.
			got := ids(ix.Decide(&decision.Request{Placement: "top", Country: "JP", Time: compiledAt, Count: tt.count}, nil, rand.New(rand.NewPCG(1, 1))))
			if fmt.Sprint(got) != tt.want {
				t.Fatalf("served %v, want %s", got, tt.want)
			}
			if fmt.Sprint(counters.asked) != tt.asked {
				t.Fatalf("Counters asked about %v, want %s: only line items about to serve", counters.asked, tt.asked)
			}
		})
	}
}

func TestConcurrentDecide(t *testing.T) {
	ix := benchIndex(t, 2_000)
	reqs := benchRequests(500)
	// Whether anything qualifies does not depend on the random draws.
	want := make([]bool, len(reqs))
	for i := range reqs {
		want[i] = len(ix.Decide(&reqs[i], nil, rand.New(rand.NewPCG(1, uint64(i))))) > 0
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), 9))
			out := make([]decision.Decision, 0, decision.MaxCount)
			for k := range 3 * len(reqs) {
				i := (k + g*37) % len(reqs)
				out = ix.Decide(&reqs[i], out[:0], rnd)
				if len(out) > 0 != want[i] || len(out) > max(reqs[i].Count, 1) {
					errs <- fmt.Sprintf("request %d: %d decisions, sequentially some: %v", i, len(out), want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestRequestDefaults(t *testing.T) {
	var f fixture
	for i := range 20 {
		f.single(fmt.Sprint("li-", i), 1, 1)
	}
	now := time.Now()
	f.set.Campaigns[0].Start, f.set.Campaigns[0].End = now.Add(-time.Hour), now.Add(time.Hour)
	ix, err := decision.Compile(&f.set, decision.Options{}) // compiled now
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(6, 6))
	tests := []struct {
		name  string
		count int
		want  int
	}{
		{"count 0 is 1", 0, 1},
		{"count 3", 3, 3},
		{"count beyond MaxCount", 100, decision.MaxCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []decision.Decision{{}}
			got := ix.Decide(&decision.Request{Placement: "top", Count: tt.count}, prefix, rnd)
			if len(got) != 1+tt.want || got[0].Line != nil {
				t.Fatalf("got %d decisions after the caller's one, want %d (and the caller's kept)", len(got)-1, tt.want)
			}
		})
	}
	// A zero time is now: li-0's campaign runs from an hour ago to an hour on.
	seen := false
	for range 500 {
		for _, d := range ix.Decide(&decision.Request{Placement: "top"}, nil, rnd) {
			seen = seen || d.Line.ID == "li-0"
		}
	}
	if !seen {
		t.Fatal("a request without a time did not reach the line item running now")
	}
}

// An auction's narrowing: sizes (any of several), a video's MIME types and
// duration, blocked categories (a top-level one blocks its subcategories)
// blocked advertiser domains and blocked apps; a Line carries its
// advertiser's domains.
func TestAuctionNarrowing(t *testing.T) {
	var f fixture
	f.single("li-banner", 1, 1, "IAB7-39")
	f.set.Advertisers[0].Domains = []string{"brand.example"}
	f.advertiser("a-video")
	f.campaign("c-video", "a-video", "")
	f.set.Creatives = append(f.set.Creatives, &tsubame.Creative{ID: "cr-video", Advertiser: "a-video", Format: tsubame.FormatVideo,
		W: 640, H: 360, Duration: 15, MIMEs: []string{"video/mp4"}, Media: "https://cdn.example.com/v.mp4",
		Click: "https://example.com/v", Status: tsubame.StatusApproved, App: "com.example.game"})
	f.lineItem("li-video", "c-video", 1, 1, "cr-video")
	ix := f.compile(t)
	decide := func(r decision.Request) []string {
		r.Time = compiledAt
		return ids(ix.Decide(&r, nil, rand.New(rand.NewPCG(1, 2))))
	}
	// Long block lists: the value that blocks comes after hundreds of
	// others (exchanges send lists of hundreds or thousands).
	long := func(last string) []string {
		l := make([]string, 0, 1001)
		for i := range 1000 {
			l = append(l, fmt.Sprintf("other-%d.example", i))
		}
		return append(l, last)
	}
	for _, tc := range []struct {
		name string
		req  decision.Request
		want string // the line item decided, "" for none
	}{
		{"category blocked last of 1,001", decision.Request{Format: "banner", BlockedCategories: long("IAB7")}, ""},
		{"domain blocked last of 1,001", decision.Request{Format: "banner", BlockedDomains: long("brand.example")}, ""},
		{"app blocked last of 1,001", decision.Request{Format: "video", BlockedApps: long("com.example.game")}, ""},
		{"1,001 other domains blocked", decision.Request{Format: "banner", BlockedDomains: long("x.example")}, "li-banner"},
		{"banner sizes, one fits", decision.Request{Format: "banner", Sizes: []decision.Size{{728, 90}, {300, 250}}}, "li-banner"},
		{"banner sizes, none fits", decision.Request{Format: "banner", Sizes: []decision.Size{{728, 90}, {300, 600}}}, ""},
		{"sizes win over w and h", decision.Request{Format: "banner", W: 728, H: 90, Sizes: []decision.Size{{300, 250}}}, "li-banner"},
		{"category blocked", decision.Request{Format: "banner", BlockedCategories: []string{"IAB7-39"}}, ""},
		{"its top-level category blocked", decision.Request{Format: "banner", BlockedCategories: []string{"IAB25", "IAB7"}}, ""},
		{"another subcategory blocked", decision.Request{Format: "banner", BlockedCategories: []string{"IAB7-38"}}, "li-banner"},
		{"advertiser domain blocked", decision.Request{Format: "banner", BlockedDomains: []string{"other.example", "brand.example"}}, ""},
		{"another domain blocked", decision.Request{Format: "banner", BlockedDomains: []string{"brand.example.com"}}, "li-banner"},
		{"video fits", decision.Request{Format: "video", MIMEs: []string{"video/webm", "video/mp4"}, MinDuration: 5, MaxDuration: 30}, "li-video"},
		{"video type refused", decision.Request{Format: "video", MIMEs: []string{"video/webm"}}, ""},
		{"video too long", decision.Request{Format: "video", MaxDuration: 10}, ""},
		{"video too short", decision.Request{Format: "video", MinDuration: 20}, ""},
		{"its app blocked", decision.Request{Format: "video", BlockedApps: []string{"com.example.other", "com.example.game"}}, ""},
		{"another app blocked", decision.Request{Format: "video", BlockedApps: []string{"com.example.gam"}}, "li-video"},
		{"a banner promoting no app, apps blocked", decision.Request{Format: "banner", BlockedApps: []string{"com.example.game"}}, "li-banner"},
	} {
		got := decide(tc.req)
		if len(got) > 1 || tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, got, tc.want)
		}
	}
	r := decision.Request{Format: "banner", Time: compiledAt}
	if ds := ix.Decide(&r, nil, nil); len(ds) != 1 || len(ds[0].Line.Domains) != 1 || ds[0].Line.Domains[0] != "brand.example" {
		t.Fatalf("the Line's domains: %+v", ds)
	}
}

// Floors: an open line item bids at or above MinCPM and not in a private
// auction; a deal's line item at or above that deal's minimum.
func TestAuctionFloors(t *testing.T) {
	var f fixture
	f.single("li-open", 1, 1).CPM = 2 * tsubame.MicrosPerUnit
	f.single("li-deal", 1, 1).Deals = []string{"deal-a", "deal-b"}
	f.set.LineItems[1].CPM = 5 * tsubame.MicrosPerUnit
	ix := f.compile(t)
	decide := func(r decision.Request) []string {
		r.Time, r.Count = compiledAt, 2
		return ids(ix.Decide(&r, nil, rand.New(rand.NewPCG(1, 2))))
	}
	m := func(units int64) tsubame.Money { return tsubame.Money(units * tsubame.MicrosPerUnit) }
	for _, tc := range []struct {
		name string
		req  decision.Request
		want string
	}{
		{"open at the floor", decision.Request{MinCPM: m(2)}, "li-open"},
		{"open under the floor", decision.Request{MinCPM: m(2) + 1}, ""},
		{"deal offered", decision.Request{Deals: []string{"deal-b"}, DealMins: []tsubame.Money{m(5)}}, "li-deal li-open"},
		{"deal under its floor", decision.Request{Deals: []string{"deal-b"}, DealMins: []tsubame.Money{m(6)}}, "li-open"},
		{"one of two deals clears", decision.Request{Deals: []string{"deal-a", "deal-b"}, DealMins: []tsubame.Money{m(9), m(1)}}, "li-deal li-open"},
		{"private auction", decision.Request{Deals: []string{"deal-a"}, PrivateAuction: true}, "li-deal"},
		{"private auction, no deal", decision.Request{PrivateAuction: true}, ""},
	} {
		got := decide(tc.req)
		slices.Sort(got)
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, got, tc.want)
		}
	}
}
