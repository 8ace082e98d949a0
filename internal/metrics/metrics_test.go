package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"tsubame"
	"tsubame/internal/budget"
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

func TestFrequencyCollector(t *testing.T) {
	reg := metrics.NewRegistry("test")
	reg.MustRegister(metrics.NewFrequencyCollector(func() budget.CapStats {
		return budget.CapStats{Errors: 9, Pending: 4, Sent: 12, Dropped: 1}
	}))
	var want strings.Builder
	for _, m := range []struct {
		name, kind string
		v          int
	}{{"tsubame_frequency_retries_dropped_total", "counter", 1}, {"tsubame_frequency_retries_pending", "gauge", 4},
		{"tsubame_frequency_retries_sent_total", "counter", 12}, {"tsubame_frequency_store_errors_total", "counter", 9}} {
		fmt.Fprintf(&want, "# TYPE %s %s\n%s %d\n", m.name, m.kind, m.name, m.v)
	}
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, mf := range got {
		if strings.HasPrefix(mf.GetName(), "tsubame_frequency_") {
			v := mf.GetMetric()[0]
			n := v.GetCounter().GetValue() + v.GetGauge().GetValue()
			fmt.Fprintf(&out, "# TYPE %s %s\n%s %d\n", mf.GetName(), strings.ToLower(mf.GetType().String()), mf.GetName(), int(n))
		}
	}
	if out.String() != want.String() {
		t.Fatalf("exported:\n%s\nwant:\n%s", out.String(), want.String())
	}
}

func TestBudgetCollector(t *testing.T) {
	reg := metrics.NewRegistry("test")
	reg.MustRegister(metrics.NewBudgetCollector(func() budget.Counts {
		return budget.Counts{Holds: 7, Buckets: 2, Accounts: 3, Billed: 40, Lost: 30, Expired: 2, StoreErrors: 5, LeasesLost: 1, Forgotten: 54}
	}))
	want := `
# HELP tsubame_budget_accounts Budget and limit counters this node holds a share of.
# TYPE tsubame_budget_accounts gauge
tsubame_budget_accounts 3
# HELP tsubame_budget_leases_lost_total Times the store held less of a lease than this node counted on: it ended before it was renewed (all of it counts as spent), or a failover lost writes.
# TYPE tsubame_budget_leases_lost_total counter
tsubame_budget_leases_lost_total 1
# HELP tsubame_budget_reservations_billed_total Holds ended by their bill: spent at the bill's price.
# TYPE tsubame_budget_reservations_billed_total counter
tsubame_budget_reservations_billed_total 40
# HELP tsubame_budget_reservations_expired_total Holds given back at a deadline: not won within the win window, or won and not billed by the end of the reservation.
# TYPE tsubame_budget_reservations_expired_total counter
tsubame_budget_reservations_expired_total 2
# HELP tsubame_budget_reservations_lost_total Holds ended by a loss notice: given back at once.
# TYPE tsubame_budget_reservations_lost_total counter
tsubame_budget_reservations_lost_total 30
# HELP tsubame_budget_reservations_open Bids and decisions of limited line items whose money is held: their outcome (a win, loss or bill) has not ended it.
# TYPE tsubame_budget_reservations_open gauge
tsubame_budget_reservations_open 7
# HELP tsubame_budget_store_errors_total Lease, release and settle calls to the store that failed (limited line items spend what they hold, then stop).
# TYPE tsubame_budget_store_errors_total counter
tsubame_budget_store_errors_total 5
# HELP tsubame_budget_units_forgotten_total Units (impressions, micro-units of spend) of this node's leases the store no longer held when asked; after a failover, at most this much is spent past a limit.
# TYPE tsubame_budget_units_forgotten_total counter
tsubame_budget_units_forgotten_total 54
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tsubame_budget_accounts", "tsubame_budget_leases_lost_total",
		"tsubame_budget_reservations_open", "tsubame_budget_reservations_billed_total", "tsubame_budget_reservations_expired_total", "tsubame_budget_reservations_lost_total",
		"tsubame_budget_store_errors_total", "tsubame_budget_units_forgotten_total"); err != nil {
		t.Fatal(err)
	}
}
