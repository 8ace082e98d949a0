package storetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
)

// RunDedupe runs the Deduper part of the suite. open returns two handles on
// the same, empty data, as two nodes sharing the store would hold them (two
// connections to one Redis; a store of one process may return itself
// twice), and arranges for them to be closed when the test ends.
func RunDedupe(t *testing.T, open func(t *testing.T) (a, b tsubame.Deduper)) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, a, b tsubame.Deduper)
	}{
		{"FirstThenRepeats", testDedupeFirst},
		{"IDsIndependent", testDedupeIndependent},
		{"NewAgainAfterTTL", testDedupeTTL},
		{"RejectsInvalid", testDedupeInvalid},
		{"CancelledNeverTrue", testDedupeCancelled},
		{"ExactlyOnceUnderRace", testDedupeRace},
		{"SeenReadsOnly", testDedupeSeen},
		{"SeenEndsWithTheWindow", testDedupeSeenTTL},
		{"SeenRejectsInvalid", testDedupeSeenInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := open(t)
			tc.test(t, a, b)
		})
	}
}

func firstSeen(t *testing.T, d tsubame.Deduper, id string, ttl time.Duration) bool {
	t.Helper()
	ok, err := d.FirstSeen(ctx(t), id, ttl)
	if err != nil {
		t.Fatalf("FirstSeen(%q): %v", id, err)
	}
	return ok
}

func testDedupeFirst(t *testing.T, a, b tsubame.Deduper) {
	if !firstSeen(t, a, "imp:d-1", time.Hour) {
		t.Fatal("first sighting reported as a repeat")
	}
	for i, d := range []tsubame.Deduper{a, b, a, b} {
		if firstSeen(t, d, "imp:d-1", time.Hour) {
			t.Fatalf("repeat %d (handle %c) reported as new", i+1, "ab"[i%2])
		}
	}
	// A repeat with another window is still a repeat.
	if firstSeen(t, b, "imp:d-1", time.Millisecond) {
		t.Fatal("repeat with a shorter ttl reported as new")
	}
}

func testDedupeIndependent(t *testing.T, a, b tsubame.Deduper) {
	ids := []string{"imp:d-1", "clk:d-1", "imp:d-2", "imp:d-1 ", "IMP:D-1", "x", "{tag}:y", "seen:z", "\x00\xff"}
	for i, id := range ids {
		d := []tsubame.Deduper{a, b}[i%2]
		if !firstSeen(t, d, id, time.Hour) {
			t.Fatalf("%q reported as a repeat: it shares state with another id", id)
		}
	}
	for _, id := range ids {
		if firstSeen(t, b, id, time.Hour) {
			t.Fatalf("%q reported as new the second time", id)
		}
	}
}

