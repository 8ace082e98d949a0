// Package metrics exposes Tsubame's counters to Prometheus. Collectors read
// snapshots (such as cache.Stats) at scrape time, so the request path pays
// nothing for them.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"tsubame/internal/accesslog"
	"tsubame/internal/bidder"
	"tsubame/internal/budget"
	"tsubame/internal/cache"
	"tsubame/internal/certs"
	"tsubame/internal/decision"
	"tsubame/internal/health"
	"tsubame/internal/logship"
	"tsubame/internal/report"
	"tsubame/internal/server"
	"tsubame/internal/ssp"
	"tsubame/internal/webhook"
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

// NewHealthGauges returns the gauges of the node's checks, read from report
// at each scrape: tsubame_ready, 1 while /readyz answers 200 (every
// required check passing), and tsubame_store_up, 1 while the store answers
// its probe (reported apart: readiness does not count it).
func NewHealthGauges(report func() health.Report) []prometheus.Collector {
	gauge := func(name, help string, value func(health.Report) bool) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, func() float64 {
			if value(report()) {
				return 1
			}
			return 0
		})
	}
	return []prometheus.Collector{
		gauge("ready", "1 while this node can serve and /readyz answers 200: open and not draining, cache warmed, access logs writable.",
			health.Report.Ready),
		gauge("store_up", "1 while the store answers its probe (store.probe_interval). Readiness does not count it: "+
			"with the store down a node serves cached ids and answers 503 for the others.",
			func(r health.Report) bool { c, ok := r.Find(health.Store); return ok && c.OK }),
	}
}

// CacheCollector exports a cache's Stats.
type CacheCollector struct {
	stats func() cache.Stats
	descs cacheDescs
}

type cacheDescs struct {
	lookups, loads, loadTime, refreshErrors, evictions, invalidations, revalidations, entries, bytes, shortCircuits, breakerOpen, loadsRefused *prometheus.Desc
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
		loadTime:      d("load_seconds_total", "Time spent in store reads made by the cache (divide by loads_total for the mean latency)."),
		refreshErrors: d("refresh_errors_total", "Background refreshes that failed; the stale value kept being served."),
		evictions:     d("evictions_total", "Entries dropped for size or age."),
		invalidations: d("invalidations_total", "Entries dropped by writes or explicit invalidation."),
		revalidations: d("revalidations_total", "Times every entry was marked for a refresh (the invalidation feed was lost and is back)."),
		entries:       d("entries", "Entries in the cache."),
		bytes:         d("bytes", "Estimated memory held by cache entries."),
		shortCircuits: d("short_circuits_total", "Store reads refused at once because the circuit breaker was open."),
		loadsRefused:  d("loads_refused_total", "Misses refused because cache.max_loads store reads were in flight for cache.load_wait."),
		breakerOpen:   d("breaker_open", "1 while the circuit breaker refuses store reads."),
	}}
}

