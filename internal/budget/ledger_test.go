package budget_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/budget"
	"tsubame/internal/decision"
	"tsubame/internal/store/memory"
)

// fakeClock is a ledger's clock that a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// limitedSet is one campaign with one line item of the given impression
// limits and budget, CPM and pacing, on placement top.
func limitedSet(limits tsubame.ImpressionLimits, b tsubame.Budget, cpm tsubame.Money, pacing string) *tsubame.CampaignSet {
	return &tsubame.CampaignSet{
		Currency:    "USD",
		Advertisers: []*tsubame.Advertiser{{ID: "acme", Name: "Acme"}},
		Campaigns:   []*tsubame.Campaign{{ID: "camp", Advertiser: "acme", Timezone: "Asia/Tokyo", Budget: b, Pacing: tsubame.Pacing{Mode: pacing}}},
		Creatives: []*tsubame.Creative{{ID: "cr", Advertiser: "acme", Format: "banner", W: 300, H: 250,
			Image: "https://cdn.acme.example/b.png", Click: "https://acme.example/", Status: "approved"}},
		LineItems: []*tsubame.LineItem{{ID: "li", Campaign: "camp", Priority: 1, Weight: 1, CPM: cpm,
			Creatives: []string{"cr"}, Limits: tsubame.Limits{Impressions: limits}}},
	}
}

// node is one server's share: a ledger and the Counters over it, on a
// store shared with the others.
type node struct {
	ledger   *budget.Ledger
	counters *budget.Counters
	line     *decision.Line
	out      tsubame.Outcomes // where its bids' outcomes are recorded

	mu   sync.Mutex
	dues map[string]int64 // decision id -> its hold's due second
}

func newNode(t *testing.T, st *memory.Store, set *tsubame.CampaignSet, holder string, opt budget.LedgerOptions) *node {
	t.Helper()
	opt.Holder = holder
	g, err := budget.NewLedger(st, st, opt)
	if err != nil {
		t.Fatal(err)
	}
	c := budget.New(st, budget.Options{Ledger: g})
	_, ls := lines(t, set, c)
	return &node{ledger: g, counters: c, line: ls["li"], out: st}
}

var ids atomic.Int64

// decide asks for one decision held until now+hold; it returns its id
// ("" when refused).
func (n *node) decide(now time.Time, hold time.Duration) string {
	return n.bid(now, hold, 0)
}

// bid asks for one bid held until now+hold (rounded up to the second),
// holding share of its price (decision.Request.HoldShare); it returns its
// id ("" when refused).
func (n *node) bid(now time.Time, hold time.Duration, share int64) string {
	req := &decision.Request{ReserveUntil: now.Add(hold), HoldShare: share}
	if share != 0 {
		req.ReserveUntil = decision.RoundUp(req.ReserveUntil, time.Second)
	}
	return n.allow(now, req)
}

// allow asks for req (its ReserveUntil and holding options set) as a new
// bid at now, and keeps its end for its outcomes; it returns its id (""
// when refused).
func (n *node) allow(now time.Time, req *decision.Request) string {
	id := fmt.Sprintf("d%09d", ids.Add(1))
	req.Reserve = []string{id}
	if !n.counters.Allow(n.line, req, 0, now) {
		return ""
	}
	n.mu.Lock()
	if n.dues == nil {
		n.dues = map[string]int64{}
	}
	n.dues[id] = req.ReserveUntil.Unix()
	n.mu.Unlock()
	return id
}

// show records the impression of decision id as its bill, at the line
// item's price, as the tracking URL does.
func (n *node) show(t *testing.T, id string) {
	t.Helper()
	n.record(t, tsubame.OutcomeBill, id)
}

// record records the outcome kind of decision id for n.
func (n *node) record(t *testing.T, kind tsubame.OutcomeKind, id string) {
	t.Helper()
	n.mu.Lock()
	due := n.dues[id]
	n.mu.Unlock()
	o := tsubame.Outcome{Kind: kind, Bid: id, LineItem: n.line.ID, Due: due}
	if kind == tsubame.OutcomeBill {
		o.Price = n.line.CPM
	}
	first, err := n.out.Record(t.Context(), n.ledger.Holder(), &o, time.Hour)
	if err != nil || !first {
		t.Errorf("%s of %s: first %v, %v", kind, id, first, err)
	}
}

func committed(t *testing.T, st tsubame.Quotas, key string) (settled, outstanding int64) {
	t.Helper()
	s, o, err := st.Committed(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return s, o
}

// An impression limit of 500 on three nodes of one store, four clients
// each, every decision shown: exactly 500 are decided, and the store's
// committed count is never over 500 while they run.
func TestLimitExactOnThreeNodes(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	set := limitedSet(tsubame.ImpressionLimits{Total: 500}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	opt := budget.LedgerOptions{Interval: 10 * time.Millisecond, Lease: time.Minute}
	var nodes []*node
	for i := range 3 {
		n := newNode(t, st, set, fmt.Sprint("node-", i), opt)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); n.ledger.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		nodes = append(nodes, n)
	}
	var decided atomic.Int64
	var perNode [3]atomic.Int64
	stop := make(chan struct{})
	var over atomic.Int64
	sampler := make(chan struct{})
	go func() {
		defer close(sampler)
		for {
			s, o := committed(t, st, "li/li/imp")
			if s+o > 500 {
				over.Store(s + o)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	for i, n := range nodes {
		for range 4 {
			wg.Go(func() {
				for refused := 0; refused < 2000 && decided.Load() < 500; {
					id := n.decide(time.Now(), time.Hour)
					if id == "" {
						refused++
						time.Sleep(100 * time.Microsecond)
						continue
					}
					decided.Add(1)
					perNode[i].Add(1)
					n.show(t, id)
				}
			})
		}
	}
	wg.Wait()
	// Whatever is still in a hand is spent by whoever asks next.
	deadline := time.Now().Add(30 * time.Second)
	for decided.Load() < 500 && time.Now().Before(deadline) {
		for _, n := range nodes {
			if id := n.decide(time.Now(), time.Hour); id != "" {
				decided.Add(1)
				n.show(t, id)
			}
		}
		time.Sleep(time.Millisecond)
	}
	for _, n := range nodes {
		if id := n.decide(time.Now(), time.Hour); id != "" {
			t.Errorf("decision %s past the limit", id)
			decided.Add(1)
		}
	}
	close(stop)
	<-sampler
	if got := decided.Load(); got != 500 {
		t.Fatalf("%d decisions on a limit of 500", got)
	}
	if o := over.Load(); o != 0 {
		t.Fatalf("committed %d of a limit of 500 at one sample", o)
	}
	t.Logf("decisions per node: %d, %d, %d", perNode[0].Load(), perNode[1].Load(), perNode[2].Load())
}

// Decisions not shown by the end of their reservation (and its grace) are
// given back and served again; shown ones stay spent. The clock is moved
// by hand.
func TestUnshownReservationsComeBack(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{Total: 10}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 30 * time.Second})
	ctx := t.Context()
	decideAll := func() []string {
		var got []string
		for range 100 {
			if id := n.decide(clk.Now(), time.Minute); id != "" {
				got = append(got, id)
				continue
			}
			n.ledger.Tick(ctx)
		}
		return got
	}
	first := decideAll()
	if len(first) != 10 {
		t.Fatalf("%d decisions on a limit of 10", len(first))
	}
	for _, id := range first[:6] {
		n.show(t, id)
	}
	clk.Advance(time.Minute + 29*time.Second) // the grace has not passed
	n.ledger.Tick(ctx)
	if got := decideAll(); len(got) != 0 {
		t.Fatalf("%d decisions before the reservations were settled", len(got))
	}
	clk.Advance(2 * time.Second)
	n.ledger.Tick(ctx)
	second := decideAll()
	if len(second) != 4 {
		t.Fatalf("%d decisions after 4 unshown reservations ended, want 4", len(second))
	}
	if c := n.ledger.Counts(); c.Billed != 6 || c.Expired != 4 || c.Holds != 4 || c.StoreErrors != 0 || c.LeasesLost != 0 {
		t.Fatalf("counts %+v, want 6 billed, 4 expired, 4 held", c)
	}
	for _, id := range second {
		n.show(t, id)
	}
	clk.Advance(2 * time.Minute)
	n.ledger.Tick(ctx)
	if s, o := committed(t, st, "li/li/imp"); s+o != 10 {
		t.Fatalf("settled %d, outstanding %d, want 10 committed", s, o)
	}
	if err := n.ledger.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s, o := committed(t, st, "li/li/imp"); s != 10 || o != 0 {
		t.Fatalf("after Close: settled %d, outstanding %d, want 10 and 0", s, o)
	}
}

// Spend is kept in thousandths of a micro-unit on the node, so a CPM that
// is not a multiple of 1,000 micro-units costs exactly CPM/1000 per
// impression: a budget of 1.00 at a CPM of 2.500001 buys 399 impressions
// (0.997500399), and the store's settled spend is that, rounded up to the
// micro-unit (997,501), after Close.
func TestSpendIsExact(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{}, tsubame.Budget{Total: 1_000_000}, 2_500_001, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now})
	ctx := t.Context()
	served := 0
	for refused := 0; refused < 100; {
		if !n.counters.Allow(n.line, &decision.Request{}, 0, clk.Now()) { // no hold: spent at once
			refused++
			n.ledger.Tick(ctx)
			continue
		}
		served++
	}
	if served != 399 {
		t.Fatalf("%d impressions on a budget of 1.00 at a CPM of 2.500001, want 399", served)
	}
	if err := n.ledger.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s, o := committed(t, st, "camp/camp/spend"); s != 997_501 || o != 0 {
		t.Fatalf("after Close: settled %d, outstanding %d micro-units, want 997501 and 0", s, o)
	}
}

// failing is a Quotas that fails while down is set.
type failing struct {
	tsubame.Quotas
	down atomic.Bool
}

var errDown = tsubame.Errorf(tsubame.EUNAVAILABLE, "store down")

