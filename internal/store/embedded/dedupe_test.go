package embedded

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func (s *Store) seenCount(t *testing.T) int {
	t.Helper()
	n := 0
	if err := s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketSeen).Stats().KeyN
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// With a steady stream of new ids the bucket holds about the ids live
// within their ttl, not every id ever seen; an expired id is new again
// before any sweep has taken it.
func TestSeenSweepBoundsTheFile(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), FileName), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s.now = func() time.Time { return time.Unix(0, now.Load()) }
	ctx := t.Context()

	if ok, err := s.FirstSeen(ctx, "early", time.Second); err != nil || !ok {
		t.Fatal(ok, err)
	}
	now.Add(int64(time.Second))
	if ok, err := s.FirstSeen(ctx, "early", time.Second); err != nil || !ok {
		t.Fatalf("expired id (not yet swept) = %v, %v; want new again", ok, err)
	}

	const ttl = time.Second
	const perTick = 100 // ids per 100 ms of the fake clock: 1,000 live at a time
	n := 0
	for range 200 { // 20 s: 20,000 ids, 20 windows
		// Concurrent, as a server's requests are: one Batch takes them all.
		var wg sync.WaitGroup
		for range perTick {
			n++
			id := fmt.Sprint("id-", n)
			wg.Go(func() {
				if ok, err := s.FirstSeen(ctx, id, ttl); err != nil || !ok {
					t.Errorf("%s: %v, %v", id, ok, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		now.Add(int64(100 * time.Millisecond))
	}
	// 4/3 of the live ids, a pass's lag, and the "early" id.
	if held, bound := s.seenCount(t), 2*10*perTick+sweepKeys+1; held > bound {
		t.Fatalf("after %d ids the bucket holds %d, more than %d", n, held, bound)
	}
}
