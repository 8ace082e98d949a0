package redis_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
	"tsubame/internal/store/storetest"
)

// openQuotas returns three clients on one prefix: three nodes sharing the
// store.
func openQuotas(t *testing.T, addrs []string) []tsubame.Quotas {
	prefix := uniquePrefix(t)
	return []tsubame.Quotas{open(t, addrs, prefix), open(t, addrs, prefix), open(t, addrs, prefix)}
}

// A quota key is the hash the package comment names: settled, and per
// holder its outstanding units and expiry; it never expires itself, as it
// holds settled spend.
func TestQuotaKeys(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix(t)
	s := open(t, []string{srv.Addr}, prefix)
	const key = "camp-3/spend/total"
	if n, _, err := s.Lease(t.Context(), key, "node-a", 100, 30, time.Minute); err != nil || n != 30 {
		t.Fatal(n, err)
	}
	if err := s.Release(t.Context(), key, "node-a", "r1", 10, 5); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string { return strings.TrimSpace(srv.CLI(t, args...)) }
	rkey := prefix + "quota:" + key
	if typ := cli("type", rkey); typ != "hash" {
		t.Fatalf("%s is a %s", rkey, typ)
	}
	if got := cli("hget", rkey, "settled"); got != "10" {
		t.Fatalf("settled = %q, want 10", got)
	}
	if got := cli("hget", rkey, "o:node-a"); got != "15" {
		t.Fatalf("o:node-a = %q, want 15", got)
	}
	if got := cli("hlen", rkey); got != "7" {
		t.Fatalf("HLEN = %s, want 7 (settled, o:node-a, e:node-a, r:node-a, q:node-a, rseq, w)", got)
	}
	if pttl := cli("pttl", rkey); pttl != "-1" {
		t.Fatalf("PTTL = %s: a quota key must never expire", pttl)
	}
	// Numbers beyond Lua's 14 printed digits are written exactly.
	const big = tsubame.MaxQuotaUnits
	if n, _, err := s.Lease(t.Context(), "big", "node-a", big, big-3, time.Minute); err != nil || n != big-3 {
		t.Fatalf("Lease = %d, %v; want %d", n, err, int64(big-3))
	}
	if got, want := cli("hget", prefix+"quota:big", "o:node-a"), fmt.Sprint(int64(big-3)); got != want {
		t.Fatalf("o:node-a = %s, want %s", got, want)
	}
	if err := s.Release(t.Context(), "big", "node-a", "r2", big-4, 1); err != nil {
		t.Fatal(err)
	}
	if settled, out, err := s.Committed(t.Context(), "big"); err != nil || settled != big-4 || out != 0 {
		t.Fatalf("Committed = %d, %d, %v; want %d, 0", settled, out, err, int64(big-4))
	}
}

// While Redis is down every call fails with EUNAVAILABLE.
func TestQuotaStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, uniquePrefix(t))
	srv.Kill()
	if n, _, err := s.Lease(t.Context(), "k", "a", 10, 1, time.Minute); n != 0 || tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("Lease with Redis down = %d, %v; want 0 and an EUNAVAILABLE error", n, err)
	}
	if err := s.Release(t.Context(), "k", "a", "r1", 1, 0); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("Release with Redis down: %v; want an EUNAVAILABLE error", err)
	}
	if _, _, err := s.Committed(t.Context(), "k"); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("Committed with Redis down: %v; want an EUNAVAILABLE error", err)
	}
}

// BenchmarkLease against a local server: one script per call, pipelined
// with the other goroutines' (rueidis).
func BenchmarkLease(b *testing.B) {
	srv := redistest.Start(b)
	for _, p := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%dxCPU", p), func(b *testing.B) {
			storetest.BenchLease(b, open(b, []string{srv.Addr}, fmt.Sprintf("bench%d:", time.Now().UnixNano())), p)
		})
	}
}

// A quota write counts once a replica has it (Redis WAIT), by default
// wherever the master has one: with the replica stopped, a Lease fails
// (EUNAVAILABLE) though the master granted its units, so that a node does
// not spend what a failover to that replica would forget; once the
// replica is back the next Lease reports the grant in what the holder
// holds. With WaitOff the same writes count at once.
func TestQuotaWritesWaitForAReplica(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", master.Addr[strings.LastIndexByte(master.Addr, ':')+1:])
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(master.CLI(t, "info", "replication"), "state=online") {
		if time.Now().After(deadline) {
			t.Fatal("the replica never connected")
		}
		time.Sleep(20 * time.Millisecond)
	}
	prefix := uniquePrefix(t)
	// A wait generous enough for a busy machine's replica to acknowledge
	// (a stopped one costs the two calls that wait for it that long).
	s, err := redis.Open(redis.Options{Addrs: []string{master.Addr}, KeyPrefix: prefix, Logger: quiet, WaitTimeout: 3 * time.Second,
		Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	off, err := redis.Open(redis.Options{Addrs: []string{master.Addr}, KeyPrefix: prefix, Logger: quiet, WaitReplicas: redis.WaitOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = off.Close() })
	ctx := t.Context()
	if got, held, err := s.Lease(ctx, "k", "a", 100, 10, time.Minute); err != nil || got != 10 || held != 10 {
		t.Fatalf("Lease with the replica up = %d, %d, %v; want 10, 10", got, held, err)
	}
	replica.Pause()
	t.Cleanup(replica.Resume)
	if got, _, err := s.Lease(ctx, "k", "a", 100, 5, time.Minute); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE || got != 0 ||
		!strings.Contains(err.Error(), "acknowledged") {
		t.Fatalf("Lease with the replica stopped = %d, %v; want 0 and an EUNAVAILABLE error naming the acknowledgement", got, err)
	}
	if err := s.Release(ctx, "k", "a", "r1", 2, 0); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("Release with the replica stopped: %v; want an EUNAVAILABLE error", err)
	}
	if got, held, err := off.Lease(ctx, "k", "b", 100, 1, time.Minute); err != nil || got != 1 || held != 1 {
		t.Fatalf("Lease with WaitOff and the replica stopped = %d, %d, %v; want 1, 1", got, held, err)
	}
	replica.Resume()
	// The unacknowledged grant was made on the master: the next answer
	// holds it, and the retried release (same id) is applied once.
	deadline = time.Now().Add(time.Minute)
	for {
		got, held, err := s.Lease(ctx, "k", "a", 100, 0, time.Minute)
		if err == nil {
			if got != 0 || held != 13 {
				t.Fatalf("Lease after the replica came back = %d, %d; want 0 and 13 held (15 granted, 2 released)", got, held)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lease never acknowledged after the replica came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Release(ctx, "k", "a", "r1", 2, 0); err != nil {
		t.Fatalf("retried Release: %v", err)
	}
	if settled, out, err := s.Committed(ctx, "k"); err != nil || settled != 2 || out != 14 {
		t.Fatalf("Committed = %d, %d, %v; want 2 settled, 14 outstanding", settled, out, err)
	}
}