func (f *failing) Lease(ctx context.Context, key, holder string, limit, want int64, ttl time.Duration) (int64, int64, error) {
	if f.down.Load() {
		return 0, 0, errDown
	}
	return f.Quotas.Lease(ctx, key, holder, limit, want, ttl)
}

func (f *failing) Release(ctx context.Context, key, holder, id string, used, unused int64) error {
	if f.down.Load() {
		return errDown
	}
	return f.Quotas.Release(ctx, key, holder, id, used, unused)
}

// With the store gone a node spends what it holds for up to the lease, then
// stops the line item; with the store back it serves again by itself.
func TestStoreDownSpendsOnlyTheLease(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	q := &failing{Quotas: st}
	set := limitedSet(tsubame.ImpressionLimits{Total: 1000}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	g, err := budget.NewLedger(q, st, budget.LedgerOptions{Holder: "node-0", Now: clk.Now, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := budget.New(st, budget.Options{Ledger: g})
	_, ls := lines(t, set, c)
	n := &node{ledger: g, counters: c, line: ls["li"]}
	ctx := t.Context()
	// Warm up: the hand follows what an interval takes.
	for range 5 {
		for range 8 {
			n.decide(clk.Now(), time.Minute)
		}
		clk.Advance(time.Second)
		g.Tick(ctx)
	}
	q.down.Store(true)
	served := 0
	for range 50 {
		if n.decide(clk.Now(), time.Minute) != "" {
			served++
		}
	}
	if served == 0 || served >= 50 {
		t.Fatalf("store down: %d of 50 decisions from the hand, want some and not all", served)
	}
	clk.Advance(61 * time.Second) // past the lease: no renewal came
	g.Tick(ctx)
	if id := n.decide(clk.Now(), time.Minute); id != "" {
		t.Fatalf("decision %s after the lease ended with the store down", id)
	}
	if c := g.Counts(); c.LeasesLost != 0 || c.StoreErrors == 0 {
		t.Fatalf("counts %+v: want store errors counted, the lease not yet lost", c)
	}
	// Its reservations may still be shown: the store keeps the lease for
	// them (10 minutes, 30 s of grace, the minute), then counts it spent.
	clk.Advance(11 * time.Minute)
	g.Tick(ctx)
	if c := g.Counts(); c.LeasesLost != 1 {
		t.Fatalf("counts %+v: want the lease lost once it ended", c)
	}
	q.down.Store(false)
	clk.Advance(time.Second) // a round after the last failed one
	g.Tick(ctx)
	if n.decide(clk.Now(), time.Minute) == "" {
		t.Fatal("no decision with the store back")
	}
	s, o := committed(t, st, "li/li/imp")
	if s+o > 1000 {
		t.Fatalf("committed %d of 1000", s+o)
	}
}

// A daily limit starts again at midnight in the campaign's time zone.
func TestDailyLimitResetsAtMidnight(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	clk.t = time.Date(2026, 11, 27, 23, 59, 0, 0, time.FixedZone("JST", 9*3600)) // Tokyo
	set := limitedSet(tsubame.ImpressionLimits{Daily: 5}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now})
	ctx := t.Context()
	count := func() int {
		got := 0
		for range 40 {
			if id := n.decide(clk.Now(), 0); id != "" {
				n.show(t, id)
				got++
				continue
			}
			n.ledger.Tick(ctx)
		}
		return got
	}
	if got := count(); got != 5 {
		t.Fatalf("%d decisions on 2026-11-27, want 5", got)
	}
	clk.Advance(time.Minute)
	if got := count(); got != 5 {
		t.Fatalf("%d decisions on 2026-11-28, want 5", got)
	}
	n.ledger.Tick(ctx)
	if s, o := committed(t, st, "li/li/imp/2026-11-27"); s+o != 5 {
		t.Fatalf("2026-11-27: committed %d", s+o)
	}
	if s, o := committed(t, st, "li/li/imp/2026-11-28"); s+o != 5 {
		t.Fatalf("2026-11-28: committed %d", s+o)
	}
}

// Even pacing of a two-minute flight of 1,200 impressions under traffic
// asking for four times that: delivery follows the flight's elapsed
// share, never ahead of it by more than what a tick grants.
func TestEvenPacingFollowsTheFlight(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := &fakeClock{t: time.Now()} // the flight must not have ended when it is compiled
	start := clk.Now()
	set := limitedSet(tsubame.ImpressionLimits{Total: 1200}, tsubame.Budget{}, 1_000_000, tsubame.PacingEven)
	set.LineItems[0].Start, set.LineItems[0].End = start, start.Add(2*time.Minute)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now})
	ctx := t.Context()
	delivered := 0
	for step := 1; step <= 1200; step++ { // 100 ms steps
		for range 4 {
			if id := n.decide(clk.Now(), 0); id != "" {
				n.show(t, id)
				delivered++
			}
		}
		clk.Advance(100 * time.Millisecond)
		if step%10 == 0 {
			n.ledger.Tick(ctx)
		}
		elapsed := time.Duration(step) * 100 * time.Millisecond
		ideal := int(1200 * elapsed / (2 * time.Minute))
		if delivered > ideal+2 {
			t.Fatalf("%v into the flight: %d delivered, the ideal is %d", elapsed, delivered, ideal)
		}
		if elapsed == 30*time.Second && (delivered < 240 || delivered > 300) {
			t.Fatalf("30s into the flight: %d delivered, want 300 ± 60 (and not past 300)", delivered)
		}
	}
	if delivered < 1176 {
		t.Fatalf("%d of 1200 delivered by the end of the flight, want at least 98%%", delivered)
	}
}

// Usages reports what the store holds for every limit of the set, with
// the pacing's target now and its ideal curve, and writes spend as
// decimals of the currency.
func TestUsages(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := &fakeClock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.FixedZone("JST", 9*3600))}
	set := limitedSet(tsubame.ImpressionLimits{Total: 1000, Daily: 100}, tsubame.Budget{Total: 50_000_000, Daily: 2_000_000}, 2_500_000, tsubame.PacingEven)
	set.Campaigns[0].Start, set.Campaigns[0].End = clk.t.Add(-24*time.Hour), clk.t.Add(72*time.Hour)
	// Catch-up off: the half of the day before noon, never delivered, is
	// delivered at once (TestCatchUpIsBounded re-paces it over the rest).
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now, CatchUp: -1})
	ctx := t.Context()
	shown := 0
	for range 200 {
		if id := n.decide(clk.Now(), time.Minute); id != "" {
			n.show(t, id)
			shown++
			continue
		}
		n.ledger.Tick(ctx)
	}
	if err := n.ledger.Close(ctx); err != nil {
		t.Fatal(err)
	}
	us, err := budget.Usages(ctx, set, st, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]budget.Usage{}
	for _, u := range us {
		byKey[u.Key] = u
	}
	if len(us) != 4 {
		t.Fatalf("%d usages, want 4: %+v", len(us), us)
	}
	// Noon in Tokyo: half the day; a day into a 4-day flight.
	want := map[string]struct{ booked, settled, target int64 }{
		"li/li/imp":                  {1000, int64(shown), 250},
		"li/li/imp/2026-11-27":       {100, int64(shown), 50},
		"camp/camp/spend":            {50_000_000, int64(shown) * 2500, 12_500_000},
		"camp/camp/spend/2026-11-27": {2_000_000, int64(shown) * 2500, 1_000_000},
	}
	for key, w := range want {
		u, ok := byKey[key]
		if !ok {
			t.Fatalf("no usage of %s", key)
		}
		if u.Booked != w.booked || u.Settled != w.settled || u.Reserved != 0 || u.Remaining != w.booked-w.settled || u.Target != w.target {
			t.Errorf("%s: %+v, want booked %d, settled %d, target %d", key, u, w.booked, w.settled, w.target)
		}
		if len(u.Ideal) != 49 || u.Ideal[0].Value != 0 || u.Ideal[48].Value != w.booked {
			t.Errorf("%s: ideal curve %v", key, u.Ideal)
		}
	}
	// Even pacing held the day to half of the daily limit by noon.
	if shown != 50 {
		t.Fatalf("%d shown by noon, want the daily limit's half, 50", shown)
	}
	b, err := json.Marshal(byKey["camp/camp/spend/2026-11-27"])
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{`"kind":"spend"`, `"booked":"2"`, `"settled":"0.125"`, `"target":"1"`, `"date":"2026-11-27"`, `"pacing":"even"`} {
		if !strings.Contains(string(b), frag) {
			t.Errorf("JSON %s lacks %s", b, frag)
		}
	}
	b, _ = json.Marshal(byKey["li/li/imp"])
	if !strings.Contains(string(b), `"booked":1000,"settled":50,`) {
		t.Errorf("JSON %s: impressions are numbers", b)
	}
}

