package memory

import (
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/storetest"
)

func TestQuotaConformance(t *testing.T) {
	storetest.RunQuota(t, func(t *testing.T) []tsubame.Quotas {
		s := New()
		t.Cleanup(func() { _ = s.Close() })
		return []tsubame.Quotas{s, s, s}
	})
}

func BenchmarkLease(b *testing.B) {
	s := New()
	defer s.Close()
	storetest.BenchLease(b, s, 1)
}

// By the store's clock, a lease expires exactly at its ttl: not a
// nanosecond before, and then it is settled.
func TestQuotaExpiresByTheClock(t *testing.T) {
	s := New()
	defer s.Close()
	var now atomic.Int64
	s.quota.clock = now.Load
	ctx := t.Context()
	if n, _, err := s.Lease(ctx, "li/imp/total", "a", 10, 4, time.Second); err != nil || n != 4 {
		t.Fatal(n, err)
	}
	now.Store(int64(time.Second) - 1)
	if st, o, err := s.Committed(ctx, "li/imp/total"); err != nil || st != 0 || o != 4 {
		t.Fatalf("a nanosecond before expiry: %d settled, %d outstanding, %v; want 0, 4", st, o, err)
	}
	// Renewed by a lease of nothing: a second more.
	if n, _, err := s.Lease(ctx, "li/imp/total", "a", 10, 0, time.Second); err != nil || n != 0 {
		t.Fatal(n, err)
	}
	now.Store(2*int64(time.Second) - 2)
	if st, o, err := s.Committed(ctx, "li/imp/total"); err != nil || st != 0 || o != 4 {
		t.Fatalf("renewed, before its new expiry: %d settled, %d outstanding, %v; want 0, 4", st, o, err)
	}
	now.Store(2*int64(time.Second) - 1)
	if st, o, err := s.Committed(ctx, "li/imp/total"); err != nil || st != 4 || o != 0 {
		t.Fatalf("at expiry: %d settled, %d outstanding, %v; want 4, 0", st, o, err)
	}
	if err := s.Release(ctx, "li/imp/total", "a", "r1", 0, 4); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
		t.Fatalf("Release after expiry: %v, want an ECONFLICT error", err)
	}
}

func TestQuotaClosed(t *testing.T) {
	s := New()
	_ = s.Close()
	if n, _, err := s.Lease(t.Context(), "li/imp/total", "a", 10, 1, time.Second); n != 0 || tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("Lease after Close = %d, %v; want 0 and an EUNAVAILABLE error", n, err)
	}
	if _, _, err := s.Committed(t.Context(), "li/imp/total"); tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
		t.Fatalf("Committed after Close: %v, want an EUNAVAILABLE error", err)
	}
}
