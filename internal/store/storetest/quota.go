package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
)

// RunQuota runs the Quotas part of the suite. open returns three handles on
// the same, empty data, as three nodes sharing the store would hold them
// (three connections to one Redis; a store of one process may return
// itself three times), and arranges for them to be closed when the test
// ends.
func RunQuota(t *testing.T, open func(t *testing.T) []tsubame.Quotas) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, qs []tsubame.Quotas)
	}{
		{"LeaseUpToTheLimit", testQuotaLimit},
		{"ReleaseUnusedGivesBack", testQuotaUnused},
		{"ReleaseUsedStaysCommitted", testQuotaUsed},
		{"ReleaseMoreThanLeased", testQuotaOverRelease},
		{"ExpiredLeaseIsSettled", testQuotaExpiry},
		{"QuotaKeysIndependent", testQuotaIndependent},
		{"ReleaseIdempotent", testQuotaIdempotent},
		{"ReleaseIDsKeptPerHolder", testQuotaReleaseIDsBounded},
		{"LeaseReportsWhatIsHeld", testQuotaHeld},
		{"IdleHoldersIDsBounded", testQuotaIdleHolders},
		{"QuotaRejectsInvalid", testQuotaInvalid},
		{"NeverOverTheLimitUnderRace", testQuotaRace},
		{"DebitPastTheLimit", testQuotaDebit},
		{"ExpireDropsTheKeyAfterItsTime", testQuotaExpire},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, open(t)) })
	}
}

// leaseTTL is long enough that no lease of the tests expires unless it
// means to.
const leaseTTL = 10 * time.Minute

func lease(t *testing.T, q tsubame.Quotas, key, holder string, limit, want int64) int64 {
	t.Helper()
	n, _ := leaseHeld(t, q, key, holder, limit, want)
	return n
}

// leaseHeld is lease, returning also the holder's whole lease.
func leaseHeld(t *testing.T, q tsubame.Quotas, key, holder string, limit, want int64) (granted, held int64) {
	t.Helper()
	n, h, err := q.Lease(ctx(t), key, holder, limit, want, leaseTTL)
	if err != nil {
		t.Fatalf("Lease(%q, %q, %d, %d): %v", key, holder, limit, want, err)
	}
	if n < 0 || n > want || h < n {
		t.Fatalf("Lease(%q, %q, %d, %d) = %d granted, %d held", key, holder, limit, want, n, h)
	}
	return n, h
}

// releaseSeq numbers the releases of the helper: each has an id of its own.
var releaseSeq atomic.Int64

func newReleaseID() string { return "r-" + strconv.FormatInt(releaseSeq.Add(1), 10) }

func release(t *testing.T, q tsubame.Quotas, key, holder string, used, unused int64) {
	t.Helper()
	releaseID(t, q, key, holder, newReleaseID(), used, unused)
}

func releaseID(t *testing.T, q tsubame.Quotas, key, holder, id string, used, unused int64) {
	t.Helper()
	if err := q.Release(ctx(t), key, holder, id, used, unused); err != nil {
		t.Fatalf("Release(%q, %q, %q, %d, %d): %v", key, holder, id, used, unused, err)
	}
}

func wantCommitted(t *testing.T, q tsubame.Quotas, key string, settled, outstanding int64) {
	t.Helper()
	s, o, err := q.Committed(ctx(t), key)
	if err != nil || s != settled || o != outstanding {
		t.Fatalf("Committed(%q) = %d settled, %d outstanding, %v; want %d, %d", key, s, o, err, settled, outstanding)
	}
}

