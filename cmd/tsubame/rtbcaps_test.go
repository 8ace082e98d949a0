package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
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

// Three real Mains bid on one Redis for an exchange that a script plays:
// li-coffee-web is capped at 3 a day per visitor; 12 visitors are each
// offered by three streams at once, one per node, and each bid wins with
// probability 10 % (seeded draws), its win notice at once to the next
// node, or its loss notice at once to the one after. A cap counts wins:
// every visitor wins exactly 3 times, and once a visitor has won 3 no node
// bids for it again.
func TestRTBCapCountsWinsAcrossNodes(t *testing.T) {
	srv := redistest.Start(t)
	ex := startCapExchange(t, [3]string{srv.Addr, srv.Addr, srv.Addr}, "2m")
	ex.play(t)
	ex.check(t)
}

// As TestRTBCapCountsWinsAcrossNodes, with node 0 reaching Redis through
// a way that fails as real ones do: some of its holds are answered after
// the bid request's deadline (the hold is made, the bid is not sent), and
// some of its notices' counts and releases are refused unmade. The late
// holds are released, the refused counts and releases sent again: every
// visitor still wins exactly 3 times, and once every bid's reservation
// (10 s) has ended no node bids for it again (a count lost would free the
// visitor when its hold ends) and the store holds its 3 impressions and
// no hold.
func TestRTBCapsSurviveALossyStore(t *testing.T) {
	const reservation = 10 * time.Second
	srv := redistest.Start(t)
	px := startFaultProxy(t, srv.Addr)
	ex := startCapExchange(t, [3]string{px.addr, srv.Addr, srv.Addr}, reservation.String())
	px.armed.Store(true)
	ex.play(t)
	px.armed.Store(false)
	for i, nd := range ex.nodes {
		waitUntil(t, fmt.Sprint("node ", i, " sent every update it kept"), func() bool { return nd.ads.counters.Stats().Pending == 0 })
	}
	time.Sleep(reservation) // every hold's reservation ends: only counts are left
	ex.check(t)
	st := ex.nodes[0].ads.counters.Stats()
	t.Logf("faults: %d late holds, %d counts and %d releases refused; node 0: %+v",
		px.late.Load(), px.counts.Load(), px.releases.Load(), st)
	if px.late.Load() == 0 || px.counts.Load() == 0 || px.releases.Load() == 0 {
		t.Fatal("a kind of fault never happened: the test proves nothing")
	}
	if st.Sent == 0 || st.Dropped != 0 {
		t.Fatalf("node 0: %+v, want updates sent again and none lost", st)
	}
}

// capExchange is three Mains on Redis bidding for one exchange, ssp, and
// the script that plays it.
type capExchange struct {
	nodes []*Main
	mu    sync.Mutex
	wins  [capVisitors]int
	bids  [capVisitors]int
	seq   atomic.Int64 // auctions
}

const (
	capVisitors = 12
	capStreams  = 3
	capped      = 3
	capMaxBids  = 600 // per stream: 3 wins at 10 % within them is all but sure
)

