package server

import (
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
