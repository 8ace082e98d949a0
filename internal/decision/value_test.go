package decision_test

import (
	"math/rand/v2"
	"testing"

	"tsubame"
	"tsubame/internal/decision"
)

// videoCreative adds an approved 15 s mp4 video of advertiser adv.
func (f *fixture) videoCreative(id, adv string) *tsubame.Creative {
	c := &tsubame.Creative{ID: id, Advertiser: adv, Format: tsubame.FormatVideo, W: 640, H: 360, Duration: 15,
		MIMEs: []string{"video/mp4"}, Media: "https://cdn.example.com/" + id + ".mp4", Click: "https://example.com/" + id,
		Status: tsubame.StatusApproved}
	f.set.Creatives = append(f.set.Creatives, c)
	return c
}

// An auction's bid is worth its CPM: within a priority the highest CPM
// serves whatever the weights, equal CPMs share by weight, and a higher
// priority still comes first whatever its price.
func TestByValue(t *testing.T) {
	const u = tsubame.MicrosPerUnit
	tests := []struct {
		name    string
		lines   []struct{ prio, weight, cpm int } // line items l0, l1, …
		byValue bool
		count   int
		want    map[string]float64 // share of the draws each line item gets
	}{
		{name: "highest CPM whatever the weights", byValue: true,
			lines: []struct{ prio, weight, cpm int }{{1, 1_000_000, 1}, {1, 1, 20}, {1, 1000, 5}},
			want:  map[string]float64{"l1": 1}},
		{name: "weights without ByValue", byValue: false,
			lines: []struct{ prio, weight, cpm int }{{1, 3, 1}, {1, 1, 20}},
			want:  map[string]float64{"l0": 0.75, "l1": 0.25}},
		{name: "equal CPMs share by weight", byValue: true,
			lines: []struct{ prio, weight, cpm int }{{1, 3, 4}, {1, 100, 2}, {1, 1, 4}},
			want:  map[string]float64{"l0": 0.75, "l2": 0.25}},
		{name: "priority first whatever the price", byValue: true,
			lines: []struct{ prio, weight, cpm int }{{2, 1, 20}, {1, 1, 1}},
			want:  map[string]float64{"l1": 1}},
		{name: "the highest CPM last in the list", byValue: true,
			lines: []struct{ prio, weight, cpm int }{{1, 5, 1}, {1, 5, 2}, {1, 5, 3}},
			want:  map[string]float64{"l2": 1}},
		{name: "second slot takes the next value", byValue: true, count: 2,
			lines: []struct{ prio, weight, cpm int }{{1, 1, 1}, {1, 1, 3}, {1, 1, 2}},
			want:  map[string]float64{"l1": 0.5, "l2": 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fixture
			for i, l := range tt.lines {
				f.single("l"+string(rune('0'+i)), l.prio, l.weight).CPM = tsubame.Money(l.cpm * u)
			}
			ix := f.compile(t)
			rnd := rand.New(rand.NewPCG(47, 7))
			const n = 8000
			served := map[string]int{}
			draws := 0
			for range n {
				for _, d := range ix.Decide(&decision.Request{Time: compiledAt, ByValue: tt.byValue, Count: tt.count}, nil, rnd) {
					served[d.Line.ID]++
					draws++
				}
			}
			for id, c := range served {
				if _, ok := tt.want[id]; !ok {
					t.Fatalf("%s served %d times: %v, want only %v", id, c, served, tt.want)
				}
			}
			for id, share := range tt.want {
				if got := float64(served[id]) / float64(draws); got < share-0.02 || got > share+0.02 {
					t.Fatalf("%s served %v: share %.3f, want %.2f ± 0.02", id, served, got, share)
				}
			}
		})
	}
}

// An impression offering a banner and a video is one decision over both:
// by value, the dearer line item serves whichever format it is; narrowing
// applies per offer.
func TestOffers(t *testing.T) {
	const u = tsubame.MicrosPerUnit
	var f fixture
	f.single("li-banner", 1, 1).CPM = u / 2
	f.advertiser("a-video")
	f.campaign("c-video", "a-video", "")
	f.videoCreative("cr-video", "a-video")
	f.lineItem("li-video", "c-video", 1, 1, "cr-video").CPM = 20 * u
	ix := f.compile(t)
	banner := decision.Offer{Format: tsubame.FormatBanner, Sizes: []decision.Size{{300, 250}}}
	video := decision.Offer{Format: tsubame.FormatVideo, MIMEs: []string{"video/mp4"}, MaxDuration: 30}
	for _, tc := range []struct {
		name    string
		offers  []decision.Offer
		byValue bool
		want    string
	}{
		{"banner and video, by value", []decision.Offer{banner, video}, true, "li-video"},
		{"video and banner, by value", []decision.Offer{video, banner}, true, "li-video"},
		{"banner only", []decision.Offer{banner}, true, "li-banner"},
		{"video only", []decision.Offer{video}, true, "li-video"},
		{"the video's duration refused", []decision.Offer{banner, {Format: tsubame.FormatVideo, MaxDuration: 10}}, true, "li-banner"},
		{"the banner's size refused", []decision.Offer{{Format: tsubame.FormatBanner, W: 728, H: 90}, video}, true, "li-video"},
		{"neither fits", []decision.Offer{{Format: tsubame.FormatBanner, W: 728, H: 90}, {Format: tsubame.FormatVideo, MIMEs: []string{"video/webm"}}}, true, ""},
	} {
		for range 50 {
			r := decision.Request{Time: compiledAt, Offers: tc.offers, ByValue: tc.byValue,
				Format: tsubame.FormatBanner, W: 1, H: 1} // not read with offers
			got := ""
			if ds := ix.Decide(&r, nil, nil); len(ds) == 1 {
				got = ds[0].Line.ID
				if ds[0].Creative.Format != map[string]string{"li-banner": "banner", "li-video": "video"}[got] {
					t.Fatalf("%s: %s with a %s creative", tc.name, got, ds[0].Creative.Format)
				}
			} else if len(ds) > 1 {
				t.Fatalf("%s: %d decisions", tc.name, len(ds))
			}
			if got != tc.want {
				t.Fatalf("%s: %q, want %q", tc.name, got, tc.want)
			}
		}
	}
}

