package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"tsubame"
)

// The decide scenario's world: one account of 10,000 line items among
// 1,000 campaigns of 200 advertisers, targeting a pool of placements and
// sites, devices, operating systems, browsers, hours, weekdays and
// key-values (decideSet), and the requests wrk cycles through against it
// (decideRequests). Both come from fixed seeds: every run measures the
// same set and the same requests.
//
// The set has the shape of internal/decision's micro-benchmark set
// (BenchmarkDecide in bench_test.go, a test file no other package can
// import, hence a copy), grown to the sizes of an account that buys
// banners in three sizes, with CPMs and browser targets besides.
const (
	decideAdvertisers  = 200
	decideCampaignsPer = 5  // campaigns per advertiser: 1,000
	decideCreativesPer = 10 // creatives per advertiser: 2,000
	decideLineItems    = 10_000
	decidePlacements   = 500
	decideSites        = 300
	decideRequestCount = 4096 // distinct requests in the wrk script
)

var (
	decideCountries = []string{"JP", "US", "GB", "DE", "FR", "KR", "TW", "CA", "AU", "BR", "IN", "SG", "ES", "IT", "NL"}
	decideZones     = []string{"Asia/Tokyo", "UTC", "America/New_York"}
	decideDevices   = []string{"desktop", "mobile", "tablet"}
	decideOS        = []string{"ios", "android", "windows", "macos"}
	decideBrowsers  = []string{"chrome", "safari", "firefox", "edge"}
	decideSections  = []string{"news", "sports", "business", "tech", "life", "travel", "food", "games", "music", "movies",
		"cars", "money", "health", "science", "books", "fashion", "home", "pets", "kids", "weather"}
	decideSizes = [][2]int{{300, 250}, {728, 90}, {320, 50}}
)