// Describe implements prometheus.Collector.
func (c *CacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.descs.lookups, c.descs.loads, c.descs.loadTime, c.descs.refreshErrors,
		c.descs.evictions, c.descs.invalidations, c.descs.revalidations, c.descs.entries, c.descs.bytes, c.descs.shortCircuits, c.descs.breakerOpen, c.descs.loadsRefused} {
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
	ch <- prometheus.MustNewConstMetric(c.descs.loadTime, prometheus.CounterValue, s.LoadTime.Seconds())
	counter(c.descs.refreshErrors, s.RefreshErrors)
	counter(c.descs.evictions, s.Evictions)
	counter(c.descs.invalidations, s.Invalidations)
	counter(c.descs.revalidations, s.Revalidations)
	ch <- prometheus.MustNewConstMetric(c.descs.entries, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(c.descs.bytes, prometheus.GaugeValue, float64(s.Bytes))
	counter(c.descs.shortCircuits, s.ShortCircuits)
	counter(c.descs.loadsRefused, s.LoadsRefused)
	open := 0.0
	if s.BreakerOpen {
		open = 1
	}
	ch <- prometheus.MustNewConstMetric(c.descs.breakerOpen, prometheus.GaugeValue, open)
}

// AccessLogCollector exports an access log's Stats under a sink label.
type AccessLogCollector struct {
	sink      string
	stats     func() accesslog.Stats
	rotations func() uint64
	d         map[string]*prometheus.Desc
}

// NewAccessLogCollector returns a collector over stats for the named sink
// (file or store); rotations may be nil.
func NewAccessLogCollector(sink string, stats func() accesslog.Stats, rotations func() uint64) *AccessLogCollector {
	c := &AccessLogCollector{sink: sink, stats: stats, rotations: rotations, d: map[string]*prometheus.Desc{}}
	for name, help := range map[string]string{
		"records_total":         "Records appended by requests.",
		"written_records_total": "Records the sink accepted.",
		"written_bytes_total":   "Bytes the sink accepted.",
		"flushes_total":         "Batches written (group commits).",
		"write_errors_total":    "Failed attempts to write a batch; each is retried, nothing is dropped.",
		"waits_total":           "Requests that waited for buffer room (buffered writer) or file space (mapped writer) because the writer fell behind.",
		"wait_seconds_total":    "Time requests spent waiting for buffer room or file space.",
		"reserve_used_total":    "Requests that used the reserve buffer after access_log.max_wait.",
		"buffered_bytes":        "Bytes of records in memory, not yet written.",
		"failing":               "1 while the last write to the sink failed.",
		"rotations_total":       "Files closed out (file sink).",
	} {
		c.d[name] = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "accesslog", name), help, nil,
			prometheus.Labels{"sink": sink})
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *AccessLogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *AccessLogCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	put := func(name string, t prometheus.ValueType, v float64) {
		ch <- prometheus.MustNewConstMetric(c.d[name], t, v)
	}
	put("records_total", prometheus.CounterValue, float64(s.Appended))
	put("written_records_total", prometheus.CounterValue, float64(s.Written))
	put("written_bytes_total", prometheus.CounterValue, float64(s.Bytes))
	put("flushes_total", prometheus.CounterValue, float64(s.Flushes))
	put("write_errors_total", prometheus.CounterValue, float64(s.WriteErrors))
	put("waits_total", prometheus.CounterValue, float64(s.Waits))
	put("wait_seconds_total", prometheus.CounterValue, s.WaitTime.Seconds())
	put("reserve_used_total", prometheus.CounterValue, float64(s.Overflows))
	put("buffered_bytes", prometheus.GaugeValue, float64(s.Buffered))
	failing := 0.0
	if s.Failing {
		failing = 1
	}
	put("failing", prometheus.GaugeValue, failing)
	var rotations uint64
	if c.rotations != nil {
		rotations = c.rotations()
	}
	put("rotations_total", prometheus.CounterValue, float64(rotations))
}

// WebhookCollector exports the webhook processor's Stats.
type WebhookCollector struct {
	stats func() webhook.Stats
	d     map[string]*prometheus.Desc
}

// NewWebhookCollector returns a collector over stats, called once per scrape.
func NewWebhookCollector(stats func() webhook.Stats) *WebhookCollector {
	c := &WebhookCollector{stats: stats, d: map[string]*prometheus.Desc{}}
	for name, help := range map[string]string{
		"messages_total":         "Webhook messages by outcome: accepted (queued), rejected (queue full, 503), duplicate (LINE redelivery), processed, failed (dead-lettered).",
		"panics_total":           "Messages whose processing panicked (isolated and dead-lettered).",
		"api_calls_total":        "Calls made to the external API, retries included.",
		"api_retries_total":      "Calls to the external API repeated after a failure.",
		"api_seconds_total":      "Time spent in external API calls, retries and backoff included.",
		"queue_length":           "Messages waiting to be processed.",
		"requests_refused_total": "Webhook requests refused unread (503) because the queue was full; their messages are not counted.",
		"in_flight":              "Messages being processed.",
	} {
		labels := []string(nil)
		if name == "messages_total" {
			labels = []string{"outcome"}
		}
		c.d[name] = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "webhook", name), help, labels, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *WebhookCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *WebhookCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	put := func(name string, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.d[name], t, v, labels...)
	}
	put("messages_total", prometheus.CounterValue, float64(s.Accepted), "accepted")
	put("messages_total", prometheus.CounterValue, float64(s.Rejected), "rejected")
	put("messages_total", prometheus.CounterValue, float64(s.Duplicates), "duplicate")
	put("messages_total", prometheus.CounterValue, float64(s.Processed), "processed")
	put("messages_total", prometheus.CounterValue, float64(s.Failed), "failed")
	put("panics_total", prometheus.CounterValue, float64(s.Panics))
	put("requests_refused_total", prometheus.CounterValue, float64(s.Refused))
	put("api_calls_total", prometheus.CounterValue, float64(s.APICalls))
	put("api_retries_total", prometheus.CounterValue, float64(s.Retries))
	put("api_seconds_total", prometheus.CounterValue, s.APITime.Seconds())
	put("queue_length", prometheus.GaugeValue, float64(s.Queued))
	put("in_flight", prometheus.GaugeValue, float64(s.InFlight))
}

