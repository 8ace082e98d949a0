package acceptance

import (
	"bytes"
	"encoding/csv"
	"math"
	"os/exec"
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
	}{
		{name: "web", args: []string{"-traffic", "web"}, want: 990},
		{name: "business hours", args: []string{"-traffic", "business"}, want: 990},
		{name: "web, 20 pct less traffic than forecast", args: []string{"-traffic", "web", "-day-traffic", "80%"}, want: 970},
		{name: "business hours, 20 pct less traffic than forecast", args: []string{"-traffic", "business", "-day-traffic", "80%"}, want: 970},
		{name: "RTB at a 5 pct win rate", args: []string{"-traffic", strings.Join(rtb, ","), "-win-rate", "5%", "-notices", "win,loss,bill"},
			want: 990, within: 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"pacing", "simulate", "-date", "2026-11-27", "-every", "1h", "-history", "7", "-noise", "10%", "-trend", "2%"}, tc.args...)
			cmd := exec.Command(bin, append(args, "../cmd/tsubame/testdata/pacing.yaml")...)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, errOut.String())
			}
			t.Log(strings.TrimSpace(errOut.String()))
			recs, err := csv.NewReader(&out).ReadAll()
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
			t.Logf("%d of %d delivered by midnight; the farthest hour from its plan: %.1f %%", prevImp, limit, worst*100)
			if prevImp*1000 < limit*tc.want {
				t.Errorf("%d of %d delivered by midnight: want at least %d", prevImp, limit, limit*tc.want/1000)
			}
		})
	}
}
