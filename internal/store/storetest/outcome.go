package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
)

// RunOutcomes runs the Outcomes part of the suite. open returns two handles
// on the same, empty data, as two nodes sharing the store would hold them,
// and arranges for them to be closed when the test ends.
func RunOutcomes(t *testing.T, open func(t *testing.T) (a, b tsubame.Outcomes)) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, a, b tsubame.Outcomes)
	}{
		{"FirstThenRepeats", testOutcomeFirst},
		{"KindsAndBefore", testOutcomeBefore},
		{"HoldersApart", testOutcomeHolders},
		{"CollectThenAck", testOutcomeCollect},
		{"ExactlyOnceUnderRace", testOutcomeRace},
		{"NewAgainAfterTTL", testOutcomeTTL},
		{"RejectsInvalid", testOutcomeInvalid},
	} {
		t.Run("Outcomes"+tc.name, func(t *testing.T) {
			a, b := open(t)
			tc.test(t, a, b)
		})
	}
}

func record(t *testing.T, s tsubame.Outcomes, holder string, o tsubame.Outcome, ttl time.Duration) (tsubame.Outcome, bool) {
	t.Helper()
	first, err := s.Record(ctx(t), holder, &o, ttl)
	if err != nil {
		t.Fatalf("Record(%s %s): %v", o.Kind, o.Bid, err)
	}
	return o, first
}

func collect(t *testing.T, s tsubame.Outcomes, holder string, max int) []tsubame.Outcome {
	t.Helper()
	got, err := s.Collect(ctx(t), holder, max)
	if err != nil {
		t.Fatalf("Collect(%s, %d): %v", holder, max, err)
	}
	return got
}

func ack(t *testing.T, s tsubame.Outcomes, holder string, n int) {
	t.Helper()
	if err := s.Ack(ctx(t), holder, n); err != nil {
		t.Fatalf("Ack(%s, %d): %v", holder, n, err)
	}
}

func testOutcomeFirst(t *testing.T, a, b tsubame.Outcomes) {
	bill := tsubame.Outcome{Kind: tsubame.OutcomeBill, Bid: "b-1", LineItem: "li-1", Due: 1_800_000_000, Price: 1_590_000}
	got, first := record(t, a, "node-a", bill, time.Hour)
	if !first || got.Before != 0 {
		t.Fatalf("first bill: first %v, before %b", first, got.Before)
	}
	for i, s := range []tsubame.Outcomes{a, b, a, b} {
		repeat := bill
		repeat.Price = 1 // a repeat's fields do not matter: nothing of it is kept
		if _, first := record(t, s, "node-a", repeat, time.Hour); first {
			t.Fatalf("repeat %d reported as first", i+1)
		}
	}
	q := collect(t, b, "node-a", 10)
	if len(q) != 1 || q[0] != bill {
		t.Fatalf("queue %+v, want only %+v", q, bill)
	}
}

func testOutcomeBefore(t *testing.T, a, b tsubame.Outcomes) {
	base := tsubame.Outcome{Bid: "b-2", LineItem: "li-1", Due: 1_800_000_000}
	win, loss, bill := base, base, base
	win.Kind, loss.Kind, bill.Kind, bill.Price = tsubame.OutcomeWin, tsubame.OutcomeLoss, tsubame.OutcomeBill, 700_000
	if o, first := record(t, a, "n", win, time.Hour); !first || o.Before != 0 {
		t.Fatalf("win: first %v, before %b", first, o.Before)
	}
	if o, first := record(t, b, "n", bill, time.Hour); !first || o.Before != tsubame.OutcomeKinds(0).With(tsubame.OutcomeWin) {
		t.Fatalf("bill after the win: first %v, before %b", first, o.Before)
	}
	o, first := record(t, a, "n", loss, time.Hour)
	if !first || !o.Before.Has(tsubame.OutcomeWin) || !o.Before.Has(tsubame.OutcomeBill) || o.Before.Has(tsubame.OutcomeLoss) {
		t.Fatalf("loss after the win and the bill: first %v, before %b", first, o.Before)
	}
	q := collect(t, b, "n", 10)
	if len(q) != 3 || q[0].Kind != tsubame.OutcomeWin || q[1].Kind != tsubame.OutcomeBill || q[2].Kind != tsubame.OutcomeLoss ||
		q[1].Price != 700_000 || q[2].Before != o.Before {
		t.Fatalf("queue %+v", q)
	}
	// Another bid's kinds are its own.
	if o, first := record(t, b, "n", tsubame.Outcome{Kind: tsubame.OutcomeBill, Bid: "b-3", LineItem: "li-1"}, time.Hour); !first || o.Before != 0 {
		t.Fatalf("another bid's bill: first %v, before %b", first, o.Before)
	}
}