// ServerCollector exports the public listener's limit counters.
type ServerCollector struct {
	stats                  func() server.Stats
	refused, conns, panics *prometheus.Desc
}

// NewServerCollector returns a collector over stats, called once per scrape.
func NewServerCollector(stats func() server.Stats) *ServerCollector {
	return &ServerCollector{
		stats: stats,
		refused: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "limits", "refused_total"),
			"Requests or connections refused by a limit, by reason: max_conns, in_flight_ads (503; a bid request a bare 204), in_flight_tracking, in_flight_hooks (503), "+
				"header_too_large (431), body_too_large (413), read_timeout (408), malformed (400), "+
				"framing (400 and the connection closed: ambiguous request framing, see docs/edge.md), "+
				"callback_auth (401: POST /callback without its bearer token), "+
				"tls_handshake (a TLS handshake failed: no common version or suite, no certificate for the name, plain HTTP).",
			[]string{"reason"}, nil),
		panics: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "http", "panics_total"),
			"Public requests whose handler panicked; each was answered 500 and logged.", nil, nil),
		conns: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "connections"), "Public connections open.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *ServerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.refused
	ch <- c.conns
	ch <- c.panics
}

// Collect implements prometheus.Collector.
func (c *ServerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for reason, n := range s.Refused {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.Conns))
	ch <- prometheus.MustNewConstMetric(c.panics, prometheus.CounterValue, float64(s.Panics))
}

// RequestCollector exports the public requests by endpoint (or route) and
// status code: a counter and a latency histogram.
type RequestCollector struct {
	requests        func() []server.RouteCount
	total, duration *prometheus.Desc
}

// NewRequestCollector returns a collector over requests, called once per scrape.
func NewRequestCollector(requests func() []server.RouteCount) *RequestCollector {
	labels := []string{"endpoint", "code"}
	return &RequestCollector{requests: requests,
		total: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "http", "requests_total"),
			"Public requests answered, by endpoint (or route: callback, webhook_line, webhook_slack, lib, json, other) and status code (0: any other).", labels, nil),
		duration: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "http", "request_duration_seconds"),
			"Time from reading a public request to writing its response, by endpoint and status code.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *RequestCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.total; ch <- c.duration }

// Collect implements prometheus.Collector.
func (c *RequestCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rc := range c.requests() {
		code := strconv.Itoa(rc.Code)
		buckets := make(map[float64]uint64, len(server.LatencyBounds))
		var n uint64
		for i, b := range server.LatencyBounds {
			n += rc.Buckets[i]
			buckets[b] = n
		}
		n += rc.Buckets[len(server.LatencyBounds)]
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(n), rc.Route, code)
		ch <- prometheus.MustNewConstHistogram(c.duration, n, rc.Sum.Seconds(), buckets, rc.Route, code)
	}
}

// NewAdminCollector exports the admin listener's authentication failures
// and alerts.
func NewAdminCollector(stats func() (authFailures, alerts, auditErrors uint64)) prometheus.Collector {
	return &adminCollector{stats: stats,
		failures: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "admin", "auth_failures_total"),
			"Failed admin logins, setups and requests with invalid credentials.", nil, nil),
		alerts: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "admin", "alerts_total"),
			"Bursts of admin authentication failures (admin.alert_failures within admin.alert_window).", nil, nil),
		auditErrors: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "admin", "audit_write_errors_total"),
			"Audit records that could not be written.", nil, nil),
	}
}

type adminCollector struct {
	stats                         func() (uint64, uint64, uint64)
	failures, alerts, auditErrors *prometheus.Desc
}

func (c *adminCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.failures
	ch <- c.alerts
	ch <- c.auditErrors
}

func (c *adminCollector) Collect(ch chan<- prometheus.Metric) {
	f, a, e := c.stats()
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(f))
	ch <- prometheus.MustNewConstMetric(c.alerts, prometheus.CounterValue, float64(a))
	ch <- prometheus.MustNewConstMetric(c.auditErrors, prometheus.CounterValue, float64(e))
}

