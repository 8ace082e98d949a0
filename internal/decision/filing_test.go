package decision

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"tsubame"
)

var conjNow = time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)

// The attributes of the generated worlds, each with the values a line
// item or a request draws from, and the one value every line item of a
// "shared" world names.
var conjAttrs = []struct {
	name   string
	values []string
	shared string
}{
	{"placement", names("pl-%04d", 1000), "pl-shared"},
	{"site", names("s%03d.example", 500), "shared.example"},
	{"app", names("app%03d", 200), "appshared"},
	{"country", countries(50), "ZZ"},
	{"region", names("JP-%d", 47), "JP-99"},
	{"device", tsubame.Devices[1:], tsubame.Devices[0]},
	{"os", names("os%d", 8), "osshared"},
	{"browser", names("br%d", 6), "brshared"},
	{"kv", kvs(), "k9=shared"},
	{"deal", names("deal-%03d", 300), "deal-shared"},
}

func names(format string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i+1)
	}
	return out
}

// kvs are 100 pairs of keys k0 to k4, 20 values each (kJ=vNN: NN%5 is J).
func kvs() []string {
	out := make([]string, 100)
	for i := range out {
		out[i] = fmt.Sprintf("k%d=v%02d", i%5, i)
	}
	return out
}

func countries(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string([]byte{byte('A' + i/26), byte('A' + i%26)})
	}
	return out
}

// target adds to l the predicate "attribute a is one of vals", or with
// exclude "none of vals".
func target(l *tsubame.LineItem, a int, vals []string, exclude bool) {
	c := &l.Targeting.Criteria
	if exclude {
		if l.Targeting.Exclude == nil {
			l.Targeting.Exclude = &tsubame.Criteria{}
		}
		c = l.Targeting.Exclude
	}
	switch conjAttrs[a].name {
	case "placement":
		c.Placements = append(c.Placements, vals...)
	case "site":
		c.Sites = append(c.Sites, vals...)
	case "app":
		c.Apps = append(c.Apps, vals...)
	case "country":
		c.Countries = append(c.Countries, vals...)
	case "region":
		c.Regions = append(c.Regions, vals...)
	case "device":
		c.Devices = append(c.Devices, vals...)
	case "os":
		c.OS = append(c.OS, vals...)
	case "browser":
		c.Browsers = append(c.Browsers, vals...)
	case "kv":
		if c.KeyValues == nil {
			c.KeyValues = map[string][]string{}
		}
		for _, v := range vals {
			key, val, _ := strings.Cut(v, "=")
			c.KeyValues[key] = append(c.KeyValues[key], val)
		}
	case "deal":
		if !exclude {
			l.Deals = append(l.Deals, vals...)
		}
	}
}

// conjWorld makes n line items over the attributes, from seed: each names
// the shared value of attribute shared (none when it is -1) and others
// of 1 to 3 other attributes (when other is over 0: one value each of
// other attributes of 100 values or more), one in ten excludes values,
// priorities 1 to 4.
func conjWorld(seed uint64, n, shared, other int) *tsubame.CampaignSet {
	r := rand.New(rand.NewPCG(seed, 7))
	set := &tsubame.CampaignSet{
		Advertisers: []*tsubame.Advertiser{{ID: "a", Name: "A"}},
		Campaigns:   []*tsubame.Campaign{{ID: "c", Advertiser: "a"}},
		Creatives: []*tsubame.Creative{{ID: "cr", Advertiser: "a", Format: tsubame.FormatBanner, W: 300, H: 250,
			Image: "https://cdn.example.com/a.png", Click: "https://example.com/", Status: tsubame.StatusApproved}},
	}
	for i := range n {
		l := &tsubame.LineItem{ID: fmt.Sprint("li-", i), Campaign: "c", Priority: 1 + r.IntN(4), Weight: 1,
			Creatives: []string{"cr"}}
		used := map[int]bool{}
		if shared >= 0 {
			target(l, shared, []string{conjAttrs[shared].shared}, false)
			used[shared] = true
		}
		if other > 0 {
			// One value of other attributes of many values: each line item
			// matches a few requests in a thousand.
			for k := 0; k < other; {
				a := r.IntN(len(conjAttrs))
				if vs := conjAttrs[a].values; !used[a] && len(vs) >= 100 {
					used[a] = true
					target(l, a, pick(r, vs, 1), false)
					k++
				}
			}
		} else {
			for range 1 + r.IntN(3) {
				a := r.IntN(len(conjAttrs))
				if used[a] {
					continue
				}
				used[a] = true
				vs := conjAttrs[a].values
				target(l, a, pick(r, vs, 1+r.IntN(min(3, len(vs)))), false)
			}
		}
		if r.IntN(10) == 0 {
			a := r.IntN(len(conjAttrs) - 1) // not deals: there are no excluded deals
			vs := conjAttrs[a].values
			target(l, a, pick(r, vs, 1+r.IntN(min(3, len(vs)))), true)
		}
		set.LineItems = append(set.LineItems, l)
	}
	return set
}

