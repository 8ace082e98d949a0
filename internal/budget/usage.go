package budget

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"tsubame"
)

// The store keys of the counters (Quotas keys). Ids are the model's
// (letters, digits and -_.:@), so a '/' cannot be part of one.
func keyLineImp(id string) string                { return "li/" + id + "/imp" }
func keyLineImpDay(id, date string) string       { return "li/" + id + "/imp/" + date }
func keyCampaignSpend(id string) string          { return "camp/" + id + "/spend" }
func keyCampaignSpendDay(id, date string) string { return "camp/" + id + "/spend/" + date }

// Kinds of a Usage.
const (
	KindImpressions = "impressions"
	KindSpend       = "spend"
)

// Usage is one budget or impression limit as the store holds it now: what
// was booked, what is spent, held and left, and what pacing allows by now.
// Spend is in micro-units of the account currency.
type Usage struct {
	Key      string `json:"key"`
	Kind     string `json:"kind"` // KindImpressions or KindSpend
	LineItem string `json:"line_item,omitempty"`
	Campaign string `json:"campaign"`
	// Date is the day of a daily limit (in the campaign's time zone);
	// empty for a total.
	Date   string `json:"date,omitempty"`
	Pacing string `json:"pacing"`
	// Start and End bound the period paced over (zero: unbounded).
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Booked is the limit; Settled what is spent (impressions shown, their
	// price); Reserved what the servers hold in leases (for decisions
	// whose impressions may still come, and to spend); Remaining what is
	// left to lease: Booked - Settled - Reserved, never below 0.
	Booked    int64 `json:"-"`
	Settled   int64 `json:"-"`
	Reserved  int64 `json:"-"`
	Remaining int64 `json:"-"`
	// Target is what pacing allows to be committed by now (Booked for
	// asap or an unbounded period).
	Target int64 `json:"-"`
	// Ideal is the pacing curve over the period, at 49 points (every
	// 1/48th), for a chart; none for an unbounded period.
	Ideal []Point `json:"-"`
	// Committed is what was committed over time, as a History recorded it
	// (Usages leaves it empty).
	Committed []Point `json:"-"`
}

// Point is one point of a curve.
type Point struct {
	Time  time.Time `json:"time"`
	Value int64     `json:"value"`
}

// MarshalJSON writes amounts (booked, settled, reserved, remaining, target
// and the curves' values) of spend as decimal strings of the
// currency ("12.5"), of impressions as numbers.
func (u Usage) MarshalJSON() ([]byte, error) {
	amount := func(n int64) json.RawMessage {
		if u.Kind == KindSpend {
			return json.RawMessage(strconv.Quote(tsubame.Money(n).String()))
		}
		return json.RawMessage(strconv.FormatInt(n, 10))
	}
	type point struct {
		Time  time.Time       `json:"time"`
		Value json.RawMessage `json:"value"`
	}
	curve := func(ps []Point) []point {
		out := make([]point, len(ps))
		for i, p := range ps {
			out[i] = point{p.Time, amount(p.Value)}
		}
		return out
	}
	type plain Usage
	return json.Marshal(struct {
		plain
		Booked    json.RawMessage `json:"booked"`
		Settled   json.RawMessage `json:"settled"`
		Reserved  json.RawMessage `json:"reserved"`
		Remaining json.RawMessage `json:"remaining"`
		Target    json.RawMessage `json:"target"`
		Ideal     []point         `json:"ideal,omitempty"`
		Committed []point         `json:"committed,omitempty"`
	}{plain(u), amount(u.Booked), amount(u.Settled), amount(u.Reserved), amount(u.Remaining), amount(u.Target),
		curve(u.Ideal), curve(u.Committed)})
}

// maxUsageCalls bounds the store calls of Usages in flight at once.
const maxUsageCalls = 16

// Usages reports every budget and impression limit of set at now, as the
// store q holds them: each line item's total and today's impressions,
// each campaign's total and today's spend ("today" in the campaign's time
// zone), in the set's order (campaigns first). A store error fails the
// whole report. It is Plan, then Fill: a store call per budget and limit.
func Usages(ctx context.Context, set *tsubame.CampaignSet, q tsubame.Quotas, now time.Time) ([]Usage, error) {
	us, err := Plan(set, now)
	if err == nil {
		err = Fill(ctx, q, us)
	}
	if err != nil {
		return nil, err
	}
	return us, nil
}

// Busiest returns up to n of us (all of them when n <= 0), those whose
// line item or campaign this node learned the most requests of first
// (what Warm ranks by), then in us's order: what a node reads of a
// hundred thousand budgets for its charts, a store call each.
func (g *Ledger) Busiest(us []Usage, n int) []Usage {
	if n <= 0 || len(us) <= n {
		return us
	}
	type ranked struct {
		u       Usage
		traffic float64
	}
	rs := make([]ranked, len(us))
	for i, u := range us {
		t := g.traffic.daily(keyCampaignSpend(u.Campaign))
		if u.LineItem != "" {
			t = max(t, g.traffic.daily(keyLineImp(u.LineItem)))
		}
		rs[i] = ranked{u, t}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int { return cmp.Compare(b.traffic, a.traffic) })
	out := make([]Usage, n)
	for i := range out {
		out[i] = rs[i].u
	}
	return out
}

// Plan lists every budget and impression limit of set at now as Usages
// does, without what the store holds of them (Fill).
func Plan(set *tsubame.CampaignSet, now time.Time) ([]Usage, error) {
	var out []Usage
	add := func(u Usage, p tsubame.Pacing, loc *time.Location, start, end int64) {
		if start > math.MinInt64 {
			u.Start = time.Unix(0, start).UTC()
		}
		if end < math.MaxInt64 {
			u.End = time.Unix(0, end).UTC()
		}
		u.Pacing = newPacer(p, loc).mode
		u.Target = Target(p, loc, u.Booked, start, end, now)
		if start > math.MinInt64 && end < math.MaxInt64 && start < end {
			for i := range 49 {
				t := time.Unix(0, start+(end-start)/48*int64(i))
				if i == 48 {
					t = time.Unix(0, end)
				}
				u.Ideal = append(u.Ideal, Point{t.UTC(), Target(p, loc, u.Booked, start, end, t)})
			}
		}
		out = append(out, u)
	}
	camps := map[string]*tsubame.Campaign{}
	for _, c := range set.Campaigns {
		camps[c.ID] = c
		loc, err := c.Location()
		if err != nil {
			return nil, err
		}
		cs, ce := window(c.Start, time.Time{}, c.End, time.Time{})
		ds, de, date := day(now, loc)
		if b := int64(c.Budget.Total); b > 0 {
			add(Usage{Key: keyCampaignSpend(c.ID), Kind: KindSpend, Campaign: c.ID, Booked: b}, c.Pacing, loc, cs, ce)
		}
		if b := int64(c.Budget.Daily); b > 0 {
			add(Usage{Key: keyCampaignSpendDay(c.ID, date), Kind: KindSpend, Campaign: c.ID, Date: date, Booked: b}, c.Pacing, loc, max(ds, cs), min(de, ce))
		}
	}
	for _, li := range set.LineItems {
		c := camps[li.Campaign]
		if c == nil {
			continue
		}
		loc, err := c.Location()
		if err != nil {
			return nil, err
		}
		ls, le := window(c.Start, li.Start, c.End, li.End)
		ds, de, date := day(now, loc)
		if n := li.Limits.Impressions.Total; n > 0 {
			add(Usage{Key: keyLineImp(li.ID), Kind: KindImpressions, LineItem: li.ID, Campaign: c.ID, Booked: n}, c.Pacing, loc, ls, le)
		}
		if n := li.Limits.Impressions.Daily; n > 0 {
			add(Usage{Key: keyLineImpDay(li.ID, date), Kind: KindImpressions, LineItem: li.ID, Campaign: c.ID, Date: date, Booked: n}, c.Pacing, loc, max(ds, ls), min(de, le))
		}
	}
	return slices.Clip(out), nil
}

// Fill reads what the store q holds of each of us (a store call each,
// maxUsageCalls at once). A store error fails them all.
func Fill(ctx context.Context, q tsubame.Quotas, us []Usage) error {
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, maxUsageCalls)
		mu    sync.Mutex
		first error
	)
	for i := range us {
		u := &us[i]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s, o, err := q.Committed(ctx, u.Key)
			if err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
				return
			}
			u.Settled, u.Reserved, u.Remaining = s, o, max(u.Booked-s-o, 0)
		})
	}
	wg.Wait()
	return first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// window intersects a campaign's and a line item's windows, in Unix
// nanoseconds; a zero time is no bound.
func window(cs, ls, ce, le time.Time) (start, end int64) {
	start, end = math.MinInt64, math.MaxInt64
	for _, t := range []time.Time{cs, ls} {
		if !t.IsZero() {
			start = max(start, t.UnixNano())
		}
	}
	for _, t := range []time.Time{ce, le} {
		if !t.IsZero() {
			end = min(end, t.UnixNano())
		}
	}
	return start, end
}
