package forecast

import (
	"slices"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/report"
)

// testTraffic is a flat history: every hour of 7 days, 600 requests from
// desktops in Japan, 300 from phones in Japan, 100 from desktops in the
// US, all for the placement top on example.com.
func testTraffic(start time.Time) func(report.Query) (*report.Result, error) {
	cells := []struct {
		c Cell
		n int64
	}{{Cell{"top", "example.com", "JP", "desktop"}, 600}, {Cell{"top", "example.com", "JP", "mobile"}, 300},
		{Cell{"top", "example.com", "US", "desktop"}, 100}}
	return func(q report.Query) (*report.Result, error) {
		res := &report.Result{Query: q}
		if slices.Contains(q.By, report.ByHour) {
			for h := start; h.Before(start.AddDate(0, 0, 7)); h = h.Add(time.Hour) {
				if h.Before(q.From) || !h.Before(q.To) {
					continue
				}
				for _, c := range cells {
					var r report.Row
					r.Time = h
					r.Dims[report.DimPlacement], r.Dims[report.DimSite], r.Dims[report.DimCountry], r.Dims[report.DimDevice] = c.c.Placement, c.c.Site, c.c.Country, c.c.Device
					r.Counts[report.Requests] = c.n
					res.Rows = append(res.Rows, r)
				}
			}
			return res, nil
		}
		var r report.Row
		if q.From.IsZero() { // all time: the total limit's line item delivered 4,000
			r.Dims[report.DimCampaign], r.Dims[report.DimLineItem], r.Counts[report.Impressions] = "c-total", "total", 4000
		} else { // today: the budget's campaign spent 100 units
			r.Dims[report.DimCampaign], r.Dims[report.DimLineItem], r.Counts[report.Spend] = "c-budget", "budget", 100*tsubame.MicrosPerUnit*1000
		}
		res.Rows = append(res.Rows, r)
		return res, nil
	}
}