// A decision still running on an index that was replaced never writes the
// old index's budget over the new one's: the budget lowered from 10.00 to
// 5.00, one decision of the old index after the new one served, and the
// new index's line items spend 5.00 at most.
func TestStaleLineKeepsTheNewBudget(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	g, err := budget.NewLedger(st, st, budget.LedgerOptions{Holder: "n", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	c := budget.New(st, budget.Options{Ledger: g})
	compile := func(total tsubame.Money) map[string]*decision.Line {
		set := limitedSet(tsubame.ImpressionLimits{}, tsubame.Budget{Total: total}, 1_000_000_000, tsubame.PacingASAP) // 1.00 an impression
		b := *set.LineItems[0]
		b.ID = "li-b"
		set.LineItems = append(set.LineItems, &b)
		_, ls := lines(t, set, c)
		return ls
	}
	ctx := t.Context()
	allow := func(l *decision.Line) { c.Allow(l, &decision.Request{}, 0, clk.Now()) }
	old := compile(10_000_000)
	allow(old["li"])
	allow(old["li-b"])
	g.Tick(ctx)
	current := compile(5_000_000)
	allow(current["li"])
	allow(current["li-b"])
	allow(old["li"]) // a decision begun on the old index reaches li
	for range 50 {   // only li-b serves from now on
		allow(current["li-b"])
		clk.Advance(time.Second)
		g.Tick(ctx)
	}
	if s, o := committed(t, st, "camp/camp/spend"); s+o > 5_000_000 {
		t.Fatalf("committed %d of a budget lowered to 5000000", s+o)
	}
}

// blind is an Outcomes whose queue cannot be read while down is set.
type blind struct {
	tsubame.Outcomes
	down atomic.Bool
}

func (b *blind) Collect(ctx context.Context, holder string, max int) ([]tsubame.Outcome, error) {
	if b.down.Load() {
		return nil, errDown
	}
	return b.Outcomes.Collect(ctx, holder, max)
}

// A hold whose deadline passed while the node could not read its
// outcomes stays held until it can: a bill recorded before the deadline
// must spend it, not find it given back and spent again. Ten decisions
// on a limit of ten, each shown while the queue cannot be read, and past
// their deadline: still no eleventh, and once the queue is read, ten
// billed and none given back.
func TestHoldsWaitForTheirOutcomes(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	out := &blind{Outcomes: st}
	set := limitedSet(tsubame.ImpressionLimits{Total: 10}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	g, err := budget.NewLedger(st, out, budget.LedgerOptions{Holder: "node-0", Now: clk.Now, MaxHold: time.Minute, Grace: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := budget.New(st, budget.Options{Ledger: g})
	_, ls := lines(t, set, c)
	n := &node{ledger: g, counters: c, line: ls["li"], out: st}
	ctx := t.Context()
	out.down.Store(true)
	shown := 0
	for range 3 {
		for range 40 {
			if id := n.decide(clk.Now(), time.Minute); id != "" {
				n.show(t, id)
				shown++
				continue
			}
			g.Tick(ctx)
		}
		clk.Advance(2 * time.Minute) // past every deadline and its grace
		g.Tick(ctx)
	}
	if shown != 10 {
		t.Fatalf("%d impressions shown on a limit of 10 while the outcomes could not be read", shown)
	}
	out.down.Store(false)
	g.Tick(ctx)
	for range 40 {
		if n.decide(clk.Now(), time.Minute) != "" {
			t.Fatal("an eleventh decision once the outcomes were read")
		}
		g.Tick(ctx)
	}
	if c := g.Counts(); c.Billed != 10 || c.Expired != 0 || c.Holds != 0 {
		t.Fatalf("counts %+v, want 10 billed, none expired or held", c)
	}
}

// An account of a period that is over gives its whole lease back once no
// reservation is open, a part of a unit included (rounded up into the
// settled spend), and is then dropped: no lease is renewed for a day gone.
func TestPeriodOverGivesEverythingBack(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	clk.t = time.Date(2026, 11, 27, 23, 0, 0, 0, time.FixedZone("JST", 9*3600))
	set := limitedSet(tsubame.ImpressionLimits{}, tsubame.Budget{Daily: 1_000_000}, 2_500_001, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now})
	ctx := t.Context()
	served := int64(0)
	for range 50 {
		if n.counters.Allow(n.line, &decision.Request{}, 0, clk.Now()) {
			served++
			continue
		}
		n.ledger.Tick(ctx)
	}
	for range 6 * 60 * 2 { // two hours of rounds: the day ends
		clk.Advance(10 * time.Second)
		n.ledger.Tick(ctx)
	}
	key := "camp/camp/spend/2026-11-27"
	s, o := committed(t, st, key)
	if want := (served*2_500_001 + 999) / 1000; s != want || o != 0 {
		t.Fatalf("%d served at 2.500001: settled %d, outstanding %d; want %d and 0", served, s, o, want)
	}
	for _, a := range n.ledger.Stats() {
		if a.Key == key {
			t.Fatalf("the account of a day gone is kept: %+v", a)
		}
	}
}

// A day's account ends only once the pools its bids held by a share left
// have come back: bids lost before midnight whose reservation ends after
// it leave their shares pooled until then (a loss does not take its share
// back), and the day's lease must not count them as spent when the day
// ends. A daily limit of 1,000 in Tokyo: the line item's win rate is
// measured (10 %, billed at once) until its bids hold shares; at 23:59:30
// 200 more are made and all lost; past midnight and their end, the store
// counts for the day exactly the bills.
func TestDayEndWaitsForSharePools(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	clk.t = time.Date(2026, 11, 27, 23, 58, 0, 0, time.FixedZone("JST", 9*3600))
	set := limitedSet(tsubame.ImpressionLimits{Daily: 1000}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 5 * time.Second})
	ctx := t.Context()
	bills := 0
	for bids := 0; bids < 200; {
		if id := n.bid(clk.Now(), 10*time.Second, decision.HoldByWinRate); id != "" {
			if bids++; bids%10 == 0 {
				n.show(t, id)
				bills++
			}
			continue
		}
		clk.Advance(time.Second)
		n.ledger.Tick(ctx)
	}
	clk.t = time.Date(2026, 11, 27, 23, 59, 30, 0, time.FixedZone("JST", 9*3600))
	n.ledger.Tick(ctx)
	n.ledger.Tick(ctx)
	lost := 0
	for lost < 200 {
		if id := n.bid(clk.Now(), time.Minute, decision.HoldByWinRate); id != "" {
			n.record(t, tsubame.OutcomeLoss, id)
			lost++
			continue
		}
		n.ledger.Tick(ctx)
	}
	for range 6 * 3 { // three minutes of rounds: the day and the holds end
		clk.Advance(10 * time.Second)
		n.ledger.Tick(ctx)
	}
	if s, o := committed(t, st, "li/li/imp/2026-11-27"); s != int64(bills) || o != 0 {
		t.Fatalf("%d billed on the day, %d lost past its end: the store settled %d and holds %d outstanding; want %d and 0",
			bills, lost, s, o, bills)
	}
}

// An account retired after its flight and made again (the flight was
// extended) names its releases anew: the store applies them, and what it
// holds for the node is what the node holds.
func TestReleasesOfAnAccountMadeAgain(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := &fakeClock{t: time.Now()}
	start := clk.Now()
	set := limitedSet(tsubame.ImpressionLimits{Total: 100_000}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	set.LineItems[0].Start, set.LineItems[0].End = start, start.Add(30*time.Second)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now})
	ctx := t.Context()
	spend := func(line *decision.Line, seconds int) {
		for range seconds {
			for range 10 {
				n.counters.Allow(line, &decision.Request{}, 0, clk.Now())
			}
			clk.Advance(time.Second)
			n.ledger.Tick(ctx)
		}
	}
	spend(n.line, 20)
	for range 15 { // the flight ends at 30 s: the account gives all back and goes
		clk.Advance(time.Second)
		n.ledger.Tick(ctx)
	}
	set.LineItems[0].End = start.Add(3 * time.Minute) // extended
	_, ls := lines(t, set, n.counters)
	spend(ls["li"], 30)
	var leased int64
	for _, a := range n.ledger.Stats() {
		if a.Key == "li/li/imp" {
			leased = a.Leased
		}
	}
	if s, o := committed(t, st, "li/li/imp"); o != leased || s+o > 100_000 {
		t.Fatalf("the store holds %d outstanding (settled %d), the node %d", o, s, leased)
	}
}

// The largest budget a campaign may have (2^53-1 micro-units) is counted
// like any other: the hand grows with demand.
func TestLargestBudget(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{}, tsubame.Budget{Total: tsubame.MaxQuotaUnits}, 50_000_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now})
	served := 0
	for range 10 {
		for range 100 {
			if n.counters.Allow(n.line, &decision.Request{}, 0, clk.Now()) {
				served++
			}
		}
		clk.Advance(time.Second)
		n.ledger.Tick(t.Context())
	}
	if served < 900 {
		t.Fatalf("%d of 1000 requests served on the largest budget", served)
	}
}

// lossy is a Quotas whose answer to one Lease is lost after the store
// granted it.
type lossy struct {
	tsubame.Quotas
	mu   sync.Mutex
	n    int
	lose int // the Lease call (from 1) whose answer is lost
}

func (l *lossy) Lease(ctx context.Context, key, holder string, limit, want int64, ttl time.Duration) (int64, int64, error) {
	got, held, err := l.Quotas.Lease(ctx, key, holder, limit, want, ttl)
	l.mu.Lock()
	l.n++
	lost := l.n == l.lose
	l.mu.Unlock()
	if lost && err == nil {
		return 0, 0, tsubame.Errorf(tsubame.EUNAVAILABLE, "answer lost (granted %d)", got)
	}
	return got, held, err
}

