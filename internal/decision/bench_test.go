package decision_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/decision"
)

// The benchmark world: a few hundred placements and sites, tens of
// countries, the four devices, key-values, three time zones.
const (
	benchPlacements  = 300
	benchSites       = 300
	benchAdvertisers = 200
)

var (
	benchCountries = []string{"JP", "US", "KR", "TW", "CN", "GB", "DE", "FR", "IN", "ID", "TH", "VN", "PH", "MY", "SG",
		"AU", "NZ", "CA", "MX", "BR", "AR", "CL", "ES", "IT", "NL", "BE", "SE", "NO", "DK", "FI", "PL", "CZ", "AT",
		"CH", "IE", "PT", "GR", "TR", "IL", "AE", "SA", "EG", "ZA", "NG", "KE", "RU", "UA", "HK", "MO", "BD"}
	benchZones    = []string{"", "UTC", "America/New_York"}
	benchOS       = []string{"ios", "android", "windows", "macos", "linux"}
	benchBrowsers = []string{"safari", "chrome", "firefox", "edge"}
	benchSections = []string{"news", "sports", "business", "tech", "life", "travel", "food", "games", "music", "movies",
		"cars", "money", "health", "science", "books", "fashion", "home", "pets", "kids", "weather"}
)

func benchPick[T any](r *rand.Rand, list []T, n int) []T {
	var out []T
	for _, i := range r.Perm(len(list))[:n] {
		out = append(out, list[i])
	}
	return out
}

func placementName(i int) string { return fmt.Sprintf("pl-%03d", i) }
func siteName(i int) string      { return fmt.Sprintf("site%03d.example", i) }

// benchIndex compiles n line items of a realistic targeting mix, from a
// fixed seed (benchSet).
func benchIndex(tb testing.TB, n int) *decision.Index {
	tb.Helper()
	ix, err := decision.Compile(benchSet(n), decision.Options{Now: compiledAt})
	if err != nil {
		tb.Fatal(err)
	}
	return ix
}

// benchSet makes the campaign set of benchIndex.
func benchSet(n int) *tsubame.CampaignSet {
	r := rand.New(rand.NewPCG(30, 2026))
	var placements, sites []string
	for i := range benchPlacements {
		placements = append(placements, placementName(i))
	}
	for i := range benchSites {
		sites = append(sites, siteName(i))
	}
	var f fixture
	for a := range benchAdvertisers {
		adv := fmt.Sprintf("adv-%d", a)
		f.advertiser(adv)
		for k := range 3 {
			cr := f.creative(fmt.Sprintf("cr-%d-%d", a, k), adv, fmt.Sprintf("IAB%d", 1+r.IntN(26)))
			if k == 2 {
				cr.W, cr.H = 728, 90
			}
		}
		for c := range 5 {
			f.campaign(fmt.Sprintf("c-%d-%d", a, c), adv, benchZones[r.IntN(len(benchZones))])
		}
	}
	for i := range n {
		a := r.IntN(benchAdvertisers)
		prio := []int{1, 2, 4, 4, 6, 8, 8, 8, 10, 12, 12, 12, 16}[r.IntN(13)]
		l := f.lineItem(fmt.Sprintf("li-%d", i), fmt.Sprintf("c-%d-%d", a, r.IntN(5)), prio, 1+r.IntN(100),
			fmt.Sprintf("cr-%d-%d", a, r.IntN(3)))
		c := &l.Targeting.Criteria
		switch x := r.IntN(10); {
		case x < 6:
			c.Placements = benchPick(r, placements, 1+r.IntN(5))
		case x < 8:
			c.Sites = benchPick(r, sites, 1+r.IntN(3))
		}
		if r.IntN(2) == 0 {
			c.Countries = benchPick(r, benchCountries, 1+r.IntN(3))
		}
		if r.IntN(10) < 3 {
			c.Devices = benchPick(r, tsubame.Devices, 1+r.IntN(2))
		}
		if r.IntN(10) < 2 {
			c.OS = benchPick(r, benchOS, 1+r.IntN(2))
		}
		if r.IntN(10) < 3 {
			c.KeyValues = map[string][]string{"section": benchPick(r, benchSections, 1+r.IntN(4))}
		}
		if r.IntN(5) == 0 {
			from := r.IntN(24)
			c.Hours = &tsubame.HourRange{From: from, To: (from+1+r.IntN(22))%24 + 1}
			if c.Hours.From == c.Hours.To {
				c.Hours = nil
			}
		}
		if r.IntN(10) == 0 {
			c.Weekdays = benchPick(r, tsubame.Weekdays, 2+r.IntN(4))
		}
		if r.IntN(10) == 0 {
			x := &tsubame.Criteria{
				KeyValues: map[string][]string{"section": {"kids"}},
				Browsers:  benchPick(r, benchBrowsers, 1),
			}
			switch r.IntN(4) {
			case 0:
				from := r.IntN(24)
				x.Hours = &tsubame.HourRange{From: from, To: (from+r.IntN(8))%24 + 1}
				if x.Hours.From == x.Hours.To {
					x.Hours = nil
				}
			case 1:
				x.Sites = benchPick(r, sites, 1+r.IntN(20))
			case 2:
				x.Placements = benchPick(r, placements, 1+r.IntN(20))
				x.Countries = []string{"US"}
			}
			l.Targeting.Exclude = x
		}
		if r.IntN(20) == 0 {
			l.Deals = []string{fmt.Sprintf("deal-%d", r.IntN(50))}
		}
	}
	return &f.set
}

