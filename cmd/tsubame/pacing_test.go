package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/bulk"
)

func pacingSet(t *testing.T, edit func(*tsubame.CampaignSet)) *tsubame.CampaignSet {
	t.Helper()
	set, err := readCampaignFile("testdata/pacing.yaml", bulk.CampaignsAuto)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(set)
	}
	return set
}

var flatTraffic = func() (tr [24]int) {
	for h := range tr {
		tr[h] = 2000
	}
	return tr
}()

// A day replayed on three simulated servers follows the pacing: never
// ahead of the ideal by more than the servers' leases, and the daily limit
// reached (98 % at least) when traffic allows.
func TestSimulatePacing(t *testing.T) {
	night := [24]int{}
	for h := range night {
		night[h] = 1
	}
	for _, tc := range []struct {
		name    string
		edit    func(*tsubame.CampaignSet)
		traffic [24]int
		check   func(t *testing.T, rows []simRow)
	}{
		{"even, web traffic", nil, webTraffic, nil},
		{"even, flat traffic", nil, flatTraffic, func(t *testing.T, rows []simRow) {
			// Enough traffic all day: delivery is the curve at every hour.
			for _, r := range rows {
				if r.impressions < r.idealI-100 {
					t.Errorf("%s: %d delivered, ideal %d", r.at.Format(time.TimeOnly), r.impressions, r.idealI)
				}
			}
		}},
		{"frontloaded", func(s *tsubame.CampaignSet) { s.Campaigns[0].Pacing.Mode = tsubame.PacingFrontloaded }, flatTraffic,
			func(t *testing.T, rows []simRow) {
				// 1.25 times even: the limit is reached at 80 % of the day, 19:12.
				for _, r := range rows {
					if h := r.at.Sub(rows[0].at).Hours(); h == 20 && r.impressions < 9900 {
						t.Errorf("frontloaded: %d delivered by 20:00, want nearly all 10000", r.impressions)
					}
				}
			}},
		{"hour weights", func(s *tsubame.CampaignSet) {
			w := make([]int, 24)
			for h := 9; h < 21; h++ {
				w[h] = 1 // 09:00 to 21:00 only
			}
			s.Campaigns[0].Pacing.HourWeights = w
		}, flatTraffic, func(t *testing.T, rows []simRow) {
			for _, r := range rows {
				h := r.at.Sub(rows[0].at).Hours()
				if h <= 9 && r.impressions != 0 {
					t.Errorf("%v h: %d delivered in hours of weight 0", h, r.impressions)
				}
				if h == 15 && (r.impressions < 4900 || r.impressions > 5000) {
					t.Errorf("15:00, half-way through the weighted hours: %d delivered, want about 5000", r.impressions)
				}
			}
		}},
		{"asap", func(s *tsubame.CampaignSet) { s.Campaigns[0].Pacing.Mode = tsubame.PacingASAP }, flatTraffic,
			func(t *testing.T, rows []simRow) {
				if r := rows[6]; r.impressions != 10000 { // 12,000 requests by 06:00
					t.Errorf("asap: %d delivered by 06:00, want the whole 10000", r.impressions)
				}
			}},
		{"too little traffic", nil, night, func(t *testing.T, rows []simRow) {
			// One request an hour: each server passes the line item over
			// for its first request (no lease yet), then serves every one.
			if last := rows[len(rows)-1]; last.impressions != last.requests-3 {
				t.Errorf("%d requests, %d delivered: want all but each server's first", last.requests, last.impressions)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Servers that tick every 10 s: the day costs a tenth of the rounds.
			res, err := simulatePacing(t.Context(), simConfig{set: pacingSet(t, tc.edit), traffic: tc.traffic, show: 100, nodes: 3,
				every: time.Hour, interval: 10 * time.Second, date: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.rows) != 25 {
				t.Fatalf("%d rows for a day by the hour, want 25", len(res.rows))
			}
			for _, r := range res.rows {
				// Three servers each lease at most a 64th of 10,000 ahead.
				if r.impressions > r.idealI+3*157 {
					t.Errorf("%s: %d delivered, ideal %d", r.at.Format(time.TimeOnly), r.impressions, r.idealI)
				}
				if r.impressions > 10000 {
					t.Fatalf("%d delivered on a daily limit of 10000", r.impressions)
				}
			}
			last := res.rows[len(res.rows)-1]
			if tc.traffic != night && last.impressions < 9800 {
				t.Errorf("%d of 10000 delivered by midnight, want 98 %%", last.impressions)
			}
			if tc.check != nil {
				tc.check(t, res.rows)
			}
		})
	}
}

// A day of 23 hours (the spring change in New York) is paced over its 23
// hours.
func TestSimulatePacingShortDay(t *testing.T) {
	set := pacingSet(t, func(s *tsubame.CampaignSet) { s.Campaigns[0].Timezone = "America/New_York" })
	res, err := simulatePacing(t.Context(), simConfig{set: set, traffic: flatTraffic, show: 100, nodes: 2, every: time.Hour,
		interval: 10 * time.Second, date: time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.rows) != 24 {
		t.Fatalf("%d rows for a day of 23 hours, want 24", len(res.rows))
	}
	for _, r := range res.rows[1:] {
		want := int64(10000) * int64(r.at.Sub(res.dayStart)/time.Second) / (23 * 3600)
		if d := r.idealI - want; d < 0 || d > 1 {
			t.Errorf("%s: ideal %d, want %d (a 23-hour day)", r.at.In(res.loc).Format(time.TimeOnly), r.idealI, want)
		}
	}
}

// The command writes its CSV, the PNG, and a summary; bad input is a usage
// error naming the problem.
func TestPacingSimulateCommand(t *testing.T) {
	png := filepath.Join(t.TempDir(), "day.png")
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"pacing", "simulate", "-date", "2026-11-27", "-every", "6h", "-png", png, "testdata/pacing.yaml"},
		nil, &out, &errOut, nil)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	recs, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 6 || strings.Join(recs[0], ",") != "time,requests,impressions,ideal_impressions,spend,ideal_spend" {
		t.Fatalf("CSV:\n%v", recs)
	}
	if recs[1][0] != "2026-11-27T00:00:00+09:00" || recs[5][0] != "2026-11-28T00:00:00+09:00" || recs[5][3] != "10000" || recs[5][5] != "30000" {
		t.Fatalf("rows %v and %v", recs[1], recs[5])
	}
	if n, _ := strconv.Atoi(recs[5][2]); n < 9800 || n > 10000 {
		t.Fatalf("%d impressions by midnight", n)
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG written (%v)", err)
	}
	if !strings.Contains(errOut.String(), "li-winter-news on 2026-11-27: 19000 requests") {
		t.Fatalf("summary: %q", errOut.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pacing"}, "pacing needs a subcommand"},
		{[]string{"pacing", "simulate"}, "usage: tsubame pacing simulate"},
		{[]string{"pacing", "simulate", "-traffic", "1,2,3", "testdata/pacing.yaml"}, "3 numbers, want 24"},
		{[]string{"pacing", "simulate", "-line", "nope", "testdata/pacing.yaml"}, `no line item "nope"`},
		{[]string{"pacing", "simulate", "-date", "27/11/2026", "testdata/pacing.yaml"}, "is not YYYY-MM-DD"},
		{[]string{"pacing", "simulate", "-show", "101", "testdata/pacing.yaml"}, "-show must be a percent"},
	} {
		errOut.Reset()
		if code := run(t.Context(), tc.args, nil, &out, &errOut, nil); code != exitUsage || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want a usage error with %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}