// startCapExchange starts three Mains, node i on the Redis at addrs[i]
// (one Redis, or a way to it), with li-coffee-web capped at 3 a day and
// bids held for reservation, and waits until each bids.
func startCapExchange(t *testing.T, addrs [3]string, reservation string) *capExchange {
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
      reservation: `+reservation+`
`), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	ex := &capExchange{}
	for _, addr := range addrs {
		env := append(testEnv(t), "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+addr,
			"TSUBAME_STORE_REDIS_KEY_PREFIX="+prefix, "TSUBAME_CONFIG="+conf)
		ex.nodes = append(ex.nodes, openMain(t, env, false))
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
	if err := ex.nodes[1].backend.(tsubame.CampaignStore).ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	// Every node has compiled the line items.
	for i := range ex.nodes {
		ex.nodes[i].ads.engine.Changed()
		waitUntil(t, fmt.Sprint("a bid from node ", i), func() bool {
			_, ok, err := ex.offer(i, fmt.Sprint("warm-up-", i))
			if err != nil {
				t.Fatal(err)
			}
			return ok
		})
	}
	return ex
}

func (ex *capExchange) base(i int) string { return "http://" + ex.nodes[i%len(ex.nodes)].PublicAddr() }

type capBid struct {
	NURL string `json:"nurl"`
	LURL string `json:"lurl"`
}

// offer posts visitor's impression to node i: its bid, or none.
func (ex *capExchange) offer(i int, visitor string) (capBid, bool, error) {
	body := fmt.Sprintf(`{"id":"auction-%d","cur":["USD"],"imp":[{"id":"1","banner":{"w":300,"h":250}}],`+
		`"site":{"domain":"www.foobar.com"},"user":{"buyeruid":%q}}`, ex.seq.Add(1), visitor)
	resp, err := http.Post(ex.base(i)+"/rtb/ssp", "application/json", strings.NewReader(body))
	if err != nil {
		return capBid{}, false, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return capBid{}, false, err
	case resp.StatusCode == http.StatusNoContent:
		return capBid{}, false, nil
	case resp.StatusCode != http.StatusOK:
		return capBid{}, false, fmt.Errorf("%s: %d %s", visitor, resp.StatusCode, answer)
	}
	var r struct {
		SeatBid []struct {
			Bid []capBid `json:"bid"`
		} `json:"seatbid"`
	}
	if err := json.Unmarshal(answer, &r); err != nil || len(r.SeatBid) != 1 || len(r.SeatBid[0].Bid) != 1 {
		return capBid{}, false, fmt.Errorf("%v: %s", err, answer)
	}
	return r.SeatBid[0].Bid[0], true, nil
}

// notify calls notice URL u on node i, as the exchange would.
func (ex *capExchange) notify(i int, u, price string) error {
	u = strings.NewReplacer("http://bidder.example", ex.base(i), "${AUCTION_PRICE}", price, "${AUCTION_LOSS}", "102").Replace(u)
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

// play offers every visitor by three streams at once until it has won its
// cap: each bid wins with probability 10 %, its win notice at once to the
// next node, or its loss notice at once to the one after.
func (ex *capExchange) play(t *testing.T) {
	var wg sync.WaitGroup
	for v := range capVisitors {
		visitor := fmt.Sprint("visitor-", v)
		for s := range capStreams {
			rnd := rand.New(rand.NewPCG(uint64(v), uint64(s)))
			node := v + s
			wg.Go(func() {
				for range capMaxBids {
					ex.mu.Lock()
					done := ex.wins[v] >= capped
					ex.mu.Unlock()
					if done {
						return
					}
					b, ok, err := ex.offer(node, visitor)
					if err != nil {
						t.Error(err)
						return
					}
					if !ok {
						continue // its cap held by bids in flight, or won
					}
					ex.mu.Lock()
					ex.bids[v]++
					ex.mu.Unlock()
					if rnd.IntN(10) == 0 {
						err = ex.notify(node+1, b.NURL, "1.10")
						ex.mu.Lock()
						ex.wins[v]++
						ex.mu.Unlock()
					} else {
						err = ex.notify(node+2, b.LURL, "1.50")
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
}

// check requires every visitor to have won exactly its cap, no node to bid
// for it again, and the store to hold its impressions and no hold.
func (ex *capExchange) check(t *testing.T) {
	if t.Failed() {
		return
	}
	for v := range capVisitors {
		if ex.wins[v] != capped {
			t.Errorf("visitor-%d: %d wins of %d bids, want exactly %d", v, ex.wins[v], ex.bids[v], capped)
		}
	}
	// No node bids for a visitor that won its cap.
	for v := range capVisitors {
		for i := range ex.nodes {
			if _, ok, err := ex.offer(i, fmt.Sprint("visitor-", v)); err != nil || ok {
				t.Errorf("visitor-%d on node %d after %d wins: bid %v (%v)", v, i, capped, ok, err)
			}
		}
	}
	// What the store holds: three impressions a visitor, no hold left.
	fc := ex.nodes[1].backend.(tsubame.FrequencyCounter)
	for v := range capVisitors {
		var rec tsubame.FrequencyRecord
		if err := fc.Read(t.Context(), fmt.Sprint("visitor-", v), &rec); err != nil {
			t.Fatal(err)
		}
		imps, held := 0, 0
		for _, e := range rec.Entries("li-coffee-web") {
			switch {
			case !e.Hold:
				imps++
			case e.At > time.Now().UnixMicro(): // an ended hold counts nothing: the store drops it at its next change
				held++
			}
		}
		if imps != capped || held != 0 {
			t.Errorf("visitor-%d: the store holds %d impressions and %d holds; want %d impressions", v, imps, held, capped)
		}
	}
	totalBids, totalWins := 0, 0
	for v := range capVisitors {
		totalBids, totalWins = totalBids+ex.bids[v], totalWins+ex.wins[v]
	}
	t.Logf("%d visitors: %d bids, %d wins", capVisitors, totalBids, totalWins)
}

// faultProxy is a TCP proxy to a Redis whose answers fail as real ones
// do while armed: every 4th hold and every 4th take of a frequency cap is
// answered 1.5 s late (Redis makes it at once, the answer waits, and every
// answer after it on the connection), and every 3rd count and every 8th
// release is refused unmade (its script's key count made unreadable: Redis
// answers an error and runs nothing); each kind at most 6 times. It never
// closes a connection: the client's own reconnection is not what is
// tested.
type faultProxy struct {
	addr                   string
	armed                  atomic.Bool
	seen                   [4]atomic.Int64 // holds, counts, releases, takes seen while armed
	late, counts, releases atomic.Int64    // faults made
	lateTakes              atomic.Int64
}

// The frequency script's op argument of each kind, as Redis reads it, and
// the key count before it (EVALSHA sha 1 key op ...).
var (
	faultOps = [4][]byte{[]byte("\r\n$1\r\nh\r\n"), []byte("\r\n$1\r\nc\r\n"), []byte("\r\n$1\r\nr\r\n"),
		[]byte("\r\n$1\r\nt\r\n")}
	faultNumKeys = []byte("\r\n$1\r\n1\r\n")
)

func startFaultProxy(t *testing.T, redisAddr string) *faultProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &faultProxy{addr: ln.Addr().String()}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", redisAddr)
			if err != nil {
				c.Close()
				continue
			}
			conns.Go(func() { px.serve(c, r) })
		}
	}()
	return px
}

// fault makes the faults of a client's chunk: it reports whether the
// answers must come late, and makes a count or release it refuses
// unreadable in place.
func (px *faultProxy) fault(chunk []byte) (late bool) {
	if !px.armed.Load() {
		return false
	}
	every := [4]int64{4, 3, 8, 4}
	made := [4]*atomic.Int64{&px.late, &px.counts, &px.releases, &px.lateTakes}
	for k, op := range faultOps {
		i := bytes.Index(chunk, op)
		if i < 0 || px.seen[k].Add(1)%every[k] != 0 || made[k].Load() >= 6 {
			continue
		}
		if k == 0 || k == 3 {
			made[k].Add(1)
			late = true
			continue
		}
		if j := bytes.LastIndex(chunk[:i], faultNumKeys); j >= 0 {
			made[k].Add(1)
			chunk[j+len(faultNumKeys)-3] = 'x' // "1" is no count of keys: ERR, the script not run
		}
	}
	return late
}

// serve relays client c to Redis r until either closes, making faults.
func (px *faultProxy) serve(c, r net.Conn) {
	defer c.Close()
	defer r.Close()
	var lateUntil atomic.Int64 // answers wait until then (Unix nanoseconds)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if d := time.Until(time.Unix(0, lateUntil.Load())); d > 0 {
					time.Sleep(d)
				}
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		c.Close()
		r.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if px.fault(buf[:n]) {
				lateUntil.Store(time.Now().Add(1500 * time.Millisecond).UnixNano())
			}
			if _, werr := r.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
