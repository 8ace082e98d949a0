package bidder

import (
	"strings"
	"testing"
	"time"

	"tsubame/internal/decision"
)

// A bid without a win window holds a share by its win rate only where no
// notice could give a whole hold back sooner: auto shares until the
// exchange sends a win or a loss notice, on always, off never.
func TestHoldShareNow(t *testing.T) {
	for _, tc := range []struct {
		holds        string
		wins, losses uint64
		want         int64
	}{
		{"", 0, 0, decision.HoldByWinRate},
		{WinRateHoldsAuto, 0, 0, decision.HoldByWinRate},
		{WinRateHoldsAuto, 0, 1, 0},
		{WinRateHoldsAuto, 1, 0, 0},
		{WinRateHoldsOn, 3, 40, decision.HoldByWinRate},
		{WinRateHoldsOff, 0, 0, 0},
	} {
		var stats Stats
		stats.Wins.Add(tc.wins)
		stats.Losses.Add(tc.losses)
		e := Exchange{WinRateHolds: tc.holds}
		if got := e.HoldShareNow(&stats); got != tc.want {
			t.Errorf("win_rate_holds %q after %d wins and %d losses: share %d, want %d", tc.holds, tc.wins, tc.losses, got, tc.want)
		}
	}
	ok := Exchange{Name: "x", Seat: "s", PriceEncoding: PricePlain, Reservation: time.Minute, WinRateHolds: WinRateHoldsOn}
	if err := ok.Validate(time.Hour); err != nil {
		t.Fatal(err)
	}
	bad := ok
	bad.WinRateHolds = "sometimes"
	if err := bad.Validate(time.Hour); err == nil || !strings.Contains(err.Error(), `win_rate_holds: "auto", "on" or "off"`) {
		t.Errorf("win_rate_holds: sometimes: %v", err)
	}
}

// The measured win window: none before WinWindowSample win notices, then
// twice their 99th percentile plus a second, within the reservation.
func TestWinWindowNow(t *testing.T) {
	var stats Stats
	e := Exchange{Reservation: time.Minute}
	for range WinWindowSample - 1 {
		stats.WinDelayed(1500 * time.Millisecond)
	}
	if w := e.WinWindowNow(&stats); w != 0 {
		t.Fatalf("window %s after %d notices, want none yet", w, WinWindowSample-1)
	}
	stats.WinDelayed(1500 * time.Millisecond)
	if w := e.WinWindowNow(&stats); w != 5*time.Second { // p99 rounds up to 2 s
		t.Fatalf("window %s, want 5s", w)
	}
	for range 1000 {
		stats.WinDelayed(50 * time.Second)
	}
	if w := e.WinWindowNow(&stats); w != time.Minute {
		t.Fatalf("window %s, want the reservation, 1m0s", w)
	}
	e.WinWindow = WinWindowOff
	if w := e.WinWindowNow(&stats); w != 0 {
		t.Fatalf("win_window off: window %s", w)
	}
}

// A won bid unbilled at its end is spent (keep_won) unless the exchange
// bills on time: auto until this node counted KeepWonSample bills with
// under 1 % of them late, on always, off never.
func TestKeepWonNow(t *testing.T) {
	for _, tc := range []struct {
		keep        string
		bills, late uint64
		want        bool
	}{
		{"", 0, 0, true},
		{KeepWonAuto, KeepWonSample - 1, 0, true},
		{KeepWonAuto, KeepWonSample, 0, false},
		{KeepWonAuto, 1000, 10, true},
		{KeepWonAuto, 1001, 10, false}, // under 1 % late: stragglers
		{KeepWonAuto, 5000, 5000, true},
		{KeepWonOn, 0, 0, true},
		{KeepWonOff, 100, 100, false},
	} {
		var stats Stats
		stats.Bills.Add(tc.bills)
		stats.Late.Add(tc.late)
		e := Exchange{KeepWon: tc.keep}
		if got := e.KeepWonNow(&stats); got != tc.want {
			t.Errorf("keep_won %q after %d bills, %d late: %v, want %v", tc.keep, tc.bills, tc.late, got, tc.want)
		}
	}
	bad := Exchange{Name: "x", Seat: "s", PriceEncoding: PricePlain, Reservation: time.Minute, KeepWon: "maybe"}
	if err := bad.Validate(time.Hour); err == nil || !strings.Contains(err.Error(), `keep_won: "auto", "on" or "off"`) {
		t.Errorf("keep_won: maybe: %v", err)
	}
}

// appendHTMLAttr escapes what ends or opens a double-quoted attribute,
// and every other byte is copied as it is.
func TestAppendHTMLAttr(t *testing.T) {
	for in, want := range map[string]string{
		"": "",
		"https://n.example/t/c/AbC-_9?price=${AUCTION_PRICE}&loss=${AUCTION_LOSS}": "https://n.example/t/c/AbC-_9?price=${AUCTION_PRICE}&amp;loss=${AUCTION_LOSS}",
		`&"<>`:        "&amp;&quot;&lt;&gt;",
		`a"b'c<d>e&f`: "a&quot;b'c&lt;d&gt;e&amp;f",
		"é\x00\xff":   "é\x00\xff",
	} {
		if got := string(appendHTMLAttr([]byte("x="), in)); got != "x="+want {
			t.Errorf("%q: %q, want %q", in, got, "x="+want)
		}
	}
}