// Leases through three handles are granted up to the limit, the last one
// cut to what is left, then 0.
func testQuotaLimit(t *testing.T, qs []tsubame.Quotas) {
	const key = "li-1/imp/total"
	wantCommitted(t, qs[0], key, 0, 0)
	for i, want := range []int64{4, 4, 4, 4, 4, 4} {
		got := lease(t, qs[i%3], key, fmt.Sprint("node-", i%3), 10, want)
		if exp := min(4, max(0, 10-4*int64(i))); got != exp {
			t.Fatalf("lease %d of 4 with a limit of 10: %d granted, want %d", i, got, exp)
		}
	}
	wantCommitted(t, qs[1], key, 0, 10)
	// A lease of nothing on a key never leased grants nothing.
	if n := lease(t, qs[2], "li-1/imp/other", "node-0", 10, 0); n != 0 {
		t.Fatalf("a lease of 0 granted %d", n)
	}
	// A limit of 0, or one under what is committed, grants nothing.
	if n := lease(t, qs[2], key, "node-3", 0, 5); n != 0 {
		t.Fatalf("a limit of 0 granted %d", n)
	}
	if n := lease(t, qs[2], key, "node-3", 5, 5); n != 0 {
		t.Fatalf("a limit of 5 with 10 committed granted %d", n)
	}
	// A higher limit grants the difference.
	if n := lease(t, qs[0], key, "node-0", 12, 5); n != 2 {
		t.Fatalf("the limit raised from 10 to 12 granted %d, want 2", n)
	}
	wantCommitted(t, qs[2], key, 0, 12)
}

// Unused units go back: a later lease, of any holder, gets them.
func testQuotaUnused(t *testing.T, qs []tsubame.Quotas) {
	const key = "camp-1/spend/2026-11-25"
	if n := lease(t, qs[0], key, "a", 100, 100); n != 100 {
		t.Fatalf("granted %d of 100", n)
	}
	release(t, qs[1], key, "a", 0, 30)
	wantCommitted(t, qs[2], key, 0, 70)
	if n := lease(t, qs[2], key, "b", 100, 50); n != 30 {
		t.Fatalf("after 30 given back a lease of 50 got %d, want 30", n)
	}
	release(t, qs[0], key, "a", 0, 70) // all of a's lease
	release(t, qs[0], key, "b", 0, 30)
	wantCommitted(t, qs[1], key, 0, 0)
	// a's lease is over: a release of it is a conflict, one of nothing a
	// no-op.
	if err := qs[1].Release(ctx(t), key, "a", newReleaseID(), 1, 0); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
		t.Fatalf("Release without a lease: %v, want an ECONFLICT error", err)
	}
	release(t, qs[1], key, "a", 0, 0)
	if n := lease(t, qs[1], key, "c", 100, 1000); n != 100 {
		t.Fatalf("everything given back, a lease got %d, want 100", n)
	}
}

// Used units are settled for good: no lease gets them again.
func testQuotaUsed(t *testing.T, qs []tsubame.Quotas) {
	const key = "li-2/imp/total"
	lease(t, qs[0], key, "a", 10, 6)
	lease(t, qs[1], key, "b", 10, 6) // 4
	release(t, qs[2], key, "a", 2, 0)
	wantCommitted(t, qs[0], key, 2, 8)
	release(t, qs[2], key, "a", 3, 1)
	release(t, qs[2], key, "b", 4, 0)
	wantCommitted(t, qs[0], key, 9, 0)
	if n := lease(t, qs[1], key, "a", 10, 10); n != 1 {
		t.Fatalf("9 settled of 10, a lease got %d, want 1", n)
	}
	release(t, qs[1], key, "a", 1, 0)
	wantCommitted(t, qs[0], key, 10, 0)
	if n := lease(t, qs[0], key, "b", 10, 10); n != 0 {
		t.Fatalf("all settled, a lease got %d", n)
	}
}

// A release of more than the lease fails with EINVALID and changes nothing.
func testQuotaOverRelease(t *testing.T, qs []tsubame.Quotas) {
	const key = "li-3/imp/total"
	lease(t, qs[0], key, "a", 10, 5)
	for _, r := range [][2]int64{{3, 3}, {6, 0}, {0, 6}, {5, 1}} {
		if err := qs[1].Release(ctx(t), key, "a", newReleaseID(), r[0], r[1]); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Fatalf("Release of %d used, %d unused of a lease of 5: %v, want an EINVALID error", r[0], r[1], err)
		}
	}
	wantCommitted(t, qs[2], key, 0, 5)
	release(t, qs[2], key, "a", 2, 3) // exactly the lease
	wantCommitted(t, qs[2], key, 2, 0)
}

