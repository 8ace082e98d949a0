package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tsubame"
)

// Sample is what the server counts, read once a second for the dashboard.
// Counters are totals since start; the dashboard shows their rates.
type Sample struct {
	Requests uint64 // public requests answered
	// LatencyBounds are the upper bounds (seconds) of the latency buckets;
	// Latency holds the requests per bucket, one more for the overflow.
	LatencyBounds []float64
	Latency       []uint64
	CacheHits     uint64 // lookups answered from the cache, fresh or stale
	CacheMisses   uint64
	LogBuffered   int // access-log bytes not yet written
	LogFailing    bool
	// ShipLag is the access-log lines not yet acknowledged by Kafka, -1
	// without the shipper; ShipAge is the oldest one's age.
	ShipLag      int64
	ShipAge      time.Duration
	ShipFailing  bool
	HookQueued   int // webhook messages waiting
	HookInFlight int // webhook messages being processed
	Conns        int64
	// Ready is what /readyz answers (every required check passing);
	// StoreUp whether the store answered its last probe, which readiness
	// does not count.
	Ready   bool
	StoreUp bool
}

// Point is one second of the dashboard: rates over the last second and
// the current levels.
type Point struct {
	Time         time.Time `json:"time"`
	RPS          float64   `json:"rps"`
	P50          float64   `json:"p50_ms"`
	P99          float64   `json:"p99_ms"`
	HitRate      float64   `json:"cache_hit_rate"` // -1 when there were no lookups
	LogBuffered  int       `json:"log_buffered_bytes"`
	LogFailing   bool      `json:"log_failing"`
	ShipLag      int64     `json:"kafka_lag_lines"` // -1 without the shipper
	ShipAge      float64   `json:"kafka_oldest_seconds"`
	ShipFailing  bool      `json:"kafka_failing"`
	HookQueued   int       `json:"webhook_queued"`
	HookInFlight int       `json:"webhook_in_flight"`
	Conns        int64     `json:"connections"`
	Goroutines   int       `json:"goroutines"`
	RSS          uint64    `json:"rss_bytes"`
	Heap         uint64    `json:"heap_bytes"`
	CPU          []float64 `json:"cpu"`         // busy % of each core (whole machine)
	ProcessCPU   float64   `json:"process_cpu"` // this process, % of one core
	Ready        bool      `json:"ready"`
	StoreUp      bool      `json:"store_up"`
}

// historyLen is how many seconds the dashboard can show on load.
const historyLen = 300

// statsRing samples once a second and keeps the last historyLen points.
type statsRing struct {
	sample  func() Sample
	mu      sync.Mutex
	points  []Point
	changed chan struct{} // closed and replaced on each new point

	prev     Sample
	prevAt   time.Time
	prevCPU  []cpuTimes
	prevProc time.Duration

	// endpoints makes the per-endpoint view (endpoints.go) when the
	// listener has a metrics registry; it is set once the ring runs, so it
	// is read atomically. window is its newest view, under mu.
	endpoints atomic.Pointer[endpointTracker]
	window    *EndpointWindow
}

func newStatsRing(sample func() Sample) *statsRing {
	return &statsRing{sample: sample, changed: make(chan struct{})}
}

func (r *statsRing) run(ctx context.Context, every time.Duration) {
	r.tick(time.Now())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.tick(now)
		}
	}
}

// heapMetric is runtime.MemStats.HeapAlloc in runtime/metrics: the heap's
// objects, live or not yet swept.
const heapMetric = "/memory/classes/heap/objects:bytes"

