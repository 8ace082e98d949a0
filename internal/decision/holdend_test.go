package decision

import (
	"testing"
	"time"
)

func TestHoldEndCountsFewSpans(t *testing.T) {
	base := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		reservation, span time.Duration
	}{
		{3 * time.Second, time.Second},
		{16 * time.Second, time.Second},
		{30 * time.Second, time.Second},
		{time.Minute, 3 * time.Second},
		{10 * time.Minute, 37 * time.Second},
		{time.Hour, 225 * time.Second},
	} {
		ends := map[int64]bool{}
		// A decision every 100 ms over two reservations.
		for at := base; at.Before(base.Add(2 * c.reservation)); at = at.Add(100*time.Millisecond + 7*time.Nanosecond) {
			end := HoldEnd(at, c.reservation)
			if end.Before(at.Add(c.reservation)) {
				t.Fatalf("reservation %v at %v: ends at %v, before the reservation does", c.reservation, at, end)
			}
			if end.After(at.Add(c.reservation + c.span)) {
				t.Fatalf("reservation %v at %v: ends at %v, more than a span (%v) after the reservation", c.reservation, at, end, c.span)
			}
			if end.Nanosecond() != 0 || end.Unix()%int64(c.span/time.Second) != 0 {
				t.Fatalf("reservation %v at %v: ends at %v, not on a span of %v", c.reservation, at, end, c.span)
			}
			ends[end.Unix()] = true
		}
		// Over two reservations, a reservation's span count twice, and one
		// more for the rounding.
		if want := 2*int(c.reservation/c.span) + 1; len(ends) > want {
			t.Errorf("reservation %v: %d ends, want at most %d", c.reservation, len(ends), want)
		}
	}
	if got := RoundUp(base, time.Second); !got.Equal(base) {
		t.Errorf("RoundUp of a whole second: %v", got)
	}
	if got := RoundUp(base.Add(time.Nanosecond), time.Second); !got.Equal(base.Add(time.Second)) {
		t.Errorf("RoundUp of a second and a nanosecond: %v", got)
	}
}