// NewAuditSyslogCollector exports the audit log's copy to syslog
// (admin.audit_syslog).
func NewAuditSyslogCollector(stats func() (sent, dropped uint64, failing bool)) prometheus.Collector {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "admin", "audit_syslog_"+n) }
	return &auditSyslogCollector{stats: stats,
		sent:    prometheus.NewDesc(name("sent_total"), "Audit lines sent to syslog.", nil, nil),
		dropped: prometheus.NewDesc(name("dropped_total"), "Audit lines not sent to syslog: the queue was full (the file keeps them).", nil, nil),
		failing: prometheus.NewDesc(name("failing"), "1 while the copy to syslog cannot connect or write.", nil, nil),
	}
}

type auditSyslogCollector struct {
	stats                  func() (uint64, uint64, bool)
	sent, dropped, failing *prometheus.Desc
}

func (c *auditSyslogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sent
	ch <- c.dropped
	ch <- c.failing
}

func (c *auditSyslogCollector) Collect(ch chan<- prometheus.Metric) {
	sent, dropped, failing := c.stats()
	f := 0.0
	if failing {
		f = 1
	}
	ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(sent))
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(dropped))
	ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, f)
}

// NewCertCollector exports the expiry of every TLS certificate in use, by
// listener (tls or admin) and site ("" for the default pair), so an alert
// can fire before one expires. loaded is called once per scrape.
func NewCertCollector(loaded func() map[string][]certs.Loaded) prometheus.Collector {
	return &certCollector{loaded: loaded, expiry: prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "tls", "certificate_expiry_timestamp_seconds"),
		"When a TLS certificate in use expires (Unix time), by listener and site (empty: the default pair).",
		[]string{"listener", "site", "names"}, nil)}
}

type certCollector struct {
	loaded func() map[string][]certs.Loaded
	expiry *prometheus.Desc
}

func (c *certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.expiry }

func (c *certCollector) Collect(ch chan<- prometheus.Metric) {
	for listener, list := range c.loaded() {
		for _, l := range list {
			ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(l.NotAfter.Unix()), listener, l.Site, l.Subject)
		}
	}
}

// ShipperCollector exports the access log's Kafka shipper's Stats.
type ShipperCollector struct {
	stats func() logship.Stats
	now   func() time.Time
	d     map[string]*prometheus.Desc
}

// NewShipperCollector returns a collector over the shipper's stats.
func NewShipperCollector(stats func() logship.Stats) *ShipperCollector {
	c := &ShipperCollector{stats: stats, now: time.Now, d: map[string]*prometheus.Desc{}}
	for name, help := range map[string]string{
		"lines_total":              "Access log lines acknowledged by Kafka.",
		"bytes_total":              "Bytes of those lines (without newlines).",
		"lag_lines":                "Lines written to the access log and not yet acknowledged by Kafka.",
		"oldest_unshipped_seconds": "Age of the oldest line sent and not yet acknowledged (0 when none).",
		"errors_total":             "Failed sends (each resent from the last acknowledged line) and read errors.",
		"skipped_lines_total":      "Lines of closed files that are not records, not shipped.",
		"failing":                  "1 while the shipper is resending after a failure.",
	} {
		c.d[name] = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "kafka_shipper", name), help, nil, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *ShipperCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ShipperCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	put := func(name string, t prometheus.ValueType, v float64) {
		ch <- prometheus.MustNewConstMetric(c.d[name], t, v)
	}
	put("lines_total", prometheus.CounterValue, float64(s.Lines))
	put("bytes_total", prometheus.CounterValue, float64(s.Bytes))
	put("lag_lines", prometheus.GaugeValue, float64(s.Lag))
	age := 0.0
	if !s.Oldest.IsZero() {
		age = max(0, c.now().Sub(s.Oldest).Seconds())
	}
	put("oldest_unshipped_seconds", prometheus.GaugeValue, age)
	put("errors_total", prometheus.CounterValue, float64(s.Errors))
	put("skipped_lines_total", prometheus.CounterValue, float64(s.Skipped))
	failing := 0.0
	if s.Failing {
		failing = 1
	}
	put("failing", prometheus.GaugeValue, failing)
}