// A grant whose answer was lost is not stranded: the next Lease says what
// the node holds, and it spends it.
func TestLostLeaseAnswerIsFound(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	lq := &lossy{Quotas: st, lose: 1}
	set := limitedSet(tsubame.ImpressionLimits{Total: 6400}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	g, err := budget.NewLedger(lq, st, budget.LedgerOptions{Holder: "n", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	c := budget.New(st, budget.Options{Ledger: g})
	_, ls := lines(t, set, c)
	ctx := t.Context()
	for range 5 {
		for range 5 {
			c.Allow(ls["li"], &decision.Request{}, 0, clk.Now())
		}
		clk.Advance(time.Second)
		g.Tick(ctx)
	}
	var leased int64
	for _, a := range g.Stats() {
		leased = a.Leased
	}
	if _, o := committed(t, st, "li/li/imp"); o != leased {
		t.Fatalf("the store holds %d for the node, the node counts %d", o, leased)
	}
}

// History keeps what each key committed at each Record, halves a key's
// points past MaxPoints (keeping the first and the last), and forgets a key
// not recorded for a day.
func TestHistory(t *testing.T) {
	var h budget.History
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for i := range budget.MaxPoints + 1 {
		h.Record([]budget.Usage{{Key: "a", Settled: int64(i), Reserved: 1}}, t0.Add(time.Duration(i)*time.Minute))
	}
	h.Record([]budget.Usage{{Key: "b", Settled: 7}}, t0.Add(30*time.Hour))
	us := []budget.Usage{{Key: "a"}, {Key: "b"}, {Key: "c"}}
	h.Fill(us)
	a := us[0].Committed
	if len(a) != budget.MaxPoints/2+1 || a[0].Value != 1 || a[len(a)-1].Value != budget.MaxPoints+1 || !a[1].Time.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("a: %d points, first %v, second %v, last %v", len(a), a[0], a[1], a[len(a)-1])
	}
	if len(us[1].Committed) != 1 || us[1].Committed[0].Value != 7 || us[2].Committed != nil {
		t.Fatalf("b %v, c %v", us[1].Committed, us[2].Committed)
	}
	h.Record(nil, t0.Add(49*time.Hour)) // a was last recorded a day before
	us = []budget.Usage{{Key: "a"}, {Key: "b"}}
	h.Fill(us)
	if us[0].Committed != nil || us[1].Committed == nil {
		t.Fatalf("after a day: a %d points, b %d", len(us[0].Committed), len(us[1].Committed))
	}
	b, err := json.Marshal(budget.Usage{Key: "x", Kind: budget.KindSpend, Committed: []budget.Point{{Time: t0, Value: 1_500_000}}})
	if err != nil || !strings.Contains(string(b), `"committed":[{"time":"2026-11-27T00:00:00Z","value":"1.5"}]`) {
		t.Fatalf("JSON %s (%v)", b, err)
	}
}

// A test request (OpenRTB's test=1) is allowed while the leases could pay
// for it, and takes nothing: committed stays what real decisions took.
func TestTestRequestsSpendNothing(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{Total: 3}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now})
	ctx := t.Context()
	test := &decision.Request{Test: true}
	if n.counters.Allow(n.line, test, 0, clk.Now()) {
		t.Fatal("a test request allowed before any lease")
	}
	n.ledger.Tick(ctx)
	for i := range 20 {
		if !n.counters.Allow(n.line, test, 0, clk.Now()) {
			t.Fatalf("test request %d refused with a lease in hand", i)
		}
	}
	real := 0
	for range 20 {
		if n.counters.Allow(n.line, &decision.Request{}, 0, clk.Now()) {
			real++
		} else {
			n.ledger.Tick(ctx)
		}
	}
	if real != 3 {
		t.Fatalf("%d real decisions after 20 test ones on a limit of 3", real)
	}
	if n.counters.Allow(n.line, test, 0, clk.Now()) {
		t.Fatal("a test request allowed with the limit spent")
	}
}

// An impression limit lowered below what is committed stops the line item
// on every node as soon as the node decides on the new index, with no
// round of its loop in between: 64,000 lowered to 1,000 on two nodes
// with 3,012 committed. The nodes' hands, leased under the old limit,
// are given back, not spent.
func TestLoweredLimitStopsAtOnce(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	opt := budget.LedgerOptions{Now: clk.Now}
	set := limitedSet(tsubame.ImpressionLimits{Total: 64_000}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	var nodes []*node
	for i := range 2 {
		nodes = append(nodes, newNode(t, st, set, fmt.Sprint("node-", i), opt))
	}
	ctx := t.Context()
	shown := 0
	for shown < 3012 {
		for _, n := range nodes {
			for shown < 3012 {
				id := n.decide(clk.Now(), time.Hour)
				if id == "" {
					break
				}
				n.show(t, id)
				shown++
			}
			n.ledger.Tick(ctx)
		}
		clk.Advance(time.Second)
	}
	for _, n := range nodes {
		if a := n.ledger.Stats()[0]; a.Hand == 0 {
			t.Fatalf("%s holds nothing in hand before the limit is lowered: the test shows nothing", a.Key)
		}
	}
	lowered := limitedSet(tsubame.ImpressionLimits{Total: 1000}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	for i, n := range nodes {
		_, ls := lines(t, lowered, n.counters)
		n.line = ls["li"]
		if id := n.decide(clk.Now(), time.Hour); id != "" {
			t.Fatalf("node %d decided on a limit of 1,000 with 3,012 committed", i)
		}
	}
	for range 5 {
		for i, n := range nodes {
			n.ledger.Tick(ctx)
			if id := n.decide(clk.Now(), time.Hour); id != "" {
				t.Fatalf("node %d decided on a limit of 1,000 with 3,012 committed, after its loop ran", i)
			}
		}
		clk.Advance(time.Second)
	}
	if s, o := committed(t, st, "li/li/imp"); s+o != 3012 {
		t.Fatalf("settled %d and outstanding %d: the hands leased under the old limit were not given back (3,012 shown)", s, o)
	}
}

// A bill that comes after its hold was given back was paid all the same:
// it is spent from the hand, or debited in the store past the limit, and
// reported. Ten decisions on a limit of ten, none shown within their
// reservation: given back, ten more are decided and shown; then the first
// ten's bills come. The store counts all twenty, and nothing more is
// decided.
func TestLateBillsAreDebited(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{Total: 10}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 30 * time.Second})
	ctx := t.Context()
	decideAll := func() []string {
		var got []string
		for range 50 {
			if id := n.decide(clk.Now(), time.Minute); id != "" {
				got = append(got, id)
				continue
			}
			n.ledger.Tick(ctx)
		}
		return got
	}
	first := decideAll()
	clk.Advance(2 * time.Minute)
	n.ledger.Tick(ctx)
	second := decideAll()
	if len(first) != 10 || len(second) != 10 {
		t.Fatalf("%d decisions, then %d after the first expired; want 10 and 10", len(first), len(second))
	}
	for _, id := range second {
		n.show(t, id)
	}
	n.ledger.Tick(ctx)
	for _, id := range first {
		n.show(t, id) // late
	}
	n.ledger.Tick(ctx)
	n.ledger.Tick(ctx)
	if s, o := committed(t, st, "li/li/imp"); s+o != 20 {
		t.Fatalf("settled %d and outstanding %d: 20 impressions were billed", s, o)
	}
	if got := decideAll(); len(got) != 0 {
		t.Fatalf("%d decisions past a limit the bills used up", len(got))
	}
	if c := n.ledger.Counts(); c.Late != 10 || c.Overage != 10 || c.Billed != 10 || c.Expired != 10 {
		t.Fatalf("counts %+v: want 10 billed, 10 expired, 10 late, all 10 past the leases", c)
	}
}

// A won bid of an exchange that bills after the reservation
// (decision.Request.KeepWon) is spent when its reservation ends unbilled,
// and its late bill is not spent again: on a limit of 10, 8 bids won and
// 2 silent. At their end the 8 are spent and the 2 given back, so that 2
// more are bid; the 8 late bills then change nothing, and the store
// counts exactly 10. Given back instead (TestLateBillsAreDebited), the 8
// would be sold again and debited past the limit.
func TestKeptWonBidsAreSpentOnce(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{Total: 10}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 30 * time.Second})
	ctx := t.Context()
	decideAll := func() []string {
		var got []string
		for range 50 {
			if id := n.allow(clk.Now(), &decision.Request{ReserveUntil: clk.Now().Add(time.Minute), KeepWon: true}); id != "" {
				got = append(got, id)
				continue
			}
			n.ledger.Tick(ctx)
		}
		return got
	}
	first := decideAll()
	if len(first) != 10 {
		t.Fatalf("%d decisions on a limit of 10", len(first))
	}
	for _, id := range first[:8] {
		n.record(t, tsubame.OutcomeWin, id)
	}
	n.ledger.Tick(ctx)
	clk.Advance(2 * time.Minute)
	n.ledger.Tick(ctx)
	second := decideAll()
	if len(second) != 2 {
		t.Fatalf("%d decisions after the first ended, want the 2 not won", len(second))
	}
	for _, id := range second {
		n.show(t, id)
	}
	for _, id := range first[:8] {
		n.show(t, id) // late
	}
	n.ledger.Tick(ctx)
	n.ledger.Tick(ctx)
	if s, o := committed(t, st, "li/li/imp"); s+o != 10 {
		t.Fatalf("settled %d and outstanding %d: 10 impressions were billed", s, o)
	}
	if c := n.ledger.Counts(); c.Kept != 8 || c.KeptBilled != 8 || c.Late != 8 || c.Overage != 0 || c.Billed != 2 || c.Expired != 2 {
		t.Fatalf("counts %+v: want 8 kept and their 8 bills late, 2 expired and 2 billed, none past the leases", c)
	}
}

// A restart hands over the counts of the won bids kept at their end, and
// the server that takes over debits the stopped one's other late bills
// from its own accounts: on a limit of 20, the stopping server held 10
// bids with KeepWon; 6 won and were kept at their end, 4 were given back.
// After the stop, the server that goes on serves one, then the 6 are
// billed (matched: not spent again) and 2 of the 4 (late: debited from its
// accounts). The store counts exactly those 9, and the server that goes
// on serves 11 more.
func TestRestartHandsOverKeptBids(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{Total: 20}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	opt := budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 5 * time.Second, Handovers: st}
	old := newNode(t, st, set, "old", opt)
	ctx := t.Context()
	var held []string
	for len(held) < 10 {
		if id := old.allow(clk.Now(), &decision.Request{ReserveUntil: clk.Now().Add(10 * time.Second), KeepWon: true}); id != "" {
			held = append(held, id)
			continue
		}
		old.ledger.Tick(ctx)
	}
	for _, id := range held[:6] {
		old.record(t, tsubame.OutcomeWin, id)
	}
	old.ledger.Tick(ctx)
	clk.Advance(time.Minute) // past their end and the grace
	old.ledger.Tick(ctx)
	if c := old.ledger.Counts(); c.Kept != 6 || c.Expired != 4 {
		t.Fatalf("counts %+v: want 6 kept, 4 given back", c)
	}
	if err := old.ledger.Close(ctx); err != nil {
		t.Fatal(err)
	}
	next := newNode(t, st, set, "next", opt)
	next.ledger.Tick(ctx) // claims the handover
	served := 0
	for served == 0 { // it serves the line item (its accounts are made)
		if id := next.decide(clk.Now(), time.Minute); id != "" {
			next.show(t, id)
			served++
		}
		next.ledger.Tick(ctx)
	}
	for _, id := range held[:8] {
		old.show(t, id) // late, for the old holder
	}
	next.ledger.Tick(ctx)
	next.ledger.Tick(ctx)
	if s, _ := committed(t, st, "li/li/imp"); s != 1+8 {
		t.Fatalf("1 served, then 6 kept bids and 2 given back billed late: the store settled %d; want 9", s)
	}
	for range 100 {
		if id := next.decide(clk.Now(), time.Minute); id != "" {
			next.show(t, id)
			served++
			continue
		}
		clk.Advance(time.Second)
		next.ledger.Tick(ctx)
	}
	if s, o := committed(t, st, "li/li/imp"); served != 12 || s+o != 20 {
		t.Fatalf("%d served after, the store settled %d, %d outstanding; want 12 served and 20 in all", served, s, o)
	}
}