func testIndex(t *testing.T, now time.Time) *decision.Index {
	t.Helper()
	set := &tsubame.CampaignSet{}
	add := func(id string, prio int, tg tsubame.Criteria, edit func(*tsubame.Campaign, *tsubame.LineItem)) {
		set.Advertisers = append(set.Advertisers, &tsubame.Advertiser{ID: "a-" + id, Name: id})
		c := &tsubame.Campaign{ID: "c-" + id, Advertiser: "a-" + id, Timezone: "UTC"}
		set.Campaigns = append(set.Campaigns, c)
		set.Creatives = append(set.Creatives, &tsubame.Creative{ID: "cr-" + id, Advertiser: "a-" + id, Format: tsubame.FormatBanner,
			W: 300, H: 250, Image: "https://cdn.example.com/" + id + ".png", Click: "https://example.com/" + id, Status: tsubame.StatusApproved})
		l := &tsubame.LineItem{ID: id, Campaign: c.ID, Priority: prio, Weight: 1, Creatives: []string{"cr-" + id},
			Targeting: tsubame.Targeting{Criteria: tg}}
		edit(c, l)
		set.LineItems = append(set.LineItems, l)
	}
	add("jp-phones", 4, tsubame.Criteria{Countries: []string{"JP"}, Devices: []string{"mobile"}}, func(_ *tsubame.Campaign, l *tsubame.LineItem) {
		l.Limits.Impressions.Daily = 3600
	})
	add("all", 4, tsubame.Criteria{}, func(_ *tsubame.Campaign, l *tsubame.LineItem) { l.Limits.Impressions.Daily = 4800 })
	add("total", 6, tsubame.Criteria{Countries: []string{"US"}}, func(_ *tsubame.Campaign, l *tsubame.LineItem) {
		l.Limits.Impressions.Total = 10000
		l.End = now.Truncate(24*time.Hour).AddDate(0, 0, 2) // 48 hours from the day's start
	})
	add("budget", 8, tsubame.Criteria{Placements: []string{"side"}}, func(c *tsubame.Campaign, l *tsubame.LineItem) {
		c.Budget.Daily, l.CPM = 1000*tsubame.MicrosPerUnit, 500*tsubame.MicrosPerUnit
	})
	add("house", 12, tsubame.Criteria{}, func(*tsubame.Campaign, *tsubame.LineItem) {}) // no goal: books nothing
	ix, err := decision.Compile(set, decision.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestForecastNetOfBookedLineItems(t *testing.T) {
	day := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	now := day.Add(30 * time.Minute)
	ix := testIndex(t, now)
	f := New(Options{Reports: testTraffic(day.AddDate(0, 0, -7)), Index: func() *decision.Index { return ix }, Now: func() time.Time { return now }})

	type want struct {
		available, booked, net int64
		lines                  map[string][3]int64 // wants, takes, short
	}
	for _, c := range []struct {
		name   string
		filter Filter
		want   want
	}{
		// jp-phones (the least supply of priority 4) takes 3,600 of the
		// 7,200 phones; all takes the same 20 % of every cell (4,800 of
		// 24,000), 2,880 of the 14,400 desktops in Japan.
		{"desktops in Japan", Filter{Countries: []string{"JP"}, Devices: []string{"desktop"}},
			want{14400, 2880, 11520, map[string][3]int64{"all": {4800, 2880, 0}}}},
		// total wants 3,000 of its 6,000 left (half its flight's traffic);
		// the US's 2,400 less all's 480 leave it 1,920.
		{"the US", Filter{Countries: []string{"US"}},
			want{2400, 2400, 0, map[string][3]int64{"all": {4800, 480, 0}, "total": {3000, 1920, 1080}}}},
		{"the placement", Filter{Placements: []string{"top"}},
			want{24000, 3600 + 4800 + 1920, 24000 - 10320, map[string][3]int64{"jp-phones": {3600, 3600, 0}, "all": {4800, 4800, 0}, "total": {3000, 1920, 1080}}}},
		{"a site's subdomain", Filter{Sites: []string{"news.example.com"}}, want{0, 0, 0, map[string][3]int64{}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := f.Forecast(Request{From: day.Add(-time.Hour), To: day.AddDate(0, 0, 1), Filter: c.filter})
			if err != nil {
				t.Fatal(err)
			}
			if !res.From.Equal(day) || len(res.Hours) != 24 || res.HistoryDays != 7 {
				t.Fatalf("from %v (the past moved to the current hour %v), %d hours, %d days of history", res.From, day, len(res.Hours), res.HistoryDays)
			}
			if res.Available != c.want.available || res.Booked != c.want.booked || res.Net != c.want.net {
				t.Errorf("available %d, booked %d, net %d; want %d, %d, %d", res.Available, res.Booked, res.Net, c.want.available, c.want.booked, c.want.net)
			}
			for _, h := range res.Hours {
				if h.Available*24 != c.want.available || h.Booked+h.Net != h.Available {
					t.Errorf("hour %v: %+v", h.Time, h)
				}
			}
			got := map[string][3]int64{}
			for _, b := range res.LineItems {
				got[b.LineItem] = [3]int64{b.Wants, b.Takes, b.Short}
			}
			if len(got) != len(c.want.lines) {
				t.Errorf("line items %v, want %v", got, c.want.lines)
			}
			for id, w := range c.want.lines {
				if got[id] != w {
					t.Errorf("%s: wants, takes, short %v; want %v", id, got[id], w)
				}
			}
		})
	}
}

func TestForecastRefuses(t *testing.T) {
	now := time.Date(2026, 12, 8, 10, 30, 0, 0, time.UTC)
	ix := testIndex(t, now)
	f := New(Options{Reports: testTraffic(now.AddDate(0, 0, -7)), Index: func() *decision.Index { return ix }, Now: func() time.Time { return now }})
	h := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	for _, req := range []Request{
		{From: h.Add(time.Minute), To: h.Add(time.Hour)},
		{From: h, To: h},
		{From: h, To: h.Add(MaxRange + time.Hour)},
		{From: h.Add(-10 * time.Hour), To: h.Add(-2 * time.Hour)}, // passed
	} {
		if _, err := f.Forecast(req); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("%v to %v: %v, want EINVALID", req.From, req.To, err)
		}
	}
}

func TestParams(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 8, 10, 30, 0, 0, time.UTC)
	req, err := Params{From: "2026-12-10", To: "2026-12-12", TZ: "Asia/Tokyo", Placements: "top, side", Sites: "News.Example.com",
		Countries: "jp,us", Devices: "Mobile"}.Parse(time.UTC, now)
	if err != nil {
		t.Fatal(err)
	}
	if !req.From.Equal(time.Date(2026, 12, 10, 0, 0, 0, 0, tokyo)) || !req.To.Equal(time.Date(2026, 12, 12, 0, 0, 0, 0, tokyo)) ||
		req.Location.String() != "Asia/Tokyo" {
		t.Errorf("range %v to %v in %v", req.From, req.To, req.Location)
	}
	if f := req.Filter; !slices.Equal(f.Placements, []string{"top", "side"}) || !slices.Equal(f.Sites, []string{"news.example.com"}) ||
		!slices.Equal(f.Countries, []string{"JP", "US"}) || !slices.Equal(f.Devices, []string{"mobile"}) {
		t.Errorf("filter %+v", f)
	}
	req, err = Params{}.Parse(time.UTC, now)
	if err != nil || !req.From.Equal(time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)) || req.To.Sub(req.From) != 24*time.Hour {
		t.Errorf("defaults: %v to %v (%v), want the current hour and a day", req.From, req.To, err)
	}
	for _, p := range []Params{{From: "tomorrow"}, {TZ: "Mars/Olympus"}, {TZ: "Local"}, {Countries: "JPN"}, {Devices: "watch"},
		{Sites: "exa mple.com"}, {Sites: ".example.com"}, {Placements: "a\x00b"}, {Placements: ","}} {
		if _, err := p.Parse(time.UTC, now); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("%+v: %v, want EINVALID", p, err)
		}
	}
}
