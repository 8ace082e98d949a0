package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"tsubame"
	"tsubame/internal/cache"
	"tsubame/internal/metrics"
	"tsubame/internal/render"
	"tsubame/internal/store/memory"
)

func TestCacheCollector(t *testing.T) {
	store := memory.New()
	if err := store.Put(context.Background(), &tsubame.Placement{ID: "1", URLs: []string{"http://a.example.com/"}}); err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(store, cache.Options{Encoders: render.Encoders(render.EncoderOptions{}, []render.Format{render.FormatJSONP})})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, id := range []string{"1", "1", "1", "2"} {
		if _, err := c.Lookup(context.Background(), []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	c.Invalidate("1")
	reg := metrics.NewRegistry("test")
	reg.MustRegister(metrics.NewCacheCollector(c.Stats))
	want := `
# HELP tsubame_cache_invalidations_total Entries dropped by writes or explicit invalidation.
# TYPE tsubame_cache_invalidations_total counter
tsubame_cache_invalidations_total 1
# HELP tsubame_cache_loads_total Store reads made by the cache, by result.
# TYPE tsubame_cache_loads_total counter
tsubame_cache_loads_total{result="error"} 0
tsubame_cache_loads_total{result="ok"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tsubame_cache_loads_total", "tsubame_cache_invalidations_total"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
		if mf.GetName() == "tsubame_cache_lookups_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "hit" && m.GetCounter().GetValue() != 2 {
					t.Errorf("hits = %v, want 2", m.GetCounter().GetValue())
				}
				if m.GetLabel()[0].GetValue() == "miss" && m.GetCounter().GetValue() != 2 {
					t.Errorf("misses = %v, want 2", m.GetCounter().GetValue())
				}
			}
		}
	}
	for _, name := range []string{"tsubame_build_info", "go_goroutines", "process_resident_memory_bytes", "tsubame_cache_bytes", "tsubame_cache_entries"} {
		if !found[name] {
			t.Errorf("%s not exported", name)
		}
	}
}
