package report

import (
	"context"
	"sync"
	"testing"
	"time"

	"tsubame/internal/accesslog"
)

// The background loop pauses after every Burst of work, as long as it
// worked, and counts every line all the same; a pass run by CatchUp never
// pauses. The clock is the test's: every look at it finds a tenth of a
// millisecond more work done.
func TestPacedLoopPausesAsLongAsItWorked(t *testing.T) {
	dir := t.TempDir()
	evs := traffic(6000, t0)
	writeLog(t, dir, accesslog.JSON, true, evs)
	const step, burst = 100 * time.Microsecond, 500 * time.Microsecond
	var (
		mu       sync.Mutex
		now      = t0
		sleeps   []time.Duration
		catching bool
	)
	r := openRoller(t, dir, func(o *Options) {
		o.Burst = burst
		o.clock = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(step)
			return now
		}
		o.sleep = func(d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if catching {
				t.Errorf("CatchUp's pass paused %v", d)
			}
			sleeps = append(sleeps, d)
		}
	})
	r.Start()
	waitLines(t, r, len(evs))
	mu.Lock()
	catching, paused := true, sleeps
	mu.Unlock()
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	equalCounts(t, "paced", byLineItem(t, r, Query{}), want(evs))

	// The files were all written before the loop started: its first pass
	// reads the 6,000 lines, looking at the clock every paceLines (23
	// times), each look finding a step more work: a pause at every fifth.
	if want := len(evs) / paceLines / int(burst/step); len(paused) != want {
		t.Fatalf("%d pauses over %d lines, want %d", len(paused), len(evs), want)
	}
	var sum time.Duration
	for i, d := range paused {
		if d != burst {
			t.Fatalf("pause %d: %v, want the %v worked since the last", i, d, burst)
		}
		sum += d
	}
	if got := r.Stats().Paused; got < sum {
		t.Fatalf("Stats().Paused = %v, want the %v paused", got, sum)
	}
}

// With the real clock and timer, a loop that pauses at every look at the
// clock still reads every line, and says how long it paused.
func TestPacedLoopReadsEverything(t *testing.T) {
	dir := t.TempDir()
	evs := traffic(3000, t0)
	writeLog(t, dir, accesslog.LTSV, false, evs)
	r := openRoller(t, dir, func(o *Options) { o.Burst = time.Nanosecond })
	r.Start()
	waitLines(t, r, len(evs))
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	equalCounts(t, "paced", byLineItem(t, r, Query{}), want(evs))
	if st := r.Stats(); st.Paused <= 0 || st.Lines != int64(len(evs)) {
		t.Fatalf("stats %+v: want every line read and a pause", st)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// waitLines waits until the running loop of r has read n lines.
func waitLines(t *testing.T, r *Roller, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for r.Stats().Lines < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("rolled up %+v of %d lines", r.Stats(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