// KeepWon spends only whole holds: a bid held by a share has too little
// in its pool to pay a kept bid's price, so it is given back at its end,
// and its late bill is debited. On a limit of 100, once the win rate is
// measured, 20 bids are held by their shares with KeepWon, 10 of them win
// and are billed after their end: the store counts every bill.
func TestKeepWonSpendsWholeHoldsOnly(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{Total: 100}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 5 * time.Second})
	ctx := t.Context()
	bills := 0
	for bids := 0; bids < 200; {
		if id := n.bid(clk.Now(), 10*time.Second, decision.HoldByWinRate); id != "" {
			if bids++; bids%10 == 0 {
				n.show(t, id)
				bills++
			}
			continue
		}
		clk.Advance(time.Second)
		n.ledger.Tick(ctx)
	}
	clk.Advance(20 * time.Second)
	n.ledger.Tick(ctx)
	var kept []string
	for len(kept) < 20 {
		req := &decision.Request{ReserveUntil: decision.RoundUp(clk.Now().Add(10*time.Second), time.Second),
			HoldShare: decision.HoldByWinRate, KeepWon: true}
		if id := n.allow(clk.Now(), req); id != "" {
			kept = append(kept, id)
			continue
		}
		n.ledger.Tick(ctx)
	}
	for _, id := range kept[:10] {
		n.record(t, tsubame.OutcomeWin, id)
	}
	n.ledger.Tick(ctx)
	clk.Advance(time.Minute) // past their end and the grace
	n.ledger.Tick(ctx)
	for _, id := range kept[:10] {
		n.show(t, id) // late
		bills++
	}
	n.ledger.Tick(ctx)
	n.ledger.Tick(ctx)
	settled, outstanding := committed(t, st, "li/li/imp")
	if c := n.ledger.Counts(); settled != int64(bills) || c.Kept != 0 {
		t.Fatalf("%d billed: the store settled %d (%d outstanding); counts %+v; want every bill settled, none kept", bills, settled, outstanding, c)
	}
}

// A loss gives a bid's hold back at once, a win keeps it for its bill, and
// a bid neither won nor lost by its win window gives it back then: on a
// limit of three, three bids; one lost, one won, one silent. At the next
// round the lost one's impression is bid again; the won one is billed and
// spent; the silent one comes back at its window, long before its
// reservation ends.
func TestOutcomesMoveTheMoney(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{Total: 3}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now, MaxHold: 10 * time.Minute, Grace: 30 * time.Second})
	ctx := t.Context()
	bid := func() string {
		t.Helper()
		for range 10 {
			id := fmt.Sprintf("b%09d", ids.Add(1))
			req := &decision.Request{Reserve: []string{id}, ReserveUntil: clk.Now().Add(10 * time.Minute), WinBy: clk.Now().Add(5 * time.Second)}
			if n.counters.Allow(n.line, req, 0, clk.Now()) {
				n.mu.Lock()
				if n.dues == nil {
					n.dues = map[string]int64{}
				}
				n.dues[id] = req.ReserveUntil.Unix()
				n.mu.Unlock()
				return id
			}
			n.ledger.Tick(ctx)
		}
		return ""
	}
	lost, won, silent := bid(), bid(), bid()
	if lost == "" || won == "" || silent == "" || bid() != "" {
		t.Fatal("not exactly three bids on a limit of three")
	}
	if c := n.ledger.Counts(); c.Holds != 3 || c.Buckets != 1 || c.HoldBytes <= 0 || c.OldestHold != 0 {
		t.Fatalf("counts %+v: want 3 holds in one bucket, its bytes, made now", c)
	}
	n.record(t, tsubame.OutcomeLoss, lost)
	n.record(t, tsubame.OutcomeWin, won)
	n.ledger.Tick(ctx)
	again := bid()
	if again == "" {
		t.Fatal("the lost bid's impression was not bid again at once")
	}
	if bid() != "" {
		t.Fatal("a bid past the limit")
	}
	n.record(t, tsubame.OutcomeBill, won)
	clk.Advance(2 * time.Second)
	if c := n.ledger.Counts(); c.Holds != 3 || c.OldestHold != 2*time.Second {
		t.Fatalf("counts %+v: want 3 held (won, silent, again), the oldest 2 s old", c)
	}
	clk.Advance(4 * time.Second) // past the win window, far from the reservation's end
	n.ledger.Tick(ctx)
	if bid() == "" {
		t.Fatal("the silent bid's impression did not come back at its win window")
	}
	if c := n.ledger.Counts(); c.Lost != 1 || c.Won != 1 || c.Billed != 1 || c.Expired < 1 {
		t.Fatalf("counts %+v: want 1 lost, 1 won, 1 billed, the silent one expired", c)
	}

}

// A shaded bid holds what it bids, not its line item's CPM, and its bill
// spends the clearing price: a budget of 0.01 at a CPM of 1.00 pays for
// ten impressions at the CPM, twenty bids shaded to half of it; billed
// at a clearing price of a quarter of the CPM, each gives the rest back,
// and the budget buys 39: a bid holds 0.0005 for as long as it is open,
// and after 38 bills of 0.00025 only 0.0005 is left for one more.
func TestShadedBidsHoldWhatTheyBid(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{}, tsubame.Budget{Total: 10_000}, 1_000_000, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now})
	ctx := t.Context()
	bidAll := func() []string {
		var got []string
		for refused := 0; refused < 50; {
			id := fmt.Sprintf("b%09d", ids.Add(1))
			req := &decision.Request{Reserve: []string{id}, ReserveUntil: clk.Now().Add(time.Minute),
				Shading: decision.Shading{Factor: decision.MaxShadingFactor / 2}}
			if !n.counters.Allow(n.line, req, 0, clk.Now()) {
				refused++
				clk.Advance(time.Second)
				n.ledger.Tick(ctx)
				continue
			}
			n.mu.Lock()
			if n.dues == nil {
				n.dues = map[string]int64{}
			}
			n.dues[id] = req.ReserveUntil.Unix()
			n.mu.Unlock()
			got = append(got, id)
		}
		return got
	}
	held := bidAll()
	if len(held) != 20 {
		t.Fatalf("%d bids shaded to half the CPM on a budget of ten impressions at the CPM, want 20", len(held))
	}
	billed := len(held)
	for round := 0; round < 20 && len(held) > 0; round++ {
		for _, id := range held {
			n.mu.Lock()
			due := n.dues[id]
			n.mu.Unlock()
			o := tsubame.Outcome{Kind: tsubame.OutcomeBill, Bid: id, LineItem: "li", Due: due, Price: 250_000}
			if first, err := st.Record(ctx, n.ledger.Holder(), &o, time.Hour); err != nil || !first {
				t.Fatal(first, err)
			}
		}
		n.ledger.Tick(ctx)
		held = bidAll()
		billed += len(held)
	}
	if billed != 39 {
		t.Fatalf("%d bills at a quarter of the CPM on a budget of ten impressions at the CPM, want 39", billed)
	}
	if s, o := committed(t, st, "camp/camp/spend"); s+o > 10_000 {
		t.Fatalf("committed %d of a budget of 10000", s+o)
	}
}

// A server that stops hands its open holds over, and a server that goes
// on settles them: a restart spends what was billed and nothing more. On a
// limit of 20, the stopping server holds ten bids, none billed yet; six
// are billed after it stopped, the other four never. The server that
// goes on spends the six and gives the four back once their reservation
// is over, and then serves the remaining 14 itself. Without the handover,
// all ten would count as spent.
func TestRestartHandsOverOpenHolds(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{Total: 20}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	opt := budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 30 * time.Second, Handovers: st}
	old := newNode(t, st, set, "old", opt)
	ctx := t.Context()
	var held []string
	for len(held) < 10 {
		if id := old.decide(clk.Now(), time.Minute); id != "" {
			held = append(held, id)
			continue
		}
		old.ledger.Tick(ctx)
	}
	if err := old.ledger.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s, o := committed(t, st, "li/li/imp"); s != 0 || o != 10 {
		t.Fatalf("after the stop: settled %d, outstanding %d; want the ten holds' units kept, nothing spent", s, o)
	}
	next := newNode(t, st, set, "next", opt)
	next.ledger.Tick(ctx) // claims the handover
	for _, id := range held[:6] {
		old.show(t, id) // billed after the stop, for the old holder
	}
	next.ledger.Tick(ctx)
	if s, o := committed(t, st, "li/li/imp"); s != 6 || o > 4+2 {
		t.Fatalf("after six bills: settled %d, outstanding %d; want 6 spent and the four open holds", s, o)
	}
	clk.Advance(2 * time.Minute) // past the reservation and its grace
	served := 0
	for range 100 {
		if next.decide(clk.Now(), time.Minute) != "" {
			served++
			continue
		}
		clk.Advance(time.Second)
		next.ledger.Tick(ctx)
	}
	if served != 14 {
		t.Fatalf("%d served after the restart on a limit of 20 with 6 billed, want 14", served)
	}
	if s, o := committed(t, st, "li/li/imp"); s+o != 20 || s < 6 {
		t.Fatalf("settled %d, outstanding %d; want 20 committed", s, o)
	}
}

