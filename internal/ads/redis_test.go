package ads_test

import (
	"context"
	"testing"

	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
)

// Three nodes, each with its own connection to one real Redis: every
// impression and click, fetched 8 times at once across them, is counted
// exactly once.
func TestRepeatsCountOnceAcrossNodesOnRedis(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	f := newFixture(t)
	var nodes []*node
	for i := range 3 {
		st, err := redis.Open(redis.Options{Addrs: []string{srv.Addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if i == 0 {
			set, _, err := f.store.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := st.ReplaceAll(context.Background(), set); err != nil {
				t.Fatal(err)
			}
		}
		nodes = append(nodes, f.startOn(t, st, nodeOpts{}))
	}
	countOnce(t, nodes...)
}
