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
	"tsubame/internal/rtbtest"
	"tsubame/internal/store/redis/redistest"
)

// Restarts burn nothing: three Mains on one Redis bid for an impression
// limit at a 10 % win rate, each win billed 3 s after it, a loss notice
// for half of the lost bids (the others hold their price for the
// exchange's 2 s win window), every
// notice to another node than the bidder's; a node is stopped and a new
// one started in its place three times while the bids go on. A stopping
// node hands over the bids whose money it holds, and a node that goes on
// settles them as their notices come and their windows pass: the whole
// limit is billed, never more. (A stopping node used to count every open
// bid as spent: the lost ones among them were never given back.)
func TestRTBRestartsBurnNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("three servers bid and restart; skipped in -short mode")
	}
	const limit = 150
	srv := redistest.Start(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "tracking.keys")
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
      win_window: 2s
`), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	// Each node its own data and log directories, as on its own machine.
	env := func() []string {
		return append(testEnv(t), "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+srv.Addr,
			"TSUBAME_STORE_REDIS_KEY_PREFIX="+prefix, "TSUBAME_CONFIG="+conf)
	}
	var mu sync.RWMutex
	nodes := []*Main{openMain(t, env(), false), openMain(t, env(), false), openMain(t, env(), false)}
	if err := nodes[0].backend.(tsubame.CampaignStore).ReplaceAll(t.Context(), rtbtest.CoffeeLine(t, "../../internal/bidder/testdata/campaigns.json", limit)); err != nil {
		t.Fatal(err)
	}
	ready := func(m *Main) {
		m.ads.engine.Changed()
		waitUntil(t, "a node to know the line item", func() bool { return m.ads.engine.Index().Len() == 1 })
	}
	for _, m := range nodes {
		ready(m)
	}
	base := func(i int) string {
		mu.RLock()
		defer mu.RUnlock()
		return "http://" + nodes[i%len(nodes)].PublicAddr()
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 30 * time.Second}
	var auction atomic.Int64
	offer := func(i int) (nurl, burl, lurl string, ok bool) {
		body := fmt.Sprintf(`{"id":"auction-%d","cur":["USD"],"imp":[{"id":"1","banner":{"w":300,"h":250}}],`+
			`"site":{"domain":"www.foobar.com"}}`, auction.Add(1))
		resp, err := client.Post(base(i)+"/rtb/ssp", "application/json", strings.NewReader(body))
		if err != nil {
			return "", "", "", false // a node stopping: the exchange moves on
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", "", "", false
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
		if json.Unmarshal(answer, &r) != nil || len(r.SeatBid) != 1 || len(r.SeatBid[0].Bid) != 1 {
			t.Errorf("bid answer %s", answer)
			return "", "", "", false
		}
		x := r.SeatBid[0].Bid[0]
		return x.NURL, x.BURL, x.LURL, true
	}
	// notify calls u on node i, or the next live one: an exchange retries.
	notify := func(i int, u, price string) {
		for try := range 30 {
			v := strings.NewReplacer("http://bidder.example", base(i+try), "${AUCTION_PRICE}", price, "${AUCTION_LOSS}", "102").Replace(u)
			resp, err := client.Get(v)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("notice %s never answered", u)
	}
	var billed, bids atomic.Int64
	var lastBid atomic.Int64
	lastBid.Store(time.Now().UnixNano())
	var bills sync.WaitGroup // billing notices on their way
	var wg sync.WaitGroup
	for s := range 6 {
		rnd := rand.New(rand.NewPCG(7, uint64(s)))
		wg.Go(func() {
			for i := s; ; i++ {
				if billed.Load() >= limit || time.Since(time.Unix(0, lastBid.Load())) > 8*time.Second {
					return
				}
				nurl, burl, lurl, ok := offer(i)
				if !ok {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				bids.Add(1)
				lastBid.Store(time.Now().UnixNano())
				if rnd.IntN(100) < 10 {
					notify(i+1, nurl, "1.10")
					bills.Add(1)
					go func() {
						defer bills.Done()
						time.Sleep(3 * time.Second) // the exchange bills late
						notify(i+2, burl, "1.10")
						billed.Add(1)
					}()
				} else if rnd.IntN(2) == 0 {
					notify(i+1, lurl, "1.50") // the exchange sends a loss notice for half of them
				} // the others hold their price for the 2 s win window
			}
		})
	}
	// Three restarts while the bids go on.
	for r := range 3 {
		waitUntil(t, "bids before a restart", func() bool { return bids.Load() >= int64(200*(r+1)) })
		mu.Lock()
		old := nodes[r]
		mu.Unlock()
		lg := old.ads.ledger
		if err := old.Close(); err != nil {
			t.Errorf("restart %d: close: %v", r, err)
		}
		t.Logf("stopped %s: %+v", lg.Holder(), lg.Counts())
		m := openMain(t, env(), false)
		ready(m)
		mu.Lock()
		nodes[r] = m
		mu.Unlock()
	}
	wg.Wait()
	bills.Wait()
	if t.Failed() {
		return
	}
	var handed uint64
	mu.RLock()
	for _, m := range nodes {
		c := m.ads.ledger.Counts()
		handed += c.HandedOver
		t.Logf("node %s: %+v", m.ads.ledger.Holder(), c)
	}
	mu.RUnlock()
	n := billed.Load()
	t.Logf("%d bids, %d billed on a limit of %d across 3 restarts", bids.Load(), n, limit)
	s, o, err := nodes[0].backend.(tsubame.Quotas).Committed(t.Context(), "li/li-coffee-web/imp")
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case n > limit:
		t.Fatalf("%d billed on a limit of %d", n, limit)
	case s+o > limit:
		t.Fatalf("the store committed %d on a limit of %d", s+o, limit)
	case n*100 < limit*95:
		t.Fatalf("%d billed on a limit of %d across three restarts: under 95 %%", n, limit)
	}
}
