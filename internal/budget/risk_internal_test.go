package budget

import (
	"math"
	"testing"

	"tsubame/internal/decision"
)

// What bids held by a share add to an account's risk, their ending takes
// away exactly, whatever their share: over one half a bid's third moment
// is negative, and a sum kept at least 0 on each add would keep what the
// ending bids take away (headroom that never goes, bids that never come).
func TestRiskComesBackToNothing(t *testing.T) {
	for _, share := range []int64{1, 100, 512, 600, 1000, decision.HoldShares - 1} {
		a := &account{key: "k", scale: impScale}
		r := reservation{n: 1, share: share}
		r.slots[0] = slot{acct: a, units: impScale}
		for range 1000 {
			a.risk.add(1, &r, 0)
		}
		if a.headroom() <= 0 {
			t.Errorf("share %d: no headroom for 1,000 open bids", share)
		}
		for range 1000 {
			a.risk.add(-1, &r, 0)
		}
		m := a.risk.load()
		if m.held != 0 || m.whole != 0 || math.Abs(m.m2) > 1e-3 || math.Abs(m.m3) > 1 || a.headroom() != 0 {
			t.Errorf("share %d: after every bid ended the risk is %+v, headroom %d; want nothing", share, m, a.headroom())
		}
	}
}
