package redis_test

import (
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
)

// The audit counts what the store keeps, by family, on a server and on a
// cluster (every master scanned, replicas not counted twice); a past day's
// key kept from before days expired is stale, and given its drop time on
// request, which has passed: it goes.
func TestAudit(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		testAudit(t, []string{srv.Addr}, func(args ...string) string { return strings.TrimSpace(srv.CLI(t, args...)) })
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 6-node cluster; skipped in -short mode")
		}
		c := redistest.StartCluster(t)
		testAudit(t, c.Addrs()[:2], nil)
	})
}

func testAudit(t *testing.T, addrs []string, cli func(...string) string) {
	prefix := uniquePrefix(t)
	s := open(t, addrs, prefix)
	ctx := t.Context()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	lease := func(key string) {
		t.Helper()
		if _, _, err := s.Lease(ctx, key, "node-a", 100, 10, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"li/a/imp", "camp/c/spend", "li/a/imp/2026-11-29", "camp/c/spend/2026-11-29", "li/a/imp/2026-11-10"} {
		lease(k)
	}
	for _, k := range []string{"li/a/imp/2026-11-29", "camp/c/spend/2026-11-29"} {
		if err := s.Expire(ctx, k, now.Add(9*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, &tsubame.Placement{ID: "top", URLs: []string{"https://ads.example.com/a.js"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FirstSeen(ctx, "imp-1", time.Hour); err != nil {
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
		if f.Keys > 0 && f.Bytes <= 0 {
			t.Errorf("%s: %d keys of %d bytes", f.Name, f.Keys, f.Bytes)
		}
	}
	for name, want := range map[string][2]int64{"quota (day)": {3, 1}, "quota (total)": {2, 2}, "seen ids": {1, 0}, "placements": {2, 2}, "other": {0, 0}} {
		if f := got[name]; f.Keys != want[0] || f.NoExpiry != want[1] {
			t.Errorf("%s: %d keys, %d never expire; want %d, %d", name, f.Keys, f.NoExpiry, want[0], want[1])
		}
	}
	if a.StaleDays != 1 || a.Expired != 0 {
		t.Errorf("stale days %d, expired %d; want 1 and 0", a.StaleDays, a.Expired)
	}
	opt.ExpirePastDays = true
	if a, err = s.Audit(ctx, opt); err != nil || a.StaleDays != 1 || a.Expired != 1 {
		t.Fatalf("with ExpirePastDays: %+v %v", a, err)
	}
	// Its drop time (2026-11-12 and 7 days) has passed: the key is gone,
	// the others are not.
	if set, out, err := s.Committed(ctx, "li/a/imp/2026-11-10"); err != nil || set != 0 || out != 0 {
		t.Errorf("the stale day's key still holds %d, %d (%v)", set, out, err)
	}
	if _, out, err := s.Committed(ctx, "li/a/imp/2026-11-29"); err != nil || out != 10 {
		t.Errorf("today's key holds %d outstanding (%v), want 10", out, err)
	}
	if cli != nil {
		if n := cli("exists", prefix+"quota:li/a/imp/2026-11-10"); n != "0" {
			t.Errorf("EXISTS of the stale day's key: %s", n)
		}
	}
	var _ tsubame.Auditor = (*redis.Store)(nil)
}