// A restart hands over bids held by a share of their price too: their
// pools and share go to the server that goes on, which pays their bills
// from them. On a limit of 100, a server measures its line item's win
// rate (10 %, billed at once) until its bids hold shares, then holds 100
// more bids by their shares and stops. Ten of those are billed after it
// stopped, the rest never; the server that goes on spends the ten from
// the pools it took over, gives the rest back when their reservation
// ends, and then serves what is left of the limit. The store counts
// exactly the bills and what it served: the limit, never more.
func TestRestartHandsOverShareHolds(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	set := limitedSet(tsubame.ImpressionLimits{Total: 100}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	opt := budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 5 * time.Second, Handovers: st}
	old := newNode(t, st, set, "old", opt)
	ctx := t.Context()
	bills := 0
	for bids := 0; bids < 200; { // the rate, measured on buckets that end
		if id := old.bid(clk.Now(), 10*time.Second, decision.HoldByWinRate); id != "" {
			if bids++; bids%10 == 0 {
				old.show(t, id)
				bills++
			}
			continue
		}
		clk.Advance(time.Second)
		old.ledger.Tick(ctx)
	}
	clk.Advance(20 * time.Second) // the measuring bids' holds end
	old.ledger.Tick(ctx)
	old.ledger.Tick(ctx)
	var held []string
	for len(held) < 100 {
		if id := old.bid(clk.Now(), time.Minute, decision.HoldByWinRate); id != "" {
			held = append(held, id)
			continue
		}
		old.ledger.Tick(ctx)
	}
	_, leased := committed(t, st, "li/li/imp")
	if leased >= 100-int64(bills) {
		t.Fatalf("100 bids hold %d impressions: want shares, fewer than a whole one each", leased)
	}
	if err := old.ledger.Close(ctx); err != nil {
		t.Fatal(err)
	}
	next := newNode(t, st, set, "next", opt)
	next.ledger.Tick(ctx) // claims the handover
	if c := next.ledger.Counts(); c.Adopted != 1 || c.Holds != 100 {
		t.Fatalf("counts %+v: want the stopped server's 100 bids adopted", c)
	}
	for _, id := range held[:10] {
		old.show(t, id) // billed after the stop, for the old holder
		bills++
	}
	next.ledger.Tick(ctx)
	clk.Advance(2 * time.Minute) // past the reservation and its grace
	served := 0
	for range 400 {
		if id := next.decide(clk.Now(), time.Minute); id != "" {
			next.show(t, id)
			served++
			continue
		}
		clk.Advance(time.Second)
		next.ledger.Tick(ctx)
	}
	settled, outstanding := committed(t, st, "li/li/imp")
	t.Logf("%d billed, %d served after; store: %d settled, %d outstanding; %+v", bills, served, settled, outstanding, next.ledger.Counts())
	if bills+served != 100 || settled+outstanding != 100 {
		t.Fatalf("%d billed and %d served after the restart, the store committed %d: want exactly the limit, 100", bills, served, settled+outstanding)
	}
}

// Bids of an exchange that sends no win notice, held by their line item's
// win rate (decision.HoldByWinRate), at a 10 % win rate on a limit of 100
// impressions, each bill at once, each bid's reservation a minute: until
// its first buckets end, a bid holds a whole impression, and after, a
// share by the measured rate, so that the node holds more bids at once
// than the limit has impressions; every bill spends a whole impression,
// from its bucket's holds or past them; and the limit is spent, exactly
// as the store counts the bills, and never past it.
// With whole holds (the mutation: a share of 0) no more than 100 bids are
// ever open. With loss notices too (win_rate_holds: on), a loss leaves its
// share in its bucket's pool: the bills are paid from the pools, not past
// them (a loss that took its share back would leave each bill only its
// own share).
func TestWinRateHoldsShareThePrice(t *testing.T) {
	for _, tc := range []struct{ byRate, losses bool }{{true, false}, {false, false}, {true, true}} {
		byRate, losses := tc.byRate, tc.losses
		t.Run(fmt.Sprintf("by rate %v, losses %v", byRate, losses), func(t *testing.T) {
			st := memory.New()
			t.Cleanup(func() { _ = st.Close() })
			clk := newClock()
			const limit = 100
			set := limitedSet(tsubame.ImpressionLimits{Total: limit}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
			n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 5 * time.Second})
			ctx := t.Context()
			share := int64(0)
			if byRate {
				share = decision.HoldByWinRate
			}
			bids, bills, mostOpen := 0, 0, int64(0)
			for s := 0; s < 3600 && bills < limit+20; s++ {
				for range 20 { // 20 bid requests a second
					id := fmt.Sprintf("b%09d", ids.Add(1))
					req := &decision.Request{Reserve: []string{id}, ReserveUntil: decision.RoundUp(clk.Now().Add(time.Minute), time.Second),
						HoldShare: share}
					if !n.counters.Allow(n.line, req, 0, clk.Now()) {
						continue
					}
					n.mu.Lock()
					if n.dues == nil {
						n.dues = map[string]int64{}
					}
					n.dues[id] = req.ReserveUntil.Unix()
					n.mu.Unlock()
					bids++
					if bids%10 == 0 { // a 10 % win rate, billed at once
						n.record(t, tsubame.OutcomeBill, id)
						bills++
					} else if losses {
						n.record(t, tsubame.OutcomeLoss, id)
					}
				}
				mostOpen = max(mostOpen, n.ledger.Counts().Holds)
				clk.Advance(time.Second)
				n.ledger.Tick(ctx)
			}
			// The last holds end; the debts are debited.
			clk.Advance(2 * time.Minute)
			n.ledger.Tick(ctx)
			n.ledger.Tick(ctx)
			settled, outstanding := committed(t, st, "li/li/imp")
			c := n.ledger.Counts()
			t.Logf("%d bids, %d billed, at most %d open at once; store: %d settled, %d outstanding; counts %+v",
				bids, bills, mostOpen, settled, outstanding, c)
			if settled != int64(bills) {
				t.Errorf("the store settled %d impressions: %d were billed", settled, bills)
			}
			if c.Billed != uint64(bills) || c.Late != 0 {
				t.Errorf("counts %+v: want all %d bills applied to their holds, none late", c, bills)
			}
			if !byRate {
				if mostOpen > limit || bills != limit || c.PastHold != 0 || c.Overage != 0 {
					t.Errorf("whole holds: %d open at most, %d billed, %d past their holds, %d overage; want at most %d open, exactly %d billed, none past",
						mostOpen, bills, c.PastHold, c.Overage, limit, limit)
				}
				return
			}
			if !losses && mostOpen <= limit*3/2 {
				t.Errorf("at most %d bids open at once on a limit of %d: bids by the win rate hold a share, and many more are open (whole holds: at most the limit)", mostOpen, limit)
			}
			switch {
			case losses && c.PastHold*4 > uint64(bills)*3:
				t.Errorf("counts %+v: %d of %d bills went past their bucket's holds; the losses' shares should pay most", c, c.PastHold, bills)
			case !losses && c.PastHold == 0:
				t.Errorf("counts %+v: no bill went past its bucket's holds", c)
			}
			// Spent, and never past it: the hand's headroom pays what the
			// pools do not.
			if bills != limit || c.Overage != 0 {
				t.Errorf("%d billed of a limit of %d, %d bills debited past the leases: want exactly the limit, none past", bills, limit, c.Overage)
			}
		})
	}
}

// A shortfall is caught up at most CatchUp percent of the plan an hour:
// a daily limit of 2,400 paced even (100 an hour by the clock), traffic
// to spare but for two hours without any (06:00 to 08:00 UTC), delivers
// at most 150 in each hour after them, and all 2,400 by the day's end;
// with CatchUp off, the two hours' 200 go at once.
func TestCatchUpIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		catchUp int
		most    int // the most in an hour after the gap
		from    int // the first hour of traffic (0: midnight)
	}{{"bounded", 0, 150, 0}, {"unbounded", -1, 300, 0},
		// Nothing committed until 18:00 (a line item added, or resumed,
		// late): the day's 2,400 re-paced over its last 6 hours, 400 an
		// hour, not 1,800 in the first of them.
		{"added at 18:00", 0, 400, 18}} {
		t.Run(tc.name, func(t *testing.T) {
			st := memory.New()
			t.Cleanup(func() { _ = st.Close() })
			clk := &fakeClock{t: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)}
			set := limitedSet(tsubame.ImpressionLimits{Daily: 2400}, tsubame.Budget{}, 1_000_000, tsubame.PacingEven)
			set.Campaigns[0].Timezone = "UTC"
			n := newNode(t, st, set, "node-0", budget.LedgerOptions{Now: clk.Now, Interval: 10 * time.Second, CatchUp: tc.catchUp})
			ctx := t.Context()
			perHour := make([]int, 24)
			for step := range 24 * 360 { // 10 s steps
				h := step / 360
				if h >= tc.from && (h < 6 || h >= 8) {
					for range 3 { // 1,080 an hour: ten times the plan
						if id := n.decide(clk.Now(), 0); id != "" {
							n.show(t, id)
							perHour[h]++
						}
					}
				}
				clk.Advance(10 * time.Second)
				n.ledger.Tick(ctx)
			}
			total := 0
			for _, v := range perHour {
				total += v
			}
			t.Logf("per hour %v: %d in all", perHour, total)
			// The hand leased in an hour may be spent early in the next:
			// a few more than the bound.
			if most := slices.Max(perHour[max(8, tc.from):]); most > tc.most+5 || tc.catchUp < 0 && most < 250 {
				t.Errorf("after the gap, %d in an hour: want at most %d (the catch-up bound, and the hand)", most, tc.most)
			}
			if total < 2395 || total > 2400 {
				t.Errorf("%d delivered of 2,400: want all of it by the day's end", total)
			}
		})
	}
}

