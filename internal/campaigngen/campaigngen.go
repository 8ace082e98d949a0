// Package campaigngen generates large campaign sets and the requests that
// go with them, from a seed: the account of a long-tail ad server (line
// items split per placement, site, keyword, region or deal) for tests,
// benchmarks and load tests of a million line items. The same seed and size
// give the same set and the same requests on every machine.
//
// The mix (per line item, independently): 56 % target placements (1 to 5
// of n/100), 32 % sites (1 to 3 of n/50), 10 % apps, 2 % none (run of
// network); half name countries
// (1 to 3, skewed to the first few), 15 % regions; 30 % devices, 15 % an
// OS, 5 % a browser; 40 % key-values (a section of 30, a keyword of n/10
// or an audience segment of 1,000); 10 % deals (of n/200); 15 % hours,
// 10 % weekdays; 10 % exclude a placement, a site or a section. Priorities
// are those of guaranteed, standard and house tiers; 30 % have frequency
// caps, 20 % impression limits; every campaign has a budget.
//
// It imports the domain only.
package campaigngen

import (
	"fmt"
	"math/rand/v2"
	"time"

	"tsubame"
)

// Size is the shape of a generated set: derived from the line items
// unless set.
type Size struct {
	LineItems   int
	Advertisers int // n/500, at least 10
	Campaigns   int // n/20, at least Advertisers
	Placements  int // n/100, at least 100
	Sites       int // n/50, at least 100
	Keywords    int // n/10, at least 100
	Deals       int // n/200, at least 10
}

func (s Size) withDefaults() Size {
	n := s.LineItems
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&s.Advertisers, max(n/500, 10))
	def(&s.Campaigns, max(n/20, s.Advertisers))
	def(&s.Placements, max(n/100, 100))
	def(&s.Sites, max(n/50, 100))
	def(&s.Keywords, max(n/10, 100))
	def(&s.Deals, max(n/200, 10))
	return s
}

// Countries are the countries of generated sets, the first the likeliest.
var Countries = []string{"JP", "US", "KR", "TW", "GB", "DE", "FR", "IN", "ID", "TH", "VN", "PH", "MY", "SG", "AU",
	"CA", "MX", "BR", "ES", "IT", "NL", "SE", "PL", "TR", "AE", "SA", "ZA", "NG", "HK", "NZ"}

var (
	sections = []string{"news", "sports", "business", "tech", "life", "travel", "food", "games", "music", "movies",
		"cars", "money", "health", "science", "books", "fashion", "home", "pets", "kids", "weather", "politics",
		"world", "local", "culture", "art", "anime", "manga", "beauty", "jobs", "education"}
	oses     = []string{"ios", "android", "windows", "macos", "linux"}
	browsers = []string{"safari", "chrome", "firefox", "edge"}
	zones    = []string{"", "UTC", "Asia/Tokyo", "America/New_York"}
)

// Placement, Site, Keyword and Deal name the generated values.
func Placement(i int) string { return fmt.Sprintf("pl-%06d", i) }
func Site(i int) string      { return fmt.Sprintf("site%06d.example", i) }
func Keyword(i int) string   { return fmt.Sprintf("kw%07d", i) }
func Deal(i int) string      { return fmt.Sprintf("deal-%05d", i) }
func region(i int) string    { return fmt.Sprintf("JP-%02d", 1+i) }
func segment(i int) string   { return fmt.Sprintf("seg%04d", i) }

// skewed draws from 0 to n-1, the low values likelier (the minimum of
// two draws).
func skewed(r *rand.Rand, n int) int { return min(r.IntN(n), r.IntN(n)) }

func some[T any](r *rand.Rand, n, most int, name func(int) T) []T {
	k := 1 + r.IntN(most)
	out := make([]T, 0, k)
	seen := map[int]bool{}
	for len(out) < k && len(seen) < n {
		i := skewed(r, n)
		if !seen[i] {
			seen[i] = true
			out = append(out, name(i))
		}
	}
	return out
}

func from(list []string) func(int) string { return func(i int) string { return list[i] } }

