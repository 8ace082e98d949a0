package budget_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"tsubame"
	"tsubame/internal/budget"
	"tsubame/internal/decision"
	"tsubame/internal/store/memory"
)

// flaky refuses the calls of the ops in fail, unmade, while down is set,
// as a store that is unreachable: the update never reaches it.
type flaky struct {
	tsubame.FrequencyCounter
	down  atomic.Bool
	fail  map[tsubame.FrequencyOp]bool
	only  atomic.Pointer[string] // when set, only this visitor's updates fail (its cluster master down)
	calls atomic.Int64           // updates refused
	// watch, when set, names a visitor whose updates are counted in
	// watched, made or not.
	watch   atomic.Pointer[string]
	watched atomic.Int64
	mu      sync.Mutex
	made    []string // "<op> <bid>" of each update passed to the store, in order
	// late, when set, picks updates the store makes after the caller gave
	// up on them: the caller sees an error, and the store makes the update
	// lateBy later (it was on its way on a slow connection).
	late     func(u *tsubame.FrequencyUpdate) bool
	lateBy   time.Duration
	arriving sync.WaitGroup
}

func (s *flaky) Update(ctx context.Context, u *tsubame.FrequencyUpdate, rec *tsubame.FrequencyRecord) (bool, error) {
	if w := s.watch.Load(); w != nil && *w == u.Visitor {
		s.watched.Add(1)
	}
	if s.late != nil && s.late(u) {
		s.calls.Add(1)
		late := *u
		late.Visitor, late.Bid = strings.Clone(u.Visitor), strings.Clone(u.Bid)
		s.arriving.Go(func() {
			time.Sleep(s.lateBy)
			s.FrequencyCounter.Update(context.Background(), &late, nil)
		})
		return false, tsubame.Errorf(tsubame.EUNAVAILABLE, "the store answered after the deadline")
	}
	if s.down.Load() && s.fail[u.Op] && (s.only.Load() == nil || *s.only.Load() == u.Visitor) {
		s.calls.Add(1)
		return false, tsubame.Errorf(tsubame.EUNAVAILABLE, "the store is down")
	}
	s.mu.Lock()
	s.made = append(s.made, u.Op.String()+" "+u.Bid)
	s.mu.Unlock()
	return s.FrequencyCounter.Update(ctx, u, rec)
}

// flakyCounters are Counters on a memory store whose updates of ops fail
// while fl.down is set, and the test set's li-capped (3 an hour, 5 a day).
func flakyCounters(t *testing.T, opt budget.Options, ops ...tsubame.FrequencyOp) (*memory.Store, *flaky, *budget.Counters, *decision.Line) {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	fl := &flaky{FrequencyCounter: st, fail: map[tsubame.FrequencyOp]bool{}}
	for _, op := range ops {
		fl.fail[op] = true
	}
	c := budget.New(fl, opt)
	_, ls := lines(t, campaigns(t), c)
	return st, fl, c, ls["li-capped"]
}

