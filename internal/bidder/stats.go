package bidder

import (
	"sync/atomic"
	"time"
)

// LatencyBounds are the upper bounds of the bid latency histogram.
var LatencyBounds = [...]time.Duration{100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond}

// Stats are an exchange's counters. Safe for concurrent use.
type Stats struct {
	Requests atomic.Uint64 // bid requests received
	Bids     atomic.Uint64 // bids made (one an impression)
	Answered atomic.Uint64 // requests answered with bids
	Refused  atomic.Uint64 // refused before reading: a bad token or source (401, 403)
	noBid    [len(noBidReasonsArray)]atomic.Uint64

	// Wins, Bills and Losses count each bid's first of its kind on this
	// node (a bill: whichever notice bills, Exchange.BillOn); the
	// repeats, each kind's notices seen before on any node.
	Wins, Bills, Losses                  atomic.Uint64
	WinRepeats, BillRepeats, LossRepeats atomic.Uint64
	// BidImps counts the impressions bids' markup fired, the first of
	// each bid (billed or not).
	BidImps atomic.Uint64
	// Late counts bills after their reservation; AboveBid wins and bills
	// whose clearing price was above the bid's (counted at the bid's);
	// PriceMissing those without a readable clearing price.
	Late, AboveBid, PriceMissing atomic.Uint64
	// Spend is the billed clearing prices, in micro-units of the
	// account currency.
	Spend atomic.Int64

	latency    [len(LatencyBounds) + 1]atomic.Uint64
	latencySum atomic.Int64 // nanoseconds

	// winDelay counts the first win notices of bids by whole seconds from
	// the bid (the last bucket: that or more), for WinWindowAuto.
	winDelay [winDelayBuckets]atomic.Uint64
}

// winDelayBuckets bounds the win delays kept apart, in seconds.
const winDelayBuckets = 64

// WinDelayed counts a first win notice d after its bid: what
// Exchange.WinWindowNow measures.
func (s *Stats) WinDelayed(d time.Duration) {
	s.winDelay[min(max(int(d/time.Second), 0), winDelayBuckets-1)].Add(1)
}

// winDelayP99 is the 99th percentile of the win delays, in whole seconds
// rounded up, and how many were counted.
func (s *Stats) winDelayP99() (time.Duration, uint64) {
	var counts [winDelayBuckets]uint64
	var total uint64
	for i := range counts {
		counts[i] = s.winDelay[i].Load()
		total += counts[i]
	}
	var seen uint64
	for i, c := range counts {
		if seen += c; seen*100 >= total*99 {
			return time.Duration(i+1) * time.Second, total
		}
	}
	return winDelayBuckets * time.Second, total
}

var noBidReasonsArray = [...]string{NoBidMalformed, NoBidThrottled, NoBidTimeout, NoBidCurrency, NoBidNoMatch, NoBidFloor, NoBidBadIDs, NoBidLog, NoBidSeat, NoBidOverload,
	NoBidSecure, NoBidDuplicate}

// count records the outcome of one bid request and how long it took.
func (s *Stats) count(o Outcome, took time.Duration) {
	if o.Bids > 0 {
		s.Answered.Add(1)
		s.Bids.Add(uint64(o.Bids))
	} else {
		s.NoBid(o.Reason)
	}
	i := 0
	for i < len(LatencyBounds) && took > LatencyBounds[i] {
		i++
	}
	s.latency[i].Add(1)
	s.latencySum.Add(int64(took))
}

// NoBid counts a request answered without a bid for reason.
func (s *Stats) NoBid(reason string) {
	for i, r := range noBidReasonsArray {
		if r == reason {
			s.noBid[i].Add(1)
			return
		}
	}
}

// Snapshot is an exchange's counters at one moment.
type Snapshot struct {
	Exchange                             string
	Requests, Bids, Answered, Refused    uint64
	NoBids                               map[string]uint64
	Wins, Bills, Losses, BidImps         uint64
	WinRepeats, BillRepeats, LossRepeats uint64
	Late, AboveBid, PriceMissing         uint64
	Spend                                int64
	Latency                              [len(LatencyBounds) + 1]uint64
	LatencySum                           time.Duration
}

// Stats reports every exchange's counters.
func (b *Bidder) Stats() []Snapshot {
	m := b.exchanges.Load()
	if m == nil {
		return nil
	}
	var out []Snapshot
	for name, x := range *m {
		s := x.stats
		snap := Snapshot{Exchange: name, Requests: s.Requests.Load(), Bids: s.Bids.Load(), Answered: s.Answered.Load(),
			Refused: s.Refused.Load(), NoBids: map[string]uint64{}, Wins: s.Wins.Load(), Bills: s.Bills.Load(),
			Losses: s.Losses.Load(), BidImps: s.BidImps.Load(), WinRepeats: s.WinRepeats.Load(),
			BillRepeats: s.BillRepeats.Load(), LossRepeats: s.LossRepeats.Load(), Late: s.Late.Load(),
			AboveBid: s.AboveBid.Load(), PriceMissing: s.PriceMissing.Load(),
			Spend: s.Spend.Load(), LatencySum: time.Duration(s.latencySum.Load())}
		for i, r := range noBidReasonsArray {
			snap.NoBids[r] = s.noBid[i].Load()
		}
		for i := range snap.Latency {
			snap.Latency[i] = s.latency[i].Load()
		}
		out = append(out, snap)
	}
	return out
}