// A lease past its expiry is settled, never given back; a release of it
// then conflicts and changes nothing. Time moves by the store's clock, so
// the test polls, with a generous deadline, rather than asserting a time.
func testQuotaExpiry(t *testing.T, qs []tsubame.Quotas) {
	const key = "camp-2/spend/total"
	if n, h, err := qs[0].Lease(ctx(t), key, "short", 100, 7, 50*time.Millisecond); err != nil || n != 7 || h != 7 {
		t.Fatalf("Lease = %d (%d held), %v; want 7", n, h, err)
	}
	lease(t, qs[1], key, "long", 100, 3)
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, o, err := qs[2].Committed(ctx(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if s+o != 10 {
			t.Fatalf("Committed = %d settled, %d outstanding; the sum moved from 10", s, o)
		}
		if s == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a 50 ms lease still outstanding after 20 s: %d settled, %d outstanding", s, o)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantCommitted(t, qs[0], key, 7, 3)
	if err := qs[0].Release(ctx(t), key, "short", newReleaseID(), 0, 7); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
		t.Fatalf("Release of an expired lease: %v, want an ECONFLICT error", err)
	}
	wantCommitted(t, qs[1], key, 7, 3)
	if n := lease(t, qs[2], key, "short", 100, 200); n != 90 {
		t.Fatalf("a new lease of the expired holder got %d, want 90", n)
	}
}

// A release applied again, by id, changes nothing and returns nil: in
// sequence, from another handle, concurrently, and after the lease ended.
// Another id applies.
func testQuotaIdempotent(t *testing.T, qs []tsubame.Quotas) {
	const key = "camp-4/spend/total"
	lease(t, qs[0], key, "a", 100, 20)
	releaseID(t, qs[0], key, "a", "r1", 2, 3)
	releaseID(t, qs[0], key, "a", "r1", 2, 3)
	releaseID(t, qs[1], key, "a", "r1", 2, 3)
	wantCommitted(t, qs[2], key, 2, 15)
	releaseID(t, qs[1], key, "a", "r2", 1, 0) // another id applies
	wantCommitted(t, qs[2], key, 3, 14)
	// The same id from two handles at once is applied once.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = qs[i].Release(context.Background(), key, "a", "r3", 4, 0) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("concurrent retries of one release: %v, %v; want nil, nil", errs[0], errs[1])
	}
	wantCommitted(t, qs[2], key, 7, 10)
	// A retry of the release that ended the lease is still a no-op, not a
	// conflict; so is one of an older release.
	releaseID(t, qs[0], key, "a", "r4", 5, 5)
	wantCommitted(t, qs[1], key, 12, 0)
	releaseID(t, qs[2], key, "a", "r4", 5, 5)
	releaseID(t, qs[2], key, "a", "r1", 2, 3)
	wantCommitted(t, qs[1], key, 12, 0)
	// Ids are per holder: b's r1 is its own.
	lease(t, qs[0], key, "b", 100, 10)
	releaseID(t, qs[1], key, "b", "r1", 2, 3)
	wantCommitted(t, qs[2], key, 14, 5)
}

// A holder's last QuotaReleaseIDs releases are kept: a retry of any of
// them is a no-op, one of an older release applies again.
func testQuotaReleaseIDsBounded(t *testing.T, qs []tsubame.Quotas) {
	const key = "camp-5/spend/total"
	lease(t, qs[0], key, "a", 1000, 1000)
	for i := range tsubame.QuotaReleaseIDs + 1 {
		releaseID(t, qs[i%3], key, "a", fmt.Sprint("id-", i), 1, 0)
	}
	n := int64(tsubame.QuotaReleaseIDs + 1)
	wantCommitted(t, qs[0], key, n, 1000-n)
	for i := 1; i <= tsubame.QuotaReleaseIDs; i++ {
		releaseID(t, qs[i%3], key, "a", fmt.Sprint("id-", i), 1, 0)
	}
	wantCommitted(t, qs[0], key, n, 1000-n)
	releaseID(t, qs[1], key, "a", "id-0", 1, 0) // forgotten: applies
	wantCommitted(t, qs[0], key, n+1, 1000-n-1)
}