// entries reads visitor's entries of line item li: its impressions and
// its holds.
func entries(t *testing.T, st tsubame.FrequencyCounter, visitor, li string) (impressions, holds []string) {
	t.Helper()
	var rec tsubame.FrequencyRecord
	if err := st.Read(t.Context(), visitor, &rec); err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.Entries(li) {
		if e.Hold {
			holds = append(holds, e.ID)
		} else {
			impressions = append(impressions, e.ID)
		}
	}
	return impressions, holds
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("30 s and still not: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A win's count and a loss's release the store did not take when asked
// are sent again until it does: the win counts against the cap (without
// it the visitor would pass the cap once the hold ends), the loss gives
// its share back at once (without it the visitor would wait the hold's
// end). The ids sent are the caller's as they were, though the caller
// reused their memory after the call.
func TestCapUpdatesTheStoreMissedAreSentAgain(t *testing.T) {
	st, fl, c, capped := flakyCounters(t, budget.Options{}, tsubame.FrequencyCount, tsubame.FrequencyRelease)
	now := time.Now()
	for _, bid := range []string{"bid-won", "bid-lost", "bid-open"} {
		if !c.HoldCap(t.Context(), capped, "u-1", bid, now, now.Add(time.Hour), nil) {
			t.Fatalf("hold of %s refused", bid)
		}
	}
	fl.down.Store(true)
	// The ids view a buffer the caller then overwrites, as the bidder's do.
	buf := []byte("u-1 bid-won")
	visitor, won := unsafe.String(&buf[0], 3), unsafe.String(&buf[4], 7)
	if c.CountCap(t.Context(), capped, visitor, won, now) {
		t.Fatal("a count the store refused reported counted")
	}
	copy(buf, "u-9 bid-xxx")
	if c.ReleaseCap(t.Context(), capped, "u-1", "bid-lost", now, now.Add(time.Hour)) {
		t.Fatal("a release the store refused reported released")
	}
	if r := c.Stats(); r.Pending != 2 || r.Sent != 0 || r.Dropped != 0 {
		t.Fatalf("with the store down: %+v, want 2 pending", r)
	}
	waitFor(t, "the store refused the retries", func() bool { return fl.calls.Load() >= 4 })
	if imps, holds := entries(t, st, "u-1", capped.ID); len(imps) != 0 || len(holds) != 3 {
		t.Fatalf("with the store down it holds %v and %v, want 3 holds", imps, holds)
	}
	fl.down.Store(false)
	waitFor(t, "both sent", func() bool { return c.Stats().Pending == 0 })
	if r := c.Stats(); r.Sent != 2 || r.Dropped != 0 {
		t.Fatalf("after the store came back: %+v, want 2 sent", r)
	}
	imps, holds := entries(t, st, "u-1", capped.ID)
	if fmt.Sprint(imps) != "[bid-won]" || fmt.Sprint(holds) != "[bid-open]" {
		t.Fatalf("the store holds impressions %v and holds %v, want [bid-won] and [bid-open]", imps, holds)
	}
	if imps, holds := entries(t, st, "u-9", capped.ID); len(imps)+len(holds) != 0 {
		t.Fatalf("u-9, the reused memory's, has %v %v", imps, holds)
	}
	// The cap of 3 an hour: the win and the open bid take two.
	if !c.HoldCap(t.Context(), capped, "u-1", "bid-4", now, now.Add(time.Hour), nil) {
		t.Fatal("the third of a cap of 3 refused: the lost bid's release did not land")
	}
	if c.HoldCap(t.Context(), capped, "u-1", "bid-5", now, now.Add(time.Hour), nil) {
		t.Fatal("a fourth of a cap of 3 held: the win's count did not land")
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Many counts failing at once, from concurrent notices, are each sent
// again exactly once they can be: the visitor's count is the number of
// wins, not one less or more.
func TestConcurrentCountsAreAllSentAgain(t *testing.T) {
	st, fl, c, capped := flakyCounters(t, budget.Options{}, tsubame.FrequencyCount)
	const visitors, wins = 20, 5 // 5 a day: each visitor's whole cap
	now := time.Now()
	fl.down.Store(true)
	var wg sync.WaitGroup
	for v := range visitors {
		for w := range wins {
			wg.Go(func() {
				c.CountCap(t.Context(), capped, fmt.Sprint("u-", v), fmt.Sprintf("bid-%d-%d", v, w), now)
				c.CountCap(t.Context(), capped, fmt.Sprint("u-", v), fmt.Sprintf("bid-%d-%d", v, w), now) // a repeated notice
			})
		}
	}
	wg.Wait()
	if r := c.Stats(); r.Pending != 2*visitors*wins {
		t.Fatalf("%+v, want %d pending", r, 2*visitors*wins)
	}
	fl.down.Store(false)
	waitFor(t, "every count sent", func() bool { return c.Stats().Pending == 0 })
	for v := range visitors {
		imps, holds := entries(t, st, fmt.Sprint("u-", v), capped.ID)
		if len(imps) != wins || len(holds) != 0 {
			t.Errorf("u-%d: %d impressions, %d holds, want %d impressions", v, len(imps), len(holds), wins)
		}
	}
	if r := c.Stats(); r.Sent != 2*visitors*wins || r.Dropped != 0 {
		t.Fatalf("%+v, want %d sent", r, 2*visitors*wins)
	}
}

// An update the store keeps refusing (its visitor's cluster master down)
// does not hold back those behind it: they are sent in turns, and each
// lands as soon as the store takes it, also when the server stops.
func TestARefusedUpdateHoldsNoOtherBack(t *testing.T) {
	st, fl, c, capped := flakyCounters(t, budget.Options{}, tsubame.FrequencyCount)
	now := time.Now()
	fl.down.Store(true)
	c.CountCap(t.Context(), capped, "u-bad", "bid-bad", now)
	c.CountCap(t.Context(), capped, "u-good", "bid-good", now)
	bad := "u-bad"
	fl.only.Store(&bad)
	waitFor(t, "u-good's count sent past u-bad's", func() bool { return c.Stats().Sent == 1 })
	if imps, _ := entries(t, st, "u-good", capped.ID); fmt.Sprint(imps) != "[bid-good]" {
		t.Fatalf("u-good: %v, want [bid-good]", imps)
	}
	if r := c.Stats(); r.Pending != 1 {
		t.Fatalf("%+v, want u-bad's count still pending", r)
	}
	// Stopping, the healthy ones behind it are still sent.
	fl.only.Store(nil)
	c.CountCap(t.Context(), capped, "u-good", "bid-good-2", now)
	fl.only.Store(&bad)
	if err := c.Close(t.Context()); err == nil {
		t.Fatal("Close with u-bad's count refused: no error")
	}
	if r := c.Stats(); r.Sent != 2 || r.Dropped != 1 || r.Pending != 0 {
		t.Fatalf("after Close: %+v, want u-good's second count sent and u-bad's dropped", r)
	}
	if imps, _ := entries(t, st, "u-good", capped.ID); fmt.Sprint(imps) != "[bid-good bid-good-2]" {
		t.Fatalf("u-good: %v, want [bid-good bid-good-2]", imps)
	}
}

// The updates kept are bounded: past Options.Pending the newest are lost
// and counted, and releases fill at most half of it, leaving the rest to
// counts (a store that hangs times out every bid's hold); Close tries
// those kept once more and, the store still failing, counts them lost too
// without waiting for its context to end (a server stopping while its
// store is down), and keeps no more.
func TestRetriesAreBoundedAndEndAtClose(t *testing.T) {
	st, fl, c, capped := flakyCounters(t, budget.Options{Pending: 4}, tsubame.FrequencyCount, tsubame.FrequencyRelease)
	now := time.Now()
	fl.down.Store(true)
	for i := range 2 {
		c.CountCap(t.Context(), capped, "u-1", fmt.Sprint("bid-", i), now)
	}
	for i := range 3 {
		c.ReleaseCap(t.Context(), capped, "u-1", fmt.Sprint("lost-", i), now, time.Time{})
	}
	if r := c.Stats(); r.Pending != 4 || r.Dropped != 1 {
		t.Fatalf("2 counts, then 3 releases: %+v, want 4 pending (2 releases) and 1 dropped", r)
	}
	c.CountCap(t.Context(), capped, "u-1", "bid-2", now)
	if r := c.Stats(); r.Pending != 4 || r.Dropped != 2 {
		t.Fatalf("then a count: %+v, want 4 pending and 2 dropped", r)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := c.Close(ctx); err == nil {
		t.Fatal("Close with the store down and 4 updates waiting: no error")
	}
	if ctx.Err() != nil {
		t.Fatal("Close waited for its context to end with the store down")
	}
	if r := c.Stats(); r.Pending != 0 || r.Dropped != 6 || r.Sent != 0 {
		t.Fatalf("after Close: %+v, want 6 dropped", r)
	}
	fl.down.Store(false)
	c.CountCap(t.Context(), capped, "u-1", "bid-after", now) // the store takes it: nothing kept
	fl.down.Store(true)
	c.CountCap(t.Context(), capped, "u-1", "bid-lost", now)
	if r := c.Stats(); r.Pending != 0 || r.Dropped != 7 {
		t.Fatalf("a failure after Close: %+v, want it dropped", r)
	}
	if imps, _ := entries(t, st, "u-1", capped.ID); fmt.Sprint(imps) != "[bid-after]" {
		t.Fatalf("the store holds %v, want [bid-after]", imps)
	}
}

// Close waits for the updates kept to be sent while the store takes them.
func TestCloseSendsWhatWaits(t *testing.T) {
	st, fl, c, capped := flakyCounters(t, budget.Options{}, tsubame.FrequencyCount)
	now := time.Now()
	fl.down.Store(true)
	for i := range 3 {
		c.CountCap(t.Context(), capped, "u-1", fmt.Sprint("bid-", i), now)
	}
	waitFor(t, "a retry refused", func() bool { return fl.calls.Load() > 3 })
	fl.down.Store(false)
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := c.Stats(); r.Sent != 3 || r.Dropped != 0 {
		t.Fatalf("%+v, want 3 sent", r)
	}
	if imps, _ := entries(t, st, "u-1", capped.ID); len(imps) != 3 {
		t.Fatalf("the store holds %v, want 3 impressions", imps)
	}
}

// A take the store made after its request gave up (the line item did not
// serve; the take reached the store 200 ms after) is cancelled: the
// impression never shown stops counting, and every visitor is served
// exactly its cap, from concurrent requests, the late ones included.
// Without the cancel a visitor would be served one less for each late
// take that landed under its cap; with a cancel sent at once, it would
// find nothing to end.
func TestALateTakeIsCancelled(t *testing.T) {
	st, fl, c, capped := flakyCounters(t, budget.Options{})
	const visitors, streams, tries = 12, 3, 4
	fl.late = func(u *tsubame.FrequencyUpdate) bool {
		return u.Op == tsubame.FrequencyTake && strings.HasSuffix(u.Bid, "-late")
	}
	fl.lateBy = 200 * time.Millisecond
	var mu sync.Mutex
	served := map[string][]string{}
	request := func(visitor, id string) bool {
		rec := &tsubame.FrequencyRecord{}
		req := &decision.Request{User: visitor, Reserve: []string{id}, Frequency: rec}
		if !c.Allow(capped, req, 0, time.Now()) {
			return false
		}
		mu.Lock()
		served[visitor] = append(served[visitor], id)
		mu.Unlock()
		return true
	}
	var wg sync.WaitGroup
	lates := 0
	for v := range visitors {
		visitor := fmt.Sprint("u-", v)
		lates++
		if request(visitor, visitor+"-first-late") { // lands under the cap, for certain
			t.Fatal("a late take served")
		}
		waitFor(t, visitor+"'s first late take made", func() bool {
			imps, _ := entries(t, st, visitor, capped.ID)
			return slices.Contains(imps, visitor+"-first-late")
		})
		for s := range streams {
			wg.Go(func() {
				for i := range tries {
					id := fmt.Sprintf("%s-%d-%d", visitor, s, i)
					if i == 1 {
						id += "-late"
					}
					request(visitor, id)
				}
			})
			lates++
		}
	}
	wg.Wait()
	waitFor(t, "every late take cancelled", func() bool { return c.Stats().Pending == 0 })
	fl.arriving.Wait()
	if r := c.Stats(); r.Sent != uint64(lates) || r.Dropped != 0 {
		t.Fatalf("%+v, want the %d late takes' cancels sent", r, lates)
	}
	// Whatever the late takes refused while they counted, each visitor now
	// gets its cap, and no more.
	for v := range visitors {
		visitor := fmt.Sprint("u-", v)
		for i := 0; request(visitor, fmt.Sprintf("%s-after-%d", visitor, i)); i++ {
		}
		imps, holds := entries(t, st, visitor, capped.ID)
		slices.Sort(imps)
		got := slices.Sorted(slices.Values(served[visitor]))
		if len(got) != 3 || !slices.Equal(imps, got) || len(holds) != 0 {
			t.Errorf("%s served %v; the store counts %v and holds %v; want 3 served, each counted once", visitor, got, imps, holds)
		}
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Cancels take at most a quarter of the updates kept (the store down fails
// every capped decision), releases and cancels half, counts the rest; a
// take whose request's deadline has passed is not sent, and keeps no
// cancel.
func TestCancelsTakeAQuarter(t *testing.T) {
	_, fl, c, capped := flakyCounters(t, budget.Options{Pending: 8}, tsubame.FrequencyTake, tsubame.FrequencyCancel,
		tsubame.FrequencyRelease, tsubame.FrequencyCount)
	now := time.Now()
	fl.down.Store(true)
	for i := range 3 {
		if c.Allow(capped, &decision.Request{User: "u-1", Reserve: []string{fmt.Sprint("d-", i)}}, 0, now) {
			t.Fatal("a take the store refused served")
		}
	}
	if r := c.Stats(); r.Pending != 2 || r.Dropped != 1 {
		t.Fatalf("3 takes failed: %+v, want 2 cancels kept, 1 dropped", r)
	}
	for i := range 3 {
		c.ReleaseCap(t.Context(), capped, "u-1", fmt.Sprint("lost-", i), now, time.Time{})
	}
	if r := c.Stats(); r.Pending != 4 || r.Dropped != 2 {
		t.Fatalf("then 3 releases: %+v, want 4 kept (2 releases), 2 dropped", r)
	}
	for i := range 5 {
		c.CountCap(t.Context(), capped, "u-1", fmt.Sprint("won-", i), now)
	}
	if r := c.Stats(); r.Pending != 8 || r.Dropped != 3 {
		t.Fatalf("then 5 counts: %+v, want 8 kept (4 counts), 3 dropped", r)
	}
	u2 := "u-2"
	fl.watch.Store(&u2)
	failures := c.Errors()
	spent, cancel := context.WithCancel(t.Context())
	cancel()
	if c.Allow(capped, &decision.Request{User: "u-2", Reserve: []string{"d-spent"}, Context: spent}, 0, now) {
		t.Fatal("a take past its deadline served")
	}
	if r := c.Stats(); r.Pending != 8 || r.Dropped != 3 || fl.watched.Load() != 0 || c.Errors() != failures {
		t.Fatalf("a take past its deadline: %+v, %d store calls, %d errors more; want none sent, nothing kept or counted",
			r, fl.watched.Load(), c.Errors()-failures)
	}
	ctx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	c.Close(ctx)
}

// A stopping server sends the updates due at once, and waits out the
// second of a cancel kept just before (its take may still be on its way)
// after them: a count queued behind it is not held back, where Close's
// time could end.
func TestCloseSendsWhatIsDueFirst(t *testing.T) {
	_, fl, c, capped := flakyCounters(t, budget.Options{}, tsubame.FrequencyTake, tsubame.FrequencyCount)
	now := time.Now()
	fl.down.Store(true)
	if c.Allow(capped, &decision.Request{User: "u-1", Reserve: []string{"d-late"}}, 0, now) {
		t.Fatal("a take the store refused served")
	}
	c.CountCap(t.Context(), capped, "u-1", "bid-won", now)
	if r := c.Stats(); r.Pending != 2 {
		t.Fatalf("%+v, want the cancel and the count kept", r)
	}
	fl.mu.Lock()
	fl.made = nil
	fl.mu.Unlock()
	fl.down.Store(false)
	ctx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	fl.mu.Lock()
	made := fmt.Sprint(fl.made)
	fl.mu.Unlock()
	if made != "[count bid-won cancel d-late]" {
		t.Fatalf("the store was sent %s, want the count, then the cancel", made)
	}
	if r := c.Stats(); r.Pending != 0 || r.Sent != 2 || r.Dropped != 0 {
		t.Fatalf("after Close: %+v, want both sent", r)
	}
}