func pick(r *rand.Rand, list []string, n int) []string {
	var out []string
	for _, i := range r.Perm(len(list))[:n] {
		out = append(out, list[i])
	}
	return out
}

// conjRequest draws a request with a value of every attribute (the shared
// one's shared value, when shared is not -1), a value of each of keys k0
// to k4, and up to two deals.
func conjRequest(r *rand.Rand, shared int) Request {
	val := func(a int) string {
		if a == shared {
			return conjAttrs[a].shared
		}
		vs := conjAttrs[a].values
		return vs[r.IntN(len(vs))]
	}
	req := Request{Placement: val(0), Site: "www." + val(1), App: val(2), Country: val(3), Region: val(4),
		Device: val(5), OS: val(6), Browser: val(7), Time: conjNow}
	for k := range 5 { // a value of each key
		key, val, _ := strings.Cut(conjAttrs[8].values[k+5*r.IntN(20)], "=")
		req.KeyValues = append(req.KeyValues, KeyValue{key, val})
	}
	if shared == 8 {
		req.KeyValues = append(req.KeyValues, KeyValue{"k9", "shared"})
	}
	for range r.IntN(3) {
		req.Deals = append(req.Deals, val(9))
	}
	if shared == 9 {
		req.Deals = append(req.Deals, conjAttrs[9].shared)
	}
	return req
}

// targeted is the plain reading of l's targeting the index must agree
// with: its lists, key-values and deals (not its flight or hours).
func targeted(l *tsubame.LineItem, r *Request) bool {
	vals := func(c *tsubame.Criteria) [][2]any {
		site := func(s string) bool { return r.Site == s || strings.HasSuffix(r.Site, "."+s) }
		eq := func(v string) func(string) bool { return func(s string) bool { return s == v } }
		return [][2]any{{c.Placements, eq(r.Placement)}, {c.Sites, site}, {c.Apps, eq(r.App)},
			{c.Countries, eq(r.Country)}, {c.Regions, eq(r.Region)}, {c.Devices, eq(r.Device)},
			{c.OS, eq(r.OS)}, {c.Browsers, eq(r.Browser)}}
	}
	kv := func(key string, vs []string) bool {
		return slices.ContainsFunc(r.KeyValues, func(p KeyValue) bool { return p.Key == key && slices.Contains(vs, p.Value) })
	}
	for _, p := range vals(&l.Targeting.Criteria) {
		if list := p[0].([]string); len(list) > 0 && !slices.ContainsFunc(list, p[1].(func(string) bool)) {
			return false
		}
	}
	for key, vs := range l.Targeting.KeyValues {
		if !kv(key, vs) {
			return false
		}
	}
	if x := l.Targeting.Exclude; x != nil {
		for _, p := range vals(x) {
			if slices.ContainsFunc(p[0].([]string), p[1].(func(string) bool)) {
				return false
			}
		}
		for key, vs := range x.KeyValues {
			if kv(key, vs) {
				return false
			}
		}
	}
	return len(l.Deals) == 0 || slices.ContainsFunc(r.Deals, func(d string) bool { return slices.Contains(l.Deals, d) })
}

// reached returns the ids of the line items the index reaches for req, per
// priority, each sorted.
func (ix *Index) reached(req *Request) [tsubame.MaxPriority + 1][]string {
	s := ix.newScratch()
	ix.resolve(req, s)
	var out [tsubame.MaxPriority + 1][]string
	for p := tsubame.MinPriority; p <= tsubame.MaxPriority; p++ {
		ix.reach(p, s)
		for _, i := range s.hits {
			out[p] = append(out[p], ix.lines[i].ID)
		}
		slices.Sort(out[p])
	}
	return out
}

