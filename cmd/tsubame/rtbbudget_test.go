package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/rtbtest"
	"tsubame/internal/store/redis/redistest"
)

// A budget is spent at the win rates of real exchanges, never over: three
// real Mains on one Redis, a line item with an impression limit, and a
// scripted exchange posting bid requests to the nodes in turn from
// several streams at once. Each bid wins with a seeded probability; a
// win's notice goes to the next node and its billing notice to the one
// after, a loss's notice (when the exchange sends them, with a clearing
// price above the bid) to the next. The exchange stops once the limit is
// billed or the nodes have bid nothing for a while. Billed: at least 97 %
// of the limit (95 % with win notices but no loss notices, where a lost
// bid holds its price for the exchange's win window), never more, and the
// store's committed count is never over the limit.
func TestRTBBudgetSpentAtRealWinRates(t *testing.T) {
	if testing.Short() {
		t.Skip("three servers bid thousands of times; skipped in -short mode")
	}
	for _, tc := range []budgetCase{
		{name: "10pct-with-losses", limit: 150, winPct: 10, losses: true, wins: true, window: "auto", reservation: "2m", want: 97},
		{name: "1pct-with-losses", limit: 30, winPct: 1, losses: true, wins: true, window: "auto", reservation: "2m", want: 97},
		{name: "10pct-wins-only", limit: 40, winPct: 10, wins: true, window: "2s", reservation: "2m", want: 95},
		// Billing notices only: bids hold shares of their price, by the
		// measured win rate, for their reservation; the exchange goes on
		// past the limit, until the servers stop bidding or for two and a
		// half minutes, so that a tail of shares past the limit would
		// show. (The last prices of the limit go slowly: a server bids
		// them only as fast as its open bids end, since the bills of all
		// of them must fit.)
		{name: "10pct-billing-only", limit: 150, winPct: 10, window: "auto", reservation: "5s", idle: 10 * time.Second, run: 150 * time.Second, want: 90},
	} {
		t.Run(tc.name, func(t *testing.T) { testBudgetAtWinRate(t, tc) })
	}
}

// budgetCase is an exchange and a limit for testBudgetAtWinRate.
type budgetCase struct {
	name                string
	limit               int64
	winPct              int  // the chance a bid wins, in percent
	losses, wins        bool // the exchange sends loss notices, win notices (and always bills)
	window, reservation string
	idle                time.Duration // 0: stop once the limit is billed, or after 5 s without a bid
	run                 time.Duration // with idle: stop after this long too
	want                int64         // the least billed, in percent of the limit
}

func testBudgetAtWinRate(t *testing.T, tc budgetCase) {
	limit, want := tc.limit, tc.want
	srv := redistest.Start(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "tracking.keys") // shared: a notice verifies on any node
	if err := os.WriteFile(keys, []byte("k1 "+strings.Repeat("s", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(conf, []byte(`ads:
  currency: USD
  budget:
    interval: 50ms
    grace: 2s
  tracking:
    keys_file: `+keys+`
rtb:
  notice_url: http://bidder.example
  exchanges:
    ssp:
      seat: Agency1
      reservation: `+tc.reservation+`
      win_window: `+tc.window+`
`), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	var nodes []*Main
	for range 3 {
		// A request is given a minute to be read, not the shipped 5 s:
		// the test is of the money, not of slow clients, and on a machine
		// busy enough a server's goroutine can wait past its read
		// deadline with the request already in its socket (408).
		env := append(testEnv(t), "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+srv.Addr,
			"TSUBAME_STORE_REDIS_KEY_PREFIX="+prefix, "TSUBAME_CONFIG="+conf, "TSUBAME_SERVER_READ_TIMEOUT=1m")
		nodes = append(nodes, openMain(t, env, false))
	}
	if err := nodes[0].backend.(tsubame.CampaignStore).ReplaceAll(t.Context(), rtbtest.CoffeeLine(t, "../../internal/bidder/testdata/campaigns.json", limit)); err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		nodes[i].ads.engine.Changed()
		waitUntil(t, fmt.Sprint("node ", i, " to know the line item"), func() bool {
			return nodes[i].ads.engine.Index().Len() == 1
		})
	}
	// The committed count is sampled all along: never over the limit.
	most := rtbtest.SampleCommitted(t, nodes[0].backend.(tsubame.Quotas), rtbtest.CoffeeKey)
	x := &rtbtest.Exchange{Path: "/rtb/ssp", Streams: 6, WinPct: tc.winPct, Losses: tc.losses, Wins: tc.wins, Bills: true,
		// Enough: the limit billed, or no bid for 5 s (what is held has
		// come back by then, and nothing more is to be had).
		StopAt: limit, Idle: 5 * time.Second}
	if tc.idle > 0 {
		x.StopAt, x.Idle, x.For = 0, tc.idle, tc.run
	}
	for _, nd := range nodes {
		x.Bases = append(x.Bases, "http://"+nd.PublicAddr())
	}
	ok := x.Run(t)
	for i, nd := range nodes {
		t.Logf("node %d: %+v", i, nd.ads.ledger.Counts())
	}
	mostCommitted := most()
	if !ok {
		return
	}
	n := x.Billed.Load()
	t.Logf("%v on a limit of %d; the store committed at most %d", x, limit, mostCommitted)
	switch {
	case n > limit:
		t.Fatalf("%d billed on a limit of %d", n, limit)
	case mostCommitted > limit:
		t.Fatalf("the store committed %d on a limit of %d", mostCommitted, limit)
	case n*100 < limit*want:
		t.Fatalf("%d billed on a limit of %d: under %d %%", n, limit, want)
	}
}
