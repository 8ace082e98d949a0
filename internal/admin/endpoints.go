package admin

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The dashboard's per-endpoint view: each public route's requests, share of
// errors and latency over the last minute. It is read once a second from
// the request histograms the metrics registry exports, so that the
// dashboard, /metrics and a Prometheus query over the same minute agree.
// Gathering reads every collector of the registry: the cost of a scrape a
// second, on the admin's goroutine, never on the request path.

// requestHistogram is the family internal/metrics' RequestCollector
// exports: every public request by endpoint (or route) and status code.
const requestHistogram = "tsubame_http_request_duration_seconds"

// endpointWindow is how far back the per-endpoint figures look.
const endpointWindow = time.Minute

// EndpointStats is one public route's traffic over the window.
type EndpointStats struct {
	Endpoint string `json:"endpoint"`
	// Configured marks an endpoint of the configuration (/api/<name>.js and
	// its other formats), listed from the start; the other rows are routes
	// (decide, rtb, json, callback, other: unknown paths...) that answered
	// a request since the start.
	Configured   bool    `json:"configured"`
	Requests     uint64  `json:"requests"`
	RPS          float64 `json:"rps"`
	ClientErrors uint64  `json:"client_errors"` // 4xx
	ServerErrors uint64  `json:"server_errors"` // 5xx
	// ErrorRate is (4xx + 5xx) / requests; P50 and P99 the latency in
	// milliseconds, estimated from the histogram's buckets. All three are
	// null when the window holds no request: nothing was measured.
	ErrorRate *float64 `json:"error_rate"`
	P50       *float64 `json:"p50_ms"`
	P99       *float64 `json:"p99_ms"`
	// Codes are the window's requests by status code ("0": a code the
	// metrics do not count apart).
	Codes map[string]uint64 `json:"codes"`
	Total uint64            `json:"total"` // requests since the start
}

// EndpointWindow is the per-endpoint view at one time.
type EndpointWindow struct {
	Time time.Time `json:"time"`
	// Seconds is the window's length: a minute, less in the first minute.
	Seconds   float64         `json:"window_seconds"`
	Endpoints []EndpointStats `json:"endpoints"`
}

// routeCounts are one route's requests since the start: by status code,
// and by latency bucket (the overflow last).
type routeCounts struct {
	codes   map[int]uint64
	buckets []uint64
}

type endpointSnap struct {
	at     time.Time
	routes map[string]routeCounts
}

// endpointTracker keeps a window of snapshots of the request histograms.
// Only the stats ring's goroutine calls tick.
type endpointTracker struct {
	gather    prometheus.Gatherer
	endpoints func() []string // Options.Endpoints

	bounds []float64 // the histogram's upper bounds, seconds
	snaps  []endpointSnap
}

func newEndpointTracker(g prometheus.Gatherer, endpoints func() []string) *endpointTracker {
	return &endpointTracker{gather: g, endpoints: endpoints}
}

// tick takes a snapshot and returns the window ending at it.
func (t *endpointTracker) tick(now time.Time) *EndpointWindow {
	names := configuredEndpoints(t.endpoints) // each time: a reload may add or drop some
	routes, bounds := readRequests(t.gather)
	if len(bounds) > 0 {
		t.bounds = bounds
	}
	t.snaps = append(t.snaps, endpointSnap{at: now, routes: routes})
	// Keep the newest snapshot at least a window old as the base.
	for len(t.snaps) > 1 && !t.snaps[1].at.After(now.Add(-endpointWindow)) {
		t.snaps = t.snaps[1:]
	}
	base := t.snaps[0]
	w := &EndpointWindow{Time: now.UTC().Truncate(time.Millisecond), Seconds: now.Sub(base.at).Seconds(), Endpoints: []EndpointStats{}}
	configured := map[string]bool{}
	for _, n := range names {
		configured[n] = true
	}
	var others []string
	for name := range routes {
		if !configured[name] {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	for _, name := range append(names, others...) {
		w.Endpoints = append(w.Endpoints, t.stats(name, configured[name], routes[name], base.routes[name], w.Seconds))
	}
	return w
}

// stats is one route's row: cur minus base, the counts at the window's start.
func (t *endpointTracker) stats(name string, configured bool, cur, base routeCounts, secs float64) EndpointStats {
	e := EndpointStats{Endpoint: name, Configured: configured, Codes: map[string]uint64{}}
	for code, n := range cur.codes {
		e.Total += n
		d := n - min(n, base.codes[code]) // counts never fall; if they did, count from zero
		if d == 0 {
			continue
		}
		e.Codes[strconv.Itoa(code)] = d
		e.Requests += d
		switch {
		case code >= 500:
			e.ServerErrors += d
		case code >= 400:
			e.ClientErrors += d
		}
	}
	if secs > 0 {
		e.RPS = float64(e.Requests) / secs
	}
	if e.Requests == 0 || len(cur.buckets) != len(t.bounds)+1 {
		return e
	}
	rate := float64(e.ClientErrors+e.ServerErrors) / float64(e.Requests)
	e.ErrorRate = &rate
	diff := make([]uint64, len(cur.buckets))
	for i, n := range cur.buckets {
		if i < len(base.buckets) {
			n -= min(n, base.buckets[i])
		}
		diff[i] = n
	}
	p50, p99 := quantile(t.bounds, diff, 0.50)*1000, quantile(t.bounds, diff, 0.99)*1000
	e.P50, e.P99 = &p50, &p99
	return e
}

// readRequests reads the request histograms from g: each route's counts,
// and the buckets' upper bounds.
func readRequests(g prometheus.Gatherer) (map[string]routeCounts, []float64) {
	routes := map[string]routeCounts{}
	// A failing collector elsewhere does not hide the requests: Gather
	// returns what it could read with its error.
	families, _ := g.Gather()
	var bounds []float64
	for _, f := range families {
		if f.GetName() != requestHistogram {
			continue
		}
		for _, m := range f.GetMetric() {
			var route string
			code := -1
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "endpoint":
					route = l.GetValue()
				case "code":
					if c, err := strconv.Atoi(l.GetValue()); err == nil {
						code = c
					}
				}
			}
			h := m.GetHistogram()
			if route == "" || code < 0 || h == nil {
				continue
			}
			var b []float64
			var perBucket []uint64
			var below uint64
			for _, bk := range h.GetBucket() {
				if math.IsInf(bk.GetUpperBound(), 1) {
					continue
				}
				b = append(b, bk.GetUpperBound())
				perBucket = append(perBucket, bk.GetCumulativeCount()-min(bk.GetCumulativeCount(), below))
				below = bk.GetCumulativeCount()
			}
			perBucket = append(perBucket, h.GetSampleCount()-min(h.GetSampleCount(), below))
			if bounds == nil {
				bounds = b
			} else if !slices.Equal(bounds, b) {
				continue // not the one histogram this view knows how to read
			}
			rc, ok := routes[route]
			if !ok {
				rc = routeCounts{codes: map[int]uint64{}, buckets: make([]uint64, len(perBucket))}
				routes[route] = rc
			}
			rc.codes[code] += h.GetSampleCount()
			for i, n := range perBucket {
				rc.buckets[i] += n
			}
		}
	}
	return routes, bounds
}

// configuredEndpoints lists the configured endpoints, sorted, without
// repeats: endpoints of one name (in several sites) share their counts.
func configuredEndpoints(list func() []string) []string {
	if list == nil {
		return nil
	}
	names := slices.Clone(list())
	slices.Sort(names)
	return slices.Compact(names)
}