// TestReachHoldsEveryMatch checks the index against a plain reading of
// the targeting, over generated worlds (several attributes per line item,
// exclusions, deals) and requests sending one value of each attribute:
// it reaches every line item whose targeting the request satisfies, of
// the priority asked, once, and none the request excludes that has no
// other targeting; and not many more than match.
func TestReachHoldsEveryMatch(t *testing.T) {
	for seed := range uint64(4) {
		set := conjWorld(seed, 3_000, -1, 0)
		ix, err := Compile(set, Options{Now: conjNow})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, 1))
		reached, matched := 0, 0
		for range 300 {
			req := conjRequest(r, -1)
			var want, excluded [tsubame.MaxPriority + 1][]string
			for _, l := range set.LineItems {
				if targeted(l, &req) {
					want[l.Priority] = append(want[l.Priority], l.ID)
				}
				if x := l.Targeting.Exclude; x != nil && !targeted(&tsubame.LineItem{Targeting: tsubame.Targeting{Exclude: x}}, &req) &&
					!includes(l) {
					excluded[l.Priority] = append(excluded[l.Priority], l.ID)
				}
			}
			s := ix.newScratch()
			ix.resolve(&req, s)
			for p := range want {
				ix.reach(p, s)
				if sorted := slices.Sorted(slices.Values(s.hits)); len(slices.Compact(sorted)) != len(s.hits) {
					t.Fatalf("seed %d, priority %d: reached %v: one twice", seed, p, s.hits)
				}
				got := map[string]bool{}
				for _, i := range s.hits {
					got[ix.lines[i].ID] = true
					if ix.lines[i].Priority != p {
						t.Fatalf("priority %d reached %s of priority %d", p, ix.lines[i].ID, ix.lines[i].Priority)
					}
				}
				for _, id := range want[p] {
					if !got[id] {
						t.Fatalf("seed %d, request %s/%s, priority %d: %s matches, not reached", seed, req.Placement, req.Site, p, id)
					}
				}
				for _, id := range excluded[p] {
					if got[id] {
						t.Fatalf("seed %d, request %s/%s, priority %d: %s excluded, but reached", seed, req.Placement, req.Site, p, id)
					}
				}
				reached += len(s.hits)
				matched += len(want[p])
			}
		}
		if matched < 300 {
			t.Fatalf("seed %d: %d line items matched 300 requests: the world is too narrow to test much", seed, matched)
		}
		if reached > 2*matched {
			t.Fatalf("seed %d: %d line items reached for %d matches", seed, reached, matched)
		}
		t.Logf("seed %d: %d line items reached, %d matched", seed, reached, matched)
	}
}

// includes reports whether l has targeting other than exclusions.
func includes(l *tsubame.LineItem) bool {
	c := &l.Targeting.Criteria
	return len(c.Placements)+len(c.Sites)+len(c.Apps)+len(c.Countries)+len(c.Regions)+len(c.Devices)+len(c.OS)+
		len(c.Browsers)+len(c.KeyValues)+len(l.Deals) > 0
}

