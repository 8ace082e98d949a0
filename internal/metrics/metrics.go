// Package metrics exposes Tsubame's counters to Prometheus. Collectors read
// snapshots (such as cache.Stats) at scrape time, so the request path pays
// nothing for them.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"tsubame/internal/cache"
)

// Namespace prefixes every Tsubame metric.
const Namespace = "tsubame"

// NewRegistry returns a registry with the Go runtime and process collectors
// and a tsubame_build_info gauge.
func NewRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace:   Namespace,
			Name:        "build_info",
			Help:        "Always 1; the version label names the running build.",
			ConstLabels: prometheus.Labels{"version": version},
		}, func() float64 { return 1 }),
	)
	return reg
}

// CacheCollector exports a cache's Stats.
type CacheCollector struct {
	stats func() cache.Stats
	descs cacheDescs
}

type cacheDescs struct {
	lookups, loads, refreshErrors, evictions, invalidations, entries, bytes *prometheus.Desc
}

// NewCacheCollector returns a collector over stats, called once per scrape.
func NewCacheCollector(stats func() cache.Stats) *CacheCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "cache", name), help, labels, nil)
	}
	return &CacheCollector{stats: stats, descs: cacheDescs{
		lookups: d("lookups_total", "Cache lookups by result: hit (fresh entry), stale (served past its TTL, "+
			"during a refresh or while the store fails), miss (waited for a store read).", "result"),
		loads:         d("loads_total", "Store reads made by the cache, by result.", "result"),
		refreshErrors: d("refresh_errors_total", "Background refreshes that failed; the stale value kept being served."),
		evictions:     d("evictions_total", "Entries dropped for size or age."),
		invalidations: d("invalidations_total", "Entries dropped by writes or explicit invalidation."),
		entries:       d("entries", "Entries in the cache."),
		bytes:         d("bytes", "Estimated memory held by cache entries."),
	}}
}

// Describe implements prometheus.Collector.
func (c *CacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.descs.lookups, c.descs.loads, c.descs.refreshErrors,
		c.descs.evictions, c.descs.invalidations, c.descs.entries, c.descs.bytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *CacheCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.descs.lookups, s.Hits, "hit")
	counter(c.descs.lookups, s.Stale, "stale")
	counter(c.descs.lookups, s.Misses, "miss")
	counter(c.descs.loads, s.Loads, "ok")
	counter(c.descs.loads, s.LoadErrors, "error")
	counter(c.descs.refreshErrors, s.RefreshErrors)
	counter(c.descs.evictions, s.Evictions)
	counter(c.descs.invalidations, s.Invalidations)
	ch <- prometheus.MustNewConstMetric(c.descs.entries, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(c.descs.bytes, prometheus.GaugeValue, float64(s.Bytes))
}