// Set generates the campaign set of size (at least its LineItems) from
// seed: valid (tsubame.CampaignSet.Validate), every creative approved,
// every flight open at now and for a year after it.
func Set(seed uint64, size Size, now time.Time) *tsubame.CampaignSet {
	size = size.withDefaults()
	r := rand.New(rand.NewPCG(seed, 0x7a6d))
	set := &tsubame.CampaignSet{}
	for a := range size.Advertisers {
		id := fmt.Sprintf("adv-%05d", a)
		set.Advertisers = append(set.Advertisers, &tsubame.Advertiser{ID: id, Name: fmt.Sprint("Advertiser ", a),
			Domains: []string{fmt.Sprintf("brand%05d.example", a)}})
		for k := range 3 {
			c := &tsubame.Creative{ID: fmt.Sprintf("cr-%05d-%d", a, k), Advertiser: id, Format: tsubame.FormatBanner,
				W: 300, H: 250, Image: fmt.Sprintf("https://cdn.example.com/%05d/%d.png", a, k),
				Click: fmt.Sprintf("https://brand%05d.example/", a), Status: tsubame.StatusApproved,
				Categories: []string{fmt.Sprint("IAB", 1+r.IntN(26))}}
			if k == 2 {
				c.W, c.H = 728, 90
			}
			set.Creatives = append(set.Creatives, c)
		}
	}
	for c := range size.Campaigns {
		a := c % size.Advertisers
		camp := &tsubame.Campaign{ID: fmt.Sprintf("camp-%06d", c), Advertiser: fmt.Sprintf("adv-%05d", a),
			Start: now.Add(-24 * time.Hour).Truncate(time.Hour), End: now.AddDate(1, 0, 0).Truncate(time.Hour),
			Timezone: zones[r.IntN(len(zones))],
			Budget:   tsubame.Budget{Daily: tsubame.Money(100+r.IntN(10_000)) * tsubame.MicrosPerUnit}}
		if r.IntN(3) == 0 {
			camp.Budget.Total = camp.Budget.Daily * 30
		}
		if r.IntN(5) == 0 {
			camp.Pacing.Mode = tsubame.PacingASAP
		}
		set.Campaigns = append(set.Campaigns, camp)
	}
	tiers := []int{1, 2, 4, 4, 6, 8, 8, 8, 8, 10, 12, 12, 16}
	for i := range size.LineItems {
		c := r.IntN(size.Campaigns)
		a := c % size.Advertisers
		l := &tsubame.LineItem{ID: fmt.Sprintf("li-%07d", i), Campaign: fmt.Sprintf("camp-%06d", c),
			Priority: tiers[r.IntN(len(tiers))], Weight: 1 + r.IntN(100),
			CPM:       tsubame.Money(50_000 + r.IntN(5_000_000)),
			Creatives: []string{fmt.Sprintf("cr-%05d-%d", a, r.IntN(3))}}
		t := &l.Targeting
		switch x := r.IntN(50); {
		case x < 28:
			t.Placements = some(r, size.Placements, 5, Placement)
		case x < 44:
			t.Sites = some(r, size.Sites, 3, Site)
		case x < 49:
			t.Apps = some(r, 1000, 2, func(i int) string { return fmt.Sprintf("com.example.app%04d", i) })
		}
		if r.IntN(2) == 0 {
			t.Countries = some(r, len(Countries), 3, from(Countries))
		}
		if r.IntN(100) < 15 {
			t.Regions = some(r, 47, 3, region)
		}
		if r.IntN(100) < 30 {
			t.Devices = some(r, len(tsubame.Devices), 2, from(tsubame.Devices))
		}
		if r.IntN(100) < 15 {
			t.OS = some(r, len(oses), 1, from(oses))
		}
		if r.IntN(100) < 5 {
			t.Browsers = some(r, len(browsers), 1, from(browsers))
		}
		if r.IntN(100) < 40 {
			t.KeyValues = map[string][]string{}
			switch r.IntN(3) {
			case 0:
				t.KeyValues["section"] = some(r, len(sections), 3, from(sections))
			case 1:
				t.KeyValues["kw"] = some(r, size.Keywords, 3, Keyword)
			default:
				t.KeyValues["seg"] = some(r, 1000, 2, segment)
			}
		}
		if r.IntN(10) == 0 {
			l.Deals = some(r, size.Deals, 2, Deal)
		}
		if r.IntN(100) < 15 {
			h := r.IntN(24)
			t.Hours = &tsubame.HourRange{From: h, To: (h+4+r.IntN(16))%24 + 1}
			if t.Hours.From == t.Hours.To {
				t.Hours = nil
			}
		}
		if r.IntN(10) == 0 {
			t.Weekdays = []string{"mon", "tue", "wed", "thu", "fri"}
		}
		if r.IntN(10) == 0 {
			x := &tsubame.Criteria{}
			switch r.IntN(3) {
			case 0:
				x.Placements = some(r, size.Placements, 3, Placement)
			case 1:
				x.Sites = some(r, size.Sites, 3, Site)
			default:
				x.KeyValues = map[string][]string{"section": {"kids"}}
			}
			t.Exclude = x
		}
		if r.IntN(10) < 3 {
			l.Frequency = []tsubame.FrequencyCap{{Impressions: int64(1 + r.IntN(5)), Per: tsubame.Duration(24 * time.Hour)}}
		}
		if r.IntN(5) == 0 {
			l.Limits.Impressions.Daily = int64(1000 + r.IntN(100_000))
		}
		set.LineItems = append(set.LineItems, l)
	}
	set.Sort()
	return set
}

// Requests generates n requests over the values of a set of size, drawn
// as the set draws them (the likeliest values likelier), at now.
func Requests(seed uint64, size Size, n int, now time.Time) []Request {
	size = size.withDefaults()
	r := rand.New(rand.NewPCG(seed, 0x9e37))
	out := make([]Request, n)
	for i := range out {
		req := Request{
			Placement: Placement(skewed(r, size.Placements)),
			Site:      "www." + Site(skewed(r, size.Sites)),
			Country:   Countries[skewed(r, len(Countries))],
			Region:    region(skewed(r, 47)),
			Device:    tsubame.Devices[r.IntN(len(tsubame.Devices))],
			OS:        oses[r.IntN(len(oses))],
			Browser:   browsers[r.IntN(len(browsers))],
			KeyValues: [][2]string{{"section", sections[skewed(r, len(sections))]}, {"kw", Keyword(skewed(r, size.Keywords))},
				{"seg", segment(skewed(r, 1000))}},
			Time: now.Add(time.Duration(r.IntN(24*3600)) * time.Second),
		}
		if r.IntN(10) == 0 {
			req.Deals = []string{Deal(skewed(r, size.Deals))}
		}
		out[i] = req
	}
	return out
}

// Request is a generated request: the attributes a decision is made on.
type Request struct {
	Placement, Site, Country, Region, Device, OS, Browser string
	KeyValues                                             [][2]string
	Deals                                                 []string
	Time                                                  time.Time
}
