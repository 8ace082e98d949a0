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
		// Concurrent, as a server's requests are: they share commits.
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
	// About 4/3 of the 1,000 live ids; twice that is a failure.
	held := s.seenCount(t)
	if bound := 2 * 10 * perTick; held > bound {
		t.Fatalf("after %d ids the bucket holds %d, more than %d", n, held, bound)
	}
	t.Logf("after %d ids, %d in the bucket", n, held)
}

// More concurrent calls than one commit takes, half of them repeats of the
// other half's ids: every call is answered, each id is first once.
func TestSeenCommitsQueueAndHandOver(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), FileName), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const ids = 3 * maxSeenCommit / 2
	var firsts [ids]atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * ids {
		wg.Go(func() {
			<-start
			ok, err := s.FirstSeen(t.Context(), fmt.Sprint("id-", i%ids), time.Hour)
			if err != nil {
				t.Error(err)
			}
			if ok {
				firsts[i%ids].Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range firsts {
		if n := firsts[i].Load(); n != 1 {
			t.Fatalf("id %d first %d times", i, n)
		}
	}
	if g := &s.seen; g.busy || len(g.queue) != 0 {
		t.Fatalf("after every call returned: busy %v, %d queued", g.busy, len(g.queue))
	}
}
