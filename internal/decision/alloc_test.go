//go:build !race

package decision_test

import (
	"math/rand/v2"
	"testing"

	"tsubame/internal/decision"
)

// TestDecideAllocatesNothing holds the matching core to zero allocations
// per decision (the race detector's sync.Pool drops entries on purpose,
// hence the build tag).
func TestDecideAllocatesNothing(t *testing.T) {
	ix := benchIndex(t, 2_000)
	reqs := benchRequests(256)
	rnd := rand.New(rand.NewPCG(1, 1))
	out := make([]decision.Decision, 0, decision.MaxCount)
	ix.Decide(&reqs[0], out, rnd) // fill the pool
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		out = ix.Decide(&reqs[i%len(reqs)], out[:0], rnd)
		i++
	}); a != 0 {
		t.Fatalf("Decide allocates %v times per call, want 0", a)
	}
}
