package acceptance

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Issue 43's acceptance for a day's pacing, with the binary's `tsubame
// pacing simulate`: three servers that replayed 7 days first (each hour
// varied by up to 10 % at random, each day 2 % more than the one before),
// then a day of the same traffic, on the line item of
// cmd/tsubame/testdata/pacing.yaml (10,000 impressions a day, even).
// Delivered by midnight at least want ‰ of the daily limit, never over it,
// and no hour above 1.5 times its plan (the servers' plan by the traffic
// they learned); an RTB line item at a 5 % win rate within 5 % of its
// plan every hour.
func TestPacingFollowsTheTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 8 days of traffic per case; skipped in -short mode")
	}
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	web := []int{300, 200, 120, 80, 80, 120, 300, 700, 900, 900, 900, 1000, 1300, 1000, 900, 900, 900, 1000, 1300, 1500, 1600, 1400, 1000, 600}
	rtb := make([]string, 24) // enough bid requests to win 2 a day's limit at 5 %
	for h, n := range web {
		rtb[h] = strconv.Itoa(n * 20)
	}
	const limit = 10_000
	for _, tc := range []struct {
		name string
		args []string
		want int64 // ‰ of the limit by midnight
		// within, when set, is how far from its plan each hour may be
		// (‰), instead of at most 1.5 times it.
		within int64
		// file is the campaign file (pacing.yaml when empty); goals, the
		// daily limits of the line items competing in it, each to reach
		// want ‰ of its goal.
		file  string
		goals map[string]int64
	}{
		{name: "web", args: []string{"-traffic", "web"}, want: 990},
		{name: "business hours", args: []string{"-traffic", "business"}, want: 990},
		{name: "web, 20 pct less traffic than forecast", args: []string{"-traffic", "web", "-day-traffic", "80%"}, want: 970},
		{name: "business hours, 20 pct less traffic than forecast", args: []string{"-traffic", "business", "-day-traffic", "80%"}, want: 970},
		{name: "RTB at a 5 pct win rate", args: []string{"-traffic", strings.Join(rtb, ","), "-win-rate", "5%", "-notices", "win,loss,bill"},
			want: 990, within: 50},
		// Three line items on one placement (two of a priority, weighted
		// 2:1, and one below), on a day of 1.5 times their goals' sum.
		{name: "three line items competing", file: "pacing-three.yaml", want: 990,
			args:  []string{"-line", "li-coffee-a,li-coffee-b,li-books", "-traffic", scaled(web, 15, 19)},
			goals: map[string]int64{"li-coffee-a": 5000, "li-coffee-b": 3000, "li-books": 2000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"pacing", "simulate", "-date", "2026-11-27", "-every", "1h", "-history", "7", "-noise", "10%", "-trend", "2%"}, tc.args...)
			cmd := exec.Command(bin, append(args, "../cmd/tsubame/testdata/"+cmp.Or(tc.file, "pacing.yaml"))...)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, errOut.String())
			}
			t.Log(strings.TrimSpace(errOut.String()))
			recs, err := csv.NewReader(&out).ReadAll()
			limit := cmp.Or(tc.goals[firstLine(tc.args)], limit)
			if err != nil || len(recs) != 26 || recs[0][4] != "impressions" || recs[0][5] != "ideal_impressions" {
				t.Fatalf("CSV (%v):\n%s", err, out.String())
			}
			var prevImp, prevPlan int64
			var worst float64
			for _, r := range recs[1:] {
				imp, _ := strconv.ParseInt(r[4], 10, 64)
				plan, _ := strconv.ParseInt(r[5], 10, 64)
				if imp > limit {
					t.Errorf("%s: %d delivered, past the daily limit of %d", r[0], imp, limit)
				}
				d, p := imp-prevImp, plan-prevPlan
				prevImp, prevPlan = imp, plan
				if r[0] == recs[1][0] {
					continue // midnight: the first row
				}
				if p > 0 {
					worst = max(worst, math.Abs(float64(d)/float64(p)-1))
				}
				switch {
				case tc.within > 0 && (d-p)*1000 > tc.within*p+1000 || tc.within > 0 && (p-d)*1000 > tc.within*p+1000:
					t.Errorf("the hour to %s: %d delivered, %d planned: want within %d‰ (and one)", r[0], d, p, tc.within)
				case tc.within == 0 && 2*d > 3*p:
					t.Errorf("the hour to %s: %d delivered, above 1.5 times its plan of %d", r[0], d, p)
				}
			}
			t.Logf("%d delivered by midnight; the farthest hour from its plan: %.1f %%", prevImp, worst*100)
			if tc.goals == nil && prevImp*1000 < limit*tc.want {
				t.Errorf("%d of %d delivered by midnight: want at least %d", prevImp, limit, limit*tc.want/1000)
			}
			for id, goal := range tc.goals {
				m := regexp.MustCompile(`(?:^|; )` + regexp.QuoteMeta(id) + `(?: on [0-9-]+: .*?, |: )(\d+) impressions billed`).FindStringSubmatch(errOut.String())
				if m == nil {
					t.Fatalf("no count of %s in %q", id, errOut.String())
				}
				n, _ := strconv.ParseInt(m[1], 10, 64)
				if n > goal || n*1000 < goal*tc.want {
					t.Errorf("%s: %d billed of its goal of %d, want at least %d and never more", id, n, goal, goal*tc.want/1000)
				}
			}
		})
	}
}

// scaled is a day of requests per hour, n/d times day.
func scaled(day []int, n, d int) string {
	out := make([]string, len(day))
	for h, v := range day {
		out[h] = strconv.Itoa(v * n / d)
	}
	return strings.Join(out, ",")
}

// firstLine is the first line item of a -line flag in args ("" without).
func firstLine(args []string) string {
	for i, a := range args {
		if a == "-line" && i+1 < len(args) {
			first, _, _ := strings.Cut(args[i+1], ",")
			return first
		}
	}
	return ""
}