// A decision that finds its hand empty waits for the top-up, once per
// request, while the loop runs: served at once on a fresh ledger with a
// Wait, passed over without one, and not kept waiting by a closed ledger.
func TestWaitForTheTopUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wait  time.Duration
		serve bool
	}{{"waits", time.Second, true}, {"never waits", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			st := memory.New()
			t.Cleanup(func() { _ = st.Close() })
			set := limitedSet(tsubame.ImpressionLimits{Total: 1000}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
			// A long interval: only a kick can top the hand up in time.
			n := newNode(t, st, set, "node-0", budget.LedgerOptions{Interval: time.Hour, Lease: 3 * time.Hour, Wait: tc.wait})
			runLoop(t, n.ledger)
			req := &decision.Request{ReserveUntil: time.Now().Add(time.Minute)}
			got := n.allow(time.Now(), req) != ""
			if got != tc.serve || req.Waited != (tc.wait > 0) {
				t.Fatalf("served %v, waited %v: want served %v", got, req.Waited, tc.serve)
			}
			if c := n.ledger.Counts(); tc.serve && c.Waited != 1 {
				t.Errorf("counts: %+v, want one wait", c)
			}
			// The request waited once: its next empty hand does not wait.
			req2 := &decision.Request{ReserveUntil: time.Now().Add(time.Minute), Waited: true}
			for range 2000 {
				if n.allow(time.Now(), req2) == "" {
					break
				}
			}
			if c := n.ledger.Counts(); tc.serve && c.Waited != 1 {
				t.Errorf("a request that waited waited again: %+v", c)
			}
		})
	}
}

// Warm leases for a new index's limited line items before their first
// decision, once: the next index warms only what is new in it, and an
// account whose limit is spent is not asked for again at every compile.
func TestWarm(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	set := limitedSet(tsubame.ImpressionLimits{Total: 6400, Daily: 3200}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	set.LineItems = append(set.LineItems, &tsubame.LineItem{ID: "li-spent", Campaign: "camp", Priority: 1, Weight: 1, CPM: 1_000_000,
		Creatives: []string{"cr"}, Limits: tsubame.Limits{Impressions: tsubame.ImpressionLimits{Total: 5}}})
	if _, _, err := st.Lease(t.Context(), "li/li-spent/imp", "another-node", 5, 5, time.Hour); err != nil {
		t.Fatal(err) // another node holds all of li-spent
	}
	g, err := budget.NewLedger(st, st, budget.LedgerOptions{Holder: "node-0"})
	if err != nil {
		t.Fatal(err)
	}
	c := budget.New(st, budget.Options{Ledger: g})
	ix, ls := lines(t, set, c)
	if n := c.Warm(t.Context(), ix, nil); n != 2 {
		t.Fatalf("%d accounts warmed, want li's 2 (li-spent's is spent)", n)
	}
	// Served at once: no loop round, no wait.
	if !c.Allow(ls["li"], &decision.Request{}, 0, time.Now()) {
		t.Fatal("the first decision of a warmed line item was refused")
	}
	leases := func() int64 { return int64(g.Counts().Warmed) }
	// The same line items in the next index: nothing to warm; li-spent
	// is not asked again.
	ix2, _ := lines(t, set, c)
	if n := c.Warm(t.Context(), ix2, ix); n != 0 || leases() != 2 {
		t.Fatalf("the next index warmed %d (%d in all), want none", n, leases())
	}
	// A new line item in the next one: warmed.
	set.LineItems = append(set.LineItems, &tsubame.LineItem{ID: "li-new", Campaign: "camp", Priority: 1, Weight: 1, CPM: 1_000_000,
		Creatives: []string{"cr"}, Limits: tsubame.Limits{Impressions: tsubame.ImpressionLimits{Total: 640}}})
	ix3, _ := lines(t, set, c)
	if n := c.Warm(t.Context(), ix3, ix2); n != 1 {
		t.Fatalf("an index with a new line item warmed %d accounts, want 1", n)
	}
}

// expiring records the Expire calls a Quotas gets.
type expiring struct {
	tsubame.Quotas
	mu    sync.Mutex
	calls map[string][]time.Time
}

func (e *expiring) Expire(ctx context.Context, key string, at time.Time) error {
	e.mu.Lock()
	if e.calls == nil {
		e.calls = map[string][]time.Time{}
	}
	e.calls[key] = append(e.calls[key], at)
	e.mu.Unlock()
	return e.Quotas.Expire(ctx, key, at)
}

// A day's keys are given to the store to drop once the day (in the
// campaign's zone) and KeepDaily are over, once each, after their first
// lease; a total's never (its flight may be extended), nor any key
// without KeepDaily.
func TestDailyKeysExpire(t *testing.T) {
	for _, keep := range []time.Duration{48 * time.Hour, 0} {
		st := memory.New()
		t.Cleanup(func() { _ = st.Close() })
		clk := newClock() // 12:00 in Tokyo, on 2026-11-27
		q := &expiring{Quotas: st}
		set := limitedSet(tsubame.ImpressionLimits{Total: 5000, Daily: 1000}, tsubame.Budget{Daily: 100 * tsubame.MicrosPerUnit}, tsubame.MicrosPerUnit, tsubame.PacingASAP)
		g, err := budget.NewLedger(q, st, budget.LedgerOptions{Holder: "node-0", Now: clk.Now, KeepDaily: keep})
		if err != nil {
			t.Fatal(err)
		}
		c := budget.New(st, budget.Options{Ledger: g})
		_, ls := lines(t, set, c)
		ctx := t.Context()
		serve := func() {
			for range 20 {
				if !c.Allow(ls["li"], &decision.Request{}, 0, clk.Now()) {
					g.Tick(ctx)
				}
			}
			g.Tick(ctx)
		}
		serve()
		clk.Advance(time.Hour)
		serve()
		clk.Advance(24 * time.Hour) // the next day
		serve()
		q.mu.Lock()
		got := q.calls
		q.mu.Unlock()
		tokyo, _ := time.LoadLocation("Asia/Tokyo")
		want := map[string][]time.Time{}
		if keep > 0 {
			for _, d := range []int{27, 28} {
				at := time.Date(2026, 11, d+1, 0, 0, 0, 0, tokyo).Add(keep)
				date := fmt.Sprintf("2026-11-%d", d)
				want["li/li/imp/"+date] = []time.Time{at}
				want["camp/camp/spend/"+date] = []time.Time{at}
			}
		}
		if len(got) != len(want) {
			t.Errorf("keep %v: Expire called for %v, want %v", keep, got, want)
		}
		for k, w := range want {
			if len(got[k]) != 1 || !got[k][0].Equal(w[0]) {
				t.Errorf("keep %v: %s expires at %v, want once at %v", keep, k, got[k], w[0])
			}
		}
		if err := g.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := budget.NewLedger(memory.New(), memory.New(), budget.LedgerOptions{KeepDaily: time.Hour}); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("KeepDaily of 1h: %v, want EINVALID", err)
	}
}

// Bids held by their win rate never bill past a limit, whatever the draw
// of wins: three nodes of one store bid for a line item on an exchange
// that sends billing notices only (no win or loss notice), each bid
// winning with a seeded chance of 3, 10 or 20 %, and billed 0–3 s later
// at its price or, on a budget, at a clearing price below it. The pools
// of shares hold what the rate's bound expects; a run of wins past it at
// the limit's end would be billed past the limit but for each hand's
// headroom. Over 16 seeds a case: never a bill past the limit (the store's
// count, the ledgers' overage), and at least 90 % of it spent.
func TestWinRateHoldsNeverBillPastTheLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		winPct     int
		limits     tsubame.ImpressionLimits
		budget     tsubame.Budget
		key        string
		concurrent bool
	}{
		{"impressions at 10 %", 10, tsubame.ImpressionLimits{Total: 150}, tsubame.Budget{}, "li/li/imp", false},
		{"impressions at 3 %", 3, tsubame.ImpressionLimits{Total: 60}, tsubame.Budget{}, "li/li/imp", false},
		{"impressions at 20 %", 20, tsubame.ImpressionLimits{Total: 150}, tsubame.Budget{}, "li/li/imp", false},
		// Shares over one half: the third moment's terms are negative, and
		// what the ended bids took away must not stay (under-delivery).
		{"impressions at 60 %", 60, tsubame.ImpressionLimits{Total: 150}, tsubame.Budget{}, "li/li/imp", false},
		{"budget at 10 %", 10, tsubame.ImpressionLimits{}, tsubame.Budget{Total: 300_000}, "camp/camp/spend", false},
		// Each second's bids at once, from as many goroutines: a take sees
		// the others' risk before its check.
		{"impressions at 10 %, bids at once", 10, tsubame.ImpressionLimits{Total: 150}, tsubame.Budget{}, "li/li/imp", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(16) {
				billed, spent, limit := billPastTheLimit(t, tc.winPct, tc.limits, tc.budget, tc.key, seed, tc.concurrent)
				if t.Failed() {
					return
				}
				if spent > limit || spent*10 < limit*9 {
					t.Fatalf("seed %d: %d billed, the store settled %d of a limit of %d: want at least 90 %%, never more", seed, billed, spent, limit)
				}
			}
		})
	}
}