// Keys do not share units.
func testQuotaIndependent(t *testing.T, qs []tsubame.Quotas) {
	for i := range 5 {
		key := fmt.Sprint("li-", i, "/imp/2026-11-25")
		if n := lease(t, qs[i%3], key, "a", 3, 5); n != 3 {
			t.Fatalf("%s: granted %d, want 3", key, n)
		}
	}
	for i := range 5 {
		wantCommitted(t, qs[0], fmt.Sprint("li-", i, "/imp/2026-11-25"), 0, 3)
	}
}

func testQuotaInvalid(t *testing.T, qs []tsubame.Quotas) {
	q := qs[0]
	long := strings.Repeat("k", tsubame.MaxQuotaKeyLength+1)
	longHolder := strings.Repeat("h", tsubame.MaxQuotaHolderLength+1)
	for _, c := range []struct {
		name         string
		key, holder  string
		id           string
		limit, want  int64
		ttl          time.Duration
		used, unused int64
		// which calls the arguments break
		lease, release, committed bool
	}{
		{name: "empty key", key: "", holder: "a", limit: 1, want: 1, ttl: time.Minute, lease: true, release: true, committed: true},
		{name: "long key", key: long, holder: "a", limit: 1, want: 1, ttl: time.Minute, lease: true, release: true, committed: true},
		{name: "empty holder", key: "k", holder: "", limit: 1, want: 1, ttl: time.Minute, lease: true, release: true},
		{name: "long holder", key: "k", holder: longHolder, limit: 1, want: 1, ttl: time.Minute, lease: true, release: true},
		{name: "negative limit", key: "k", holder: "a", limit: -1, want: 1, ttl: time.Minute, lease: true},
		{name: "limit too large", key: "k", holder: "a", limit: tsubame.MaxQuotaUnits + 1, want: 1, ttl: time.Minute, lease: true},
		{name: "negative want", key: "k", holder: "a", limit: 1, want: -1, ttl: time.Minute, lease: true},
		{name: "zero ttl", key: "k", holder: "a", limit: 1, want: 1, ttl: 0, lease: true},
		{name: "negative ttl", key: "k", holder: "a", limit: 1, want: 1, ttl: -time.Second, lease: true},
		{name: "ttl too long", key: "k", holder: "a", limit: 1, want: 1, ttl: tsubame.MaxLeaseTTL + time.Second, lease: true},
		{name: "empty id", key: "k", holder: "a", id: "-", used: 1, release: true},
		{name: "long id", key: "k", holder: "a", id: strings.Repeat("i", tsubame.MaxQuotaReleaseIDLength+1), used: 1, release: true},
		{name: "negative used", key: "k", holder: "a", used: -1, release: true},
		{name: "negative unused", key: "k", holder: "a", unused: -1, release: true},
		{name: "unused too large", key: "k", holder: "a", unused: tsubame.MaxQuotaUnits + 1, release: true},
	} {
		if c.lease {
			if n, _, err := q.Lease(ctx(t), c.key, c.holder, c.limit, c.want, c.ttl); n != 0 || tsubame.ErrorCode(err) != tsubame.EINVALID {
				t.Errorf("%s: Lease = %d, %v; want 0 and an EINVALID error", c.name, n, err)
			}
		}
		if c.release {
			id := c.id
			switch id {
			case "":
				id = newReleaseID()
			case "-":
				id = ""
			}
			if err := q.Release(ctx(t), c.key, c.holder, id, c.used, c.unused); tsubame.ErrorCode(err) != tsubame.EINVALID {
				t.Errorf("%s: Release: %v, want an EINVALID error", c.name, err)
			}
		}
		if c.committed {
			if _, _, err := q.Committed(ctx(t), c.key); tsubame.ErrorCode(err) != tsubame.EINVALID {
				t.Errorf("%s: Committed: %v, want an EINVALID error", c.name, err)
			}
		}
	}
	// The longest key and holder, and the largest limit, are valid.
	key := strings.Repeat("k", tsubame.MaxQuotaKeyLength)
	holder := strings.Repeat("h", tsubame.MaxQuotaHolderLength)
	if n := lease(t, q, key, holder, tsubame.MaxQuotaUnits, tsubame.MaxQuotaUnits); n != tsubame.MaxQuotaUnits {
		t.Fatalf("a lease of the largest limit got %d, want %d", n, int64(tsubame.MaxQuotaUnits))
	}
	releaseID(t, qs[1], key, holder, strings.Repeat("i", tsubame.MaxQuotaReleaseIDLength), tsubame.MaxQuotaUnits-1, 1)
	wantCommitted(t, qs[2], key, tsubame.MaxQuotaUnits-1, 0)
	wantCommitted(t, q, "k", 0, 0) // nothing recorded by the invalid calls
}

