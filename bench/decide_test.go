package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/device"
)

// The generated account is valid, of the sizes the report states, and the
// same in every run.
func TestDecideSet(t *testing.T) {
	set := decideSet()
	if err := set.Validate(); err != nil {
		t.Fatalf("the generated set does not validate: %v", err)
	}
	if got, want := [4]int{len(set.Advertisers), len(set.Campaigns), len(set.Creatives), len(set.LineItems)},
		[4]int{decideAdvertisers, decideAdvertisers * decideCampaignsPer, decideAdvertisers * decideCreativesPer, 10_000}; got != want {
		t.Fatalf("advertisers, campaigns, creatives, line items = %v, want %v", got, want)
	}
	a, _ := json.Marshal(set)
	b, _ := json.Marshal(decideSet())
	if !bytes.Equal(a, b) {
		t.Fatal("two calls made different sets")
	}
	zones, sizes, prios := map[string]bool{}, map[[2]int]bool{}, map[int]bool{}
	for _, c := range set.Campaigns {
		zones[c.Timezone] = true
	}
	for _, c := range set.Creatives {
		sizes[[2]int{c.W, c.H}] = true
	}
	var targeted, excluding int
	for _, l := range set.LineItems {
		prios[l.Priority] = true
		c := l.Targeting.Criteria
		if len(c.Placements)+len(c.Sites)+len(c.Countries)+len(c.Devices)+len(c.OS)+len(c.Browsers)+len(c.KeyValues)+len(c.Weekdays) > 0 || c.Hours != nil {
			targeted++
		}
		if l.Targeting.Exclude != nil {
			excluding++
		}
	}
	if len(zones) != len(decideZones) || len(sizes) != len(decideSizes) || !prios[tsubame.MinPriority] || !prios[tsubame.MaxPriority] {
		t.Errorf("time zones %v, sizes %v, priorities %v: want all of each", zones, sizes, prios)
	}
	if targeted < 9000 || excluding < 500 {
		t.Errorf("%d line items targeted, %d with excludes: want most targeted, about a tenth excluding", targeted, excluding)
	}
}

