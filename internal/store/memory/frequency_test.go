package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/storetest"
)

func TestFrequencyConformance(t *testing.T) {
	storetest.RunFrequency(t, func(t *testing.T) (a, b, c tsubame.FrequencyCounter) {
		s := New()
		t.Cleanup(func() { _ = s.Close() })
		return s, s, s
	})
}

func BenchmarkTake(b *testing.B) {
	s := New()
	defer s.Close()
	storetest.BenchTake(b, s, 1)
}

// held returns how many visitors the shards hold, expired ones included,
// and how many entries.
func (f *frequencies) held() (visitors, entries int) {
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		visitors += len(sh.visits)
		for _, v := range sh.visits {
			for _, l := range v.lines {
				entries += len(l.Entries)
			}
		}
		sh.mu.Unlock()
	}
	return visitors, entries
}

func take(t *testing.T, s *Store, visitor, line string, caps []tsubame.FrequencyCap, now time.Time) bool {
	t.Helper()
	ok, err := s.Update(context.Background(), &tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: visitor, LineItem: line,
		Caps: caps, Now: now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// With a steady stream of new visitors, the memory held stays proportional
// to the visitors within the window, not to every visitor ever seen; a
// line item keeps only the impressions within its window, and a hold
// keeps its visitor until it ends; after a burst the maps give their
// memory back.
func TestFrequencySweepBoundsMemory(t *testing.T) {
	s := New()
	defer s.Close()
	caps := []tsubame.FrequencyCap{{Impressions: 1000, Per: tsubame.Duration(time.Second)}}
	now := time.Unix(1_800_000_000, 0)
	const perTick = 1000 // visitors per 100 ms: 10,000 within a window
	n := 0
	for range 300 { // 30 s: 300,000 visitors, 30 windows
		for range perTick {
			n++
			if !take(t, s, fmt.Sprint("u-", n), "li", caps, now) {
				t.Fatalf("visitor %d refused", n)
			}
		}
		now = now.Add(100 * time.Millisecond)
		if visitors, _ := s.freq.held(); visitors > 2*10*perTick+freqShards*sweepMin {
			t.Fatalf("after %d visitors the store holds %d, more than twice the live ones plus a sweep's slack", n, visitors)
		}
	}
	// One visitor seen every 10 ms for 10 s keeps the impressions of one window.
	for range 1000 {
		take(t, s, "u-steady", "li", caps, now)
		now = now.Add(10 * time.Millisecond)
	}
	sh := s.freq.shard("u-steady")
	sh.mu.Lock()
	kept := len(sh.visits["u-steady"].lines[0].Entries)
	sh.mu.Unlock()
	if kept != 100 {
		t.Errorf("a line item seen every 10 ms keeps %d impressions of a 1 s window, want 100", kept)
	}
	// A hold of a minute keeps its visitor past the second of the cap.
	u := &tsubame.FrequencyUpdate{Op: tsubame.FrequencyHold, Visitor: "u-held", LineItem: "li", Caps: caps, Bid: "b", Now: now,
		Until: now.Add(time.Minute)}
	if ok, err := s.Update(context.Background(), u, nil); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if e := s.freq.shard("u-held").visits["u-held"].expires; e != now.Add(time.Minute).UnixMicro() {
		t.Fatalf("a visitor held for a minute expires at %d, want %d", e, now.Add(time.Minute).UnixMicro())
	}
	// A shard that swept away most of its visitors rebuilt its map.
	now = now.Add(time.Hour)
	for i := range freqShards * 2 * sweepMin {
		take(t, s, fmt.Sprint("u-late-", i), "li", caps, now)
	}
	for i := range s.freq.shards {
		sh := &s.freq.shards[i]
		if sh.peak > 4*sweepMin+len(sh.visits) {
			t.Fatalf("shard %d: peak %d with %d visitors held: its map was not rebuilt", i, sh.peak, len(sh.visits))
		}
	}
}

func TestFrequencyClosed(t *testing.T) {
	s := New()
	caps := []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Hour)}}
	if !take(t, s, "u-a", "li", caps, time.Now()) {
		t.Fatal("refused")
	}
	_ = s.Close()
	u := &tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: "u-b", LineItem: "li", Caps: caps, Now: time.Now()}
	if ok, err := s.Update(context.Background(), u, nil); ok || tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("Update after Close = %v, %v; want an EUNAVAILABLE error", ok, err)
	}
	if err := s.Read(context.Background(), "u-a", &tsubame.FrequencyRecord{}); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("Read after Close = %v; want an EUNAVAILABLE error", err)
	}
	if visitors, _ := s.freq.held(); visitors != 0 {
		t.Fatalf("%d visitors held after Close", visitors)
	}
}
