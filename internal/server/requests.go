package server

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// LatencyBounds are the upper bounds, in seconds, of the request latency
// histogram's buckets; a last bucket holds everything slower.
var LatencyBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

var boundsNS = func() (out [15]int64) {
	for i, b := range LatencyBounds {
		out[i] = int64(b * 1e9)
	}
	return out
}()

// Codes are the status codes counted apart; any other is counted as 0.
var Codes = [numCodes]int{200, 204, 302, 304, 400, 401, 403, 404, 405, 408, 413, 429, 431, 500, 503, 0}

const numCodes = 16

func codeIndex(code int) int {
	switch code {
	case 200:
		return 0
	case 204:
		return 1
	case 302:
		return 2
	case 304:
		return 3
	case 400:
		return 4
	case 401:
		return 5
	case 403:
		return 6
	case 404:
		return 7
	case 405:
		return 8
	case 408:
		return 9
	case 413:
		return 10
	case 429:
		return 11
	case 431:
		return 12
	case 500:
		return 13
	case 503:
		return 14
	}
	return 15
}

// routeStats counts one route's requests by status code and latency:
// two atomic adds per request, no allocation, no lock. The counters are
// sharded by connection so that cores serving different connections do not
// fight over one cache line (which cost 80 ns a request on two cores).
type routeStats struct {
	shards [statShards]statShard
}

const statShards = 8

type statShard struct {
	buckets [numCodes][16]atomic.Uint64 // [code][bucket]
	sumNS   [numCodes]atomic.Int64
	_       [64]byte // keeps the next shard off this one's last cache line
}

func (rs *routeStats) observe(conn uint64, code int, d time.Duration) {
	sh := &rs.shards[conn%statShards]
	c := codeIndex(code)
	ns := int64(d)
	b := 0
	for b < len(boundsNS) && ns > boundsNS[b] {
		b++
	}
	sh.buckets[c][b].Add(1)
	sh.sumNS[c].Add(ns)
}

// Route names of the requests that are not ad tags.
const (
	RouteCallback = "callback"
	RouteWebhook  = "webhook_" // + the platform: webhook_line, webhook_slack
	RouteLib      = "lib"
	RouteJSON     = "json"
	RouteHealth   = "health" // /healthz and /readyz
	RouteOther    = "other"  // unknown paths, hosts and endpoints
)

// requestStats holds a routeStats per route name. Endpoints of the same name
// (in several sites, or across reloads) share one.
type requestStats struct {
	mu     sync.Mutex
	routes map[string]*routeStats
}

func (r *requestStats) get(name string) *routeStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routes == nil {
		r.routes = map[string]*routeStats{}
	}
	rs := r.routes[name]
	if rs == nil {
		rs = &routeStats{}
		r.routes[name] = rs
	}
	return rs
}

// RouteCount is one route and status code's requests: how many fell in each
// latency bucket (LatencyBounds, then the overflow) and their total time.
type RouteCount struct {
	Route   string
	Code    int
	Buckets []uint64
	Sum     time.Duration
}

// Requests returns the request counts so far, by route (sorted) and code;
// codes no request had are left out.
func (s *Server) Requests() []RouteCount {
	s.reqs.mu.Lock()
	names := make([]string, 0, len(s.reqs.routes))
	for name := range s.reqs.routes {
		names = append(names, name)
	}
	s.reqs.mu.Unlock()
	slices.Sort(names)
	var out []RouteCount
	for _, name := range names {
		rs := s.reqs.get(name)
		for c := range Codes {
			rc := RouteCount{Route: name, Code: Codes[c], Buckets: make([]uint64, 16)}
			var n uint64
			for i := range rs.shards {
				sh := &rs.shards[i]
				rc.Sum += time.Duration(sh.sumNS[c].Load())
				for b := range sh.buckets[c] {
					v := sh.buckets[c][b].Load()
					rc.Buckets[b] += v
					n += v
				}
			}
			if n > 0 {
				out = append(out, rc)
			}
		}
	}
	return out
}
