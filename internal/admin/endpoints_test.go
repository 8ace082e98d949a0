package admin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// requestMetrics registers a histogram shaped as internal/metrics'
// RequestCollector exports it.
func requestMetrics(reg *prometheus.Registry) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: requestHistogram, Help: "test",
		Buckets: []float64{0.001, 0.01, 0.1}}, []string{"endpoint", "code"})
	reg.MustRegister(h)
	return h
}

func observe(h *prometheus.HistogramVec, endpoint string, code, n int, seconds float64) {
	for range n {
		h.WithLabelValues(endpoint, fmt.Sprint(code)).Observe(seconds)
	}
}

// The window holds what came within its minute: counts by code, the
// share of 4xx and 5xx, latency quantiles; the configured endpoints are
// listed first, requested or not; a row with no request has no rate and
// no latency (null), not zeros.
func TestEndpointWindow(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := requestMetrics(reg)
	tr := newEndpointTracker(reg, func() []string { return []string{"sample4", "sample2", "shop1", "sample2"} })
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	observe(h, "sample4", 200, 5, 0.0005) // before the first snapshot: in the total only
	tr.tick(t0)

	observe(h, "sample4", 200, 90, 0.0005)
	observe(h, "sample4", 404, 6, 0.005)
	observe(h, "sample4", 503, 4, 0.05)
	observe(h, "other", 404, 2, 0.0005)
	w := tr.tick(t0.Add(10 * time.Second))
	rows := map[string]EndpointStats{}
	var order []string
	for _, e := range w.Endpoints {
		rows[e.Endpoint] = e
		order = append(order, e.Endpoint)
	}
	if got := strings.Join(order, ","); got != "sample2,sample4,shop1,other" || w.Seconds != 10 {
		t.Fatalf("rows %s over %v s", got, w.Seconds)
	}
	s4 := rows["sample4"]
	if s4.Requests != 100 || s4.Total != 105 || s4.RPS != 10 || s4.ClientErrors != 6 || s4.ServerErrors != 4 ||
		*s4.ErrorRate != 0.1 || fmt.Sprint(s4.Codes) != "map[200:90 404:6 503:4]" || !s4.Configured {
		t.Errorf("sample4: %+v", s4)
	}
	if *s4.P50 <= 0 || *s4.P50 > 1 || *s4.P99 <= 10 || *s4.P99 > 100 {
		t.Errorf("sample4 latency: p50 %v ms, p99 %v ms", *s4.P50, *s4.P99)
	}
	if o := rows["other"]; o.Configured || o.Requests != 2 || *o.ErrorRate != 1 {
		t.Errorf("other: %+v", o)
	}
	if s2 := rows["sample2"]; s2.Requests != 0 || s2.RPS != 0 || s2.ErrorRate != nil || s2.P50 != nil || s2.P99 != nil || !s2.Configured {
		t.Errorf("an endpoint never asked: %+v", s2)
	}

	// A minute later, with nothing new: the window is empty, the total stays.
	for i := 11; i <= 80; i++ {
		w = tr.tick(t0.Add(time.Duration(i) * time.Second))
	}
	for _, e := range w.Endpoints {
		if e.Endpoint == "sample4" && (e.Requests != 0 || e.Total != 105 || e.ErrorRate != nil) {
			t.Errorf("sample4 after a quiet minute: %+v", e)
		}
	}
	if w.Seconds != 60 {
		t.Errorf("window of %v s", w.Seconds)
	}
	b, _ := json.Marshal(w.Endpoints[0])
	if !strings.Contains(string(b), `"error_rate":null,"p50_ms":null,"p99_ms":null`) {
		t.Errorf("a row with no request: %s", b)
	}
}

// The stats API and its stream carry the per-endpoint view, read from the
// listener's metrics registry.
func TestStatsEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	hist := requestMetrics(reg)
	h := newHarness(t, true, func(o *Options) {
		o.Metrics = reg
		o.Sample = func() Sample { return Sample{ShipLag: -1} }
		o.Endpoints = func() []string { return []string{"sample4"} }
	})
	plain, _, err := h.accounts.CreateToken(testUser, "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	// waitFor waits until the stats' one row reads want.
	var last string
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var out struct{ Endpoints *EndpointWindow }
			r := h.do("GET", "/api/v1/stats", nil, "Authorization", "Bearer "+plain)
			if err := json.Unmarshal(r.body, &out); err != nil || r.status != 200 {
				t.Fatalf("stats: %d %s", r.status, r.body)
			}
			if out.Endpoints != nil && len(out.Endpoints.Endpoints) == 1 {
				e := out.Endpoints.Endpoints[0]
				last = fmt.Sprintf("%s %d %d %d", e.Endpoint, e.Requests, e.ServerErrors, e.Total)
				if last == want {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the stats never read %q; last %q", want, last)
			}
		}
	}
	// The configured endpoint is listed before any request; the requests
	// come after the window's first snapshot (on a busy machine the ring's
	// first tick may come late, and would count them as before the window).
	waitFor("sample4 0 0 0")
	observe(hist, "sample4", 200, 3, 0.0005)
	observe(hist, "sample4", 500, 1, 0.0005)
	waitFor("sample4 4 1 4")

	req, _ := http.NewRequest("GET", h.base+"/api/v1/stats/stream", nil)
	req.Header.Set("Authorization", "Bearer "+plain)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if sc.Text() != "event: endpoints" {
			continue
		}
		sc.Scan()
		var w EndpointWindow
		data, _ := strings.CutPrefix(sc.Text(), "data: ")
		if err := json.Unmarshal([]byte(data), &w); err != nil || len(w.Endpoints) != 1 || w.Endpoints[0].Total != 4 {
			t.Fatalf("endpoints event %q (%v)", sc.Text(), err)
		}
		return
	}
	t.Fatalf("the stream ended without an endpoints event: %v", sc.Err())
}
