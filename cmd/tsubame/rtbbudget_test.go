package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
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
	for _, tc := range []struct {
		name      string
		limit     int64
		winPct    int  // the chance a bid wins, in percent
		losses    bool // the exchange sends loss notices
		winWindow string
		want      int64 // the least billed, in percent of the limit
	}{
		{"10pct-with-losses", 150, 10, true, "auto", 97},
		{"1pct-with-losses", 30, 1, true, "auto", 97},
		{"10pct-wins-only", 40, 10, false, "2s", 95},
	} {
		t.Run(tc.name, func(t *testing.T) { testBudgetAtWinRate(t, tc.limit, tc.winPct, tc.losses, tc.winWindow, tc.want) })
	}
}

func testBudgetAtWinRate(t *testing.T, limit int64, winPct int, losses bool, winWindow string, want int64) {
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
  tracking:
    keys_file: `+keys+`
rtb:
  notice_url: http://bidder.example
  exchanges:
    ssp:
      seat: Agency1
      reservation: 2m
      win_window: `+winWindow+`
`), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	var nodes []*Main
	for range 3 {
		env := append(testEnv(t), "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+srv.Addr,
			"TSUBAME_STORE_REDIS_KEY_PREFIX="+prefix, "TSUBAME_CONFIG="+conf)
		nodes = append(nodes, openMain(t, env, false))
	}
	b, err := os.ReadFile("../../internal/bidder/testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	for _, li := range set.LineItems {
		if li.ID == "li-coffee-web" {
			li.Limits.Impressions.Total = limit
			set.LineItems = []*tsubame.LineItem{li} // the only one: every bid is its
			break
		}
	}
	if err := nodes[0].backend.(tsubame.CampaignStore).ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	base := func(i int) string { return "http://" + nodes[i%len(nodes)].PublicAddr() }
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 30 * time.Second}
	type bid struct {
		NURL, BURL, LURL string
	}
	var auction atomic.Int64
	offer := func(i int) (bid, bool, error) {
		body := fmt.Sprintf(`{"id":"auction-%d","cur":["USD"],"imp":[{"id":"1","banner":{"w":300,"h":250}}],`+
			`"site":{"domain":"www.foobar.com"}}`, auction.Add(1))
		resp, err := client.Post(base(i)+"/rtb/ssp", "application/json", strings.NewReader(body))
		if err != nil {
			return bid{}, false, err
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			return bid{}, false, err
		case resp.StatusCode == http.StatusNoContent:
			return bid{}, false, nil
		case resp.StatusCode != http.StatusOK:
			return bid{}, false, fmt.Errorf("%d %s", resp.StatusCode, answer)
		}
		var r struct {
			SeatBid []struct {
				Bid []struct {
					NURL string `json:"nurl"`
					BURL string `json:"burl"`
					LURL string `json:"lurl"`
				} `json:"bid"`
			} `json:"seatbid"`
		}
		if err := json.Unmarshal(answer, &r); err != nil || len(r.SeatBid) != 1 || len(r.SeatBid[0].Bid) != 1 {
			return bid{}, false, fmt.Errorf("%v: %s", err, answer)
		}
		x := r.SeatBid[0].Bid[0]
		return bid{x.NURL, x.BURL, x.LURL}, true, nil
	}
	notify := func(i int, u, price string) error {
		u = strings.NewReplacer("http://bidder.example", base(i), "${AUCTION_PRICE}", price, "${AUCTION_LOSS}", "102").Replace(u)
		resp, err := client.Get(u)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d", u, resp.StatusCode)
		}
		return nil
	}
	for i := range nodes {
		nodes[i].ads.engine.Changed()
		waitUntil(t, fmt.Sprint("node ", i, " to know the line item"), func() bool {
			return nodes[i].ads.engine.Index().Len() == 1
		})
	}
	// The committed count is sampled all along: never over the limit.
	var most atomic.Int64
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		q := nodes[0].backend.(tsubame.Quotas)
		for {
			if s, o, err := q.Committed(t.Context(), "li/li-coffee-web/imp"); err == nil {
				most.Store(max(most.Load(), s+o))
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	const streams = 6
	var billed, bids, noBids atomic.Int64
	var lastBid atomic.Int64 // Unix nanoseconds
	lastBid.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	for s := range streams {
		rnd := rand.New(rand.NewPCG(uint64(winPct), uint64(s)))
		wg.Go(func() {
			for i := s; ; i++ {
				// Enough: the limit billed, or no bid for 5 s (what is held
				// has come back by then, and nothing more is to be had).
				if billed.Load() >= limit || time.Since(time.Unix(0, lastBid.Load())) > 5*time.Second {
					return
				}
				b, ok, err := offer(i)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					noBids.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				bids.Add(1)
				lastBid.Store(time.Now().UnixNano())
				if rnd.IntN(100) < winPct {
					if err := notify(i+1, b.NURL, "1.10"); err != nil {
						t.Error(err)
						return
					}
					if err := notify(i+2, b.BURL, "1.10"); err != nil {
						t.Error(err)
						return
					}
					billed.Add(1)
				} else if losses {
					if err := notify(i+1, b.LURL, "1.50"); err != nil { // the winner paid more
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for i, nd := range nodes {
		t.Logf("node %d: %+v", i, nd.ads.ledger.Counts())
	}
	close(stopSampling)
	<-sampled
	if t.Failed() {
		return
	}
	n := billed.Load()
	t.Logf("win rate %d %%, loss notices %v: %d bids, %d no-bids, %d billed on a limit of %d; the store committed at most %d",
		winPct, losses, bids.Load(), noBids.Load(), n, limit, most.Load())
	switch {
	case n > limit:
		t.Fatalf("%d billed on a limit of %d", n, limit)
	case most.Load() > limit:
		t.Fatalf("the store committed %d on a limit of %d", most.Load(), limit)
	case n*100 < limit*want:
		t.Fatalf("%d billed on a limit of %d: under %d %%", n, limit, want)
	}
}