// billPastTheLimit runs TestWinRateHoldsNeverBillPastTheLimit's exchange
// with seed until nothing is bid for a minute, and returns the bills, what
// the store settled on key, and its limit (impressions, or micro-units).
func billPastTheLimit(t *testing.T, winPct int, limits tsubame.ImpressionLimits, b tsubame.Budget, key string, seed uint64, concurrent bool) (billed, settled, limit int64) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	clk := newClock()
	const cpm = 1_000_000 // 1.00 a thousand: 1,000 micro-units an impression
	set := limitedSet(limits, b, cpm, tsubame.PacingASAP)
	opt := budget.LedgerOptions{Now: clk.Now, MaxHold: time.Minute, Grace: 5 * time.Second}
	var nodes []*node
	for i := range 3 {
		nodes = append(nodes, newNode(t, st, set, fmt.Sprint("node-", i), opt))
	}
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(seed, uint64(winPct)))
	type bill struct {
		n     *node
		id    string
		at    time.Time
		price tsubame.Money
	}
	var due []bill
	idle := time.Duration(0)
	for step := 0; idle < time.Minute && step < 3600; step++ {
		bids := 0
		for _, n := range nodes {
			// 10 bid requests a second on each node, one after another or
			// at once; the wins are drawn in the order of the ids.
			ids := make([]string, 10)
			var wg sync.WaitGroup
			for i := range ids {
				if !concurrent {
					ids[i] = n.bid(clk.Now(), 10*time.Second, decision.HoldByWinRate)
					continue
				}
				wg.Go(func() { ids[i] = n.bid(clk.Now(), 10*time.Second, decision.HoldByWinRate) })
			}
			wg.Wait()
			slices.Sort(ids)
			for _, id := range ids {
				if id == "" {
					continue
				}
				bids++
				if rng.IntN(100) < winPct {
					price := tsubame.Money(cpm)
					if b.Total > 0 {
						price = tsubame.Money(cpm/2 + rng.IntN(cpm/2+1)) // cleared below the bid
					}
					due = append(due, bill{n, id, clk.Now().Add(time.Duration(rng.IntN(4)) * time.Second), price})
				}
			}
		}
		if bids == 0 {
			idle += time.Second
		} else {
			idle = 0
		}
		clk.Advance(time.Second)
		rest := due[:0]
		for _, x := range due {
			if x.at.After(clk.Now()) {
				rest = append(rest, x)
				continue
			}
			x.n.mu.Lock()
			o := tsubame.Outcome{Kind: tsubame.OutcomeBill, Bid: x.id, LineItem: x.n.line.ID, Due: x.n.dues[x.id], Price: x.price}
			x.n.mu.Unlock()
			if _, err := x.n.out.Record(ctx, x.n.ledger.Holder(), &o, time.Hour); err != nil {
				t.Fatal(err)
			}
			billed++
		}
		due = rest
		for _, n := range nodes {
			n.ledger.Tick(ctx)
		}
		if s, o := committed(t, st, key); s+o > 0 {
			limit = int64(limits.Total) + int64(b.Total)
			if s+o > limit {
				t.Errorf("seed %d: the store committed %d (settled %d, outstanding %d) on a limit of %d", seed, s+o, s, o, limit)
				return billed, s, limit
			}
		}
	}
	clk.Advance(2 * time.Minute) // the last holds end
	var over uint64
	for _, n := range nodes {
		n.ledger.Tick(ctx)
		if err := n.ledger.Close(ctx); err != nil {
			t.Fatal(err)
		}
		over += n.ledger.Counts().Overage
	}
	settled, outstanding := committed(t, st, key)
	limit = int64(limits.Total) + int64(b.Total)
	t.Logf("seed %d: %d billed; store: %d settled, %d outstanding of %d; %d bills past the leases", seed, billed, settled, outstanding, limit, over)
	if over != 0 || outstanding != 0 {
		t.Errorf("seed %d: %d bills debited past the leases, %d left outstanding after Close", seed, over, outstanding)
	}
	return billed, settled, limit
}

// leaseCounting counts the leases and releases a Quotas gets.
type leaseCounting struct {
	tsubame.Quotas
	calls atomic.Int64
}

func (q *leaseCounting) Lease(ctx context.Context, key, holder string, limit, want int64, ttl time.Duration) (int64, int64, error) {
	q.calls.Add(1)
	return q.Quotas.Lease(ctx, key, holder, limit, want, ttl)
}

func (q *leaseCounting) Release(ctx context.Context, key, holder, id string, used, unused int64) error {
	q.calls.Add(1)
	return q.Quotas.Release(ctx, key, holder, id, used, unused)
}

// An account no decision asked of for Idle (and twice its longest gap
// between decisions) gives its lease back whole and
// is no longer renewed: an idle node sends the store nothing for it. The
// store then counts exactly what was served, nothing outstanding; the
// next decision leases again. With Idle off, the lease is renewed all
// along.
func TestIdleLeaseGoesBack(t *testing.T) {
	for _, idle := range []time.Duration{5 * time.Minute, -1} {
		st := memory.New()
		t.Cleanup(func() { _ = st.Close() })
		q := &leaseCounting{Quotas: st}
		clk := newClock()
		set := limitedSet(tsubame.ImpressionLimits{Total: 1000}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
		g, err := budget.NewLedger(q, st, budget.LedgerOptions{Holder: "node-0", Now: clk.Now, Idle: idle})
		if err != nil {
			t.Fatal(err)
		}
		c := budget.New(st, budget.Options{Ledger: g})
		_, ls := lines(t, set, c)
		ctx := t.Context()
		served := int64(0)
		serve := func(n int) {
			for range n {
				if !c.Allow(ls["li"], &decision.Request{}, 0, clk.Now()) {
					g.Tick(ctx)
					if !c.Allow(ls["li"], &decision.Request{}, 0, clk.Now()) {
						t.Fatal("refused after a top-up")
					}
				}
				served++
			}
		}
		rounds := func(d time.Duration) {
			for range int(d / (10 * time.Second)) {
				clk.Advance(10 * time.Second)
				g.Tick(ctx)
			}
		}
		serve(30)
		rounds(7 * time.Minute) // past Idle: the lease goes back
		before := q.calls.Load()
		rounds(10 * time.Minute)
		calls := q.calls.Load() - before
		s, o := committed(t, st, "li/li/imp")
		if idle < 0 {
			if calls == 0 || o == 0 {
				t.Fatalf("idle off: %d store calls in 10 idle minutes, %d outstanding; want renewals of a lease held", calls, o)
			}
			continue
		}
		if calls != 0 || s != served || o != 0 {
			t.Fatalf("idle: %d store calls in 10 idle minutes, %d settled, %d outstanding; want none, %d, 0", calls, s, o, served)
		}
		serve(5) // leases again; kept twice the 17 minutes it went without
		rounds(40 * time.Minute)
		if s, o := committed(t, st, "li/li/imp"); s != served || o != 0 {
			t.Fatalf("after idle again: %d settled, %d outstanding; want %d, 0", s, o, served)
		}
	}
}

// A request whose line item has both an impression limit and a campaign
// budget, on a fresh ledger whose loop tops up only when asked, waits
// once, for both: the counters after the first empty one are topped up
// in the same round, not left to refuse it after its wait.
func TestWaitCoversEveryCounter(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	set := limitedSet(tsubame.ImpressionLimits{Total: 1000, Daily: 500}, tsubame.Budget{Total: 100 * tsubame.MicrosPerUnit, Daily: 50 * tsubame.MicrosPerUnit},
		tsubame.MicrosPerUnit, tsubame.PacingASAP)
	n := newNode(t, st, set, "node-0", budget.LedgerOptions{Interval: time.Hour, Lease: 3 * time.Hour, Wait: time.Second, Warm: -1})
	runLoop(t, n.ledger)
	req := &decision.Request{ReserveUntil: time.Now().Add(time.Minute)}
	if n.allow(time.Now(), req) == "" || !req.Waited {
		t.Fatalf("the first decision was refused (waited %v): %+v", req.Waited, n.ledger.Stats())
	}
	if c := n.ledger.Counts(); c.Waited != 1 {
		t.Fatalf("counts: %+v, want one wait", c)
	}
}

// runLoop runs g's loop until the test ends, once it runs.
func runLoop(t *testing.T, g *budget.Ledger) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(30 * time.Second); !g.Running(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the loop does not run")
		}
	}
}

// An auction's direct line item is only checked until it wins
// (decision.Request.Check), and takes its impression once it has
// (decision.Index.Take): on three nodes of one store, four clients each,
// where one check in three wins, the checks alone commit nothing, and
// the wins take exactly the limit of 300, never over it.
func TestChecksTakeNothingUntilTheWin(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	set := limitedSet(tsubame.ImpressionLimits{Total: 300}, tsubame.Budget{}, 1_000_000, tsubame.PacingASAP)
	opt := budget.LedgerOptions{Interval: 10 * time.Millisecond, Lease: time.Minute}
	var nodes []*node
	for i := range 3 {
		n := newNode(t, st, set, fmt.Sprint("node-", i), opt)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); n.ledger.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		nodes = append(nodes, n)
	}
	check := func(n *node) bool {
		return n.counters.Allow(n.line, &decision.Request{Check: true, ReserveUntil: time.Now().Add(time.Hour)}, 0, time.Now())
	}
	// Checks until every node's lease is in hand: none commits anything.
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for !check(n) {
			if time.Now().After(deadline) {
				t.Fatal("no node could serve within 30s")
			}
			time.Sleep(time.Millisecond)
		}
		for range 100 {
			check(n)
		}
	}
	if s, o := committed(t, st, "li/li/imp"); s != 0 || o > 300 {
		t.Fatalf("checks alone: settled %d, outstanding %d", s, o)
	}
	var taken, checked atomic.Int64
	var wg sync.WaitGroup
	for _, n := range nodes {
		for range 4 {
			wg.Go(func() {
				for refused := 0; refused < 4000 && taken.Load() < 300; {
					if !check(n) {
						refused++
						time.Sleep(100 * time.Microsecond)
						continue
					}
					if checked.Add(1)%3 != 0 {
						continue // lost the auction: nothing to give back
					}
					id := n.decide(time.Now(), time.Hour)
					if id == "" {
						refused++ // the last of a lease went to another client
						continue
					}
					taken.Add(1)
					n.show(t, id)
				}
			})
		}
	}
	wg.Wait()
	for deadline := time.Now().Add(30 * time.Second); taken.Load() < 300 && time.Now().Before(deadline); {
		for _, n := range nodes {
			if check(n) {
				if id := n.decide(time.Now(), time.Hour); id != "" {
					taken.Add(1)
					n.show(t, id)
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	for _, n := range nodes {
		if check(n) {
			t.Error("a check allowed past the limit")
		}
	}
	if got := taken.Load(); got != 300 {
		t.Fatalf("%d wins taken on a limit of 300 (%d checks)", got, checked.Load())
	}
	if s, o := committed(t, st, "li/li/imp"); s+o != 300 {
		t.Fatalf("committed %d settled + %d outstanding, want 300", s, o)
	}
}
