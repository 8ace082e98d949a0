package budget

import (
	"fmt"
	"testing"

	"tsubame/internal/store/memory"
)

// Busiest keeps the budgets and limits whose line items and campaigns had
// the most requests on this node (what the dashboard reads of a million,
// a store call each), then those of the set's order.
func TestBusiest(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	g, err := NewLedger(st, st, LedgerOptions{Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	learn := func(key string, perRound int64) {
		p := g.traffic.of(key)
		watch(p, 20_000, 0, 86400, func(int) int64 { return perRound })
		watch(p, 20_001, 0, 1, func(int) int64 { return 1 }) // the day is learned once the next begins
	}
	learn(keyLineImp("busy"), 10)
	learn(keyCampaignSpend("camp-2"), 3)
	us := []Usage{
		{Key: keyCampaignSpend("camp-1"), Campaign: "camp-1"},
		{Key: keyCampaignSpend("camp-2"), Campaign: "camp-2"},
		{Key: keyLineImp("quiet"), LineItem: "quiet", Campaign: "camp-1"},
		{Key: keyLineImpDay("busy", "2026-11-29"), LineItem: "busy", Campaign: "camp-1"},
		{Key: keyLineImp("other"), LineItem: "other", Campaign: "camp-2"}, // its campaign's requests
	}
	keys := func(us []Usage) string {
		var out []string
		for _, u := range us {
			out = append(out, u.Key)
		}
		return fmt.Sprint(out)
	}
	for _, tt := range []struct {
		n    int
		want string
	}{
		{2, "[li/busy/imp/2026-11-29 camp/camp-2/spend]"},
		{3, "[li/busy/imp/2026-11-29 camp/camp-2/spend li/other/imp]"},
		{4, "[li/busy/imp/2026-11-29 camp/camp-2/spend li/other/imp camp/camp-1/spend]"},
		{0, keys(us)},
		{5, keys(us)},
	} {
		if got := keys(g.Busiest(us, tt.n)); got != tt.want {
			t.Errorf("Busiest(%d) = %s, want %s", tt.n, got, tt.want)
		}
	}
}
