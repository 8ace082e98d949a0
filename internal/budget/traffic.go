package budget

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Even pacing follows the traffic, not the clock: a limit paced over a
// period may be committed by now in the share of the period's expected
// traffic that has passed, so a day's budget is spread over the day's
// requests (published as "traffic-shaped" pacing: Agarwal et al., KDD
// 2014). The expected traffic is learned by each node from its own
// decisions: every take a line item's account is asked for, granted or
// not, counts as one request for it, in the quarter-hour (UTC) it came,
// and each day's counts are folded into a smoothed day (an exponentially
// weighted mean over days, so a trend moves it within a few days and one
// odd day does not). A node's share of the traffic has the shape of all of
// it, since a load balancer spreads requests evenly, so no node needs the
// others' counts.
//
// An account paces by its own line item's (or campaign's) day once every
// quarter-hour of it was watched for a whole day; until then by the day of
// every limited line item this node serves; until then by the clock. A
// campaign's hour_weights, set by an operator, override all of it.

// Quarters of a day: the forecast's step.
const (
	quarters = 96
	quarter  = int64(15 * time.Minute)
	dayNs    = int64(24 * time.Hour)
)

// trafficAlpha is the weight of the newest day in a smoothed day: about
// the last week counts.
const trafficAlpha = 0.3

// maxProfiles bounds the line items and campaigns whose own day a node
// learns; beyond it they pace by every line item's (about 2.2 KB each in
// memory, 36 MB at most; about as much in the traffic file).
const maxProfiles = 16384

// profile is the traffic of one line item's or campaign's accounts (or of
// all of them), per quarter-hour of the UTC day.
type profile struct {
	mu    sync.Mutex
	day   int64                            // Unix day of today's counts
	today [quarters]int64                  // requests counted today, per quarter
	seenT [quarters]int64                  // nanoseconds of each quarter watched today
	shape [quarters]float32                // requests per quarter, smoothed over days
	seen  [quarters]uint16                 // days folded into each quarter
	last  int64                            // when it last counted, Unix nanoseconds
	every int64                            // the loop's interval, nanoseconds
	w     atomic.Pointer[[quarters]uint32] // the pacing weights; nil until every quarter was seen
}

// maxWatch is the most one count credits as watched: a round late by
// more than that (the loop stalled, the server stopped) did not watch the
// time in between.
const maxWatch = int64(time.Minute)

// count adds n requests at now (Unix nanoseconds): one loop round's, the
// time since the last round watched (at most maxWatch; an interval for
// the first).
func (p *profile) count(now, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	day := floorDiv(now, dayNs)
	if day != p.day {
		p.fold()
		p.day, p.today, p.seenT = day, [quarters]int64{}, [quarters]int64{}
	}
	watched := p.every
	if p.last != 0 && now > p.last {
		watched = min(now-p.last, maxWatch)
	}
	q := floorDiv(now, quarter) - day*quarters
	p.today[q] += n
	p.seenT[q] += watched
	p.last = now
}

// fold folds today's counts into the smoothed day: each quarter this node
// watched for at least half of it, scaled to the whole quarter. Once every
// quarter has been seen, the weights follow. Under p.mu.
func (p *profile) fold() {
	for q := range quarters {
		if 2*p.seenT[q] < quarter {
			continue
		}
		v := float32(float64(p.today[q]) * float64(quarter) / float64(p.seenT[q]))
		if p.seen[q] == 0 {
			p.shape[q] = v
		} else {
			p.shape[q] = p.shape[q]*(1-trafficAlpha) + v*trafficAlpha
		}
		p.seen[q] = min(p.seen[q]+1, math.MaxUint16)
	}
	p.weigh()
}

// weigh makes the pacing weights of the smoothed day: per quarter, its
// share of the mean in thousandths, and at least a hundredth of the mean
// (a quarter forecast empty may still get traffic). Under p.mu.
func (p *profile) weigh() {
	var sum float64
	for q := range quarters {
		if p.seen[q] == 0 {
			return
		}
		sum += float64(p.shape[q])
	}
	if sum <= 0 {
		return
	}
	mean := sum / quarters
	var w [quarters]uint32
	for q := range quarters {
		w[q] = uint32(min(max(float64(p.shape[q])/mean*1000, 10), 1e6))
	}
	p.w.Store(&w)
}

