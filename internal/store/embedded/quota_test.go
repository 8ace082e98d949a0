package embedded

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/storetest"
)

func TestQuotaConformance(t *testing.T) {
	storetest.RunQuota(t, func(t *testing.T) []tsubame.Quotas {
		s := openTemp(t)
		return []tsubame.Quotas{s, s, s} // one process holds the file
	})
}

// Settled spend and leases survive a restart; a lease that expired while
// the store was closed is settled, not given back.
func TestQuotaSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	ctx := t.Context()
	if n, _, err := s.Lease(ctx, "camp-1/spend/total", "a", 100, 40, time.Minute); err != nil || n != 40 {
		t.Fatal(n, err)
	}
	if n, _, err := s.Lease(ctx, "camp-1/spend/total", "b", 100, 30, time.Hour); err != nil || n != 30 {
		t.Fatal(n, err)
	}
	if err := s.Release(ctx, "camp-1/spend/total", "a", "r1", 25, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.now = func() time.Time { return now.Add(2 * time.Minute) } // a's lease expired
	if st, o, err := s.Committed(ctx, "camp-1/spend/total"); err != nil || st != 35 || o != 30 {
		t.Fatalf("Committed after reopen = %d settled, %d outstanding, %v; want 35, 30", st, o, err)
	}
	if err := s.Release(ctx, "camp-1/spend/total", "a", "r2", 0, 10); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
		t.Fatalf("Release of an expired lease: %v, want an ECONFLICT error", err)
	}
	if n, _, err := s.Lease(ctx, "camp-1/spend/total", "c", 100, 100, time.Minute); err != nil || n != 35 {
		t.Fatalf("Lease = %d, %v; want the 35 left", n, err)
	}
}

func BenchmarkLease(b *testing.B) {
	for _, p := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%dxCPU", p), func(b *testing.B) {
			storetest.BenchLease(b, openTemp(b), p)
		})
	}
}
