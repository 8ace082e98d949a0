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
	writeLogFiles(t, dir, accesslog.JSON, true, evs, len(evs)) // one file: one commit, at its end
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

	// The file was written before the loop started: its first pass reads
	// the 6,000 lines, looking at the clock every paceLines (23 times),
	// each look finding a step more work since the pass began or last
	// paused (which looks once more): a pause at every fifth look.
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
	if got := r.Stats().Paused; got != sum {
		t.Fatalf("Stats().Paused = %v, want the %v paused", got, sum)
	}
}

// A pass that worked long pauses twice Burst at most, and a commit's time
// is not work: reading many closed files, each committed at its end, of
// fewer lines than a look at the clock counts, never pauses.
func TestPacedLoopPauseIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		perFile int
		want    time.Duration // every pause's length; 0: none
	}{
		{"long work", 3000, 2 * time.Millisecond},
		{"commits between", 150, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			evs := traffic(3000, t0)
			writeLogFiles(t, dir, accesslog.LTSV, false, evs, tc.perFile)
			var (
				mu     sync.Mutex
				now    = t0
				sleeps []time.Duration
			)
			r := openRoller(t, dir, func(o *Options) {
				o.Burst = time.Millisecond
				o.clock = func() time.Time {
					mu.Lock()
					defer mu.Unlock()
					now = now.Add(10 * time.Millisecond) // ten bursts at every look
					return now
				}
				o.sleep = func(d time.Duration) {
					mu.Lock()
					defer mu.Unlock()
					sleeps = append(sleeps, d)
				}
			})
			r.Start()
			waitLines(t, r, len(evs))
			r.Close()
			mu.Lock()
			defer mu.Unlock()
			if tc.want == 0 && len(sleeps) > 0 {
				t.Fatalf("paused %v", sleeps)
			}
			if tc.want != 0 && len(sleeps) == 0 {
				t.Fatal("never paused")
			}
			for i, d := range sleeps {
				if d != tc.want {
					t.Fatalf("pause %d: %v, want %v", i, d, tc.want)
				}
			}
		})
	}
}

// A caller waiting for the roller (CatchUp here, Verify or Rebuild alike)
// ends the loop's pause rather than waiting it out, and so does Close: a
// Burst of an hour, on a clock that finds an hour more work at every look,
// pauses two hours unless something ends it.
func TestPauseEndsForAWaiter(t *testing.T) {
	for _, waiter := range []string{"CatchUp", "Close"} {
		t.Run(waiter, func(t *testing.T) {
			dir := t.TempDir()
			evs := traffic(3000, t0)
			writeLogFiles(t, dir, accesslog.JSON, false, evs, len(evs))
			var (
				mu     sync.Mutex
				now    = t0
				looks  int
				paused = make(chan struct{}) // closed at the look that pauses
			)
			r := openRoller(t, dir, func(o *Options) {
				o.Burst = time.Hour
				o.clock = func() time.Time {
					mu.Lock()
					defer mu.Unlock()
					if looks++; looks == 2 { // the pass's start, then its first look
						close(paused)
					}
					now = now.Add(time.Hour)
					return now
				}
			})
			r.Start()
			<-paused
			done := make(chan error, 1)
			go func() {
				if waiter == "Close" {
					done <- r.Close()
					return
				}
				done <- r.CatchUp(context.Background())
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(2 * time.Minute):
				t.Fatalf("%s waited out the pause", waiter)
			}
			if st := r.Stats(); st.Paused >= time.Hour {
				t.Fatalf("paused %v: the pause was not ended", st.Paused)
			}
			if waiter == "CatchUp" {
				equalCounts(t, "after the pause", byLineItem(t, r, Query{}), want(evs))
			}
		})
	}
}

// With the real clock and timer, a loop that pauses at every look at the
// clock still reads every line, and says how long it paused.
func TestPacedLoopReadsEverything(t *testing.T) {
	dir := t.TempDir()
	evs := traffic(3000, t0)
	writeLogFiles(t, dir, accesslog.LTSV, false, evs, 1000)
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