// weights are the pacing weights, nil until a whole day was learned.
func (p *profile) weights() *[quarters]uint32 {
	if p == nil {
		return nil
	}
	return p.w.Load()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// traffic is a node's profiles: one per line item or campaign counter
// (keyed as its total's account: "li/<id>/imp", "camp/<id>/spend"), and
// one of every request any of them counted.
type traffic struct {
	mu    sync.Mutex
	byKey map[string]*profile
	all   *profile
	every int64
	swept int64 // when forget last ran; the loop's own
}

func newTraffic(every time.Duration) *traffic {
	return &traffic{byKey: map[string]*profile{}, all: &profile{every: int64(every)}, every: int64(every)}
}

// of returns key's profile, made if new and there is room for it (nil
// when not).
func (t *traffic) of(key string) *profile {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.byKey[key]
	if p == nil && len(t.byKey) < maxProfiles {
		p = &profile{every: t.every}
		t.byKey[key] = p
	}
	return p
}

// daily is the requests a day key's profile learned (0: none learned).
func (t *traffic) daily(key string) float64 {
	t.mu.Lock()
	p := t.byKey[key]
	t.mu.Unlock()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum float64
	for q := range quarters {
		sum += float64(p.shape[q])
	}
	return sum
}

// forget drops the profiles that counted nothing for longer than a week
// and a day: their line items are gone.
func (t *traffic) forget(now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, p := range t.byKey {
		p.mu.Lock()
		old := p.last != 0 && now-p.last > 8*dayNs
		p.mu.Unlock()
		if old {
			delete(t.byKey, k)
		}
	}
}

// savedProfile is a profile as WriteTraffic writes it: its smoothed day.
type savedProfile struct {
	Shape [quarters]float32 `json:"shape"`
	Seen  [quarters]uint16  `json:"seen"`
	Last  int64             `json:"last"`
}

// savedTraffic is WriteTraffic's file.
type savedTraffic struct {
	Version int                     `json:"version"`
	All     savedProfile            `json:"all"`
	Keys    map[string]savedProfile `json:"keys"`
}

const trafficVersion = 1

func (p *profile) save() savedProfile {
	p.mu.Lock()
	defer p.mu.Unlock()
	return savedProfile{Shape: p.shape, Seen: p.seen, Last: p.last}
}

func (p *profile) load(s savedProfile) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shape, p.seen, p.last = s.Shape, s.Seen, s.Last
	p.weigh()
}

// WriteTraffic writes what the node learned of its traffic's days
// (smoothed, per line item and campaign), for ReadTraffic at its next
// start: a restart does not pace by the clock again. Today's counts are
// not written: a day is learned whole or not at all.
func (g *Ledger) WriteTraffic(w io.Writer) error {
	t := g.traffic
	out := savedTraffic{Version: trafficVersion, All: t.all.save(), Keys: map[string]savedProfile{}}
	t.mu.Lock()
	for k, p := range t.byKey {
		out.Keys[k] = p.save()
	}
	t.mu.Unlock()
	return json.NewEncoder(w).Encode(&out)
}

// ReadTraffic reads what WriteTraffic wrote, before the ledger counts
// anything.
func (g *Ledger) ReadTraffic(r io.Reader) error {
	var in savedTraffic
	if err := json.NewDecoder(r).Decode(&in); err != nil {
		return fmt.Errorf("the traffic forecast: %w", err)
	}
	if in.Version != trafficVersion {
		return fmt.Errorf("the traffic forecast is of version %d, this server reads %d", in.Version, trafficVersion)
	}
	for _, s := range append([]savedProfile{in.All}, values(in.Keys)...) {
		for _, v := range s.Shape {
			if v < 0 || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("the traffic forecast holds a count of %v", v)
			}
		}
	}
	t := g.traffic
	t.all.load(in.All)
	for k, s := range in.Keys {
		if p := t.of(k); p != nil {
			p.load(s)
		}
	}
	return nil
}

func values(m map[string]savedProfile) []savedProfile {
	out := make([]savedProfile, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