// browserUAs are the User-Agents the decide requests come with, and what
// the server's parser (internal/device) reads in each: a crawler's, or
// none (wrk's default), would be answered 204 without a decision. The
// first is browserUA, which every other GET scenario sends.
var browserUAs = []struct{ UA, Device, OS, Browser string }{
	{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", "desktop", "windows", "chrome"},
	{"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1", "mobile", "ios", "safari"},
	{"Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36", "mobile", "android", "chrome"},
	{"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15", "desktop", "macos", "safari"},
	{"Mozilla/5.0 (iPad; CPU OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1", "tablet", "ios", "safari"},
	{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0", "desktop", "windows", "edge"},
	{"Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:133.0) Gecko/20100101 Firefox/133.0", "desktop", "macos", "firefox"},
	{"Mozilla/5.0 (Linux; Android 14; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", "tablet", "android", "chrome"},
}

// browserUA is the User-Agent of every wrk run but the webhook's: ad
// requests come from browsers, and the server parses it for targeting, so
// sample4 and decide in the same run carry the same header.
var browserUA = browserUAs[0].UA

func decidePlacement(i int) string { return fmt.Sprintf("pl-%03d", i) }
func decideSite(i int) string      { return fmt.Sprintf("site%03d.example", i) }

// pick returns n distinct values of list, in random order.
func pick[T any](r *rand.Rand, list []T, n int) []T {
	out := make([]T, 0, n)
	for _, i := range r.Perm(len(list))[:n] {
		out = append(out, list[i])
	}
	return out
}

// decideSet makes the scenario's campaign set. It passes
// CampaignSet.Validate (decide_test.go).
func decideSet() *tsubame.CampaignSet {
	r := rand.New(rand.NewPCG(30, 2026))
	var placements, sites []string
	for i := range decidePlacements {
		placements = append(placements, decidePlacement(i))
	}
	for i := range decideSites {
		sites = append(sites, decideSite(i))
	}
	set := &tsubame.CampaignSet{Currency: tsubame.DefaultCurrency}
	creatives := make([][]string, decideAdvertisers) // by advertiser
	for a := range decideAdvertisers {
		adv := fmt.Sprintf("adv-%03d", a)
		brand := fmt.Sprintf("brand%03d.example", a)
		set.Advertisers = append(set.Advertisers, &tsubame.Advertiser{ID: adv, Name: "Advertiser " + strconv.Itoa(a), Domains: []string{brand}})
		for k := range decideCreativesPer {
			id := fmt.Sprintf("cr-%03d-%d", a, k)
			size := decideSizes[k%len(decideSizes)]
			cats := []string{fmt.Sprintf("IAB%d", 1+r.IntN(26))}
			if r.IntN(3) == 0 {
				cats = append(cats, fmt.Sprintf("IAB%d-%d", 1+r.IntN(26), 1+r.IntN(20)))
			}
			set.Creatives = append(set.Creatives, &tsubame.Creative{
				ID: id, Advertiser: adv, Format: tsubame.FormatBanner, W: size[0], H: size[1],
				Image: "https://cdn.example.com/" + id + ".png", Click: fmt.Sprintf("https://%s/landing/%d", brand, k),
				Categories: cats, Status: tsubame.StatusApproved,
			})
			creatives[a] = append(creatives[a], id)
		}
		for c := range decideCampaignsPer {
			set.Campaigns = append(set.Campaigns, &tsubame.Campaign{
				ID: fmt.Sprintf("c-%03d-%d", a, c), Advertiser: adv, Timezone: decideZones[r.IntN(len(decideZones))]})
		}
	}
	for i := range decideLineItems {
		a := r.IntN(decideAdvertisers)
		l := &tsubame.LineItem{
			ID:        fmt.Sprintf("li-%05d", i),
			Campaign:  fmt.Sprintf("c-%03d-%d", a, r.IntN(decideCampaignsPer)),
			Priority:  []int{1, 2, 4, 4, 6, 8, 8, 8, 10, 12, 12, 12, 16}[r.IntN(13)],
			Weight:    1 + r.IntN(100),
			CPM:       tsubame.Money(50+r.IntN(1951)) * tsubame.MicrosPerUnit / 100, // 0.50 to 20.00
			Creatives: pick(r, creatives[a], 1+r.IntN(3)),
		}
		c := &l.Targeting.Criteria
		switch x := r.IntN(10); {
		case x < 6:
			c.Placements = pick(r, placements, 1+r.IntN(5))
		case x < 8:
			c.Sites = pick(r, sites, 1+r.IntN(3))
		}
		if r.IntN(2) == 0 {
			c.Countries = pick(r, decideCountries, 1+r.IntN(3))
		}
		if r.IntN(10) < 3 {
			c.Devices = pick(r, decideDevices, 1+r.IntN(2))
		}
		if r.IntN(10) < 2 {
			c.OS = pick(r, decideOS, 1+r.IntN(2))
		}
		if r.IntN(10) == 0 {
			c.Browsers = pick(r, decideBrowsers, 1+r.IntN(2))
		}
		if r.IntN(10) < 3 {
			c.KeyValues = map[string][]string{"section": pick(r, decideSections, 1+r.IntN(4))}
		}
		if r.IntN(5) == 0 {
			from := r.IntN(24)
			if to := (from+1+r.IntN(22))%24 + 1; to != from {
				c.Hours = &tsubame.HourRange{From: from, To: to}
			}
		}
		if r.IntN(10) == 0 {
			c.Weekdays = pick(r, tsubame.Weekdays, 2+r.IntN(4))
		}
		if r.IntN(10) == 0 {
			x := &tsubame.Criteria{
				KeyValues: map[string][]string{"section": {"kids"}},
				Browsers:  pick(r, decideBrowsers, 1),
			}
			switch r.IntN(4) {
			case 0:
				from := r.IntN(24)
				if to := (from+r.IntN(8))%24 + 1; to != from {
					x.Hours = &tsubame.HourRange{From: from, To: to}
				}
			case 1:
				x.Sites = pick(r, sites, 1+r.IntN(20))
			case 2:
				x.Placements = pick(r, placements, 1+r.IntN(20))
				x.Countries = []string{"US"}
			}
			l.Targeting.Exclude = x
		}
		if r.IntN(20) == 0 {
			l.Deals = []string{fmt.Sprintf("deal-%d", r.IntN(50))}
		}
		set.LineItems = append(set.LineItems, l)
	}
	return set
}

// decideRequest is one request of the scenario: what an ad tag on a
// publisher's page asks.
type decideRequest struct {
	Placement string
	Site      string // "" for none
	Section   string // kv.section
	Lang      string // kv.lang, "" for none
	UID       string // "" for a visitor without one (the server makes a cookie)
	W, H      int    // 0: any size
	UA        int    // index in browserUAs
}

// Path is the request's path and query.
func (q decideRequest) Path() string {
	v := url.Values{}
	v.Set("placement", q.Placement)
	if q.Site != "" {
		v.Set("site", q.Site)
	}
	v.Set("kv.section", q.Section)
	if q.Lang != "" {
		v.Set("kv.lang", q.Lang)
	}
	if q.UID != "" {
		v.Set("uid", q.UID)
	}
	if q.W > 0 {
		v.Set("w", strconv.Itoa(q.W))
		v.Set("h", strconv.Itoa(q.H))
	}
	return "/api/decide?" + v.Encode()
}

// decideRequests makes n requests spread over the world of decideSet.
func decideRequests(n int) []decideRequest {
	r := rand.New(rand.NewPCG(4, 4))
	out := make([]decideRequest, n)
	for i := range out {
		q := decideRequest{
			Placement: decidePlacement(r.IntN(decidePlacements)),
			Section:   decideSections[r.IntN(len(decideSections))],
			UA:        r.IntN(len(browserUAs)),
		}
		if r.IntN(10) != 0 {
			q.Site = "www." + decideSite(r.IntN(decideSites))
		}
		if r.IntN(2) == 0 {
			q.Lang = "ja"
		}
		if r.IntN(8) != 0 {
			q.UID = fmt.Sprintf("v%06d", r.IntN(200_000))
		}
		if r.IntN(4) == 0 {
			s := decideSizes[r.IntN(len(decideSizes))]
			q.W, q.H = s[0], s[1]
		}
		out[i] = q
	}
	return out
}

// decideScript is the wrk script of the scenario: each thread cycles
// through the requests from its own starting point, each request with its
// User-Agent. The requests are formatted once, in init: request() only
// hands the next one out, so wrk spends no more per request than it must.
func decideScript(reqs []decideRequest) string {
	var b strings.Builder
	b.WriteString("local uas = {\n")
	for _, u := range browserUAs {
		fmt.Fprintf(&b, "  %q,\n", u.UA)
	}
	b.WriteString("}\nlocal reqs = {\n")
	for _, q := range reqs {
		fmt.Fprintf(&b, "  {%q, %d},\n", q.Path(), q.UA+1)
	}
	b.WriteString(`}
local threads = 0
function setup(thread)
  thread:set("first", threads * 1031)
  threads = threads + 1
end
local formatted = {}
local i = 0
function init(args)
  for n, q in ipairs(reqs) do
    local h = {}
    for k, v in pairs(wrk.headers) do h[k] = v end
    h["User-Agent"] = uas[q[2]]
    formatted[n] = wrk.format("GET", q[1], h)
  end
  i = (first or 0) % #formatted
end
function request()
  i = i % #formatted + 1
  return formatted[i]
end
`)
	return b.String()
}

// writeDecideFiles writes the campaign file and the wrk script of the
// scenario into dir.
func writeDecideFiles(dir string) (campaigns, script string, err error) {
	campaigns, script = filepath.Join(dir, "decide-campaigns.json"), filepath.Join(dir, "decide.lua")
	b, err := json.Marshal(decideSet())
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(campaigns, b, 0o600); err != nil {
		return "", "", err
	}
	return campaigns, script, os.WriteFile(script, []byte(decideScript(decideRequests(decideRequestCount))), 0o600)
}

// importCampaigns loads the campaign file into the store of the Tsubame
// that will run in dir (startTsubame's layout), before it starts: with the
// binary under test's own `campaigns import`, so the file is checked, and
// the store written, by the code being measured, whatever revision -bin is.
func importCampaigns(ctx context.Context, bin, dir, file string) error {
	cmd := exec.CommandContext(ctx, bin, "campaigns", "import", "-replace", file)
	cmd.Env = append(os.Environ(), "TSUBAME_DATA_DIR="+filepath.Join(dir, "data"), "TSUBAME_LOG_LEVEL=error")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s campaigns import: %w\n%s", bin, err, out)
	}
	return nil
}

// fill counts the answers of /api/decide during one run: 200 with
// decisions, 204 without.
type fill struct{ Filled, Empty, Other int64 }

// Rate is the share of answers that carried a decision.
func (f fill) Rate() float64 {
	if n := f.Filled + f.Empty + f.Other; n > 0 {
		return float64(f.Filled) / float64(n)
	}
	return 0
}

func (f fill) sub(g fill) fill {
	return fill{f.Filled - g.Filled, f.Empty - g.Empty, f.Other - g.Other}
}

// scrapeDecide reads the decide route's answers by status from Tsubame's
// /metrics.
func scrapeDecide(admin string) (fill, error) {
	body, err := httpGet("http://" + admin + "/metrics")
	if err != nil {
		return fill{}, err
	}
	var f fill
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		rest, isDecide := strings.CutPrefix(name, `tsubame_http_requests_total{code="`)
		if !ok || !isDecide || !strings.HasSuffix(rest, `",endpoint="decide"}`) {
			continue
		}
		v, _ := strconv.ParseFloat(val, 64)
		switch code, _, _ := strings.Cut(rest, `"`); code {
		case "200":
			f.Filled += int64(v)
		case "204":
			f.Empty += int64(v)
		default:
			f.Other += int64(v)
		}
	}
	return f, sc.Err()
}
