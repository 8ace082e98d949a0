// Package forecast tells ad-ops how many impressions a targeting will offer
// over a range of hours to come, and how much of that the line items
// already booked will take: what is checked before a campaign is sold.
//
// The traffic is the reports' count of ad requests' slots (the requests
// counter: every slot asked of /api/decide, filled or not), per hour and
// per placement, site, country and device, over the last whole days
// (Options.Days). With Redis the reports hold every node's counts, so a
// forecast is the cluster's, asked of any node. A model (Model) is fit to
// the selection's own hours: a trend through its days' totals, shared
// among the hours of a day as the history shared them.
//
// What booked line items take is planned over the cells (each combination
// of those four dimensions seen in the history), each cell's supply its
// share of the history times the forecast of all traffic over the range:
// every line item with an impression limit or a campaign budget wants
// what it still has to deliver in the range (a daily limit per day, less
// what today already delivered; a total limit's rest, spread over the
// rest of its flight as its traffic comes; a budget in impressions at the
// line item's price, shared among its campaign's priced line items), and
// allocate shares the cells among them in priority order. A selection's
// net is what its cells keep. Targeting the counts do not tell (region,
// OS, browser, app, key-values) is taken to admit every cell, so the net
// errs on the side of selling less.
//
// It reads the reports and the index and writes nothing; it must not
// import the listeners, config, the stores or cmd (arch_test.go).
package forecast

import (
	"math"
	"slices"
	"strings"
	"time"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/report"
)

// MaxRange bounds a forecast's range.
const MaxRange = 93 * 24 * time.Hour