// Three handles of eight goroutines each lease random slices of one limit of
// 500, spend part and give part back, until none is left: the units in hand
// and what the store counts as committed never exceed 500, and what it
// settles is exactly what the goroutines said they used.
func testQuotaRace(t *testing.T, qs []tsubame.Quotas) {
	const (
		key        = "camp-9/spend/total"
		limit      = 500
		goroutines = 8
	)
	var (
		inHand  atomic.Int64 // granted and not yet released, by the goroutines' count
		used    atomic.Int64
		granted atomic.Int64
		over    atomic.Int64 // the most in hand seen above the limit
		done    = make(chan struct{})
		wg      sync.WaitGroup
		monitor sync.WaitGroup
	)
	samples := 0
	monitor.Go(func() {
		for {
			s, o, err := qs[0].Committed(context.Background(), key)
			if err != nil {
				t.Error(err)
				return
			}
			if s+o > limit {
				t.Errorf("Committed = %d settled + %d outstanding, over the limit of %d", s, o, limit)
				return
			}
			samples++
			select {
			case <-done:
				return
			default:
			}
		}
	})
	for h, q := range qs {
		for g := range goroutines {
			wg.Go(func() {
				holder := "node-" + strconv.Itoa(h) + "-" + strconv.Itoa(g)
				rng := rand.New(rand.NewPCG(uint64(h), uint64(g)))
				var mine int64
				seq := 0
				nextID := func() string { seq++; return holder + "/" + strconv.Itoa(seq) }
				for refused := 0; refused < 3; {
					n, held, err := q.Lease(context.Background(), key, holder, limit, 1+rng.Int64N(7), leaseTTL)
					if err != nil {
						t.Error(err)
						return
					}
					if held != mine+n {
						t.Errorf("%s holds %d by its count, %d by the store's", holder, mine+n, held)
						return
					}
					if n == 0 {
						refused++ // others may still give units back
					}
					granted.Add(n)
					if h := inHand.Add(n); h > limit {
						over.Store(h)
					}
					mine += n
					if mine == 0 || rng.IntN(2) == 0 {
						continue // spend on, with a bigger lease
					}
					u := rng.Int64N(mine + 1)
					un := rng.Int64N(mine - u + 1)
					inHand.Add(-(u + un)) // before the store lowers its count
					if err := q.Release(context.Background(), key, holder, nextID(), u, un); err != nil {
						t.Error(err)
						return
					}
					used.Add(u)
					mine -= u + un
				}
				u := rng.Int64N(mine + 1)
				inHand.Add(-mine)
				if err := q.Release(context.Background(), key, holder, nextID(), u, mine-u); err != nil {
					t.Error(err)
				}
				used.Add(u)
			})
		}
	}
	wg.Wait()
	close(done)
	monitor.Wait()
	if h := over.Load(); h != 0 {
		t.Errorf("%d units in hand at once, over the limit of %d", h, limit)
	}
	s, o, err := qs[2].Committed(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if o != 0 || s != used.Load() || s > limit {
		t.Fatalf("after every lease was released: %d settled, %d outstanding; want %d settled (the units used), at most %d, and none outstanding", s, o, used.Load(), limit)
	}
	t.Logf("%d units granted, %d used, %d samples of Committed", granted.Load(), s, samples)
}

// BenchLease measures Lease of one unit, each goroutine on a key and
// holder of its own (nodes spend many line items at once), with a limit it
// never reaches.
func BenchLease(b *testing.B, q tsubame.Quotas, parallelism int) {
	bctx := context.Background()
	var goroutine atomic.Int64
	run := time.Now().UnixNano()
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		g := goroutine.Add(1)
		key := fmt.Sprintf("bench-%d-%d/imp/total", run, g)
		holder := fmt.Sprint("node-", g)
		for pb.Next() {
			if n, _, err := q.Lease(bctx, key, holder, tsubame.MaxQuotaUnits, 1, time.Minute); err != nil || n != 1 {
				b.Errorf("Lease(%s) = %d, %v; want 1", key, n, err)
				return
			}
		}
	})
}

