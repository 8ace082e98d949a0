package memory

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"tsubame"
)

var _ tsubame.FrequencyCounter = (*Store)(nil)

// freqShards is how many locks the frequency keys are spread over, by a
// hash of the key: concurrent decisions for different visitors rarely wait
// for each other, and never for the store's other locks.
const freqShards = 64

var freqSeed = maphash.MakeSeed()

// frequencies holds the times of Take per key. Like seen (dedupe.go), a
// shard is swept of its expired keys after as many inserts as it kept keys
// at its last sweep (sweepMin at least), and its map rebuilt when a sweep
// leaves fewer than a quarter of its peak: its memory is proportional to
// the visitors seen within the longest window of their line items' caps,
// about 60 bytes a key plus 8 a time. The zero value is ready for use.
type frequencies struct {
	closed atomic.Bool
	shards [freqShards]freqShard
}

type freqShard struct {
	mu      sync.Mutex
	keys    map[string]freqTimes
	inserts int // since the last sweep
	sweepAt int // inserts that trigger the next sweep
	peak    int // the most keys held since the map was made
	_       [64]byte
}

// freqTimes are a key's times in Unix microseconds, ascending, and when the
// last of them leaves the longest window.
type freqTimes struct {
	times   []int64
	expires int64
}

// Take records an impression for key at now if its caps allow one more
// (tsubame.FrequencyCounter). The times live in this process only: this
// backend caps for one node.
func (s *Store) Take(ctx context.Context, key string, caps []tsubame.FrequencyCap, now time.Time) (bool, error) {
	if err := tsubame.ValidateTake(key, caps); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	return s.freq.take(key, caps, now.UnixMicro())
}

func (f *frequencies) take(key string, caps []tsubame.FrequencyCap, now int64) (bool, error) {
	sh := &f.shards[maphash.String(freqSeed, key)%freqShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Checked under the shard's lock: close sets the flag before it takes
	// the locks to drop the maps, so no call revives one.
	if f.closed.Load() {
		return false, errClosed
	}
	e, found := sh.keys[key]
	times, ok := tsubame.TakeFrequency(e.times, caps, now)
	if len(times) == 0 {
		if found {
			delete(sh.keys, key)
		}
		return ok, nil
	}
	if sh.keys == nil {
		sh.keys = make(map[string]freqTimes)
		sh.sweepAt = sweepMin
	}
	sh.keys[key] = freqTimes{times: times, expires: times[len(times)-1] + tsubame.LongestFrequencyWindow(caps)}
	if !found {
		sh.peak = max(sh.peak, len(sh.keys))
		if sh.inserts++; sh.inserts >= sh.sweepAt {
			sh.sweep(now)
		}
	}
	return ok, nil
}

// sweep drops the keys whose times have all left their windows; the caller
// holds the lock.
func (sh *freqShard) sweep(now int64) {
	sh.keys, sh.peak = sweepExpired(sh.keys, sh.peak, func(e freqTimes) bool { return e.expires <= now })
	sh.inserts = 0
	sh.sweepAt = max(sweepMin, len(sh.keys))
}

// close makes later calls fail and drops every key.
func (f *frequencies) close() {
	f.closed.Store(true)
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		sh.keys = nil
		sh.mu.Unlock()
	}
}
