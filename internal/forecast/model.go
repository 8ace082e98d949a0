package forecast

import (
	"time"
)

// Cell is one combination of the dimensions ad requests are counted by.
type Cell struct {
	Placement, Site, Country, Device string
}

// History is the ad requests' slots counted per cell and per hour of
// whole days in a zone, the oldest day first.
type History struct {
	loc   *time.Location
	start time.Time // midnight of the first day, in loc
	days  int
	cells map[Cell][][24]float64
	total [][24]float64 // every cell's
}

// NewHistory returns an empty history of days whole days in loc, the
// first starting at start's date.
func NewHistory(loc *time.Location, start time.Time, days int) *History {
	y, m, d := start.In(loc).Date()
	return &History{loc: loc, start: time.Date(y, m, d, 0, 0, 0, 0, loc), days: days,
		cells: map[Cell][][24]float64{}, total: make([][24]float64, days)}
}

// Start is midnight of the first day; End the end of the last.
func (h *History) Start() time.Time { return h.start }

// End is the end of the last day: midnight after it, in the zone.
func (h *History) End() time.Time { return h.start.AddDate(0, 0, h.days) }

// Add counts n slots of c in the hour starting at t. Hours outside the
// days are ignored.
func (h *History) Add(t time.Time, c Cell, n int64) {
	k := dayIndex(h.start, t.In(h.loc))
	if k < 0 || k >= h.days || n <= 0 {
		return
	}
	hour := t.In(h.loc).Hour()
	days := h.cells[c]
	if days == nil {
		days = make([][24]float64, h.days)
		h.cells[c] = days
	}
	days[k][hour] += float64(n)
	h.total[k][hour] += float64(n)
}

// Cells returns every cell counted and its slots over the history.
func (h *History) Cells() map[Cell]float64 {
	out := make(map[Cell]float64, len(h.cells))
	for c, days := range h.cells {
		out[c] = sum(days)
	}
	return out
}

// series returns the days of the cells admit admits (nil: all of them).
func (h *History) series(admit func(Cell) bool) [][24]float64 {
	if admit == nil {
		return h.total
	}
	out := make([][24]float64, h.days)
	for c, days := range h.cells {
		if !admit(c) {
			continue
		}
		for k := range days {
			for hr := range days[k] {
				out[k][hr] += days[k][hr]
			}
		}
	}
	return out
}

// watched reports, per day, whether any request was counted: a day the
// servers were off (or before they were first started) says nothing of
// the traffic, and is left out of the fit.
func (h *History) watched() []bool {
	out := make([]bool, h.days)
	for k, day := range h.total {
		for _, n := range day {
			if n > 0 {
				out[k] = true
				break
			}
		}
	}
	return out
}

func sum(days [][24]float64) float64 {
	var s float64
	for _, d := range days {
		for _, n := range d {
			s += n
		}
	}
	return s
}

// dayIndex is the number of calendar days from start's date to t's, both
// read in start's zone.
func dayIndex(start, t time.Time) int {
	y1, m1, d1 := start.Date()
	y2, m2, d2 := t.In(start.Location()).Date()
	a := time.Date(y1, m1, d1, 0, 0, 0, 0, time.UTC)
	b := time.Date(y2, m2, d2, 0, 0, 0, 0, time.UTC)
	return int(b.Sub(a) / (24 * time.Hour))
}

// trendHorizon bounds how far past the history a trend is carried: further
// days are forecast as that day (a week's trend, carried for months,
// would promise traffic nobody saw).
const trendHorizon = 7

// Model forecasts one series: a day's total from a straight line fit to
// the watched days' totals (least squares; their mean when fewer than 3
// days were watched), shared among the hours of the day as the history
// shared it (each local clock hour's slots over every watched day's, so
// one noisy day weighs as much as its traffic). Published as a "trend and
// seasonal profile" forecast; a weekday's own shape is not kept (it takes
// weeks of history to tell from noise).
type Model struct {
	loc   *time.Location
	start time.Time
	last  int         // the last watched day's index
	a, b  float64     // a day's total: a + b*k, k days from start
	shape [24]float64 // each clock hour's share of a day
	none  bool        // nothing was watched: every hour forecasts 0
}

// Fit fits a model to the series of the cells admit admits (nil: all).
func (h *History) Fit(admit func(Cell) bool) *Model {
	days, watched := h.series(admit), h.watched()
	m := &Model{loc: h.loc, start: h.start}
	var n, sx, sy, sxx, sxy, all float64
	var hours [24]float64
	for k, day := range days {
		if !watched[k] {
			continue
		}
		var t float64
		for hr, v := range day {
			t += v
			hours[hr] += v
		}
		x := float64(k)
		n, sx, sy, sxx, sxy, all = n+1, sx+x, sy+t, sxx+x*x, sxy+x*t, all+t
		m.last = k
	}
	if n == 0 || all == 0 {
		m.none = true
		return m
	}
	for hr := range hours {
		m.shape[hr] = hours[hr] / all
	}
	m.a = sy / n
	if d := n*sxx - sx*sx; n >= 3 && d != 0 {
		m.b = (n*sxy - sx*sy) / d
		m.a = (sy - m.b*sx) / n
	}
	return m
}

// Day returns the total forecast for the day k days after the first of
// the history.
func (m *Model) Day(k int) float64 {
	if m.none {
		return 0
	}
	k = min(k, m.last+trendHorizon)
	return max(0, m.a+m.b*float64(k))
}

// Hour returns the slots forecast for the hour starting at t.
func (m *Model) Hour(t time.Time) float64 {
	if m.none {
		return 0
	}
	lt := t.In(m.loc)
	return m.Day(dayIndex(m.start, lt)) * m.shape[lt.Hour()]
}