// TestFilingCases checks the cases the generated worlds reach rarely: a
// line item naming a domain and its subdomain, a request with two values
// of a key, a deal offered twice, a value both included and excluded,
// exclusions only, and no targeting. A line item is filed under its
// rarest predicate: "two" under j=x (one line item names it, two name
// k's values), "deal" under mobile (as rare as its deals; the first).
func TestFilingCases(t *testing.T) {
	set := conjWorld(0, 0, -1, 0)
	add := func(id string, tg tsubame.Targeting, deals ...string) {
		set.LineItems = append(set.LineItems, &tsubame.LineItem{ID: id, Campaign: "c", Priority: 1, Weight: 1,
			Creatives: []string{"cr"}, Targeting: tg, Deals: deals})
	}
	add("sub", tsubame.Targeting{Criteria: tsubame.Criteria{Sites: []string{"news.example.com", "example.com"}, Devices: []string{"mobile"}}})
	add("two", tsubame.Targeting{Criteria: tsubame.Criteria{KeyValues: map[string][]string{"k": {"a", "b"}, "j": {"x"}}}})
	add("both", tsubame.Targeting{Criteria: tsubame.Criteria{Placements: []string{"top"}},
		Exclude: &tsubame.Criteria{Placements: []string{"top"}}})
	add("only-excl", tsubame.Targeting{Exclude: &tsubame.Criteria{Countries: []string{"US"}, Sites: []string{"example.com"}}})
	add("none", tsubame.Targeting{})
	add("deal", tsubame.Targeting{Criteria: tsubame.Criteria{Devices: []string{"mobile"}}}, "d1", "d2")
	ix, err := Compile(set, Options{Now: conjNow})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		req  Request
		want []string
	}{
		{Request{Site: "a.news.example.com", Device: "mobile"}, []string{"deal", "none", "sub"}},
		{Request{Site: "example.org", Device: "mobile", Country: "US"}, []string{"deal", "none"}},
		{Request{Site: "example.org", Device: "mobile", Deals: []string{"d2", "d1", "d2"}}, []string{"deal", "none", "only-excl"}},
		{Request{KeyValues: []KeyValue{{"k", "a"}, {"k", "b"}}}, []string{"none", "only-excl"}},
		// "both" is filed under top: its exclusion is match's to find.
		{Request{KeyValues: []KeyValue{{"k", "b"}, {"j", "x"}, {"j", "x"}}, Placement: "top"}, []string{"both", "none", "only-excl", "two"}},
	}
	for _, tt := range tests {
		if got := ix.reached(&tt.req)[1]; !slices.Equal(got, tt.want) {
			t.Errorf("%+v reaches %v, want %v", tt.req, got, tt.want)
		}
	}
}

// TestReachFollowsMatches is the point of the index: whatever attribute
// every line item names the same value of (all of them on desktops, all
// on one site, all with one key-value), a request reaches only those
// whose other targeting it satisfies too, not the thousands that share
// that value: no more than twice the line items that match, and a few.
func TestReachFollowsMatches(t *testing.T) {
	n := 20_000
	if testing.Short() {
		n = 5_000
	}
	for a := range conjAttrs {
		t.Run(conjAttrs[a].name, func(t *testing.T) {
			set := conjWorld(uint64(a), n, a, 1)
			ix, err := Compile(set, Options{Now: conjNow})
			if err != nil {
				t.Fatal(err)
			}
			s := ix.newScratch()
			r := rand.New(rand.NewPCG(uint64(a), 2))
			reached, matched := 0, 0
			for range 200 {
				req := conjRequest(r, a)
				ix.resolve(&req, s)
				s.now = conjNow.UnixNano()
				hits, matches := 0, 0
				for p := tsubame.MinPriority; p <= tsubame.MaxPriority; p++ {
					ix.reach(p, s)
					hits += len(s.hits)
					for _, i := range s.hits {
						if ix.match(&ix.lines[i], &req, conjNow, s) == WhyEligible {
							matches++
						}
					}
				}
				if hits > 2*matches+8 {
					t.Fatalf("request %s/%s/%s: %d line items reached for %d matches", req.Placement, req.Site, req.Device, hits, matches)
				}
				reached += hits
				matched += matches
			}
			if matched == 0 {
				t.Fatal("no line item matched 200 requests: the world tests nothing")
			}
			t.Logf("%d line items sharing one %s: %d reached, %d matched over 200 requests", n, conjAttrs[a].name, reached, matched)
		})
	}
}

// BenchmarkDecideShared decides among 50,000 line items that all name one
// value of an attribute (devices: [desktop], one site, one key-value ...)
// and one other: ns/op and the line items reached per decision.
func BenchmarkDecideShared(b *testing.B) {
	for a := range conjAttrs {
		b.Run(conjAttrs[a].name, func(b *testing.B) {
			ix, err := Compile(conjWorld(uint64(a), 50_000, a, 1), Options{Now: conjNow})
			if err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 1))
			reqs := make([]Request, 1024)
			for i := range reqs {
				reqs[i] = conjRequest(r, a)
			}
			out := make([]Decision, 0, MaxCount)
			samples := make([]time.Duration, 0, 1<<20)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				out = ix.Decide(&reqs[i%len(reqs)], out[:0], r)
				if len(samples) < cap(samples) {
					samples = append(samples, time.Since(t0))
				}
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2]), "p50-ns")
			b.ReportMetric(float64(samples[len(samples)*99/100]), "p99-ns")
		})
	}
}
