package forecast

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// A news site's day, requests per hour, hour 0 first.
var webDay = [24]float64{300, 200, 120, 80, 80, 120, 300, 700, 900, 900, 900, 1000,
	1300, 1000, 900, 900, 900, 1000, 1300, 1500, 1600, 1400, 1000, 600}

// simulate returns days+1 days of webDay's traffic in loc from start: each
// hour of the first days varied by up to noise at random, each day trend
// more than the one before; the last day is webDay times (1+trend)^days,
// unvaried (the day a forecast is judged on).
func simulate(days int, noise, trend float64, seed uint64) [][24]float64 {
	rnd := rand.New(rand.NewPCG(seed, 1))
	out := make([][24]float64, days+1)
	for k := range out {
		for h, v := range webDay {
			v *= math.Pow(1+trend, float64(k))
			if k < days {
				v *= 1 + noise*(2*rnd.Float64()-1)
			}
			out[k][h] = math.Round(v)
		}
	}
	return out
}

func TestModelForecastsTheNextDay(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, tokyo)
	for _, c := range []struct {
		name         string
		noise, trend float64
	}{{"flat", 0.10, 0}, {"growing", 0.10, 0.05}, {"shrinking", 0.10, -0.05}, {"noisy", 0.20, 0.03}} {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(5) {
				days := simulate(7, c.noise, c.trend, seed)
				h := NewHistory(tokyo, start, 7)
				for k, day := range days[:7] {
					for hr, v := range day {
						h.Add(start.AddDate(0, 0, k).Add(time.Duration(hr)*time.Hour), Cell{Placement: "top"}, int64(v))
					}
				}
				m := h.Fit(nil)
				next := start.AddDate(0, 0, 7)
				for hr, want := range days[7] {
					got := m.Hour(next.Add(time.Duration(hr) * time.Hour))
					if math.Abs(got-want) > 0.15*want {
						t.Errorf("seed %d: hour %d: forecast %.0f, the day had %.0f (%+.1f%%)", seed, hr, got, want, 100*(got-want)/want)
					}
				}
			}
		})
	}
}

func TestModelLeavesOutDaysNotWatched(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	h := NewHistory(time.UTC, start, 7)
	// The servers ran from the fifth day only.
	for k := 4; k < 7; k++ {
		for hr, v := range webDay {
			h.Add(start.AddDate(0, 0, k).Add(time.Duration(hr)*time.Hour), Cell{}, int64(v))
		}
	}
	m := h.Fit(nil)
	next := start.AddDate(0, 0, 7)
	var day float64
	for hr := range 24 {
		day += m.Hour(next.Add(time.Duration(hr) * time.Hour))
	}
	var want float64
	for _, v := range webDay {
		want += v
	}
	if math.Abs(day-want) > 0.5 {
		t.Errorf("a day forecast %.1f, want %.0f: days with no traffic counted as traffic", day, want)
	}
	if h := NewHistory(time.UTC, start, 7).Fit(nil); h.Hour(next) != 0 {
		t.Errorf("no history forecast %v, want 0", h.Hour(next))
	}
}

func TestModelCarriesTheTrendAWeekAtMost(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	h := NewHistory(time.UTC, start, 7)
	for k := range 7 {
		h.Add(start.AddDate(0, 0, k).Add(12*time.Hour), Cell{}, int64(1000+100*k))
	}
	m := h.Fit(nil)
	if got := m.Day(7); math.Abs(got-1700) > 1e-6 {
		t.Errorf("day 7: %v, want 1700", got)
	}
	if got, far := m.Day(13), m.Day(60); got != far || math.Abs(got-2300) > 1e-6 {
		t.Errorf("days 13 and 60: %v and %v, want both 2300", got, far)
	}
	h = NewHistory(time.UTC, start, 7)
	for k := range 7 {
		h.Add(start.AddDate(0, 0, k).Add(12*time.Hour), Cell{}, int64(700-100*k))
	}
	if got := h.Fit(nil).Day(20); got != 0 {
		t.Errorf("a falling trend forecast %v, want 0 (never below)", got)
	}
}

func TestAllocateHighWaterMark(t *testing.T) {
	// Two cells of 1,000 and 3,000. a (priority 1) may serve both and
	// wants 2,000: half of each. b (priority 2) serves the first only
	// and wants 800: it gets the 500 left and is short by 300.
	supply := []float64{1000, 3000}
	a := &booking{id: "a", priority: 1, want: 2000, cells: []int{0, 1}}
	b := &booking{id: "b", priority: 2, want: 800, cells: []int{0}}
	rest := allocate(supply, []*booking{b, a})
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-6 }
	if !near(a.got[0], 500) || !near(a.got[1], 1500) || !near(b.got[0], 500) {
		t.Errorf("a got %v, b got %v; want [500 1500] and [500]", a.got, b.got)
	}
	if !near(rest[0], 0) || !near(rest[1], 1500) {
		t.Errorf("rest %v, want [0 1500]", rest)
	}
	// Within a priority the one with less supply goes first, so that a
	// narrow booking is not starved by a broad one.
	narrow := &booking{id: "narrow", priority: 1, want: 1000, cells: []int{0}}
	broad := &booking{id: "broad", priority: 1, want: 2500, cells: []int{0, 1}}
	rest = allocate(supply, []*booking{broad, narrow})
	if !near(narrow.got[0], 1000) || !near(broad.got[0]+broad.got[1], 2500) || !near(rest[0]+rest[1], 500) {
		t.Errorf("narrow got %v, broad %v, rest %v", narrow.got, broad.got, rest)
	}
}