// Lease reports the holder's whole lease: what its grants added up to, less
// what it released; after a lease expired and was settled, only what the
// new call granted; and a lease of 0 units says what is held without
// changing it.
func testQuotaHeld(t *testing.T, qs []tsubame.Quotas) {
	const key = "li-held/imp/total"
	if n, h := leaseHeld(t, qs[0], key, "a", 100, 5); n != 5 || h != 5 {
		t.Fatalf("first lease: %d granted, %d held", n, h)
	}
	if n, h := leaseHeld(t, qs[1], key, "a", 100, 7); n != 7 || h != 12 {
		t.Fatalf("second lease: %d granted, %d held; want 7 and 12", n, h)
	}
	if n, h := leaseHeld(t, qs[2], key, "b", 100, 3); n != 3 || h != 3 {
		t.Fatalf("another holder: %d granted, %d held; want 3 and 3", n, h)
	}
	release(t, qs[0], key, "a", 2, 4)
	if n, h := leaseHeld(t, qs[1], key, "a", 100, 0); n != 0 || h != 6 {
		t.Fatalf("after a release of 6: %d granted, %d held; want 0 and 6", n, h)
	}
	if n, h := leaseHeld(t, qs[2], key, "c", 100, 0); n != 0 || h != 0 {
		t.Fatalf("a holder without a lease: %d granted, %d held", n, h)
	}
	// A lease the store settled at its expiry is gone from what is held.
	if _, _, err := qs[0].Lease(ctx(t), key, "short", 100, 4, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for { // waited for by Committed, which renews nothing
		if _, o, err := qs[2].Committed(ctx(t), key); err != nil || o == 9 {
			break // a's 6 and b's 3: the 4 expired
		}
		if time.Now().After(deadline) {
			t.Fatal("a lease of 50 ms still outstanding after 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, h := leaseHeld(t, qs[1], key, "short", 100, 1); n != 1 || h != 1 {
		t.Fatalf("after its lease expired: %d granted, %d held; want 1 and 1", n, h)
	}
}

// A key keeps the release ids of the last QuotaIdleHolders holders without
// a lease: an older one's retry of the release that ended its lease is
// ECONFLICT (there is no lease to apply it to), never applied twice; a
// recent one's is a no-op; a holder with a lease keeps its ids whatever
// the others do.
func testQuotaIdleHolders(t *testing.T, qs []tsubame.Quotas) {
	const key = "li-idle/imp/total"
	lease(t, qs[0], key, "busy", 1000, 10)
	releaseID(t, qs[0], key, "busy", "busy-1", 1, 0)
	for i := range tsubame.QuotaIdleHolders + 2 {
		holder := fmt.Sprint("gone-", i)
		q := qs[i%len(qs)]
		lease(t, q, key, holder, 1000, 2)
		releaseID(t, q, key, holder, holder+"/end", 1, 1) // ends its lease
	}
	for i, want := range map[int]string{0: tsubame.ECONFLICT, 1: tsubame.ECONFLICT, 2: "", tsubame.QuotaIdleHolders + 1: ""} {
		holder := fmt.Sprint("gone-", i)
		err := qs[1].Release(ctx(t), key, holder, holder+"/end", 1, 1)
		if tsubame.ErrorCode(err) != want {
			t.Errorf("retry of %s's last release: %v, want %q", holder, err, want)
		}
	}
	if err := qs[2].Release(ctx(t), key, "busy", "busy-1", 1, 0); err != nil {
		t.Errorf("retry of a leasing holder's release: %v, want a no-op", err)
	}
	n := int64(tsubame.QuotaIdleHolders + 2)
	wantCommitted(t, qs[0], key, 1+n, 9) // nothing applied twice
}

// A debit settles units no lease holds, even past the limit, once per id
// (a holder's release ids), with or without a lease of the holder's; the
// limit then leaves that much less to lease.
func testQuotaDebit(t *testing.T, qs []tsubame.Quotas) {
	const key = "camp-9/spend/total"
	debit := func(q tsubame.Quotas, holder, id string, units int64) {
		t.Helper()
		if err := q.Debit(ctx(t), key, holder, id, units); err != nil {
			t.Fatalf("Debit(%s, %s, %d): %v", holder, id, units, err)
		}
	}
	lease(t, qs[0], key, "a", 100, 100)
	debit(qs[1], "a", "d1", 7) // past the limit: 107 committed
	debit(qs[2], "a", "d1", 7) // a retry
	debit(qs[1], "c", "d1", 3) // another holder's, without a lease
	wantCommitted(t, qs[0], key, 10, 100)
	if got := lease(t, qs[1], key, "b", 100, 100); got != 0 {
		t.Fatalf("%d units leased with 110 of 100 committed", got)
	}
	releaseID(t, qs[0], key, "a", "r1", 60, 0) // a's lease goes on after its debit
	if got := lease(t, qs[1], key, "b", 100, 100); got != 0 {
		t.Fatalf("%d units leased with 110 of 100 committed", got)
	}
	releaseID(t, qs[0], key, "a", "r2", 0, 40)
	wantCommitted(t, qs[2], key, 70, 0)
	if got := lease(t, qs[1], key, "b", 100, 100); got != 30 {
		t.Fatalf("%d units leased with 70 of 100 committed, want 30", got)
	}
	// The same debit from two handles at once is applied once.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = qs[i].Debit(context.Background(), key, "c", "d2", 5) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("concurrent retries of one debit: %v, %v", errs[0], errs[1])
	}
	wantCommitted(t, qs[2], key, 75, 30)
	for _, bad := range []struct {
		holder, id string
		units      int64
	}{{"", "d9", 1}, {"a", "", 1}, {"a", "d9", 0}, {"a", "d9", -1}, {"a", "d9", tsubame.MaxQuotaUnits + 1}} {
		if err := qs[0].Debit(ctx(t), key, bad.holder, bad.id, bad.units); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("Debit(%q, %q, %d): %v, want EINVALID", bad.holder, bad.id, bad.units, err)
		}
	}
	wantCommitted(t, qs[1], key, 75, 30)
}

// A key Expire gave a time to stays until then, through every handle, and
// is dropped after it (settled units and leases with it, so that a new
// lease starts from nothing); Expire makes no key. The store may drop a
// key any time after its time: the test waits for it, writing another key
// meanwhile (a store may sweep on writes).
func testQuotaExpire(t *testing.T, qs []tsubame.Quotas) {
	const day, other, never = "li-1/imp/2026-11-20", "li-1/imp/2026-11-21", "li-1/imp/2026-11-22"
	lease(t, qs[0], day, "node-0", 100, 10)
	release(t, qs[0], day, "node-0", 6, 0)
	lease(t, qs[1], other, "node-1", 100, 5)
	if err := qs[1].Expire(ctx(t), day, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := qs[2].Expire(ctx(t), never, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		wantCommitted(t, q, day, 6, 4) // not yet
		wantCommitted(t, q, never, 0, 0)
	}
	// A later call moves the time: to the past, and the key goes.
	if err := qs[2].Expire(ctx(t), day, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	leased := int64(5)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		leased += lease(t, qs[0], other, "node-0", 100, 1)
		s, o, err := qs[1].Committed(ctx(t), day)
		if err != nil {
			t.Fatal(err)
		}
		if s == 0 && o == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a key past its time still holds %d settled, %d outstanding", s, o)
		}
	}
	// The others are untouched; a lease of the dropped key starts anew.
	wantCommitted(t, qs[0], other, 0, leased)
	if n := lease(t, qs[1], day, "node-1", 100, 100); n != 100 {
		t.Fatalf("a lease of the dropped key granted %d of its limit of 100", n)
	}
	if n := lease(t, qs[2], never, "node-2", 3, 3); n != 3 {
		t.Fatalf("a key Expire named before it was made granted %d of 3", n)
	}
}
