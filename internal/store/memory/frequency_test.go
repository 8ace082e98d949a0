package memory

import (
	"context"
	"fmt"
	"hash/maphash"
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

// keys returns how many keys the shards hold, expired ones included, and
// how many times.
func (f *frequencies) held() (keys, times int) {
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		keys += len(sh.keys)
		for _, e := range sh.keys {
			times += len(e.times)
		}
		sh.mu.Unlock()
	}
	return keys, times
}

// With a steady stream of new visitors, the memory held stays proportional
// to the visitors within the window, not to every visitor ever seen; a key
// keeps only the times within its window; after a burst the maps give their
// memory back.
func TestFrequencySweepBoundsMemory(t *testing.T) {
	s := New()
	defer s.Close()
	ctx := context.Background()
	caps := []tsubame.FrequencyCap{{Impressions: 1000, Per: tsubame.Duration(time.Second)}}
	now := time.Unix(1_800_000_000, 0)
	const perTick = 1000 // visitors per 100 ms: 10,000 within a window
	n := 0
	for range 300 { // 30 s: 300,000 visitors, 30 windows
		for range perTick {
			n++
			if ok, err := s.Take(ctx, fmt.Sprint("li/u-", n), caps, now); err != nil || !ok {
				t.Fatalf("visitor %d: %v, %v", n, ok, err)
			}
		}
		now = now.Add(100 * time.Millisecond)
		if keys, _ := s.freq.held(); keys > 2*10*perTick+freqShards*sweepMin {
			t.Fatalf("after %d visitors the store holds %d keys, more than twice the live ones plus a sweep's slack", n, keys)
		}
	}
	// One visitor seen every 10 ms for 10 s keeps the times of one window.
	for range 1000 {
		if _, err := s.Take(ctx, "li/steady", caps, now); err != nil {
			t.Fatal(err)
		}
		now = now.Add(10 * time.Millisecond)
	}
	sh := &s.freq.shards[maphash.String(freqSeed, "li/steady")%freqShards]
	sh.mu.Lock()
	kept := len(sh.keys["li/steady"].times)
	sh.mu.Unlock()
	if kept != 100 {
		t.Errorf("a key seen every 10 ms keeps %d times of a 1 s window, want 100", kept)
	}
	// A shard that swept away most of its keys rebuilt its map.
	now = now.Add(time.Hour)
	for i := range freqShards * 2 * sweepMin {
		if _, err := s.Take(ctx, fmt.Sprint("li/late-", i), caps, now); err != nil {
			t.Fatal(err)
		}
	}
	for i := range s.freq.shards {
		sh := &s.freq.shards[i]
		if sh.peak > 4*sweepMin+len(sh.keys) {
			t.Fatalf("shard %d: peak %d with %d keys held: its map was not rebuilt", i, sh.peak, len(sh.keys))
		}
	}
}

func TestFrequencyClosed(t *testing.T) {
	s := New()
	caps := []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Hour)}}
	if ok, err := s.Take(context.Background(), "li/a", caps, time.Now()); err != nil || !ok {
		t.Fatal(ok, err)
	}
	_ = s.Close()
	if ok, err := s.Take(context.Background(), "li/b", caps, time.Now()); ok || tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("Take after Close = %v, %v; want an EUNAVAILABLE error", ok, err)
	}
	if keys, _ := s.freq.held(); keys != 0 {
		t.Fatalf("%d keys held after Close", keys)
	}
}