// Options configure a Forecaster.
type Options struct {
	// Reports answers the queries of the history and of what line items
	// delivered (a report.Roller's Query).
	Reports func(report.Query) (*report.Result, error)
	// Index returns the line items that serve now.
	Index func() *decision.Index
	// Days is the history's whole days (7 when 0).
	Days int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Forecaster answers forecasts. It is safe for concurrent use.
type Forecaster struct{ opt Options }

// New returns a Forecaster.
func New(opt Options) *Forecaster {
	if opt.Days <= 0 {
		opt.Days = 7
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Forecaster{opt: opt}
}

// Filter selects the traffic of a forecast: a request is in it when each
// list is empty or holds its value (a site also when it holds a parent
// domain of it, as targeting matches).
type Filter struct {
	Placements []string `json:"placements,omitempty"`
	Sites      []string `json:"sites,omitempty"`
	Countries  []string `json:"countries,omitempty"`
	Devices    []string `json:"devices,omitempty"`
}

// Admits reports whether c is in f.
func (f *Filter) Admits(c Cell) bool {
	in := func(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }
	if !in(f.Placements, c.Placement) || !in(f.Countries, c.Country) || !in(f.Devices, c.Device) {
		return false
	}
	if len(f.Sites) == 0 {
		return true
	}
	for _, s := range f.Sites {
		if c.Site == s || strings.HasSuffix(c.Site, "."+s) {
			return true
		}
	}
	return false
}

// Request is a forecast asked for.
type Request struct {
	// From (inclusive) and To (exclusive): whole hours in Location. A From
	// in the past is moved to the current hour.
	From, To time.Time
	Filter   Filter
	Location *time.Location // UTC when nil
}

// Hour is one hour of a forecast. Available is the slots the selection's
// requests are forecast to ask; Booked what booked line items take of
// them; Net the rest, which may still be sold.
type Hour struct {
	Time      time.Time `json:"time"`
	Available int64     `json:"available"`
	Booked    int64     `json:"booked"`
	Net       int64     `json:"net"`
}

// Booking is a booked line item that takes from the selection.
type Booking struct {
	LineItem string `json:"line_item"`
	Campaign string `json:"campaign"`
	Priority int    `json:"priority"`
	// Wants is what it still has to deliver in the range (from all of
	// its traffic); Takes what it is planned to take of the selection;
	// Short what the forecast traffic cannot give it.
	Wants int64 `json:"wants"`
	Takes int64 `json:"takes"`
	Short int64 `json:"short"`
}

// Result is a forecast.
type Result struct {
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	Timezone    string    `json:"timezone"`
	Filter      Filter    `json:"filter"`
	HistoryFrom time.Time `json:"history_from"`
	HistoryTo   time.Time `json:"history_to"`
	// HistoryDays is the number of days of the history that had traffic.
	HistoryDays int       `json:"history_days"`
	Available   int64     `json:"available"`
	Booked      int64     `json:"booked"`
	Net         int64     `json:"net"`
	Hours       []Hour    `json:"hours"`
	LineItems   []Booking `json:"line_items"`
}

// Forecast answers req.
func (f *Forecaster) Forecast(req Request) (*Result, error) {
	loc := req.Location
	if loc == nil {
		loc = time.UTC
	}
	now := f.opt.Now().In(loc)
	cur := hourStart(now)
	from, to := req.From.In(loc), req.To.In(loc)
	for _, t := range []time.Time{from, to} {
		if !hourStart(t).Equal(t) {
			return nil, tsubame.Errorf(tsubame.EINVALID, "%s is not a whole hour in %s", t.Format(time.RFC3339), loc)
		}
	}
	if !from.Before(to) {
		return nil, tsubame.Errorf(tsubame.EINVALID, "the start (%s) is not before the end (%s)", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if to.Sub(from) > MaxRange {
		return nil, tsubame.Errorf(tsubame.EINVALID, "a forecast covers at most %d days", int(MaxRange/(24*time.Hour)))
	}
	if from.Before(cur) {
		from = cur
	}
	if !from.Before(to) {
		return nil, tsubame.Errorf(tsubame.EINVALID, "the range (to %s) has passed: a forecast is of the hours to come", to.Format(time.RFC3339))
	}

	y, m, d := now.Date()
	today := time.Date(y, m, d, 0, 0, 0, 0, loc)
	hist := NewHistory(loc, today.AddDate(0, 0, -f.opt.Days), f.opt.Days)
	res, err := f.opt.Reports(report.Query{From: hist.Start(), To: hist.End(), Location: loc,
		By: []string{report.ByHour, "placement", "site", "country", "device"}})
	if err != nil {
		return nil, err
	}
	for _, r := range res.Rows {
		hist.Add(r.Time, cellOf(&r.Dims), r.Counts[report.Requests])
	}

	all, sel := hist.Fit(nil), hist.Fit(req.Filter.Admits)
	out := &Result{From: from, To: to, Timezone: loc.String(), Filter: req.Filter,
		HistoryFrom: hist.Start(), HistoryTo: hist.End(), HistoryDays: countTrue(hist.watched())}
	hours := hoursOf(from, to)
	var allRange float64
	for _, h := range hours {
		allRange += all.Hour(h)
	}

	// The cells' supply over the range, and the booked line items' plan.
	cellSlots := hist.Cells()
	var histAll float64
	for _, n := range cellSlots {
		histAll += n
	}
	cells := make([]Cell, 0, len(cellSlots))
	for c := range cellSlots {
		cells = append(cells, c)
	}
	slices.SortFunc(cells, func(a, b Cell) int {
		return strings.Compare(a.Placement+"\x00"+a.Site+"\x00"+a.Country+"\x00"+a.Device,
			b.Placement+"\x00"+b.Site+"\x00"+b.Country+"\x00"+b.Device)
	})
	supply := make([]float64, len(cells))
	for i, c := range cells {
		if histAll > 0 {
			supply[i] = allRange * cellSlots[c] / histAll
		}
	}
	ix := f.opt.Index()
	bs, err := f.bookings(ix, cells, all, from, to, now)
	if err != nil {
		return nil, err
	}
	rest := allocate(supply, bs)
	var selSupply, selRest float64
	inSel := make([]bool, len(cells))
	for i, c := range cells {
		if req.Filter.Admits(c) {
			inSel[i] = true
			selSupply += supply[i]
			selRest += rest[i]
		}
	}
	keep := 1.0 // the share of the selection's slots left unbooked
	if selSupply > 0 {
		keep = max(0, min(1, selRest/selSupply))
	}
	for _, h := range hours {
		a := round(sel.Hour(h))
		n := round(float64(a) * keep)
		out.Hours = append(out.Hours, Hour{Time: h, Available: a, Booked: a - n, Net: n})
		out.Available, out.Booked, out.Net = out.Available+a, out.Booked+a-n, out.Net+n
	}
	out.LineItems = []Booking{}
	for _, b := range bs {
		var got, takes float64
		for i, c := range b.cells {
			got += b.got[i]
			if inSel[c] {
				takes += b.got[i]
			}
		}
		if takes <= 0 {
			continue
		}
		camp := ""
		if l, ok := ix.LineByID(b.id); ok {
			camp = l.Campaign
		}
		out.LineItems = append(out.LineItems, Booking{LineItem: b.id, Campaign: camp, Priority: b.priority,
			Wants: round(b.want), Takes: round(takes), Short: round(max(0, b.want-got))})
	}
	return out, nil
}

func cellOf(d *report.Dims) Cell {
	return Cell{Placement: d[report.DimPlacement], Site: d[report.DimSite], Country: d[report.DimCountry], Device: d[report.DimDevice]}
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func round(v float64) int64 { return int64(math.Round(v)) }

// hourStart is the start of t's hour in t's zone (in a zone 30 or 45
// minutes off UTC, not a whole UTC hour).
func hourStart(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, t.Hour(), 0, 0, 0, t.Location())
}

// hoursOf returns the starts of the hours in [from, to).
func hoursOf(from, to time.Time) []time.Time {
	var out []time.Time
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		out = append(out, h)
	}
	return out
}

// delivered is what line items and campaigns delivered, from the reports.
type delivered struct {
	imps, impsToday   map[string]int64         // per line item
	spend, spendToday map[string]tsubame.Money // per campaign, rounded down to micro-units
}

func (f *Forecaster) delivered(today time.Time) (*delivered, error) {
	d := &delivered{imps: map[string]int64{}, impsToday: map[string]int64{},
		spend: map[string]tsubame.Money{}, spendToday: map[string]tsubame.Money{}}
	for _, q := range []struct {
		from  time.Time
		imps  map[string]int64
		spend map[string]tsubame.Money
	}{{time.Time{}, d.imps, d.spend}, {today, d.impsToday, d.spendToday}} {
		res, err := f.opt.Reports(report.Query{From: q.from, By: []string{"campaign", "line_item"}})
		if err != nil {
			return nil, err
		}
		for _, r := range res.Rows {
			q.imps[r.Dims[report.DimLineItem]] += r.Counts[report.Impressions]
			q.spend[r.Dims[report.DimCampaign]] += tsubame.Money(r.Counts[report.Spend] / 1000)
		}
	}
	return d, nil
}

// bookings returns the booked line items that want some of [from, to):
// those with an impression limit, or a campaign budget and a price.
func (f *Forecaster) bookings(ix *decision.Index, cells []Cell, model *Model, from, to, now time.Time) ([]*booking, error) {
	y, m, dd := now.Date()
	del, err := f.delivered(time.Date(y, m, dd, 0, 0, 0, 0, now.Location()))
	if err != nil {
		return nil, err
	}
	priced := map[string]int{} // a campaign's line items with a price
	for l := range ix.Lines() {
		if l.CPM > 0 {
			priced[l.Campaign]++
		}
	}
	cur := hourStart(now)
	all := newCurve(model, cur)
	var out []*booking
	for l := range ix.Lines() {
		if !l.Limited {
			continue
		}
		want := math.Inf(1)
		if l.Limits.Daily > 0 {
			want = min(want, daily(all, l, float64(l.Limits.Daily), float64(del.impsToday[l.ID]), from, to, cur))
		}
		if l.Limits.Total > 0 {
			want = min(want, total(all, l, float64(l.Limits.Total-del.imps[l.ID]), from, to, cur))
		}
		if l.CPM > 0 && priced[l.Campaign] > 0 {
			// A budget in impressions at the line item's price, its
			// share of the campaign's.
			imps := func(m tsubame.Money) float64 {
				return float64(m) * 1000 / float64(l.CPM) / float64(priced[l.Campaign])
			}
			if l.Budget.Daily > 0 {
				want = min(want, daily(all, l, imps(l.Budget.Daily), imps(del.spendToday[l.Campaign]), from, to, cur))
			}
			if l.Budget.Total > 0 {
				want = min(want, total(all, l, imps(l.Budget.Total-del.spend[l.Campaign]), from, to, cur))
			}
		}
		if math.IsInf(want, 1) || want <= 0 {
			continue
		}
		b := &booking{id: l.ID, priority: l.Priority, want: want}
		for c, cell := range cells {
			if ix.Targets(l, decision.Traffic(cell)) {
				b.cells = append(b.cells, c)
			}
		}
		out = append(out, b)
	}
	return out, nil
}

// flightIn narrows [from, to) to l's flight.
func flightIn(l *decision.Line, from, to time.Time) (time.Time, time.Time) {
	s, e := l.Flight()
	if s > from.UnixNano() {
		from = time.Unix(0, s).In(from.Location())
	}
	if e < to.UnixNano() {
		to = time.Unix(0, e).In(to.Location())
	}
	return from, to
}

// horizon bounds how far ahead a flight's traffic is weighed hour by hour:
// a total limit whose flight ends later is spread over this much.
const horizon = 400 * 24 * time.Hour

// curve is the forecast of all traffic, hour by hour from the current
// hour to the horizon, summed: what any span of it holds is one
// subtraction, however many line items ask.
type curve struct {
	cur time.Time
	cum []float64 // cum[i]: the forecast of the i hours from cur
}

func newCurve(all *Model, cur time.Time) *curve {
	n := int(horizon / time.Hour)
	c := &curve{cur: cur, cum: make([]float64, n+1)}
	for i := range n {
		c.cum[i+1] = c.cum[i] + all.Hour(cur.Add(time.Duration(i)*time.Hour))
	}
	return c
}

// index is the number of hours from cur that start before t.
func (c *curve) index(t time.Time) int {
	d := t.Sub(c.cur)
	if d <= 0 {
		return 0
	}
	return min(int((d+time.Hour-1)/time.Hour), len(c.cum)-1)
}

// traffic is the forecast of all traffic over the hours that start in
// [from, to).
func (c *curve) traffic(from, to time.Time) float64 {
	a, b := c.index(from), c.index(to)
	if b <= a {
		return 0
	}
	return c.cum[b] - c.cum[a]
}

// daily is what a daily limit wants of [from, to): per day of the line
// item's zone, the limit (today less what was delivered) spread over the
// day's traffic from now on, as even pacing spreads it.
func daily(all *curve, l *decision.Line, limit, today float64, from, to, cur time.Time) float64 {
	from, to = flightIn(l, from, to)
	zone := l.Zone
	if zone == nil {
		zone = time.UTC
	}
	var want float64
	for day := dayStart(from.In(zone)); day.Before(to); day = day.AddDate(0, 0, 1) {
		end := day.AddDate(0, 0, 1)
		left := limit
		start := day
		if !cur.Before(day) { // today
			left, start = max(0, limit-today), cur
		}
		rest := all.traffic(start, end)
		if rest <= 0 {
			continue
		}
		want += left * all.traffic(later(from, day), earlier(to, end)) / rest
	}
	return want
}

// total is what a total limit's rest wants of [from, to): spread over the
// rest of the flight as its traffic comes, or all of it when the flight
// has no end (nothing paces it: it takes what comes).
func total(all *curve, l *decision.Line, rest float64, from, to, cur time.Time) float64 {
	if rest <= 0 {
		return 0
	}
	_, e := l.Flight()
	if e == math.MaxInt64 {
		return rest
	}
	end := time.Unix(0, e).In(cur.Location())
	if end.Sub(cur) > horizon {
		end = cur.Add(horizon)
	}
	whole := all.traffic(cur, end)
	if whole <= 0 {
		return 0
	}
	from, to = flightIn(l, from, to)
	return rest * all.traffic(from, to) / whole
}

func dayStart(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, t.Location())
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
