package storetest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
)

// RunFrequency runs the FrequencyCounter part of the suite. open returns
// three handles on the same, empty data, as three nodes sharing the store
// would hold them (three connections to one Redis; a store of one process
// may return itself three times), and arranges for them to be closed when
// the test ends. Time moves by the now each call passes, never by sleeping.
func RunFrequency(t *testing.T, open func(t *testing.T) (a, b, c tsubame.FrequencyCounter)) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, fcs []tsubame.FrequencyCounter)
	}{
		{"CapOfThree", testFrequencyCap},
		{"TwoCapsTogether", testFrequencyTwoCaps},
		{"WindowSlides", testFrequencySlides},
		{"LaterTimesCount", testFrequencyLater},
		{"FrequencyKeysIndependent", testFrequencyIndependent},
		{"TakeRejectsInvalid", testFrequencyInvalid},
		{"TakeCancelledNeverTrue", testFrequencyCancelled},
		{"ExactlyTheCapUnderRace", testFrequencyRace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, c := open(t)
			tc.test(t, []tsubame.FrequencyCounter{a, b, c})
		})
	}
}

// frequencyStart is the first now of the tests: any fixed time will do, as
// the windows are measured by the now of each call.
var frequencyStart = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// caps makes the caps of a line item: n impressions per window, each.
func caps(n int64, per time.Duration, more ...tsubame.FrequencyCap) []tsubame.FrequencyCap {
	return append([]tsubame.FrequencyCap{{Impressions: n, Per: tsubame.Duration(per)}}, more...)
}

func take(t *testing.T, fc tsubame.FrequencyCounter, key string, cs []tsubame.FrequencyCap, now time.Time) bool {
	t.Helper()
	ok, err := fc.Take(ctx(t), key, cs, now)
	if err != nil {
		t.Fatalf("Take(%q, %v, %v): %v", key, cs, now, err)
	}
	return ok
}