// heapBytes is the heap's size (MemStats.HeapAlloc), read without stopping
// the world: runtime.ReadMemStats does, until every running goroutine
// reaches a safe point, which on two busy cores held every request in
// flight for milliseconds each time it ran.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func (r *statsRing) tick(now time.Time) {
	cur := r.sample()
	cpu, _ := readCPUTimes()
	proc := processCPU()
	first := r.prevAt.IsZero()
	p := Point{Time: now.UTC().Truncate(time.Millisecond), HitRate: -1, LogBuffered: cur.LogBuffered, LogFailing: cur.LogFailing,
		ShipLag: cur.ShipLag, ShipAge: cur.ShipAge.Seconds(), ShipFailing: cur.ShipFailing,
		HookQueued: cur.HookQueued, HookInFlight: cur.HookInFlight, Conns: cur.Conns, Goroutines: runtime.NumGoroutine(),
		RSS: rss(), Ready: cur.Ready, StoreUp: cur.StoreUp}
	p.Heap = heapBytes()
	if !first {
		secs := now.Sub(r.prevAt).Seconds()
		p.RPS = float64(cur.Requests-r.prev.Requests) / secs
		if lookups := (cur.CacheHits - r.prev.CacheHits) + (cur.CacheMisses - r.prev.CacheMisses); lookups > 0 {
			p.HitRate = float64(cur.CacheHits-r.prev.CacheHits) / float64(lookups)
		}
		if len(cur.Latency) == len(r.prev.Latency) {
			diff := make([]uint64, len(cur.Latency))
			for i := range diff {
				diff[i] = cur.Latency[i] - r.prev.Latency[i]
			}
			p.P50 = quantile(cur.LatencyBounds, diff, 0.50) * 1000
			p.P99 = quantile(cur.LatencyBounds, diff, 0.99) * 1000
		}
		p.CPU = cpuBusy(r.prevCPU, cpu)
		p.ProcessCPU = 100 * (proc - r.prevProc).Seconds() / secs
	}
	r.prev, r.prevAt, r.prevCPU, r.prevProc = cur, now, cpu, proc
	var window *EndpointWindow
	if t := r.endpoints.Load(); t != nil {
		window = t.tick(now)
	}
	if first {
		return
	}
	r.mu.Lock()
	if window != nil {
		r.window = window
	}
	r.points = append(r.points, p)
	if len(r.points) > historyLen {
		r.points = r.points[len(r.points)-historyLen:]
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// since returns the points after t, the newest per-endpoint view (nil
// without one) and a channel closed at the next point.
func (r *statsRing) since(t time.Time) ([]Point, *EndpointWindow, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := len(r.points)
	for i > 0 && r.points[i-1].Time.After(t) {
		i--
	}
	return append([]Point(nil), r.points[i:]...), r.window, r.changed
}

// quantile estimates the q-quantile of a histogram by linear interpolation
// inside the bucket holding it (as Prometheus' histogram_quantile does).
func quantile(bounds []float64, counts []uint64, q float64) float64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen float64
	for i, c := range counts {
		if seen+float64(c) >= rank && c > 0 {
			lo := 0.0
			if i > 0 {
				lo = bounds[i-1]
			}
			if i >= len(bounds) {
				return bounds[len(bounds)-1] // beyond the last bound: report the bound
			}
			return lo + (bounds[i]-lo)*(rank-seen)/float64(c)
		}
		seen += float64(c)
	}
	return bounds[len(bounds)-1]
}

type cpuTimes struct{ busy, total uint64 }

// readCPUTimes reads each core's time from /proc/stat (Linux). No library
// is needed for six numbers a line.
func readCPUTimes() ([]cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, err
	}
	var out []cpuTimes
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 || !bytes.HasPrefix(f[0], []byte("cpu")) || len(f[0]) == 3 {
			continue // not a per-core line ("cpu" alone is the sum)
		}
		var t cpuTimes
		for i, v := range f[1:] {
			n, _ := strconv.ParseUint(string(v), 10, 64)
			if i >= 8 {
				break // guest times are already counted in user
			}
			t.total += n
			if i != 3 && i != 4 { // idle, iowait
				t.busy += n
			}
		}
		out = append(out, t)
	}
	return out, nil
}

func cpuBusy(prev, cur []cpuTimes) []float64 {
	if len(prev) != len(cur) {
		return nil
	}
	out := make([]float64, len(cur))
	for i := range cur {
		if dt := cur[i].total - prev[i].total; dt > 0 {
			out[i] = 100 * float64(cur[i].busy-prev[i].busy) / float64(dt)
		}
	}
	return out
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss is the process's resident memory, from /proc/self/statm.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res uint64
	if _, err := fmt.Sscan(string(b), &size, &res); err != nil {
		return 0
	}
	return res * uint64(os.Getpagesize())
}

// errNoStats answers the stats routes of a server given no Sample.
var errNoStats = tsubame.Errorf(tsubame.ENOTFOUND, "this server keeps no live stats")

func (s *Server) statsNow(w http.ResponseWriter, _ *http.Request) {
	if s.stats == nil {
		s.writeStoreError(w, errNoStats)
		return
	}
	points, window, _ := s.stats.since(time.Time{})
	out := map[string]any{"points": points}
	if window != nil {
		out["endpoints"] = window
	}
	writeJSON(w, http.StatusOK, out)
}

// statsStream sends the recent points, then one event per second, as
// server-sent events, until the client leaves or the session ends. After
// the points of each second comes the per-endpoint view, as an event named
// "endpoints".
func (s *Server) statsStream(w http.ResponseWriter, r *http.Request) {
	if s.stats == nil {
		s.writeStoreError(w, errNoStats)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	id := identityOf(r)
	var last time.Time
	for {
		points, window, changed := s.stats.since(last)
		for _, p := range points {
			b, _ := json.Marshal(p)
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return
			}
			last = p.Time
		}
		if window != nil && len(points) > 0 {
			b, _ := json.Marshal(window)
			if _, err := fmt.Fprintf(w, "event: endpoints\ndata: %s\n\n", b); err != nil {
				return
			}
		}
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-changed:
		case <-time.After(5 * time.Second):
		}
		if id.sess != nil && !s.sessionLive(r) {
			return // logged out or expired: stop streaming
		}
	}
}

// sessionLive reports whether the request's session is still valid,
// without counting the stream as activity: an open dashboard does not keep
// an idle session alive.
func (s *Server) sessionLive(r *http.Request) bool {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return false
	}
	sess := s.sessions.peek(c.Value, s.now())
	return sess != nil && s.sessionUser(sess) != nil
}