func testOutcomeHolders(t *testing.T, a, b tsubame.Outcomes) {
	for i := range 4 {
		holder := []string{"node-a/1f", "node-b/2e"}[i%2]
		record(t, []tsubame.Outcomes{a, b}[i/2], holder, tsubame.Outcome{Kind: tsubame.OutcomeLoss, Bid: fmt.Sprint("b-", i), LineItem: "li"}, time.Hour)
	}
	qa, qb := collect(t, a, "node-a/1f", 10), collect(t, a, "node-b/2e", 10)
	if len(qa) != 2 || len(qb) != 2 || qa[0].Bid != "b-0" || qa[1].Bid != "b-2" || qb[0].Bid != "b-1" || qb[1].Bid != "b-3" {
		t.Fatalf("queues %+v and %+v", qa, qb)
	}
	if q := collect(t, b, "node-c/3d", 10); len(q) != 0 {
		t.Fatalf("a holder with no outcome has %+v", q)
	}
	ack(t, b, "node-c/3d", 5) // nothing to ack: no error
}

func testOutcomeCollect(t *testing.T, a, b tsubame.Outcomes) {
	const n = 1000
	for i := range n {
		record(t, []tsubame.Outcomes{a, b}[i%2], "n", tsubame.Outcome{Kind: tsubame.OutcomeWin, Bid: fmt.Sprintf("b-%04d", i), LineItem: "li", Due: int64(i)}, time.Hour)
	}
	first := collect(t, a, "n", 3)
	if again := collect(t, b, "n", 3); len(first) != 3 || len(again) != 3 || first[0] != again[0] || first[2] != again[2] {
		t.Fatalf("two collects before an ack: %+v and %+v", first, again)
	}
	ack(t, a, "n", 0)
	seen := 0
	for seen < n {
		batch := collect(t, []tsubame.Outcomes{a, b}[seen%2], "n", 300)
		if len(batch) == 0 {
			t.Fatalf("queue empty after %d of %d", seen, n)
		}
		for i, o := range batch {
			if want := fmt.Sprintf("b-%04d", seen+i); o.Bid != want || o.Due != int64(seen+i) {
				t.Fatalf("outcome %d is %+v, want bid %s", seen+i, o, want)
			}
		}
		ack(t, a, "n", len(batch))
		seen += len(batch)
	}
	if q := collect(t, b, "n", 10); len(q) != 0 {
		t.Fatalf("%d outcomes left after acking all", len(q))
	}
	record(t, a, "n", tsubame.Outcome{Kind: tsubame.OutcomeLoss, Bid: "b-last", LineItem: "li"}, time.Hour)
	ack(t, b, "n", 100) // more than the queue holds: it empties
	if q := collect(t, a, "n", 10); len(q) != 0 {
		t.Fatalf("%d outcomes left after acking more than the queue", len(q))
	}
}