// The User-Agents are browsers to the server's parser, each read as the
// table says: a bot's would be answered 204 without a decision.
func TestBrowserUAs(t *testing.T) {
	p, err := device.New(device.Options{CacheSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range browserUAs {
		got := p.Parse([]byte(u.UA))
		if got.Bot || got.Device != u.Device || got.OS != u.OS || got.Browser != u.Browser {
			t.Errorf("%s: parsed as %+v, want %s, %s, %s", u.UA, got, u.Device, u.OS, u.Browser)
		}
	}
}

// The requests are the same in every run, valid for the server, spread
// over the world, and most of them fill at any hour of the week: the
// index is asked the way the server asks it (internal/ads: no country,
// as the bench has no geo database).
func TestDecideRequests(t *testing.T) {
	reqs := decideRequests(decideRequestCount)
	if !slices.Equal(reqs, decideRequests(decideRequestCount)) {
		t.Fatal("two calls made different requests")
	}
	paths, placements := map[string]bool{}, map[string]bool{}
	for _, q := range reqs {
		p := q.Path()
		paths[p] = true
		placements[q.Placement] = true
		u, err := url.Parse(p)
		if err != nil || u.Path != "/api/decide" || u.Query().Get("placement") != q.Placement {
			t.Fatalf("%s: not a decide request (%v)", p, err)
		}
		if err := tsubame.ValidID(q.Placement); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if strings.ContainsAny(p, `"\`) {
			t.Fatalf("%s cannot be written as a Lua string as it is", p)
		}
	}
	if len(paths) < decideRequestCount*9/10 || len(placements) < decidePlacements*9/10 {
		t.Errorf("%d distinct paths over %d placements: want nearly all distinct, nearly every placement", len(paths), len(placements))
	}

	set := decideSet()
	week := time.Date(2026, 11, 23, 0, 30, 0, 0, time.UTC) // a Monday
	for h := 0; h < 7*24; h += 17 {
		at := week.Add(time.Duration(h) * time.Hour)
		ix, err := decision.Compile(set, decision.Options{Now: at})
		if err != nil {
			t.Fatal(err)
		}
		filled := 0
		var out []decision.Decision
		for _, q := range reqs {
			ua := browserUAs[q.UA]
			req := decision.Request{User: q.UID, Placement: q.Placement, Site: q.Site, Device: ua.Device, OS: ua.OS, Browser: ua.Browser,
				KeyValues: []decision.KeyValue{{Key: "section", Value: q.Section}}, Time: at, Count: 1, W: q.W, H: q.H}
			if q.Lang != "" {
				req.KeyValues = append(req.KeyValues, decision.KeyValue{Key: "lang", Value: q.Lang})
			}
			if out = ix.Decide(&req, out[:0], nil); len(out) > 0 {
				filled++
			}
		}
		if rate := float64(filled) / float64(len(reqs)); rate < 0.9 {
			t.Errorf("%s: %.1f %% of the requests filled, want most", at.Format(time.RFC3339), 100*rate)
		}
	}
}

// wrk runs the script as meant: each request one of the list, with its
// User-Agent, the threads through different parts of it.
func TestDecideScript(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("wrk is not installed (make bench installs it)")
	}
	reqs := decideRequests(decideRequestCount)
	want := map[string]string{}
	for _, q := range reqs {
		want[q.Path()] = browserUAs[q.UA].UA
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		bad  []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if ua, ok := want[r.URL.RequestURI()]; !ok || r.UserAgent() != ua {
			if len(bad) < 5 {
				bad = append(bad, r.URL.RequestURI()+" with "+r.UserAgent())
			}
		}
		seen[r.URL.RequestURI()]++
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	script := filepath.Join(t.TempDir(), "decide.lua")
	if err := os.WriteFile(script, []byte(decideScript(reqs)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := runWrk(ctx, srv.URL+"/", 2, 4, time.Second, script, "User-Agent: "+browserUA)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("requests not in the list, or with another User-Agent: %q", bad)
	}
	// Each thread starts at its own place in the list (the k-th at
	// request 1031k) and walks on from there: both first requests are
	// seen, and at least as many distinct requests as half of all (the
	// threads' speeds differ on a busy machine: a faster one walks into
	// the slower one's part).
	if r.Requests < 100 || len(seen) < min(int(r.Requests), len(reqs))/2 {
		t.Fatalf("%d requests, %d distinct: want each thread to walk its own part of the list", r.Requests, len(seen))
	}
	// wrk asks the first thread's script for a request it does not send
	// (to check that one can be made): each thread's second is looked for.
	for k := range 2 {
		if second := reqs[k*1031+1].Path(); seen[second] == 0 {
			t.Errorf("thread %d's second request (%s) was not made: the threads do not start at their own parts", k, second)
		}
	}
}

// The decide route's answers are read from /metrics by status.
func TestScrapeDecide(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`# HELP tsubame_http_requests_total Public requests answered.
# TYPE tsubame_http_requests_total counter
tsubame_http_requests_total{code="200",endpoint="decide"} 1.234567e+06
tsubame_http_requests_total{code="200",endpoint="sample4"} 99
tsubame_http_requests_total{code="204",endpoint="decide"} 4321
tsubame_http_requests_total{code="400",endpoint="decide"} 2
tsubame_http_request_duration_seconds_count{code="200",endpoint="decide"} 1.234567e+06
`))
	}))
	defer srv.Close()
	f, err := scrapeDecide(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (fill{Filled: 1234567, Empty: 4321, Other: 2}); f != want {
		t.Fatalf("scraped %+v, want %+v", f, want)
	}
	if r := f.sub(fill{Filled: 234567, Empty: 4321, Other: 2}).Rate(); r != 1 {
		t.Fatalf("rate of the difference = %v, want 1", r)
	}
}
