package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"tsubame/internal/decision"
	"tsubame/internal/forecast"
	"tsubame/internal/report"
)

// simDevices are the devices of the simulated requests, with their shares
// in percent, drawn at random for each request when a forecast is made.
var simDevices = []struct {
	name  string
	share int
}{{"desktop", 60}, {"mobile", 30}, {"tablet", 10}}

// simForecast is `pacing simulate -forecast`: the day forecast from the
// days replayed before it, as GET /api/v1/forecast forecasts it from the
// reports, then set beside what the day brought.
type simForecast struct {
	placement string
	subset    []string // the devices of the subset forecast net of booked line items
	loc       *time.Location
	start     time.Time // the first day replayed
	day       time.Time // the day forecast
	rnd       *rand.Rand
	// asked are the requests per hour (its start, Unix seconds) and
	// device; billed the impressions billed per line item, and per hour
	// and device for the day forecast.
	asked     map[int64]map[string]int64
	billedAll map[string]int64
	billedDay map[int64]map[string]int64
	all, sub  *forecast.Result
}

func newSimForecast(placement string, subset []string, loc *time.Location, start, day time.Time) *simForecast {
	return &simForecast{placement: placement, subset: subset, loc: loc, start: start, day: day,
		rnd:   rand.New(rand.NewPCG(5, 6)), // its own: the other draws stay as without it
		asked: map[int64]map[string]int64{}, billedAll: map[string]int64{}, billedDay: map[int64]map[string]int64{}}
}

func (f *simForecast) hour(t time.Time) int64 {
	t = t.In(f.loc)
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), 0, 0, 0, f.loc).Unix()
}

func add(m map[int64]map[string]int64, h int64, k string) {
	if m[h] == nil {
		m[h] = map[string]int64{}
	}
	m[h][k]++
}

// request draws a request's device at now and counts it.
func (f *simForecast) request(now time.Time) string {
	r, dev := f.rnd.IntN(100), simDevices[len(simDevices)-1].name
	for _, d := range simDevices {
		if r < d.share {
			dev = d.name
			break
		}
		r -= d.share
	}
	add(f.asked, f.hour(now), dev)
	return dev
}

// billed counts an impression of line billed for a bid made at bid for a
// request of device dev.
func (f *simForecast) billed(bid time.Time, line, dev string) {
	f.billedAll[line]++
	if !bid.Before(f.day) {
		add(f.billedDay, f.hour(bid), dev)
	}
}

// reports answers the forecast's queries as the reports would: requests
// per hour and cell, impressions per line item.
func (f *simForecast) reports(q report.Query) (*report.Result, error) {
	res := &report.Result{Query: q}
	if slices.Contains(q.By, report.ByHour) {
		for h, devs := range f.asked {
			t := time.Unix(h, 0).In(f.loc)
			if t.Before(q.From) || !t.Before(q.To) {
				continue
			}
			for dev, n := range devs {
				var row report.Row
				row.Time, row.Dims[report.DimPlacement], row.Dims[report.DimDevice] = t, f.placement, dev
				row.Counts[report.Requests] = n
				res.Rows = append(res.Rows, row)
			}
		}
		return res, nil
	}
	for line, n := range f.billedAll {
		if !q.From.IsZero() { // today's, before the day: none
			continue
		}
		var row report.Row
		row.Dims[report.DimLineItem], row.Counts[report.Impressions] = line, n
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// forecast forecasts the day (at its start) for the placement, and for the
// subset net of the line items of ix.
func (f *simForecast) forecast(ix *decision.Index, days int) error {
	fc := forecast.New(forecast.Options{Reports: f.reports, Index: func() *decision.Index { return ix }, Days: days,
		Now: func() time.Time { return f.day }})
	req := forecast.Request{From: f.day, To: f.day.AddDate(0, 0, 1), Location: f.loc, Filter: forecast.Filter{Placements: []string{f.placement}}}
	var err error
	if f.all, err = fc.Forecast(req); err != nil {
		return err
	}
	req.Filter.Devices = f.subset
	f.sub, err = fc.Forecast(req)
	return err
}

// errors returns the worst hour's error of the placement's forecast and of
// the subset's net, in percent of what the day brought.
func (f *simForecast) errors() (all, sub float64) {
	for i, h := range f.all.Hours {
		got, net := f.actual(h.Time)
		all = max(all, math.Abs(pctOff(h.Available, got)))
		sub = max(sub, math.Abs(pctOff(f.sub.Hours[i].Net, net)))
	}
	return all, sub
}

// actual is what the hour at t brought: its requests, and the subset's
// requests not taken by the line items.
func (f *simForecast) actual(t time.Time) (requests, net int64) {
	h := f.hour(t)
	for dev, n := range f.asked[h] {
		requests += n
		if slices.Contains(f.subset, dev) {
			net += n - f.billedDay[h][dev]
		}
	}
	return requests, net
}

func pctOff(forecast, actual int64) float64 {
	if actual == 0 {
		if forecast == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return 100 * float64(forecast-actual) / float64(actual)
}

// writeCSV writes the day's hours: forecast and actual, for the placement
// and for the subset's net.
func (f *simForecast) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	sub := strings.Join(f.subset, "+")
	_ = cw.Write([]string{"hour", "requests", "forecast", "error_pct", sub + "_net", sub + "_forecast_net", sub + "_error_pct", sub + "_booked"})
	pct := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	for i, h := range f.all.Hours {
		got, net := f.actual(h.Time)
		s := f.sub.Hours[i]
		_ = cw.Write([]string{h.Time.In(f.loc).Format(time.RFC3339), strconv.FormatInt(got, 10), strconv.FormatInt(h.Available, 10),
			pct(pctOff(h.Available, got)), strconv.FormatInt(net, 10), strconv.FormatInt(s.Net, 10), pct(pctOff(s.Net, net)),
			strconv.FormatInt(s.Booked, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// summary is the forecast's line on stderr.
func (f *simForecast) summary() string {
	all, sub := f.errors()
	return fmt.Sprintf("forecast of %s from %d days: every hour within %.1f%%; %s net of booked line items (%d of %d forecast booked): within %.1f%%",
		f.placement, f.all.HistoryDays, all, strings.Join(f.subset, "+"), f.sub.Booked, f.sub.Available, sub)
}
