package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tsubame"
)

// held returns how many ids the shards hold, expired ones included.
func (s *seen) held() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.ids)
		sh.mu.Unlock()
	}
	return n
}

// With a steady stream of new ids, the memory held stays proportional to the
// ids live within their ttl, not to every id ever seen; after a burst the
// maps give their memory back.
func TestSeenSweepBoundsMemory(t *testing.T) {
	s := New()
	defer s.Close()
	var now int64
	s.seen.clock = func() int64 { return now }
	ctx := context.Background()
	const ttl = time.Second
	const perTick = 1000 // ids per 100 ms of the fake clock: 10,000 live at a time
	n := 0
	for range 1000 { // 100 s: 1,000,000 ids, 100 windows
		for range perTick {
			n++
			if ok, err := s.FirstSeen(ctx, fmt.Sprint("id-", n), ttl); err != nil || !ok {
				t.Fatalf("id %d: %v, %v", n, ok, err)
			}
		}
		now += int64(100 * time.Millisecond)
		if held, bound := s.seen.held(), 2*10*perTick+seenShards*sweepMin; held > bound {
			t.Fatalf("after %d ids the store holds %d, more than %d (twice the live ids plus a sweep's slack)", n, held, bound)
		}
	}
	// A shard that swept away most of its ids rebuilt its map.
	now += int64(time.Hour)
	for i := range seenShards * 2 * sweepMin {
		if _, err := s.FirstSeen(ctx, fmt.Sprint("late-", i), ttl); err != nil {
			t.Fatal(err)
		}
	}
	for i := range s.seen.shards {
		sh := &s.seen.shards[i]
		if sh.peak > 4*sweepMin+len(sh.ids) {
			t.Fatalf("shard %d: peak %d with %d ids held: its map was not rebuilt", i, sh.peak, len(sh.ids))
		}
	}
}

func TestSeenClosed(t *testing.T) {
	s := New()
	if ok, err := s.FirstSeen(context.Background(), "a", time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	_ = s.Close()
	if ok, err := s.FirstSeen(context.Background(), "b", time.Minute); ok || tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("FirstSeen after Close = %v, %v; want an EUNAVAILABLE error", ok, err)
	}
	if n := s.seen.held(); n != 0 {
		t.Fatalf("%d ids held after Close", n)
	}
}