// testDedupeTTL waits until an id is new again instead of assuming when it
// will be. While it waits it repeats the id with a ttl of an hour, so a
// store whose repeats extend or replace the window never counts it again
// and fails at the deadline; and the sighting that ends the wait opens a
// window of an hour, so the next call is a repeat however slow the machine.
// It does check the lower bound: an id is never new again before ttl has
// passed (time is taken before the first call, so a slow machine only makes
// the interval longer), less a little for a server's clock.
func testDedupeTTL(t *testing.T, a, b tsubame.Deduper) {
	const ttl = 50 * time.Millisecond
	const slack = 5 * time.Millisecond // Redis expires by its own wall clock, to the millisecond
	if !firstSeen(t, a, "long", time.Hour) {
		t.Fatal("first sighting reported as a repeat")
	}
	start := time.Now()
	if !firstSeen(t, a, "short", ttl) {
		t.Fatal("first sighting reported as a repeat")
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		d := []tsubame.Deduper{a, b}[i%2]
		if firstSeen(t, d, "short", time.Hour) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("id still a repeat 30s after a %v window", ttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if elapsed := time.Since(start); elapsed < ttl-slack {
		t.Fatalf("id new again %v after its first sighting, within its %v window", elapsed, ttl)
	}
	// The sighting that ended the wait opened a window of an hour.
	if firstSeen(t, b, "short", time.Hour) {
		t.Fatal("id new twice in a row after its window passed")
	}
	// Its neighbour, with a window of an hour, is still remembered.
	if firstSeen(t, b, "long", time.Hour) {
		t.Fatal("an id forgotten within its window (a sweep took it early?)")
	}
}

func testDedupeInvalid(t *testing.T, a, _ tsubame.Deduper) {
	longest := strings.Repeat("x", tsubame.MaxEventIDLength)
	for _, tc := range []struct {
		id  string
		ttl time.Duration
	}{
		{"", time.Minute},
		{longest + "y", time.Minute},
		{"ok", 0},
		{"ok", -time.Second},
	} {
		ok, err := a.FirstSeen(ctx(t), tc.id, tc.ttl)
		if ok || tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Fatalf("FirstSeen(%d-byte id, %v) = %v, %v; want false and an EINVALID error", len(tc.id), tc.ttl, ok, err)
		}
	}
	// Refused arguments recorded nothing; the longest id is accepted.
	for _, id := range []string{"ok", longest} {
		if !firstSeen(t, a, id, time.Minute) {
			t.Fatalf("%d-byte id reported as a repeat", len(id))
		}
	}
}

func testDedupeCancelled(t *testing.T, a, b tsubame.Deduper) {
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	ok, err := a.FirstSeen(c, "cancelled", time.Minute)
	if ok || err == nil {
		t.Fatalf("FirstSeen with a cancelled context = %v, %v; want false and an error", ok, err)
	}
	// Whether the id was recorded is not said; the store still answers.
	if !firstSeen(t, b, "after-cancel", time.Minute) {
		t.Fatal("first sighting reported as a repeat")
	}
}

// testDedupeRace has 8 goroutines on each handle ask about the same 500 ids,
// all in the same order from one start, so that every id is asked about by
// 16 callers at about the same moment: each id must be first exactly once.
func testDedupeRace(t *testing.T, a, b tsubame.Deduper) {
	const ids, perHandle = 500, 8
	var firsts [ids]atomic.Int32
	var total atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 * perHandle {
		d := []tsubame.Deduper{a, b}[g%2]
		wg.Go(func() {
			<-start
			for i := range ids {
				ok, err := d.FirstSeen(ctx(t), "race:"+strconv.Itoa(i), time.Hour)
				if err != nil {
					t.Errorf("goroutine %d, id %d: %v", g, i, err)
					return
				}
				if ok {
					firsts[i].Add(1)
					total.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	var wrong []string
	for i := range firsts {
		if n := firsts[i].Load(); n != 1 {
			wrong = append(wrong, fmt.Sprintf("id %d first %d times", i, n))
		}
	}
	if n := total.Load(); n != ids || len(wrong) > 0 {
		t.Fatalf("%d firsts among %d calls on %d ids, want %d: %s", n, 2*perHandle*ids, ids, ids, strings.Join(wrong[:min(10, len(wrong))], "; "))
	}
}

// BenchFirstSeen measures d.FirstSeen from parallelism goroutines per CPU
// (b.SetParallelism): "new" asks only about ids never seen (a write each),
// "repeat" only about ids already seen (the answer false). The id strings
// are built per call in "new", which costs the benchmark one allocation of
// its own per op.
func BenchFirstSeen(b *testing.B, d tsubame.Deduper, parallelism int) {
	bctx := context.Background()
	b.Run("new", func(b *testing.B) {
		benchFresh(b, parallelism, "bench:%d:%d:", func(id string) (bool, error) { return d.FirstSeen(bctx, id, time.Hour) })
	})
	b.Run("repeat", func(b *testing.B) {
		seen := make([]string, 1024)
		for i := range seen {
			seen[i] = fmt.Sprintf("bench:seen:%d:%d", time.Now().UnixNano(), i)
			if _, err := d.FirstSeen(bctx, seen[i], time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		var goroutine atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(parallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(goroutine.Add(1)) * 97
			for ; pb.Next(); i++ {
				ok, err := d.FirstSeen(bctx, seen[i%len(seen)], time.Hour)
				if err != nil || ok {
					b.Errorf("FirstSeen(%s) = %v, %v; want false", seen[i%len(seen)], ok, err)
					return
				}
			}
		})
	})
}

// benchFresh runs op from parallelism goroutines per CPU (b.SetParallelism)
// on ids never used before, each of which must answer true: prefix (a
// format of the start time and the goroutine's number) and a counter. The
// id strings are built per call: one allocation of the benchmark's own.
func benchFresh(b *testing.B, parallelism int, prefix string, op func(id string) (bool, error)) {
	var goroutine atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		buf := fmt.Appendf(nil, prefix, time.Now().UnixNano(), goroutine.Add(1))
		n := len(buf)
		for i := uint64(0); pb.Next(); i++ {
			buf = strconv.AppendUint(buf[:n], i, 10)
			if ok, err := op(string(buf)); err != nil || !ok {
				b.Errorf("%s: %v, %v; want true", buf, ok, err)
				return
			}
		}
	})
}

func seen(t *testing.T, d tsubame.Deduper, ids ...string) []bool {
	t.Helper()
	got, err := d.Seen(ctx(t), ids)
	if err != nil {
		t.Fatalf("Seen(%q): %v", ids, err)
	}
	if len(got) != len(ids) {
		t.Fatalf("Seen(%q) answered %d values", ids, len(got))
	}
	return got
}

// testDedupeSeen: Seen tells recorded ids from others, from either handle,
// in the order asked, and records nothing.
func testDedupeSeen(t *testing.T, a, b tsubame.Deduper) {
	if got := seen(t, a); len(got) != 0 {
		t.Fatalf("Seen of no ids: %v", got)
	}
	if got := seen(t, a, "imp:s-1", "imp:s-2"); got[0] || got[1] {
		t.Fatalf("ids never recorded reported seen: %v", got)
	}
	// Seen recorded nothing: the first FirstSeen is still first.
	if !firstSeen(t, b, "imp:s-1", time.Hour) {
		t.Fatal("an id only asked about by Seen was recorded")
	}
	firstSeen(t, a, "imp:s-3", time.Hour)
	ids := []string{"imp:s-0", "imp:s-1", "imp:s-2", "imp:s-3", "imp:s-1"}
	want := []bool{false, true, false, true, true}
	for _, d := range []tsubame.Deduper{a, b} {
		got := seen(t, d, ids...)
		for i := range ids {
			if got[i] != want[i] {
				t.Fatalf("Seen(%q) = %v, want %v", ids, got, want)
			}
		}
	}
	many := make([]string, tsubame.MaxSeenBatch)
	for i := range many {
		many[i] = fmt.Sprint("imp:many-", i)
		if i%3 == 0 {
			firstSeen(t, a, many[i], time.Hour)
		}
	}
	for i, ok := range seen(t, b, many...) {
		if ok != (i%3 == 0) {
			t.Fatalf("Seen of %d ids: %q is %v", len(many), many[i], ok)
		}
	}
}

// testDedupeSeenTTL: an id is no longer seen once its window has passed
// (waited for, never assumed), and asking does not extend the window.
func testDedupeSeenTTL(t *testing.T, a, b tsubame.Deduper) {
	firstSeen(t, a, "short", 50*time.Millisecond)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; seen(t, []tsubame.Deduper{a, b}[i%2], "short")[0]; i++ {
		if time.Now().After(deadline) {
			t.Fatal("id still seen 30s after a 50ms window")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !firstSeen(t, b, "short", time.Hour) {
		t.Fatal("an id no longer seen was a repeat")
	}
	if !seen(t, a, "short")[0] {
		t.Fatal("an id recorded again is not seen")
	}
}

func testDedupeSeenInvalid(t *testing.T, a, _ tsubame.Deduper) {
	tooMany := make([]string, tsubame.MaxSeenBatch+1)
	for i := range tooMany {
		tooMany[i] = "ok"
	}
	for _, ids := range [][]string{
		{""},
		{"ok", strings.Repeat("x", tsubame.MaxEventIDLength+1)},
		tooMany,
	} {
		if _, err := a.Seen(ctx(t), ids); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("Seen of %d ids (first %q): %v, want EINVALID", len(ids), ids[0][:min(len(ids[0]), 8)], err)
		}
	}
}