// value is one metric of a valuesCollector: its description and how it is
// read from a snapshot of type S.
type value[S any] struct {
	name, help string
	kind       prometheus.ValueType
	read       func(S) float64
}

// valuesCollector exports a table of metrics read from one snapshot per
// scrape: a new set of metrics is a table, not a Describe/Collect pair.
type valuesCollector[S any] struct {
	snapshot func() S
	values   []value[S]
	descs    []*prometheus.Desc
}

func newValuesCollector[S any](subsystem string, snapshot func() S, values []value[S]) *valuesCollector[S] {
	c := &valuesCollector[S]{snapshot: snapshot, values: values}
	for _, v := range values {
		c.descs = append(c.descs, prometheus.NewDesc(prometheus.BuildFQName(Namespace, subsystem, v.name), v.help, nil, nil))
	}
	return c
}

func (c *valuesCollector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *valuesCollector[S]) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	for i, v := range c.values {
		ch <- prometheus.MustNewConstMetric(c.descs[i], v.kind, v.read(s))
	}
}

// NewFrequencyCollector exports the frequency caps' store failures and the
// updates sent again (internal/budget.Counters).
func NewFrequencyCollector(stats func() budget.CapStats) prometheus.Collector {
	return newValuesCollector("frequency", stats, []value[budget.CapStats]{
		{"store_errors_total", "Frequency caps' store calls that failed (the store down, slow or refusing): a decision's take or read, whose capped line items then did not serve, or a bid's hold, count or release.",
			prometheus.CounterValue, func(s budget.CapStats) float64 { return float64(s.Errors) }},
		{"retries_pending", "Frequency caps' updates the store did not take when asked (a win's count, a loss's release, the release of a hold that may have landed late), waiting to be sent again.",
			prometheus.GaugeValue, func(s budget.CapStats) float64 { return float64(s.Pending) }},
		{"retries_sent_total", "Frequency caps' updates the store took when sent again.",
			prometheus.CounterValue, func(s budget.CapStats) float64 { return float64(s.Sent) }},
		{"retries_dropped_total", "Frequency caps' updates lost: more waiting than ads.caps_pending, refused by the store, or left waiting when the server stopped.",
			prometheus.CounterValue, func(s budget.CapStats) float64 { return float64(s.Dropped) }},
	})
}

// NewIndexCollector exports the decision index's counts (internal/ads).
func NewIndexCollector(stats func() decision.IndexStats) prometheus.Collector {
	return newValuesCollector("decision_index", stats, []value[decision.IndexStats]{
		{"line_items", "Line items in the decision index in use: those that may serve.",
			prometheus.GaugeValue, func(s decision.IndexStats) float64 { return float64(s.LineItems) }},
		{"compiles_total", "Compiles of the whole campaign set into the index, holding changes back meanwhile: at start, after an import, after a gap in the store's log of writes, or for every change where the store keeps no log.",
			prometheus.CounterValue, func(s decision.IndexStats) float64 { return float64(s.Compiles) }},
		{"patches_total", "Changes (writes, and flights starting or ending) patched into the index in use: the line items they touch compiled again, the rest shared.",
			prometheus.CounterValue, func(s decision.IndexStats) float64 { return float64(s.Patches) }},
		{"compiles_behind_total", "Compiles of the whole set off the request path once patches used half the room the last compile left, patched with the changes made meanwhile and swapped in.",
			prometheus.CounterValue, func(s decision.IndexStats) float64 { return float64(s.CompilesBehind) }},
	})
}

// NewNoFillCollector exports the direct decisions of /api/decide (and the
// decide endpoints) that filled nothing, by cause (internal/ads,
// decision.NoFill).
func NewNoFillCollector(counts func() [decision.NumNoFills]uint64) prometheus.Collector {
	return &noFillCollector{counts: counts, desc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "decide", "nofill_total"),
		"Direct decisions that filled no slot, by cause: placement_unknown (no line item names the placement, and none that names none admits the request), targeting (flights, hours or targeting admit none), no_creative_fits (no creative of the format and size), capped (frequency caps, budgets, limits or pacing held every eligible one back).",
		[]string{"cause"}, nil)}
}

type noFillCollector struct {
	counts func() [decision.NumNoFills]uint64
	desc   *prometheus.Desc
}

func (c *noFillCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *noFillCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.counts()
	for cause := decision.Filled + 1; cause < decision.NumNoFills; cause++ {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n[cause]), cause.String())
	}
}

