package redis_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/redis/redistest"
	"tsubame/internal/store/storetest"
)

// A frequency key is the sorted set the package comment names: one member
// per impression, scored by its time in microseconds, the ones out of the
// longest window dropped, and the key expiring the longest window after
// its last impression.
func TestFrequencyKeys(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix(t)
	s := open(t, []string{srv.Addr}, prefix)
	caps := []tsubame.FrequencyCap{{Impressions: 2, Per: tsubame.Duration(time.Minute)}, {Impressions: 5, Per: tsubame.Duration(time.Hour)}}
	key := tsubame.FrequencyKey("li-1", "u-1")
	rkey := prefix + "freq:" + key
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	for i, at := range []time.Time{t0, t0, t0.Add(30 * time.Minute)} {
		if ok, err := s.Take(t.Context(), key, caps, at); err != nil || !ok {
			t.Fatalf("take %d = %v, %v", i, ok, err)
		}
	}
	cli := func(args ...string) string { return strings.TrimSpace(srv.CLI(t, args...)) }
	if typ := cli("type", rkey); typ != "zset" {
		t.Fatalf("%s is a %s", rkey, typ)
	}
	scores := strings.Fields(cli("zrange", rkey, "0", "-1", "withscores"))
	want := []string{strconv.FormatInt(t0.UnixMicro(), 10), strconv.FormatInt(t0.UnixMicro(), 10), strconv.FormatInt(t0.Add(30*time.Minute).UnixMicro(), 10)}
	if len(scores) != 6 || scores[1] != want[0] || scores[3] != want[1] || scores[5] != want[2] || scores[0] == scores[2] {
		t.Fatalf("members and scores %v; want 3 distinct members scored %v", scores, want)
	}
	pttl, err := strconv.Atoi(cli("pttl", rkey))
	if err != nil || pttl <= 0 || pttl > int(time.Hour/time.Millisecond) {
		t.Fatalf("PTTL %d (%v), want the hour at most and never without expiry", pttl, err)
	}
	// At t0+1h the two of t0 are dropped.
	if ok, err := s.Take(t.Context(), key, caps, t0.Add(time.Hour)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if n := cli("zcard", rkey); n != "2" {
		t.Fatalf("ZCARD %s after the window slid past 2 of 4 impressions, want 2", n)
	}
}

// While Redis is down Take fails and never answers true; when it is back
// Take works again, through the same handle.
func TestFrequencyStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, uniquePrefix(t))
	caps := []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Hour)}}
	srv.Kill()
	for i := range 3 {
		if ok, err := s.Take(t.Context(), fmt.Sprint("li/down-", i), caps, time.Now()); ok || tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
			t.Fatalf("Take with Redis down = %v, %v; want false and an EUNAVAILABLE error", ok, err)
		}
	}
	srv.Restart(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := s.Take(t.Context(), "li/back", caps, time.Now())
		if err == nil {
			if !ok {
				t.Fatal("first impression of a key refused after a restart")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Take still failing 30s after Redis came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkTake against a local server: one script per call, pipelined
// with the other goroutines' (rueidis).
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	for _, p := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%dxCPU", p), func(b *testing.B) {
			storetest.BenchTake(b, open(b, []string{srv.Addr}, fmt.Sprintf("bench%d:", time.Now().UnixNano())), p)
		})
	}
}
