package tsubame

import (
	"strings"
	"testing"
	"time"
)

// The rules of QuotaState, by a clock the test moves: a lease expires at
// its expiry and is settled, a lease of 0 renews it, a lowered limit
// grants nothing, and a refused release changes nothing.
func TestQuotaState(t *testing.T) {
	var q QuotaState
	check := func(why string, settled, outstanding int64) {
		t.Helper()
		if q.Settled != settled || q.Outstanding() != outstanding {
			t.Fatalf("%s: %d settled, %d outstanding; want %d, %d", why, q.Settled, q.Outstanding(), settled, outstanding)
		}
	}
	if n := q.Lease("a", 10, 4, 0, 100); n != 4 {
		t.Fatalf("granted %d, want 4", n)
	}
	if n := q.Lease("b", 10, 9, 0, 50); n != 6 {
		t.Fatalf("granted %d, want the 6 left", n)
	}
	if n := q.Lease("c", 10, 1, 0, 50); n != 0 || len(q.Leases) != 2 {
		t.Fatalf("granted %d with nothing left, %d leases; want 0 and no lease for c", n, len(q.Leases))
	}
	if n := q.Lease("a", 10, 0, 40, 200); n != 0 {
		t.Fatal(n) // renews a's lease to 200
	}
	if q.Expire(49) {
		t.Fatal("a lease expired before its time")
	}
	if !q.Expire(50) {
		t.Fatal("b's lease not expired at its expiry")
	}
	check("b expired", 6, 4)
	if err := q.Release("b", "r1", 0, 6, 60); ErrorCode(err) != ECONFLICT {
		t.Fatalf("release of an expired lease: %v, want ECONFLICT", err)
	}
	if err := q.Release("a", "r1", 4, 1, 60); ErrorCode(err) != EINVALID {
		t.Fatalf("release of 5 of a lease of 4: %v, want EINVALID", err)
	}
	check("refused releases", 6, 4)
	if n := q.Lease("c", 5, 1, 60, 300); n != 0 {
		t.Fatalf("a limit lowered under what is committed granted %d", n)
	}
	if err := q.Release("a", "r2", 1, 3, 60); err != nil {
		t.Fatal(err)
	}
	check("a released", 7, 0)
	if err := q.Release("a", "r2", 1, 3, 60); err != nil {
		t.Fatalf("a retry of an applied release: %v, want nil", err)
	}
	check("a released again", 7, 0)
	if len(q.Leases) != 0 {
		t.Fatalf("%d leases left", len(q.Leases))
	}
}

func TestValidateLease(t *testing.T) {
	if err := ValidateLease(strings.Repeat("k", MaxQuotaKeyLength), strings.Repeat("h", MaxQuotaHolderLength), MaxQuotaUnits, 0, MaxLeaseTTL); err != nil {
		t.Fatalf("the largest valid arguments: %v", err)
	}
	for _, c := range []struct {
		key, holder string
		limit, want int64
		ttl         time.Duration
	}{
		{"", "a", 1, 1, time.Second},
		{"k", strings.Repeat("h", MaxQuotaHolderLength+1), 1, 1, time.Second},
		{"k", "a", -1, 1, time.Second},
		{"k", "a", 1, MaxQuotaUnits + 1, time.Second},
		{"k", "a", 1, 1, 0},
	} {
		if err := ValidateLease(c.key, c.holder, c.limit, c.want, c.ttl); ErrorCode(err) != EINVALID {
			t.Errorf("ValidateLease(%q, %q, %d, %d, %v) = %v, want EINVALID", c.key, c.holder, c.limit, c.want, c.ttl, err)
		}
	}
	if err := ValidateRelease("k", "a", "r", 0, -1); ErrorCode(err) != EINVALID {
		t.Errorf("ValidateRelease of -1 unused = %v, want EINVALID", err)
	}
	for _, id := range []string{"", strings.Repeat("i", MaxQuotaReleaseIDLength+1)} {
		if err := ValidateRelease("k", "a", id, 0, 0); ErrorCode(err) != EINVALID {
			t.Errorf("ValidateRelease of an id of %d bytes = %v, want EINVALID", len(id), err)
		}
	}
	if err := ValidateRelease("k", "a", strings.Repeat("i", MaxQuotaReleaseIDLength), 0, 0); err != nil {
		t.Errorf("ValidateRelease of the longest id: %v", err)
	}
}
