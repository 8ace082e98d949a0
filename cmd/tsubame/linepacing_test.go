package main

import (
	"testing"

	"tsubame"
	"tsubame/internal/admin"
	"tsubame/internal/budget"
)

// TestLinePacing: a line item is paced by its own impression limit (the
// day's first), else by its campaign's budget; its state compares what
// was delivered (and is held) with what the plan allows by now.
func TestLinePacing(t *testing.T) {
	li := &tsubame.LineItem{ID: "li-1", Campaign: "c-1"}
	camp := budget.Usage{Key: "c-1 total", Kind: budget.KindSpend, Campaign: "c-1", Pacing: "even", Booked: 100_000_000, Target: 40_000_000, Settled: 39_000_000}
	own := budget.Usage{Key: "li-1 total", Kind: budget.KindImpressions, LineItem: "li-1", Campaign: "c-1", Pacing: "even", Booked: 1000, Target: 500, Settled: 100}
	day := own
	day.Key, day.Date, day.Booked, day.Target, day.Settled, day.Reserved = "li-1 day", "2026-11-30", 100, 50, 45, 5
	other := own
	other.Key, other.LineItem = "li-2 total", "li-2"

	for _, c := range []struct {
		name  string
		us    []budget.Usage
		key   string
		state string
	}{
		{"its campaign's budget, on track", []budget.Usage{other, camp}, "c-1 total", admin.PacingOnTrack},
		{"its own limit before its campaign's", []budget.Usage{camp, own}, "li-1 total", admin.PacingBehind},
		{"the day's before the total, ahead", []budget.Usage{camp, own, day}, "li-1 day", admin.PacingAhead},
		{"none", []budget.Usage{other}, "", ""},
	} {
		p := linePacing(pacedBy(c.us, li))
		switch {
		case c.key == "" && p != nil:
			t.Errorf("%s: paced by %+v", c.name, p)
		case c.key != "" && (p == nil || p.Budget != c.key || p.State != c.state):
			t.Errorf("%s: %+v, want %s %s", c.name, p, c.key, c.state)
		}
	}
	// The amounts: spend as the currency's decimals, impressions as numbers.
	p := linePacing(&camp)
	if string(p.Delivered) != `"39"` || string(p.Planned) != `"40"` || string(p.Booked) != `"100"` {
		t.Errorf("spend: %s %s %s", p.Delivered, p.Planned, p.Booked)
	}
	if p = linePacing(&day); string(p.Delivered) != "45" || p.Detail != "45 impressions delivered of 50 impressions planned by now (100 impressions booked, even pacing); ahead: it serves again as the plan moves on" {
		t.Errorf("impressions: %s %q", p.Delivered, p.Detail)
	}
	// Nothing planned yet (the flight has not begun): no pacing.
	early := camp
	early.Target = 0
	if p := linePacing(&early); p != nil {
		t.Errorf("before the plan: %+v", p)
	}
	// Asap (or no end): the plan is the whole booking, never ahead or
	// behind before it is spent.
	asap := camp
	for _, settled := range []int64{0, asap.Booked - 1} {
		asap.Target, asap.Settled = asap.Booked, settled
		if p := linePacing(&asap); p.State != admin.PacingOnTrack {
			t.Errorf("asap, %d settled: %+v", settled, p)
		}
	}
}
