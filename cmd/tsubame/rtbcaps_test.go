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
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/redis/redistest"
)

// Three real Mains bid on one Redis for an exchange that a script plays:
// li-coffee-web is capped at 3 a day per visitor; 12 visitors are each
// offered by three streams at once, one per node, and each bid wins with
// probability 10 % (seeded draws), its win notice at once to the next
// node, or its loss notice at once to the one after. A cap counts wins:
// every visitor wins exactly 3 times, and once a visitor has won 3 no node
// bids for it again.
func TestRTBCapCountsWinsAcrossNodes(t *testing.T) {
	const (
		visitors = 12
		streams  = 3
		capped   = 3
		maxBids  = 600 // per stream: 3 wins at 10 % within them is all but sure
	)
	srv := redistest.Start(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "tracking.keys") // shared: a notice verifies on any node
	if err := os.WriteFile(keys, []byte("k1 "+strings.Repeat("s", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(conf, []byte(`ads:
  currency: USD
  tracking:
    keys_file: `+keys+`
rtb:
  notice_url: http://bidder.example
  exchanges:
    ssp:
      seat: Agency1
      reservation: 2m
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
			li.Frequency = []tsubame.FrequencyCap{{Impressions: capped, Per: tsubame.Duration(24 * time.Hour)}}
		}
	}
	if err := nodes[0].backend.(tsubame.CampaignStore).ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	base := func(i int) string { return "http://" + nodes[i%3].PublicAddr() }
	type bid struct {
		NURL string `json:"nurl"`
		LURL string `json:"lurl"`
	}
	var auctions sync.Mutex
	auction := 0
	// offer posts visitor's impression to node i: its bid, or none.
	offer := func(i int, visitor string) (bid, bool, error) {
		auctions.Lock()
		auction++
		id := auction
		auctions.Unlock()
		body := fmt.Sprintf(`{"id":"auction-%d","cur":["USD"],"imp":[{"id":"1","banner":{"w":300,"h":250}}],`+
			`"site":{"domain":"www.foobar.com"},"user":{"buyeruid":%q}}`, id, visitor)
		resp, err := http.Post(base(i)+"/rtb/ssp", "application/json", strings.NewReader(body))
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
			return bid{}, false, fmt.Errorf("%s: %d %s", visitor, resp.StatusCode, answer)
		}
		var r struct {
			SeatBid []struct {
				Bid []bid `json:"bid"`
			} `json:"seatbid"`
		}
		if err := json.Unmarshal(answer, &r); err != nil || len(r.SeatBid) != 1 || len(r.SeatBid[0].Bid) != 1 {
			return bid{}, false, fmt.Errorf("%v: %s", err, answer)
		}
		return r.SeatBid[0].Bid[0], true, nil
	}
	notify := func(i int, u, price string) error {
		u = strings.NewReplacer("http://bidder.example", base(i), "${AUCTION_PRICE}", price, "${AUCTION_LOSS}", "102").Replace(u)
		resp, err := http.Get(u)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d", u, resp.StatusCode)
		}
		return nil
	}
	// Every node has compiled the line items.
	for i := range nodes {
		nodes[i].ads.engine.Changed()
		waitUntil(t, fmt.Sprint("a bid from node ", i), func() bool {
			_, ok, err := offer(i, fmt.Sprint("warm-up-", i))
			if err != nil {
				t.Fatal(err)
			}
			return ok
		})
	}

	var mu sync.Mutex
	wins := make([]int, visitors)
	bids := make([]int, visitors)
	var wg sync.WaitGroup
	for v := range visitors {
		visitor := fmt.Sprint("visitor-", v)
		for s := range streams {
			rnd := rand.New(rand.NewPCG(uint64(v), uint64(s)))
			node := v + s
			wg.Go(func() {
				for range maxBids {
					mu.Lock()
					done := wins[v] >= capped
					mu.Unlock()
					if done {
						return
					}
					b, ok, err := offer(node, visitor)
					if err != nil {
						t.Error(err)
						return
					}
					if !ok {
						continue // its cap held by bids in flight, or won
					}
					mu.Lock()
					bids[v]++
					mu.Unlock()
					if rnd.IntN(10) == 0 {
						err = notify(node+1, b.NURL, "1.10")
						mu.Lock()
						wins[v]++
						mu.Unlock()
					} else {
						err = notify(node+2, b.LURL, "1.50")
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for v := range visitors {
		if wins[v] != capped {
			t.Errorf("visitor-%d: %d wins of %d bids, want exactly %d", v, wins[v], bids[v], capped)
		}
	}
	// No node bids for a visitor that won its cap.
	for v := range visitors {
		for i := range nodes {
			if _, ok, err := offer(i, fmt.Sprint("visitor-", v)); err != nil || ok {
				t.Errorf("visitor-%d on node %d after %d wins: bid %v (%v)", v, i, capped, ok, err)
			}
		}
	}
	// What the store holds: three impressions a visitor, no hold left.
	fc := nodes[1].backend.(tsubame.FrequencyCounter)
	for v := range visitors {
		var rec tsubame.FrequencyRecord
		if err := fc.Read(t.Context(), fmt.Sprint("visitor-", v), &rec); err != nil {
			t.Fatal(err)
		}
		es := rec.Entries("li-coffee-web")
		held := 0
		for _, e := range es {
			if e.Hold {
				held++
			}
		}
		if len(es) != capped || held != 0 {
			t.Errorf("visitor-%d: the store holds %d entries, %d of them holds; want %d impressions", v, len(es), held, capped)
		}
	}
	totalBids, totalWins := 0, 0
	for v := range visitors {
		totalBids, totalWins = totalBids+bids[v], totalWins+wins[v]
	}
	t.Logf("%d visitors: %d bids, %d wins", visitors, totalBids, totalWins)
}