// takes runs the calls in order, handle i%3 for the i-th, and returns
// their answers as a string of 1 (taken) and 0.
func takes(t *testing.T, fcs []tsubame.FrequencyCounter, key string, cs []tsubame.FrequencyCap, at ...time.Time) string {
	t.Helper()
	var b strings.Builder
	for i, now := range at {
		if take(t, fcs[i%len(fcs)], key, cs, now) {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

// Ten calls at one instant, through three handles: exactly the first three
// are taken (two at the same instant both count).
func testFrequencyCap(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(3, time.Hour)
	if got := takes(t, fcs, "li-1/u-1", cs, slices.Repeat([]time.Time{frequencyStart}, 10)...); got != "1110000000" {
		t.Fatalf("10 calls at one instant with a cap of 3 per hour: %s, want 1110000000", got)
	}
	// A minute later the hour still holds three.
	if take(t, fcs[2], "li-1/u-1", cs, frequencyStart.Add(time.Minute)) {
		t.Fatal("a 4th impression taken within the hour")
	}
}

// Two caps hold together: 2 per second and 3 per hour.
func testFrequencyTwoCaps(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(2, time.Second, tsubame.FrequencyCap{Impressions: 3, Per: tsubame.Duration(time.Hour)})
	t0 := frequencyStart
	for _, st := range []struct {
		at   []time.Time
		want string
		why  string
	}{
		{[]time.Time{t0, t0, t0}, "110", "2 per second"},
		{[]time.Time{t0.Add(999 * time.Millisecond)}, "0", "the second is not over"},
		{[]time.Time{t0.Add(time.Second), t0.Add(time.Second)}, "10", "the 3rd of the hour"},
		{[]time.Time{t0.Add(10 * time.Second), t0.Add(30 * time.Minute), t0.Add(time.Hour - time.Microsecond)}, "000", "3 per hour"},
		// At t0+1h the two of t0 leave the hour; the one of t0+1s stays.
		{[]time.Time{t0.Add(time.Hour), t0.Add(time.Hour), t0.Add(time.Hour)}, "110", "2 per second, 3 per hour"},
		{[]time.Time{t0.Add(time.Hour + time.Second)}, "1", "t0+1s left the hour"},
		{[]time.Time{t0.Add(time.Hour + 2*time.Second)}, "0", "3 per hour"},
	} {
		if got := takes(t, fcs, "li-2/u-1", cs, st.at...); got != st.want {
			t.Fatalf("at %v: %s, want %s (%s)", st.at, got, st.want, st.why)
		}
	}
}

// The window slides: an impression leaves it exactly one window after it
// was taken, and fixed hourly buckets would let 3 at 0:59 and 3 at 1:00
// through where a sliding hour lets 3.
func testFrequencySlides(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(3, time.Hour)
	t0 := frequencyStart
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, st := range []struct {
		at   []time.Time
		want string
	}{
		{[]time.Time{at(59 * time.Minute), at(59 * time.Minute), at(59*time.Minute + 30*time.Second)}, "111"},
		{[]time.Time{at(time.Hour), at(time.Hour), at(time.Hour + time.Minute), at(time.Hour + 58*time.Minute)}, "0000"},
		{[]time.Time{at(time.Hour + 59*time.Minute - time.Microsecond)}, "0"},
		// The two of 0:59 leave at 1:59: two more, not three.
		{[]time.Time{at(time.Hour + 59*time.Minute), at(time.Hour + 59*time.Minute), at(time.Hour + 59*time.Minute)}, "110"},
		{[]time.Time{at(time.Hour + 59*time.Minute + 30*time.Second)}, "1"},
		// Long after, the key starts afresh.
		{[]time.Time{at(48 * time.Hour), at(48 * time.Hour), at(48 * time.Hour), at(48 * time.Hour)}, "1110"},
	} {
		if got := takes(t, fcs, "li-3/u-1", cs, st.at...); got != st.want {
			t.Fatalf("at %v: %s, want %s", st.at, got, st.want)
		}
	}
}

// An impression recorded at a later time than a call's now counts against
// it: a node whose clock is behind cannot pass a cap another has filled.
func testFrequencyLater(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(2, time.Minute)
	t0 := frequencyStart
	if got := takes(t, fcs, "li-4/u-1", cs, t0.Add(10*time.Millisecond), t0.Add(20*time.Millisecond), t0); got != "110" {
		t.Fatalf("a call behind two later impressions: %s, want 110", got)
	}
}

func testFrequencyIndependent(t *testing.T, fcs []tsubame.FrequencyCounter) {
	cs := caps(1, time.Hour)
	keys := []string{"li-1/u-1", "li-1/u-2", "li-2/u-1", "li-1/u-1x", "li-1x/u-1", "LI-1/U-1", "a", "{tag}/b", "seen:li-1/u-1",
		tsubame.FrequencyKey(strings.Repeat("l", tsubame.MaxObjectIDLength), strings.Repeat("v", tsubame.MaxObjectIDLength))}
	for i, k := range keys {
		if !take(t, fcs[i%3], k, cs, frequencyStart) {
			t.Fatalf("%q refused: it shares a count with another key", k)
		}
	}
	for i, k := range keys {
		if take(t, fcs[(i+1)%3], k, cs, frequencyStart.Add(time.Minute)) {
			t.Fatalf("%q taken twice within its cap of 1 per hour", k)
		}
	}
}

func testFrequencyInvalid(t *testing.T, fcs []tsubame.FrequencyCounter) {
	hour := caps(1, time.Hour)
	for _, tc := range []struct {
		key string
		cs  []tsubame.FrequencyCap
	}{
		{"", hour},
		{strings.Repeat("k", tsubame.MaxFrequencyKeyLength+1), hour},
		{"k", nil},
		{"k", slices.Repeat(hour, tsubame.MaxFrequencyCaps+1)},
		{"k", caps(0, time.Hour)},
		{"k", caps(1, time.Duration(0))},
		{"k", caps(1, tsubame.MaxFrequencyWindow+time.Second)},
		{"k", caps(1, time.Hour, tsubame.FrequencyCap{Impressions: -1, Per: tsubame.Duration(time.Hour)})},
	} {
		ok, err := fcs[0].Take(ctx(t), tc.key, tc.cs, frequencyStart)
		if ok || tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Fatalf("Take(%d-byte key, %v) = %v, %v; want false and an EINVALID error", len(tc.key), tc.cs, ok, err)
		}
	}
	// Refused calls recorded nothing.
	if !take(t, fcs[1], "k", hour, frequencyStart) {
		t.Fatal("a refused call was recorded")
	}
}

func testFrequencyCancelled(t *testing.T, fcs []tsubame.FrequencyCounter) {
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	cs := caps(1, time.Hour)
	if ok, err := fcs[0].Take(c, "cancelled", cs, frequencyStart); ok || err == nil {
		t.Fatalf("Take with a cancelled context = %v, %v; want false and an error", ok, err)
	}
	// Whether it was recorded is not said; the store still answers.
	if !take(t, fcs[1], "after-cancel", cs, frequencyStart) {
		t.Fatal("first impression of a key refused")
	}
}

// testFrequencyRace has 8 goroutines on each of the three handles try 10
// impressions of each of 40 visitors, all from one start and in the same
// order, so that every visitor is asked about by 24 callers at about the
// same moment (at three instants a millisecond apart): a cap of 3 per hour
// lets exactly 3 through for every visitor, never 4.
func testFrequencyRace(t *testing.T, fcs []tsubame.FrequencyCounter) {
	const visitors, perHandle, tries, cap = 40, 8, 10, 3
	cs := caps(cap, time.Hour)
	var taken [visitors]atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 3 * perHandle {
		fc := fcs[g%3]
		now := frequencyStart.Add(time.Duration(g%3) * time.Millisecond)
		wg.Go(func() {
			<-start
			for v := range visitors {
				key := tsubame.FrequencyKey("li-race", "u-"+strconv.Itoa(v))
				for range tries {
					ok, err := fc.Take(ctx(t), key, cs, now)
					if err != nil {
						t.Errorf("goroutine %d, visitor %d: %v", g, v, err)
						return
					}
					if ok {
						taken[v].Add(1)
					}
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
	total := 0
	for v := range taken {
		n := int(taken[v].Load())
		total += n
		if n != cap {
			wrong = append(wrong, fmt.Sprintf("visitor %d: %d", v, n))
		}
	}
	if len(wrong) > 0 {
		t.Fatalf("%d impressions taken of %d visitors with a cap of %d (%d calls each), want exactly %d each: %s",
			total, visitors, cap, 3*perHandle*tries, cap, strings.Join(wrong[:min(10, len(wrong))], "; "))
	}
}

// BenchTake measures fc.Take from parallelism goroutines per CPU
// (b.SetParallelism) with a cap of 3 per hour: "taken" on keys never seen
// (a write each), "refused" on keys already at their cap. The keys are
// built per call in "taken", which costs the benchmark one allocation of
// its own per op.
func BenchTake(b *testing.B, fc tsubame.FrequencyCounter, parallelism int) {
	bctx := context.Background()
	cs := caps(3, time.Hour)
	b.Run("taken", func(b *testing.B) {
		benchFresh(b, parallelism, "bench-%d-%d/", func(key string) (bool, error) { return fc.Take(bctx, key, cs, time.Now()) })
	})
	b.Run("refused", func(b *testing.B) {
		keys := make([]string, 1024)
		now := time.Now()
		var wg sync.WaitGroup // concurrent, so that a store that batches writes fills them fast
		for i := range keys {
			keys[i] = fmt.Sprintf("bench-full-%d/%d", now.UnixNano(), i)
			wg.Go(func() {
				for range 3 {
					if _, err := fc.Take(bctx, keys[i], cs, now); err != nil {
						b.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			return
		}
		var goroutine atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(parallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(goroutine.Add(1)) * 97
			for ; pb.Next(); i++ {
				if ok, err := fc.Take(bctx, keys[i%len(keys)], cs, time.Now()); err != nil || ok {
					b.Errorf("Take(%s) = %v, %v; want false", keys[i%len(keys)], ok, err)
					return
				}
			}
		})
	})
}