func testOutcomeRace(t *testing.T, a, b tsubame.Outcomes) {
	const callers, bids = 16, 20
	var firsts atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := range callers {
		s := []tsubame.Outcomes{a, b}[c%2]
		wg.Go(func() {
			<-start
			for i := range bids {
				for _, k := range []tsubame.OutcomeKind{tsubame.OutcomeWin, tsubame.OutcomeBill} {
					o := tsubame.Outcome{Kind: k, Bid: fmt.Sprint("b-", i), LineItem: "li"}
					first, err := s.Record(ctx(t), "n", &o, time.Hour)
					if err != nil {
						t.Error(err)
						return
					}
					if first {
						firsts.Add(1)
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if n := firsts.Load(); n != 2*bids {
		t.Fatalf("%d firsts for %d bids' wins and bills", n, bids)
	}
	q := collect(t, a, "n", tsubame.MaxOutcomesBatch)
	if len(q) != 2*bids {
		t.Fatalf("%d outcomes queued, want %d", len(q), 2*bids)
	}
	// Whichever of a bid's win and bill came first, the other names it.
	for _, o := range q {
		other := tsubame.OutcomeWin
		if o.Kind == tsubame.OutcomeWin {
			other = tsubame.OutcomeBill
		}
		if o.Before != 0 && o.Before != tsubame.OutcomeKinds(0).With(other) {
			t.Fatalf("%s of %s names %b before it", o.Kind, o.Bid, o.Before)
		}
	}
}

func testOutcomeTTL(t *testing.T, a, b tsubame.Outcomes) {
	o := tsubame.Outcome{Kind: tsubame.OutcomeWin, Bid: "b-ttl", LineItem: "li"}
	if _, first := record(t, a, "n", o, time.Second); !first {
		t.Fatal("first reported as a repeat")
	}
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for i := 0; ; i++ {
		got, first := record(t, []tsubame.Outcomes{a, b}[i%2], "n", o, time.Hour)
		if first {
			if got.Before != 0 {
				t.Fatalf("after its window the win names %b before it", got.Before)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still a repeat 30s after a 1s window")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if elapsed := time.Since(start); elapsed < time.Second-5*time.Millisecond {
		t.Fatalf("new again %v after its first record, within its 1s window", elapsed)
	}
}

func testOutcomeInvalid(t *testing.T, a, b tsubame.Outcomes) {
	ok := tsubame.Outcome{Kind: tsubame.OutcomeBill, Bid: "b-1", LineItem: "li", Price: 1}
	for _, tc := range []struct {
		name   string
		holder string
		edit   func(o *tsubame.Outcome)
		ttl    time.Duration
	}{
		{"empty holder", "", nil, time.Hour},
		{"long holder", string(make([]byte, tsubame.MaxHolderLength+1)), nil, time.Hour},
		{"holder with a bar", "a|b", nil, time.Hour},
		{"no kind", "n", func(o *tsubame.Outcome) { o.Kind = 0 }, time.Hour},
		{"unknown kind", "n", func(o *tsubame.Outcome) { o.Kind = 9 }, time.Hour},
		{"empty bid", "n", func(o *tsubame.Outcome) { o.Bid = "" }, time.Hour},
		{"bid with a bar", "n", func(o *tsubame.Outcome) { o.Bid = "a|b" }, time.Hour},
		{"empty line item", "n", func(o *tsubame.Outcome) { o.LineItem = "" }, time.Hour},
		{"negative price", "n", func(o *tsubame.Outcome) { o.Price = -1 }, time.Hour},
		{"price past MaxCPM", "n", func(o *tsubame.Outcome) { o.Price = tsubame.MaxCPM + 1 }, time.Hour},
		{"a loss with a price", "n", func(o *tsubame.Outcome) { o.Kind = tsubame.OutcomeLoss }, time.Hour},
		{"short ttl", "n", nil, time.Second - 1},
		{"long ttl", "n", nil, tsubame.MaxOutcomeTTL + 1},
	} {
		o := ok
		if tc.edit != nil {
			tc.edit(&o)
		}
		if first, err := a.Record(ctx(t), tc.holder, &o, tc.ttl); first || tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("%s: Record = %v, %v; want an EINVALID error", tc.name, first, err)
		}
	}
	if _, err := a.Collect(ctx(t), "n", 0); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("Collect of 0: %v", err)
	}
	if _, err := a.Collect(ctx(t), "n", tsubame.MaxOutcomesBatch+1); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("Collect past the batch: %v", err)
	}
	if err := a.Ack(ctx(t), "n", -1); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("Ack of -1: %v", err)
	}
	if q := collect(t, b, "n", 10); len(q) != 0 {
		t.Fatalf("refused records queued %+v", q)
	}
	// None of them was recorded: the valid one is still first.
	if _, first := record(t, b, "n", ok, time.Hour); !first {
		t.Fatal("a refused record was kept")
	}
}
