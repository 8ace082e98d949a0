package budget_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/budget"
	"tsubame/internal/store/memory"
)

// failover is a Quotas that behaves as a Redis master whose replica stops
// receiving its writes at Cut and is promoted at Promote: every write
// after Cut is forgotten. It keeps the keys in tsubame.QuotaState, as the
// stores that keep them themselves do, on the test's clock.
type failover struct {
	now func() time.Time

	mu      sync.Mutex
	keys    map[string]*tsubame.QuotaState
	replica map[string]*tsubame.QuotaState // the replica's copy, from Cut; nil before
	granted int64                          // units granted since Cut: what the promotion forgets at most
}

func newFailover(now func() time.Time) *failover {
	return &failover{now: now, keys: map[string]*tsubame.QuotaState{}}
}

func copyState(q *tsubame.QuotaState) *tsubame.QuotaState {
	c := &tsubame.QuotaState{Settled: q.Settled, Leases: slices.Clone(q.Leases)}
	for _, r := range q.Released {
		c.Released = append(c.Released, tsubame.QuotaReleased{Holder: r.Holder, IDs: slices.Clone(r.IDs)})
	}
	return c
}

// Cut stops the replica: what it has now is what the promotion keeps.
func (f *failover) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replica = map[string]*tsubame.QuotaState{}
	for k, q := range f.keys {
		f.replica[k] = copyState(q)
	}
	f.granted = 0
}

// Promote makes the replica the master, and returns the units granted
// since Cut, which it does not know of.
func (f *failover) Promote() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys, f.replica = f.replica, nil
	return f.granted
}

func (f *failover) state(key string) *tsubame.QuotaState {
	q := f.keys[key]
	if q == nil {
		q = &tsubame.QuotaState{}
		f.keys[key] = q
	}
	return q
}

func (f *failover) Lease(ctx context.Context, key, holder string, limit, want int64, ttl time.Duration) (int64, int64, error) {
	if err := tsubame.ValidateLease(key, holder, limit, want, ttl); err != nil {
		return 0, 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.state(key)
	now := f.now().UnixNano()
	got := q.Lease(holder, limit, want, now, now+int64(ttl))
	if f.replica != nil {
		f.granted += got
	}
	return got, q.Held(holder), nil
}

func (f *failover) Release(ctx context.Context, key, holder, id string, used, unused int64) error {
	if err := tsubame.ValidateRelease(key, holder, id, used, unused); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state(key).Release(holder, id, used, unused, f.now().UnixNano())
}

func (f *failover) Debit(ctx context.Context, key, holder, id string, units int64) error {
	if err := tsubame.ValidateDebit(key, holder, id, units); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state(key).Debit(holder, id, units, f.now().UnixNano())
	return nil
}

func (f *failover) Committed(ctx context.Context, key string) (int64, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.state(key)
	q.Expire(f.now().UnixNano())
	return q.Settled, q.Outstanding(), nil
}

// Expire keeps every key: the test's keys outlive it.
func (f *failover) Expire(context.Context, string, time.Time) error { return nil }

// A failover to a replica that missed the last writes costs at most what
// those writes granted, however much the nodes had reserved: two nodes
// on an impression limit of 3,000, every decision shown and held for its
// 10-minute reservation, the replica cut off for four rounds of leases
// and then promoted. The store used to come back holding less than the
// nodes counted on, and each node took the store's word for its whole
// lease into its hand again, though most of it backed reservations it had
// made: it spent its lease twice.
func TestFailoverForgettingWritesSpendsNoLeaseTwice(t *testing.T) {
	clk := newClock()
	fo := newFailover(clk.Now)
	seen := memory.New()
	t.Cleanup(func() { _ = seen.Close() })
	set := limitedSet(tsubame.ImpressionLimits{Total: 3000}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	var nodes []*node
	for i := range 2 {
		g, err := budget.NewLedger(fo, seen, budget.LedgerOptions{Holder: fmt.Sprint("node-", i), Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		c := budget.New(seen, budget.Options{Ledger: g})
		_, ls := lines(t, set, c)
		nodes = append(nodes, &node{ledger: g, counters: c, line: ls["li"], out: seen})
	}
	ctx := t.Context()
	shown := 0
	// round: every node decides until its hand is empty, then its loop
	// runs once, and the clock moves on a second. Every decision is shown,
	// but its bill comes with a delay of 100 rounds (an exchange that
	// bills late): the leases hold what the open bids took when the
	// failover comes.
	type open struct {
		n     *node
		id    string
		round int
	}
	var pending []open // decided, not yet billed, in order
	rounds := 0
	round := func() int {
		n := 0
		rounds++
		for _, nd := range nodes {
			for {
				id := nd.decide(clk.Now(), 10*time.Minute)
				if id == "" {
					break
				}
				pending = append(pending, open{nd, id, rounds})
				n++
			}
		}
		for len(pending) > 0 && pending[0].round <= rounds-100 {
			pending[0].n.show(t, pending[0].id)
			pending = pending[1:]
		}
		for _, nd := range nodes {
			nd.ledger.Tick(ctx)
		}
		clk.Advance(time.Second)
		return n
	}
	for shown < 1500 {
		shown += round()
	}
	fo.Cut()
	for range 4 {
		shown += round()
	}
	forgotten := fo.Promote()
	// The nodes go on until the limit stops them, and past every
	// reservation's end.
	for range 20 * 60 {
		shown += round()
	}
	if shown > 3000+int(forgotten) {
		t.Fatalf("%d impressions shown on a limit of 3,000: %d over, and the failover forgot writes granting %d",
			shown, shown-3000, forgotten)
	}
	if shown < 3000-100 {
		t.Fatalf("%d impressions shown on a limit of 3,000", shown)
	}
	var lost, forgot uint64
	for _, nd := range nodes {
		c := nd.ledger.Counts()
		lost, forgot = lost+c.LeasesLost, forgot+c.Forgotten
	}
	if len(pending) != 0 {
		t.Fatalf("%d decisions never billed", len(pending))
	}
	if lost == 0 || forgot == 0 || forgot > uint64(forgotten)+3000 {
		t.Fatalf("the nodes counted %d leases lost, %d units forgotten; the failover forgot %d granted units", lost, forgot, forgotten)
	}
	s, o := committed(t, fo, "li/li/imp")
	if o != 0 || s > 3000 {
		t.Fatalf("the store ends with %d settled and %d outstanding on a limit of 3,000", s, o)
	}
	t.Logf("%d shown; the failover forgot %d granted units; the store ends with %d settled, %d outstanding; the nodes counted %d units forgotten",
		shown, forgotten, s, o, forgot)
}