// NewBudgetCollector exports the ledger of budgets and impression limits
// (internal/budget): reservations open and settled, counters held, store
// failures and leases lost.
func NewBudgetCollector(counts func() budget.Counts) prometheus.Collector {
	return newValuesCollector("budget", counts, []value[budget.Counts]{
		{"reservations_open", "Bids and decisions of limited line items whose money is held: their outcome (a win, loss or bill) has not ended it.",
			prometheus.GaugeValue, func(c budget.Counts) float64 { return float64(c.Holds) }},
		{"hold_buckets", "Buckets the held money is kept in: one per line item and second of a reservation's end, whatever the number of bids.",
			prometheus.GaugeValue, func(c budget.Counts) float64 { return float64(c.Buckets) }},
		{"handed_over_buckets_total", "Buckets of open holds this server handed over when it stopped, for another to settle.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.HandedOver) }},
		{"adopted_handovers", "Stopped servers' open holds this server settles now.",
			prometheus.GaugeValue, func(c budget.Counts) float64 { return float64(c.Adopted) }},
		{"hold_bytes", "Memory the held money's buckets take, about.",
			prometheus.GaugeValue, func(c budget.Counts) float64 { return float64(c.HoldBytes) }},
		{"oldest_hold_seconds", "Age of the oldest bucket of held money (0: none).",
			prometheus.GaugeValue, func(c budget.Counts) float64 { return c.OldestHold.Seconds() }},
		{"reservations_billed_total", "Holds ended by their bill: spent at the bill's price.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Billed) }},
		{"reservations_won_total", "Holds whose bid won: held on until its bill.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Won) }},
		{"reservations_lost_total", "Holds ended by a loss notice: given back at once.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Lost) }},
		{"reservations_expired_total", "Holds given back at a deadline: not won within the win window, or won and not billed by the end of the reservation.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Expired) }},
		{"bills_late_total", "Bills of no hold (after its deadline or its loss, or of a process since restarted): spent from the hand.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Late) }},
		{"bills_past_hold_total", "Bills of bids held by a share of their price (win_rate_holds) that cost more than their holds had left: the rest spent from the hand.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.PastHold) }},
		{"won_kept_total", "Won bids spent at the end of their reservation with no bill (keep_won: their exchange bills late), so that their money is not sold again.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Kept) }},
		{"kept_bills_total", "Late bills of won bids spent at their end (keep_won): not spent again. Those kept and never billed are the difference from won_kept_total.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.KeptBilled) }},
		{"topup_waits_total", "Decisions that found this node's share of a budget empty and waited for its top-up (ads.budget.wait) until the store answered.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Waited) }},
		{"topup_waits_timed_out_total", "Decisions whose wait for a top-up ran out first (the store slow): waiting is off for that budget for an interval.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.WaitsTimedOut) }},
		{"accounts_warmed_total", "Budgets and limits leased for before their line item's first decision on this node (at start, and when a new index brings a line item or flight).",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Warmed) }},
		{"overage_bills_total", "Late bills, and bills past their holds, no hand covered: debited past what was leased, each past the limit it used up.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Overage) }},
		{"accounts", "Budget and limit counters this node holds a share of.",
			prometheus.GaugeValue, func(c budget.Counts) float64 { return float64(c.Accounts) }},
		{"store_errors_total", "Lease, release and settle calls to the store that failed (limited line items spend what they hold, then stop).",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.StoreErrors) }},
		{"leases_lost_total", "Times the store held less of a lease than this node counted on: it ended before it was renewed (all of it counts as spent), or a failover lost writes.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.LeasesLost) }},
		{"units_forgotten_total", "Units (impressions, micro-units of spend) of this node's leases the store no longer held when asked; after a failover, at most this much is spent past a limit.",
			prometheus.CounterValue, func(c budget.Counts) float64 { return float64(c.Forgotten) }},
	})
}

// NewBidderCollector exports the OpenRTB bidder's counters per exchange
// (internal/bidder): requests, bids, no-bid reasons, refusals, wins,
// bills, losses and their repeats, late bills, markup impressions,
// clearing prices above the bid or missing, spend and the bid latency.
func NewBidderCollector(stats func() []bidder.Snapshot) prometheus.Collector {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "rtb", n) }
	ex := []string{"exchange"}
	c := &bidderCollector{stats: stats,
		nobid:   prometheus.NewDesc(name("no_bids_total"), "Bid requests answered without a bid, by reason.", []string{"exchange", "reason"}, nil),
		latency: prometheus.NewDesc(name("bid_seconds"), "Time to answer a bid request (decoded to encoded).", ex, nil),
	}
	for _, v := range []struct {
		name, help string
		read       func(bidder.Snapshot) float64
	}{
		{"requests_total", "Bid requests received.", func(s bidder.Snapshot) float64 { return float64(s.Requests) }},
		{"answered_total", "Bid requests answered with bids.", func(s bidder.Snapshot) float64 { return float64(s.Answered) }},
		{"bids_total", "Bids made (one an impression).", func(s bidder.Snapshot) float64 { return float64(s.Bids) }},
		{"refused_total", "Bid requests refused unread: a wrong token or a source not listed.", func(s bidder.Snapshot) float64 { return float64(s.Refused) }},
		{"wins_total", "Win notices counted (the first of each bid).", func(s bidder.Snapshot) float64 { return float64(s.Wins) }},
		{"win_repeats_total", "Win notices repeated: answered, not counted again.", func(s bidder.Snapshot) float64 { return float64(s.WinRepeats) }},
		{"bills_total", "Bids billed, by whichever notice bills (the first of each bid).", func(s bidder.Snapshot) float64 { return float64(s.Bills) }},
		{"bill_repeats_total", "Bills repeated: answered, not billed again.", func(s bidder.Snapshot) float64 { return float64(s.BillRepeats) }},
		{"late_bills_total", "Bills after their bid's reservation ended (billed: overage).", func(s bidder.Snapshot) float64 { return float64(s.Late) }},
		{"losses_total", "Loss notices counted (the first of each bid).", func(s bidder.Snapshot) float64 { return float64(s.Losses) }},
		{"loss_repeats_total", "Loss notices repeated: answered, not counted again.", func(s bidder.Snapshot) float64 { return float64(s.LossRepeats) }},
		{"bid_imps_total", "Impressions bids' markup fired, counted (the first of each bid).", func(s bidder.Snapshot) float64 { return float64(s.BidImps) }},
		{"price_above_bid_total", "Win and billing notices whose clearing price was above the bid's: logged, counted at the bid's.", func(s bidder.Snapshot) float64 { return float64(s.AboveBid) }},
		{"price_missing_total", "Win and billing notices without a readable clearing price: counted at the bid's.", func(s bidder.Snapshot) float64 { return float64(s.PriceMissing) }},
		{"spend_micros_total", "Billed clearing prices, in micro-units of the account currency.", func(s bidder.Snapshot) float64 { return float64(s.Spend) }},
	} {
		c.counters = append(c.counters, bidderCounter{prometheus.NewDesc(name(v.name), v.help, ex, nil), v.read})
	}
	return c
}

type bidderCounter struct {
	desc *prometheus.Desc
	read func(bidder.Snapshot) float64
}

type bidderCollector struct {
	stats          func() []bidder.Snapshot
	counters       []bidderCounter
	nobid, latency *prometheus.Desc
}

func (c *bidderCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, k := range c.counters {
		ch <- k.desc
	}
	ch <- c.nobid
	ch <- c.latency
}

func (c *bidderCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.stats() {
		for _, k := range c.counters {
			ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, k.read(s), s.Exchange)
		}
		for reason, n := range s.NoBids {
			ch <- prometheus.MustNewConstMetric(c.nobid, prometheus.CounterValue, float64(n), s.Exchange, reason)
		}
		buckets := map[float64]uint64{}
		var n uint64
		for i, bound := range bidder.LatencyBounds {
			n += s.Latency[i]
			buckets[bound.Seconds()] = n
		}
		n += s.Latency[len(bidder.LatencyBounds)]
		ch <- prometheus.MustNewConstHistogram(c.latency, n, s.LatencySum.Seconds(), buckets, s.Exchange)
	}
}

// ReportCollector exports the reports' roller stats (internal/report).
type ReportCollector struct {
	stats                 func() report.Stats
	lines, events, errors *prometheus.Desc
	paused                *prometheus.Desc
}

// NewReportCollector returns a collector over the roller's stats.
func NewReportCollector(stats func() report.Stats) *ReportCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "report", name), help, nil, nil)
	}
	return &ReportCollector{stats: stats,
		lines:  d("lines_total", "Access log lines the reports have read since the start."),
		events: d("events_total", "Of those, lines counted (event lines, refused tracking requests)."),
		errors: d("errors_total", "Rollup passes that failed (retried at the next interval) and lines that could not be read."),
		paused: d("paused_seconds_total", "Time the background reading paused between its bursts (report.burst)."),
	}
}

// Describe implements prometheus.Collector.
func (c *ReportCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lines
	ch <- c.events
	ch <- c.errors
	ch <- c.paused
}

// Collect implements prometheus.Collector.
func (c *ReportCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(c.lines, prometheus.CounterValue, float64(s.Lines))
	ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(s.Events))
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(s.Errors))
	ch <- prometheus.MustNewConstMetric(c.paused, prometheus.CounterValue, s.Paused.Seconds())
}