// A secure request takes only creatives whose every URL is https; one that
// does not say takes any.
func TestSecure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(c *tsubame.Creative)
		secure bool // the creative may serve on a secure request
	}{
		{"https image and click", func(*tsubame.Creative) {}, true},
		{"http image", func(c *tsubame.Creative) { c.Image = "http://cdn.example.com/a.png" }, false},
		{"HTTPS in capitals", func(c *tsubame.Creative) { c.Image = "HTTPS://cdn.example.com/a.png" }, true},
		{"http click", func(c *tsubame.Creative) { c.Click = "http://example.com/landing" }, false},
		{"http video media", func(c *tsubame.Creative) {
			c.Format, c.Image, c.Duration, c.MIMEs, c.Media = tsubame.FormatVideo, "", 15, []string{"video/mp4"}, "http://cdn.example.com/v.mp4"
		}, false},
		{"https video media", func(c *tsubame.Creative) {
			c.Format, c.Image, c.Duration, c.MIMEs, c.Media = tsubame.FormatVideo, "", 15, []string{"video/mp4"}, "https://cdn.example.com/v.mp4"
		}, true},
		{"HTML of https and relative URLs", func(c *tsubame.Creative) {
			c.Image, c.HTML = "", `<a href="https://example.com/x"><img src="//cdn.example.com/a.png"></a>`
		}, true},
		{"HTML with an http script", func(c *tsubame.Creative) {
			c.Image, c.HTML = "", `<script src="HTTP://tracker.example.com/t.js"></script><img src="https://cdn.example.com/a.png">`
		}, false},
	} {
		var f fixture
		f.single("li", 1, 1)
		tc.edit(f.set.Creatives[0])
		ix := f.compile(t)
		for _, secure := range []bool{false, true} {
			got := len(ix.Decide(&decision.Request{Time: compiledAt, Secure: secure}, nil, nil)) == 1
			if want := !secure || tc.secure; got != want {
				t.Errorf("%s: served on a request with secure=%v: %v, want %v", tc.name, secure, got, want)
			}
		}
	}
}

// A shaded first-price bid is Factor of the CPM, at least Step over the
// floor, never above the CPM; a deal's line item and an unshaded request
// bid the CPM.
func TestShadedPrice(t *testing.T) {
	var f fixture
	f.single("li-open", 1, 1).CPM = 2 * tsubame.MicrosPerUnit
	f.single("li-deal", 1, 1).Deals = []string{"deal-a"}
	f.set.LineItems[1].CPM = 2 * tsubame.MicrosPerUnit
	ix := f.compile(t)
	m := func(s string) tsubame.Money {
		v, err := tsubame.ParseMoney(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		factor int64
		step   string
		floor  string
		open   string // li-open's price
	}{
		{"no shading", 0, "0.01", "1.00", "2"},
		{"factor", 850_000, "0.01", "0", "1.7"},
		{"floor and step over the factor", 500_000, "0.01", "1.50", "1.51"},
		{"factor over floor and step", 900_000, "0.01", "1.50", "1.8"},
		{"never above the CPM", 500_000, "0.10", "1.95", "2"},
		{"a factor of 1 bids the CPM", 1_000_000, "0", "0", "2"},
		{"rounded down to the micro-unit", 333_333, "0", "0", "0.666666"},
	} {
		r := decision.Request{Time: compiledAt, MinCPM: m(tc.floor), Shading: decision.Shading{Factor: tc.factor, Step: m(tc.step)}}
		lines := map[string]*decision.Line{}
		r.Deals, r.DealMins = []string{"deal-a"}, []tsubame.Money{m("1")}
		for _, d := range ix.Decide(&decision.Request{Time: compiledAt, Count: 2, Deals: r.Deals, DealMins: r.DealMins}, nil, nil) {
			lines[d.Line.ID] = d.Line
		}
		if len(lines) != 2 {
			t.Fatalf("decided %v", lines)
		}
		if got := r.Price(lines["li-open"]).String(); got != tc.open {
			t.Errorf("%s: the open line item's price %s, want %s", tc.name, got, tc.open)
		}
		if got := r.Price(lines["li-deal"]).String(); got != "2" {
			t.Errorf("%s: the deal's line item's price %s, want its CPM, 2", tc.name, got)
		}
	}
}
