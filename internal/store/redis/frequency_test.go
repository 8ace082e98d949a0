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

// A visitor's record is the hash the package comment names: a field per
// line item holding its entries, the impressions out of the longest window
// and the holds ended dropped when the line item is written, and the key
// expiring when the last of its entries stops mattering.
func TestFrequencyKeys(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix(t)
	s := open(t, []string{srv.Addr}, prefix)
	caps := []tsubame.FrequencyCap{{Impressions: 2, Per: tsubame.Duration(time.Minute)}, {Impressions: 5, Per: tsubame.Duration(time.Hour)}}
	rkey := prefix + "fv:u-1"
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	us := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).UnixMicro(), 10) }
	for i, u := range []tsubame.FrequencyUpdate{
		{Op: tsubame.FrequencyTake, Now: t0},
		{Op: tsubame.FrequencyTake, Now: t0, Bid: "d-2"},
		{Op: tsubame.FrequencyHold, Now: t0.Add(30 * time.Minute), Bid: "b-3", Until: t0.Add(31 * time.Minute)},
	} {
		u.Visitor, u.LineItem, u.Caps = "u-1", "li-1", caps
		if ok, err := s.Update(t.Context(), &u, nil); err != nil || !ok {
			t.Fatalf("update %d = %v, %v", i, ok, err)
		}
	}
	cli := func(args ...string) string { return strings.TrimSpace(srv.CLI(t, args...)) }
	if typ := cli("type", rkey); typ != "hash" {
		t.Fatalf("%s is a %s", rkey, typ)
	}
	if got, want := cli("hget", rkey, "li-1"), "i"+us(0)+" i"+us(0)+"/d-2 h"+us(31*time.Minute)+"/b-3"; got != want {
		t.Fatalf("li-1's entries %q, want %q", got, want)
	}
	pttl, err := strconv.Atoi(cli("pttl", rkey))
	if err != nil || pttl <= 0 || pttl > int(time.Hour/time.Millisecond) {
		t.Fatalf("PTTL %d (%v), want the hour at most and never without expiry", pttl, err)
	}
	// At t0+1h the two of t0 are dropped, and the hold ended at t0+31m.
	u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyCount, Visitor: "u-1", LineItem: "li-1", Caps: caps, Bid: "b-4", Now: t0.Add(time.Hour)}
	if ok, err := s.Update(t.Context(), &u, nil); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got, want := cli("hget", rkey, "li-1"), "i"+us(time.Hour)+"/b-4"; got != want {
		t.Fatalf("li-1's entries %q after the window slid, want %q", got, want)
	}
	// A line item whose entries all go is a field no more.
	u = tsubame.FrequencyUpdate{Op: tsubame.FrequencyRelease, Visitor: "u-1", LineItem: "li-1", Caps: caps, Bid: "b-4", Now: t0.Add(3 * time.Hour)}
	if ok, err := s.Update(t.Context(), &u, nil); err != nil || ok {
		t.Fatal(ok, err)
	}
	if n := cli("exists", rkey); n != "0" {
		t.Fatalf("EXISTS %s = %s after its last entry went", rkey, n)
	}
}

// While Redis is down Read and Update fail and never answer true; when it
// is back they work again, through the same handle.
func TestFrequencyStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, uniquePrefix(t))
	caps := []tsubame.FrequencyCap{{Impressions: 1, Per: tsubame.Duration(time.Hour)}}
	take := func(visitor string) (bool, error) {
		u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: visitor, LineItem: "li", Caps: caps, Now: time.Now()}
		return s.Update(t.Context(), &u, nil)
	}
	srv.Kill()
	for i := range 3 {
		if ok, err := take(fmt.Sprint("u-down-", i)); ok || tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
			t.Fatalf("Update with Redis down = %v, %v; want false and an EUNAVAILABLE error", ok, err)
		}
		rec := &tsubame.FrequencyRecord{}
		if err := s.Read(t.Context(), "u-down", rec); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE || rec.Read {
			t.Fatalf("Read with Redis down = %v (read %v); want an EUNAVAILABLE error", err, rec.Read)
		}
	}
	srv.Restart(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := take("u-back")
		if err == nil {
			if !ok {
				t.Fatal("first impression of a visitor refused after a restart")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Update still failing 30s after Redis came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkTake against a local server: one script per update, pipelined
// with the other goroutines' (rueidis).
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	for _, p := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%dxCPU", p), func(b *testing.B) {
			storetest.BenchTake(b, open(b, []string{srv.Addr}, fmt.Sprintf("bench%d:", time.Now().UnixNano())), p)
		})
	}
}