// NewSSPCollector exports the sell side's counters (internal/ssp): per
// demand partner, the bid requests sent, answered with bids and without,
// timed out, failed and not sent (over its qps or calls in flight), the
// bids dropped by validation and the auctions won; and the notice calls
// made, failed and dropped.
func NewSSPCollector(stats func() map[string]*ssp.PartnerStats, notices func() (sent, failed, dropped uint64)) prometheus.Collector {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "ssp", n) }
	p := []string{"partner"}
	c := &sspCollector{stats: stats, notices: notices,
		noticeDescs: [3]*prometheus.Desc{
			prometheus.NewDesc(name("notices_sent_total"), "Win, billing and loss notices called.", nil, nil),
			prometheus.NewDesc(name("notices_failed_total"), "Notice calls that failed (an error or a status other than 2xx).", nil, nil),
			prometheus.NewDesc(name("notices_dropped_total"), "Notices dropped: the queue (ssp.notices.queue) was full.", nil, nil),
		}}
	for _, v := range []struct {
		name, help string
		read       func(*ssp.PartnerStats) uint64
	}{
		{"requests_total", "Bid requests sent to the partner.", func(s *ssp.PartnerStats) uint64 { return s.Requests.Load() }},
		{"bids_total", "Calls answered with bids.", func(s *ssp.PartnerStats) uint64 { return s.Bids.Load() }},
		{"no_bids_total", "Calls answered without a bid (204 or no seat).", func(s *ssp.PartnerStats) uint64 { return s.NoBids.Load() }},
		{"timeouts_total", "Calls not answered by the auction's deadline (or the partner's timeout).", func(s *ssp.PartnerStats) uint64 { return s.Timeouts.Load() }},
		{"errors_total", "Calls that failed: reset, bad status, not OpenRTB, too large, HTTP/1.0.", func(s *ssp.PartnerStats) uint64 { return s.Errors.Load() }},
		{"throttled_total", "Auctions the partner was not asked in: over its qps or max_in_flight.", func(s *ssp.PartnerStats) uint64 { return s.Throttled.Load() }},
		{"invalid_bids_total", "Bids dropped by validation (see docs/ssp.md).", func(s *ssp.PartnerStats) uint64 { return s.Invalid.Load() }},
		{"wins_total", "Auctions the partner's bid won.", func(s *ssp.PartnerStats) uint64 { return s.Wins.Load() }},
	} {
		c.counters = append(c.counters, sspCounter{prometheus.NewDesc(name("partner_"+v.name), v.help, p, nil), v.read})
	}
	return c
}

type sspCounter struct {
	desc *prometheus.Desc
	read func(*ssp.PartnerStats) uint64
}

type sspCollector struct {
	stats       func() map[string]*ssp.PartnerStats
	notices     func() (sent, failed, dropped uint64)
	counters    []sspCounter
	noticeDescs [3]*prometheus.Desc
}

func (c *sspCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, k := range c.counters {
		ch <- k.desc
	}
	for _, d := range c.noticeDescs {
		ch <- d
	}
}

func (c *sspCollector) Collect(ch chan<- prometheus.Metric) {
	for partner, s := range c.stats() {
		for _, k := range c.counters {
			ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, float64(k.read(s)), partner)
		}
	}
	sent, failed, dropped := c.notices()
	for i, v := range [3]uint64{sent, failed, dropped} {
		ch <- prometheus.MustNewConstMetric(c.noticeDescs[i], prometheus.CounterValue, float64(v))
	}
}
