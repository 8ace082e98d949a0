package server

import (
	"context"
	"testing"
	"time"
)

// panicLog lets one stack through per interval and counts the rest into
// the next line it lets through.
func TestPanicLogBoundsLines(t *testing.T) {
	var l panicLog
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{0, true, 0},
		{time.Millisecond, false, 0},
		{500 * time.Millisecond, false, 0},
		{panicLogEvery - 1, false, 0},
		{panicLogEvery, true, 3},
		{panicLogEvery + 1, false, 0},
		{10 * panicLogEvery, true, 1},
		{20 * panicLogEvery, true, 0},
	}
	for i, st := range steps {
		ok, n := l.allow(t0.Add(st.at))
		if ok != st.ok || n != st.suppressed {
			t.Fatalf("step %d (+%v): allow = %v, %d; want %v, %d", i, st.at, ok, n, st.ok, st.suppressed)
		}
	}
}

// A readiness probe runs at most once per readyEvery, whatever the callers.
func TestReadinessReusesAProbe(t *testing.T) {
	calls := 0
	r := readiness{probe: func(context.Context) error { calls++; return nil }}
	t0 := time.Now()
	for _, at := range []time.Duration{0, time.Millisecond, readyEvery / 2} {
		if err := r.check(t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("%d probes within readyEvery, want 1", calls)
	}
	// r.at is the probe's own time (≥ t0), so a call readyEvery after that
	// probes again.
	_ = r.check(r.at.Add(readyEvery))
	if calls != 2 {
		t.Fatalf("%d probes after readyEvery, want 2", calls)
	}
}
