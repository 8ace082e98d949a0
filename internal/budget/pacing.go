package budget

import (
	"math"
	"math/bits"
	"slices"
	"time"

	"tsubame"
)

// frontloadedRate is how much faster than even a frontloaded campaign is
// allowed to deliver: 5/4, so its period's limit may be reached when 80 %
// of the period has passed, and no sooner.
const frontloadedNum, frontloadedDen = 5, 4

// pacer is how one limit of a campaign, or of one of its line items, is
// spread over its period: the flight for a total, the day (within the
// flight) for a daily limit. The zero value is asap.
type pacer struct {
	mode    string
	weights []int // 24 weights, hour 0 first, in loc; nil: by the traffic
	loc     *time.Location
	// own and all are the traffic (traffic.go) of the line item's or
	// campaign's counter and of every one of this node's: without hour
	// weights, the period is weighed by the first that learned a day, else
	// by the clock. nil: not learned (Target, the dashboards' ideal).
	own, all *profile
}

func newPacer(p tsubame.Pacing, loc *time.Location) pacer {
	mode := p.Mode
	if mode == "" {
		mode = tsubame.PacingEven
	}
	return pacer{mode: mode, weights: p.HourWeights, loc: loc}
}

func (p pacer) equal(q pacer) bool {
	return p.mode == q.mode && slices.Equal(p.weights, q.weights) && p.loc.String() == q.loc.String() && p.own == q.own && p.all == q.all
}

// learned is the traffic's quarter-hour weights the pacer weighs by now:
// nil with hour weights, or when no day was learned.
func (p pacer) learned() *[quarters]uint32 {
	if p.weights != nil {
		return nil
	}
	if w := p.own.weights(); w != nil {
		return w
	}
	return p.all.weights()
}

// curve caches the weighted length of a period and how far into it the
// last call got, so that a target asked every second of a long flight
// costs the hours since the last call, not the hours since the start. It
// is owned by one goroutine.
type curve struct {
	start, end int64             // the period, Unix nanoseconds
	w          *[quarters]uint32 // the traffic weights it was summed by
	total      uint64
	at         int64  // time of the cached sum
	sum        uint64 // weighted milliseconds from start to at
}

// target is the most of limit that may be committed at now within the
// period [start, end) (Unix nanoseconds): limit for asap and for a period
// without a bound; otherwise limit times the weighted share of the period
// that has passed (1.25 times it for frontloaded, up to limit), rounded
// up, so that delivery may start as soon as the period does. Before the
// period nothing, after it all.
func (p pacer) target(c *curve, limit, start, end, now int64) int64 {
	if p.mode == tsubame.PacingASAP || start == math.MinInt64 || end == math.MaxInt64 || now >= end {
		return limit
	}
	if now <= start {
		return 0
	}
	w := p.learned()
	if c.start != start || c.end != end || now < c.at || c.w != w {
		*c = curve{start: start, end: end, w: w, at: start, total: p.weigh(w, start, end)}
	}
	c.sum += p.weigh(w, c.at, now)
	c.at = now
	if c.total == 0 {
		return limit // no hour of the period has weight: nothing to spread by
	}
	num, den := uint64(1), uint64(1)
	if p.mode == tsubame.PacingFrontloaded {
		num, den = frontloadedNum, frontloadedDen
	}
	hi, lo := bits.Mul64(uint64(limit), c.sum*num)
	d := c.total * den
	if hi >= d {
		return limit // the share is past 1
	}
	q, r := bits.Div64(hi, lo, d)
	if r > 0 {
		q++
	}
	return int64(min(q, uint64(limit)))
}

// weigh is the weighted length of [from, to) in milliseconds: each
// millisecond counts its hour's weight (in the pacer's zone), or else its
// quarter-hour's in the learned traffic w (UTC quarters). Without either
// every hour weighs 1. Hours follow the zone's clock, so a day with a
// daylight-saving change has 23 or 25 of them.
func (p pacer) weigh(w *[quarters]uint32, from, to int64) uint64 {
	if to <= from {
		return 0
	}
	if p.weights == nil && w != nil {
		var sum uint64
		if to-from > 2*dayNs {
			// Whole days at once: a long flight costs its two ends.
			first := (floorDiv(from, dayNs) + 1) * dayNs
			last := floorDiv(to, dayNs) * dayNs
			var day uint64
			for q := range quarters {
				day += uint64(w[q]) * uint64(quarter/int64(time.Millisecond))
			}
			return p.weigh(w, from, first) + uint64((last-first)/dayNs)*day + p.weigh(w, last, to)
		}
		for t := from; t < to; {
			q := floorDiv(t, quarter)
			end := min((q+1)*quarter, to)
			sum += uint64(w[q-floorDiv(q, quarters)*quarters]) * uint64(end-t) / uint64(time.Millisecond)
			t = end
		}
		return sum
	}
	if p.weights == nil {
		return uint64(to-from) / uint64(time.Millisecond)
	}
	var sum uint64
	for t := from; t < to; {
		lt := time.Unix(0, t).In(p.loc)
		_, off := lt.Zone()
		// The next local hour: local seconds are Unix seconds plus the
		// offset, and an hour starts where they are a multiple of 3600.
		sec := t / int64(time.Second)
		if t%int64(time.Second) < 0 {
			sec-- // whole seconds, toward the past
		}
		next := (sec + 3600 - mod(sec+int64(off), 3600)) * int64(time.Second)
		end := min(next, to)
		sum += uint64(p.weights[lt.Hour()]) * uint64(end-t) / uint64(time.Millisecond)
		t = end
	}
	return sum
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// day returns the bounds of the day of t in loc (Unix nanoseconds) and its
// date: midnight to midnight, 23 to 25 hours around a daylight-saving
// change, and a day that starts after midnight where the zone skips it.
func day(t time.Time, loc *time.Location) (start, end int64, date string) {
	lt := t.In(loc)
	y, m, d := lt.Date()
	s := time.Date(y, m, d, 0, 0, 0, 0, loc)
	e := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	return s.UnixNano(), e.UnixNano(), lt.Format(time.DateOnly)
}

// Target is the most of limit that pacing p, in the time zone loc, lets be
// committed at now within the period [start, end) (Unix nanoseconds;
// math.MinInt64 and math.MaxInt64 for an unbounded start or end): the
// ideal curve that leases follow, for dashboards and simulations.
func Target(p tsubame.Pacing, loc *time.Location, limit, start, end int64, now time.Time) int64 {
	var c curve
	return newPacer(p, loc).target(&c, limit, start, end, now.UnixNano())
}

// Day returns the bounds of the day of t in loc, in Unix nanoseconds, and
// its date (2026-11-27): the period of a daily budget or limit.
func Day(t time.Time, loc *time.Location) (start, end int64, date string) { return day(t, loc) }
