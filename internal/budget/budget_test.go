package budget_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/budget"
	"tsubame/internal/decision"
	"tsubame/internal/store/memory"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
)

// campaigns reads the test set: li-capped (priority 1, 3 per hour and 5
// per day) and li-open (priority 2, no cap), both on placement top.
func campaigns(t testing.TB) *tsubame.CampaignSet {
	t.Helper()
	b, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	return &set
}

// lines compiles set and returns its lines by id.
func lines(t testing.TB, set *tsubame.CampaignSet, c decision.Counters) (*decision.Index, map[string]*decision.Line) {
	t.Helper()
	ix, err := decision.Compile(set, decision.Options{Counters: c, Now: liveAt(set)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*decision.Line{}
	for l := range ix.Lines() {
		out[l.ID] = l
	}
	return ix, out
}

// counting counts the calls that reach the store.
type counting struct {
	tsubame.FrequencyCounter
	reads, updates atomic.Int64
}

func (c *counting) Read(ctx context.Context, visitor string, rec *tsubame.FrequencyRecord) error {
	c.reads.Add(1)
	return c.FrequencyCounter.Read(ctx, visitor, rec)
}

func (c *counting) Update(ctx context.Context, u *tsubame.FrequencyUpdate, rec *tsubame.FrequencyRecord) (bool, error) {
	c.updates.Add(1)
	return c.FrequencyCounter.Update(ctx, u, rec)
}

func (c *counting) calls() int64 { return c.reads.Load() + c.updates.Load() }

// Compile gives a line item's caps to its Line, as a copy of its own.
func TestCompileKeepsTheCaps(t *testing.T) {
	set := campaigns(t)
	_, ls := lines(t, set, nil)
	want := slices.Clone(set.LineItems[0].Frequency)
	set.LineItems[0].Frequency[0].Impressions = 99
	if got := ls["li-capped"].Frequency; !slices.Equal(got, want) {
		t.Fatalf("li-capped's Line has caps %v, want %v (and not the set's slice)", got, want)
	}
	if got := ls["li-open"].Frequency; got != nil {
		t.Fatalf("li-open's Line has caps %v", got)
	}
}

func TestAllow(t *testing.T) {
	st := memory.New()
	defer st.Close()
	fc := &counting{FrequencyCounter: st}
	c := budget.New(fc, budget.Options{})
	_, ls := lines(t, campaigns(t), c)
	capped, open := ls["li-capped"], ls["li-open"]
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	allow := func(l *decision.Line, user string, at time.Time, n int) string {
		var b strings.Builder
		for range n {
			if c.Allow(l, &decision.Request{User: user}, 0, at) {
				b.WriteByte('1')
			} else {
				b.WriteByte('0')
			}
		}
		return b.String()
	}
	// Without caps: every time, and the store is never asked.
	if got := allow(open, "u-1", t0, 5) + allow(open, "", t0, 5); got != "1111111111" {
		t.Fatalf("uncapped line item: %s", got)
	}
	// With caps, no visitor (or one that is not an id): never, without asking.
	if got := allow(capped, "", t0, 3) + allow(capped, strings.Repeat("u", tsubame.MaxObjectIDLength+1), t0, 3); got != "000000" {
		t.Fatalf("capped line item without a visitor: %s", got)
	}
	if n := fc.calls(); n != 0 {
		t.Fatalf("%d store calls for uncapped line items or unknown visitors", n)
	}
	// 3 per hour, 5 per day, per visitor.
	for _, st := range []struct {
		user string
		at   time.Time
		want string
	}{
		{"u-1", t0, "11100"},
		{"u-2", t0, "111"},
		{"u-1", t0.Add(time.Hour), "1100"},
		{"u-1", t0.Add(3 * time.Hour), "0"},
		{"u-1", t0.Add(24 * time.Hour), "11100"},
	} {
		if got := allow(capped, st.user, st.at, len(st.want)); got != st.want {
			t.Fatalf("%s at %v: %s, want %s", st.user, st.at, got, st.want)
		}
	}
	if c.Errors() != 0 {
		t.Fatalf("%d errors", c.Errors())
	}
}

// A store that fails refuses capped line items only; the failures are
// counted, and logged once per LogEvery however many there are.
func TestAllowFailsClosed(t *testing.T) {
	st := memory.New()
	_ = st.Close()
	var logs bytes.Buffer // slog's handler writes one record at a time
	c := budget.New(st, budget.Options{Log: slog.New(slog.NewTextHandler(&logs, nil)), LogEvery: time.Hour})
	_, ls := lines(t, campaigns(t), c)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 25 {
				if c.Allow(ls["li-capped"], &decision.Request{User: "u-1"}, 0, time.Now()) {
					t.Errorf("goroutine %d: a capped line item served with the store closed", g)
				}
				if !c.Allow(ls["li-open"], &decision.Request{User: "u-1"}, 0, time.Now()) {
					t.Errorf("goroutine %d: an uncapped line item refused with the store closed", g)
				}
			}
		})
	}
	wg.Wait()
	if n := c.Errors(); n != 200 {
		t.Fatalf("Errors() = %d after 200 failed takes", n)
	}
	if n := strings.Count(logs.String(), "cannot count frequency caps"); n != 1 {
		t.Fatalf("%d log lines for 200 failures within LogEvery, want 1:\n%s", n, logs.String())
	}
}

