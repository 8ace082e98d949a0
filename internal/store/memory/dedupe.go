package memory

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"tsubame"
)

var _ tsubame.Deduper = (*Store)(nil)

// seenShards is how many locks the event ids are spread over, by a hash of
// the id: concurrent trackers rarely wait for each other, and never for the
// store's placement lock.
const seenShards = 64

// sweepMin is the fewest inserts into a shard between two sweeps of its
// expired ids. A shard is swept after as many inserts as it kept ids at its
// last sweep, or sweepMin if that is more: a sweep costs O(1) per insert,
// amortised, and a shard never holds more than twice the ids it kept at its
// last sweep plus sweepMin.
const sweepMin = 256

// shrinkMin: a map is rebuilt after a sweep that leaves fewer than a quarter
// of the most ids it held, when that was at least shrinkMin. Go's maps keep
// their buckets after deletes, so without it a burst would hold its memory
// for good.
const shrinkMin = 4096

// seen holds the event ids of FirstSeen with their expiry. Its memory is
// not bounded by a count: it is proportional to the ids seen within their
// ttl (up to about twice that, with the sweep's lag), because forgetting a
// live id would count its repeat. An id of n bytes costs about n+50 bytes.
type seen struct {
	seed   maphash.Seed
	closed atomic.Bool
	// clock returns monotonic nanoseconds: a step of the wall clock
	// neither lengthens nor shortens a window.
	clock  func() int64
	shards [seenShards]seenShard
}

type seenShard struct {
	mu      sync.Mutex
	ids     map[string]int64 // id -> when it expires, in clock nanoseconds
	inserts int              // since the last sweep
	sweepAt int              // inserts that trigger the next sweep
	peak    int              // the most ids held since the map was made
	_       [64]byte         // keeps neighbouring shards' locks off one cache line
}

func (s *seen) init() {
	s.seed = maphash.MakeSeed()
	base := time.Now()
	s.clock = func() int64 { return int64(time.Since(base)) }
}

// FirstSeen records id and reports whether it is new within ttl. The ids
// live in this process only: this backend dedupes for one node.
func (s *Store) FirstSeen(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if err := tsubame.ValidateFirstSeen(id, ttl); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	return s.seen.firstSeen(id, ttl)
}

func (s *seen) firstSeen(id string, ttl time.Duration) (bool, error) {
	sh := &s.shards[maphash.String(s.seed, id)%seenShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Checked under the shard's lock: close sets the flag before it
	// takes the locks to drop the maps, so no call revives one.
	if s.closed.Load() {
		return false, errClosed
	}
	now := s.clock()
	if exp, ok := sh.ids[id]; ok && now < exp {
		return false, nil
	}
	if sh.ids == nil {
		sh.ids = make(map[string]int64)
		sh.sweepAt = sweepMin
	}
	exp := now + int64(ttl)
	if exp < now {
		exp = math.MaxInt64
	}
	sh.ids[id] = exp
	sh.peak = max(sh.peak, len(sh.ids))
	if sh.inserts++; sh.inserts >= sh.sweepAt {
		sh.sweep(now)
	}
	return true, nil
}

// sweep drops the expired ids; the caller holds the lock.
func (sh *seenShard) sweep(now int64) {
	sh.ids, sh.peak = sweepExpired(sh.ids, sh.peak, func(exp int64) bool { return exp <= now })
	sh.inserts = 0
	sh.sweepAt = max(sweepMin, len(sh.ids))
}

// sweepExpired deletes the entries of m that expired reports, and returns
// m with the most entries it held since it was made (peak, updated), or a
// new map of the rest when they are fewer than a quarter of a peak of at
// least shrinkMin (see there).
func sweepExpired[V any](m map[string]V, peak int, expired func(V) bool) (map[string]V, int) {
	for k, v := range m {
		if expired(v) {
			delete(m, k)
		}
	}
	n := len(m)
	if peak < shrinkMin || n >= peak/4 {
		return m, peak
	}
	kept := make(map[string]V, n)
	for k, v := range m {
		kept[k] = v
	}
	return kept, n
}

// close makes later calls fail and drops every id.
func (s *seen) close() {
	s.closed.Store(true)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.ids = nil
		sh.mu.Unlock()
	}
}

// Seen reports whether each id is recorded and within its window.
func (s *Store) Seen(ctx context.Context, ids []string) ([]bool, error) {
	if err := tsubame.ValidateSeen(ids); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		ok, err := s.seen.lookup(id)
		if err != nil {
			return nil, err
		}
		out[i] = ok
	}
	return out, nil
}

func (s *seen) lookup(id string) (bool, error) {
	sh := &s.shards[maphash.String(s.seed, id)%seenShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.closed.Load() {
		return false, errClosed
	}
	exp, ok := sh.ids[id]
	return ok && s.clock() < exp, nil
}
