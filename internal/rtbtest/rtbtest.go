// Package rtbtest plays an exchange against bidders, for tests: streams
// of OpenRTB bid requests to real servers over HTTP, seeded wins, and the
// notices a real exchange sends (loss, win, bill; late or at once), each
// to another server than the bidder's.
package rtbtest

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
)

// Exchange plays an exchange against bidders: streams of bid
// requests posted to the nodes in turn, each bid winning with a seeded
// probability, and the notices it sends each going to another node than
// the bidder's: a win's notice to the next node and its bill to the one
// after, a loss's notice (its clearing price above the bid, why a bid
// usually loses) to the next.
type Exchange struct {
	Bases   []string // the nodes' URLs
	Path    string   // the exchange's bid path: /rtb/<name>
	Streams int      // requests at once
	WinPct  int      // the chance a bid wins, in percent
	// The notices it sends: loss notices, win notices (nurl), billing
	// notices (burl). BillOnWin counts the win notice as the bill (an
	// exchange with bill_on: nurl), BillDelay is how long after its win a
	// bill comes.
	Losses, Wins, Bills bool
	BillOnWin           bool
	BillDelay           time.Duration
	// It stops once StopAt have won (0: no such bound), once the nodes
	// bid nothing for Idle, or once it ran For (0: no such bound).
	StopAt int64
	Idle   time.Duration
	For    time.Duration
	// During, when set, is called as the bills go on, with how many were
	// billed (restarts).
	During func(billed int64)

	// What it did: bids, no-bids, bids won, bills sent.
	Bids, NoBids, Won, Billed atomic.Int64

	client  *http.Client
	auction atomic.Int64
}

// Run plays the exchange until it stops, then waits for the bills on
// their way, and reports whether nothing failed.
func (x *Exchange) Run(t testing.TB) bool {
	t.Helper()
	x.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * x.Streams}, Timeout: 30 * time.Second}
	var lastBid atomic.Int64 // Unix nanoseconds
	start := time.Now()
	lastBid.Store(start.UnixNano())
	var wg, bills sync.WaitGroup
	var failed atomic.Bool
	fail := func(err error) {
		t.Error(err)
		failed.Store(true)
	}
	bill := func(i int, u string) {
		if err := x.notify(i, u, "1.10"); err != nil {
			fail(err)
			return
		}
		x.Billed.Add(1)
		if x.During != nil {
			x.During(x.Billed.Load())
		}
	}
	for s := range x.Streams {
		rnd := rand.New(rand.NewPCG(uint64(x.WinPct), uint64(s)))
		wg.Go(func() {
			for i := s; !failed.Load(); i += x.Streams {
				if x.StopAt > 0 && x.Won.Load() >= x.StopAt || time.Since(time.Unix(0, lastBid.Load())) > x.Idle ||
					x.For > 0 && time.Since(start) > x.For {
					return
				}
				b, ok, err := x.offer(i)
				if err != nil {
					fail(err)
					return
				}
				if !ok {
					x.NoBids.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				x.Bids.Add(1)
				lastBid.Store(time.Now().UnixNano())
				if rnd.IntN(100) >= x.WinPct {
					if x.Losses {
						if err := x.notify(i+1, b.LURL, "1.50"); err != nil { // the winner paid more
							fail(err)
							return
						}
					}
					continue
				}
				x.Won.Add(1)
				if x.Wins {
					if x.BillOnWin {
						bill(i+1, b.NURL)
						continue
					}
					if err := x.notify(i+1, b.NURL, "1.10"); err != nil {
						fail(err)
						return
					}
				}
				if !x.Bills {
					continue
				}
				if x.BillDelay == 0 {
					bill(i+2, b.BURL)
					continue
				}
				bills.Add(1)
				time.AfterFunc(x.BillDelay, func() {
					defer bills.Done()
					bill(i+2, b.BURL)
				})
			}
		})
	}
	wg.Wait()
	bills.Wait()
	return !failed.Load()
}

type bid struct{ NURL, BURL, LURL string }

// offer posts the i-th bid request to a node; false: a no-bid.
func (x *Exchange) offer(i int) (bid, bool, error) {
	body := fmt.Sprintf(`{"id":"auction-%d","cur":["USD"],"imp":[{"id":"1","banner":{"w":300,"h":250}}],`+
		`"site":{"domain":"www.foobar.com"}}`, x.auction.Add(1))
	resp, err := x.client.Post(x.Bases[i%len(x.Bases)]+x.Path, "application/json", strings.NewReader(body))
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
	b := r.SeatBid[0].Bid[0]
	return bid{b.NURL, b.BURL, b.LURL}, true, nil
}

// notify calls notice URL u at the i-th node with price as its clearing
// price (the loss's too).
func (x *Exchange) notify(i int, u, price string) error {
	u = strings.NewReplacer("http://bidder.example", x.Bases[i%len(x.Bases)], "${AUCTION_PRICE}", price, "${AUCTION_LOSS}", "102").Replace(u)
	resp, err := x.client.Get(u)
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

// String says what the exchange did.
func (x *Exchange) String() string {
	return fmt.Sprintf("%d bids, %d no-bids, %d won, %d billed", x.Bids.Load(), x.NoBids.Load(), x.Won.Load(), x.Billed.Load())
}

// CoffeeLine is the bidder's test campaigns (internal/bidder/testdata/
// campaigns.json, at file) with only the line item li-coffee-web, limited
// to limit impressions in total.
func CoffeeLine(t testing.TB, file string, limit int64) *tsubame.CampaignSet {
	t.Helper()
	b, err := os.ReadFile(file)
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
			return &set
		}
	}
	t.Fatal("no li-coffee-web in the bidder's test campaigns")
	return nil
}

// CoffeeKey is li-coffee-web's impression account in the store.
const CoffeeKey = "li/li-coffee-web/imp"

// SampleCommitted samples q's committed count of key (settled and
// outstanding) until the returned function is called, which returns the
// most it saw.
func SampleCommitted(t testing.TB, q tsubame.Quotas, key string) func() int64 {
	var most atomic.Int64
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			if s, o, err := q.Committed(t.Context(), key); err == nil {
				most.Store(max(most.Load(), s+o))
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return most.Load()
	}
}