// A store that does not answer within the timeout is a refusal; when it
// answers again capped line items serve again, and the log says so.
func TestAllowTimesOutAndRecovers(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redis.Open(redis.Options{Addrs: []string{srv.Addr}, KeyPrefix: "budget:"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs bytes.Buffer
	c := budget.New(st, budget.Options{Timeout: time.Second, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	_, ls := lines(t, campaigns(t), c)
	req := &decision.Request{User: "u-1"}
	if !c.Allow(ls["li-capped"], req, 0, time.Now()) {
		t.Fatal("first impression refused")
	}
	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	if c.Allow(ls["li-capped"], req, 0, time.Now()) || c.Errors() != 1 {
		t.Fatalf("with Redis paused: served, or %d errors (want 1)", c.Errors())
	}
	srv.Resume()
	paused = false
	// A new visitor each time: a Take that failed may still have counted.
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; !c.Allow(ls["li-capped"], &decision.Request{User: "u-back-" + strconv.Itoa(n)}, 0, time.Now()); n++ {
		if time.Now().After(deadline) {
			t.Fatalf("capped line item still refused 30s after Redis resumed (%d errors)", c.Errors())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "cannot count frequency caps") || !strings.Contains(logs.String(), "counted again") {
		t.Fatalf("log:\n%s", logs.String())
	}
}

// BenchmarkAllow: an uncapped line item, and a capped one on the memory
// store (taken: a new visitor each time; refused: visitors at their cap).
func BenchmarkAllow(b *testing.B) {
	st := memory.New()
	defer st.Close()
	c := budget.New(st, budget.Options{})
	_, ls := lines(b, campaigns(b), c)
	users := make([]string, 1<<16)
	for i := range users {
		users[i] = "u-" + strconv.Itoa(i)
	}
	now := time.Now()
	b.Run("uncapped", func(b *testing.B) {
		b.ReportAllocs()
		req := &decision.Request{User: "u-1"}
		for b.Loop() {
			if !c.Allow(ls["li-open"], req, 0, now) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("capped/taken", func(b *testing.B) {
		b.ReportAllocs()
		var req decision.Request
		i := 0
		for b.Loop() {
			req.User = users[i%len(users)]
			c.Allow(ls["li-capped"], &req, 0, now.Add(time.Duration(i/len(users))*25*time.Hour))
			i++
		}
	})
	b.Run("capped/refused", func(b *testing.B) {
		req := &decision.Request{User: "u-full"}
		for range 3 {
			c.Allow(ls["li-capped"], req, 0, now)
		}
		b.ReportAllocs()
		for b.Loop() {
			if c.Allow(ls["li-capped"], req, 0, now) {
				b.Fatal("taken past the cap")
			}
		}
	})
}

// BenchmarkAllowLimited: a decision of a line item with an impression
// limit and a campaign budget, daily and in total (four accounts), held
// under its decision id, on one node's lease: no store call, no
// allocation (the queue of reservations grows by amortised appends; a
// round settles them every 10,000 decisions, as the loop would).
func BenchmarkAllowLimited(b *testing.B) {
	st := memory.New()
	defer st.Close()
	clk := newClock()
	g, err := budget.NewLedger(st, st, budget.LedgerOptions{Holder: "bench", Now: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close(context.Background())
	c := budget.New(st, budget.Options{Ledger: g})
	set := limitedSet(tsubame.ImpressionLimits{Total: tsubame.MaxQuotaUnits, Daily: tsubame.MaxQuotaUnits / 2},
		tsubame.Budget{Total: tsubame.MaxQuotaUnits, Daily: tsubame.MaxQuotaUnits / 2}, 2_500_000, tsubame.PacingASAP)
	_, ls := lines(b, set, c)
	l := ls["li"]
	ids := make([]string, 1<<14)
	for i := range ids {
		ids[i] = fmt.Sprintf("01M8%022d", i)
	}
	req := &decision.Request{Reserve: make([]string, 1)}
	round := func() { // a second later, and the reservations of a minute ago settled
		clk.Advance(time.Second)
		g.Tick(context.Background())
	}
	// Warm up: the leases taken, the hands sized for a busy line item.
	for range 5 {
		for range 20_000 {
			req.Reserve[0], req.ReserveUntil = ids[0], clk.Now()
			c.Allow(l, req, 0, clk.Now())
		}
		round()
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now := clk.Now()
		req.Reserve[0], req.ReserveUntil = ids[i%len(ids)], now
		if !c.Allow(l, req, 0, now) {
			b.Fatal("refused")
		}
		if i++; i%10_000 == 0 {
			b.StopTimer()
			round()
			b.StartTimer()
		}
	}
}

// liveAt is a time the set's flights are on: the latest start among its
// campaigns and line items (time.Now when none starts). A test's flights
// are laid on its own clock, which is not the wall clock: compiled at the
// wall clock, a flight a test dated in the past would have ended and its
// line items left out of the index.
func liveAt(set *tsubame.CampaignSet) time.Time {
	var at time.Time
	for _, c := range set.Campaigns {
		if c.Start.After(at) {
			at = c.Start
		}
	}
	for _, l := range set.LineItems {
		if l.Start.After(at) {
			at = l.Start
		}
	}
	if at.IsZero() {
		return time.Now()
	}
	return at
}

// A check (an auction's direct line item before it has won) reads the
// visitor's caps and counts nothing: any number of checks leaves the caps
// as they were, and a checked line item at its cap is refused.
func TestCheckCountsNoCap(t *testing.T) {
	st := memory.New()
	defer st.Close()
	fc := &counting{FrequencyCounter: st}
	c := budget.New(fc, budget.Options{})
	_, ls := lines(t, campaigns(t), c)
	capped := ls["li-capped"]
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	for i := range 10 {
		var rec tsubame.FrequencyRecord
		if !c.Allow(capped, &decision.Request{User: "u-1", Check: true, Frequency: &rec}, 0, t0) {
			t.Fatalf("check %d refused under the cap", i)
		}
	}
	if u := fc.updates.Load(); u != 0 {
		t.Fatalf("%d store updates for checks", u)
	}
	for i := range 3 { // 3 an hour: the checks took none of them
		if !c.Allow(capped, &decision.Request{User: "u-1"}, 0, t0) {
			t.Fatalf("take %d refused after checks", i)
		}
	}
	var rec tsubame.FrequencyRecord
	if c.Allow(capped, &decision.Request{User: "u-1", Check: true, Frequency: &rec}, 0, t0) {
		t.Fatal("a check allowed at the cap")
	}
}

// lateHolds makes every hold and answers its caller that the deadline
// passed: a store that answered after the request gave up.
type lateHolds struct{ tsubame.FrequencyCounter }

func (s lateHolds) Update(ctx context.Context, u *tsubame.FrequencyUpdate, rec *tsubame.FrequencyRecord) (bool, error) {
	ok, err := s.FrequencyCounter.Update(context.WithoutCancel(ctx), u, rec)
	if u.Op == tsubame.FrequencyHold && err == nil {
		return false, context.DeadlineExceeded
	}
	return ok, err
}

// A hold the store made after its request gave up (no bid was sent) is
// released: it does not keep a share of the visitor's cap for the bid's
// whole reservation. Without the release the visitor would be held at 2 of
// a cap of 3 for the hour.
func TestHoldThatLandedLateIsReleased(t *testing.T) {
	st := memory.New()
	defer st.Close()
	c := budget.New(lateHolds{st}, budget.Options{})
	_, ls := lines(t, campaigns(t), c)
	capped := ls["li-capped"] // 3 an hour
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	if c.HoldCap(t.Context(), capped, "u-1", "bid-late", t0, t0.Add(time.Hour), nil) {
		t.Fatal("a hold answered after the deadline reported held")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var rec tsubame.FrequencyRecord
		if err := st.Read(t.Context(), "u-1", &rec); err != nil {
			t.Fatal(err)
		}
		if len(rec.Entries(capped.ID)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the late hold is still in the store: %+v", rec.Entries(capped.ID))
		}
		time.Sleep(10 * time.Millisecond)
	}
	plain := budget.New(st, budget.Options{})
	for i := range 3 {
		if !plain.HoldCap(t.Context(), capped, "u-1", fmt.Sprint("bid-", i), t0, t0.Add(time.Hour), nil) {
			t.Fatalf("hold %d of 3 refused: the late hold still takes the cap", i+1)
		}
	}
	if plain.HoldCap(t.Context(), capped, "u-1", "bid-4", t0, t0.Add(time.Hour), nil) {
		t.Fatal("a fourth hold of a cap of 3")
	}
}