// benchRequests makes n requests spread over the benchmark world, from a
// fixed seed.
func benchRequests(n int) []decision.Request {
	r := rand.New(rand.NewPCG(4, 4))
	out := make([]decision.Request, n)
	for i := range out {
		req := decision.Request{
			Placement: placementName(r.IntN(benchPlacements)),
			Site:      fmt.Sprintf("www.%s", siteName(r.IntN(benchSites))),
			Country:   benchCountries[min(r.IntN(len(benchCountries)*2), r.IntN(len(benchCountries)))],
			Region:    "JP-13",
			Device:    tsubame.Devices[r.IntN(len(tsubame.Devices))],
			OS:        benchOS[r.IntN(len(benchOS))],
			Browser:   benchBrowsers[r.IntN(len(benchBrowsers))],
			KeyValues: []decision.KeyValue{{"section", benchSections[r.IntN(len(benchSections))]}, {"lang", "ja"}},
			Time:      compiledAt.Add(time.Duration(r.IntN(7*24)) * time.Hour),
			Count:     1,
		}
		if r.IntN(4) == 0 {
			req.Count = 3
		}
		if r.IntN(10) == 0 {
			req.Deals = []string{fmt.Sprintf("deal-%d", r.IntN(50))}
		}
		if r.IntN(3) == 0 {
			req.Format, req.W, req.H = tsubame.FormatBanner, 300, 250
		}
		out[i] = req
	}
	return out
}

var sink []decision.Decision

// BenchmarkDecide is one decision among 10,000 line items with targeting
// on: ns/op and allocs/op (0) of the matching core.
func BenchmarkDecide(b *testing.B) {
	ix := benchIndex(b, 10_000)
	reqs := benchRequests(1024)
	rnd := rand.New(rand.NewPCG(1, 1))
	out := make([]decision.Decision, 0, decision.MaxCount)
	served := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		out = ix.Decide(&reqs[i%len(reqs)], out[:0], rnd)
		served += len(out)
	}
	sink = out
	b.ReportMetric(float64(served)/float64(b.N), "decisions/op")
}

// BenchmarkDecideParallel is BenchmarkDecide on every core.
func BenchmarkDecideParallel(b *testing.B) {
	ix := benchIndex(b, 10_000)
	reqs := benchRequests(1024)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rnd := rand.New(rand.NewPCG(rand.Uint64(), 1))
		out := make([]decision.Decision, 0, decision.MaxCount)
		for i := 0; pb.Next(); i++ {
			out = ix.Decide(&reqs[i%len(reqs)], out[:0], rnd)
		}
	})
}

// BenchmarkDecideLatency reports the spread of single decisions among
// 10,000 line items: p50, p99 and max in ns (the goal is p99 < 1 ms).
func BenchmarkDecideLatency(b *testing.B) {
	ix := benchIndex(b, 10_000)
	reqs := benchRequests(1024)
	rnd := rand.New(rand.NewPCG(1, 1))
	out := make([]decision.Decision, 0, decision.MaxCount)
	samples := make([]time.Duration, 0, 1<<20)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		out = ix.Decide(&reqs[i%len(reqs)], out[:0], rnd)
		d := time.Since(t0)
		if len(samples) < cap(samples) {
			samples = append(samples, d)
		}
	}
	b.StopTimer()
	sink = out
	slices.Sort(samples)
	q := func(p float64) float64 { return float64(samples[int(p*float64(len(samples)-1))]) }
	b.ReportMetric(q(0.50), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
	b.ReportMetric(float64(samples[len(samples)-1]), "max-ns")
}

// BenchmarkCompile is the cost of one change of the campaign set: 10,000
// line items compiled into an index (off the request path).
func BenchmarkCompile(b *testing.B) {
	set := benchSet(10_000)
	// What one index keeps on the heap beside its set.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ix, err := decision.Compile(set, decision.Options{Now: compiledAt})
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ix)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decision.Compile(set, decision.Options{Now: compiledAt}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "index-MiB")
}
