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

// The audit counts the quota keys by days and totals, the day's keys
// without a drop time, and a past day's key as stale: given its drop time
// on request, which has passed, it goes at once.
func TestAuditQuotas(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, k := range []string{"li/a/imp", "li/a/imp/2026-11-29", "li/a/imp/2026-11-10"} {
		if _, _, err := s.Lease(ctx, k, "node-a", 100, 10, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Expire(ctx, "li/a/imp/2026-11-29", now.Add(9*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	opt := tsubame.AuditOptions{KeepDaily: 7 * 24 * time.Hour, Now: now}
	a, err := s.Audit(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]tsubame.AuditFamily{}
	for _, f := range a.Families {
		got[f.Name] = f
	}
	if d, tot := got["quota (day)"], got["quota (total)"]; d.Keys != 2 || d.NoExpiry != 1 || tot.Keys != 1 || tot.NoExpiry != 1 || a.StaleDays != 1 {
		t.Fatalf("days %+v, totals %+v, stale %d", d, tot, a.StaleDays)
	}
	opt.ExpirePastDays = true
	if a, err = s.Audit(ctx, opt); err != nil || a.Expired != 1 {
		t.Fatalf("with ExpirePastDays: %+v %v", a, err)
	}
	if set, out, err := s.Committed(ctx, "li/a/imp/2026-11-10"); err != nil || set != 0 || out != 0 {
		t.Errorf("the stale day's key still holds %d, %d (%v)", set, out, err)
	}
	if _, out, err := s.Committed(ctx, "li/a/imp/2026-11-29"); err != nil || out != 10 {
		t.Errorf("today's key holds %d outstanding (%v), want 10", out, err)
	}
	if a, err = s.Audit(ctx, tsubame.AuditOptions{KeepDaily: 7 * 24 * time.Hour, Now: now}); err != nil || a.StaleDays != 0 {
		t.Errorf("after: %+v %v", a, err)
	}
}
