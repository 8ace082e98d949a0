package decision_test

import (
	"math/rand/v2"
	"testing"

	"tsubame/internal/decision"
)

// TestDecideAllocatesNothing holds the matching core to zero allocations
// per decision. make test runs it without -race too: the race detector's
// sync.Pool drops entries on purpose, so under -race it cannot hold.
func TestDecideAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race sync.Pool drops entries on purpose; make test runs this test again without -race")
	}
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
