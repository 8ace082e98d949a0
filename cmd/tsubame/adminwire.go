package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"syscall"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/admin"
	"tsubame/internal/budget"
	"tsubame/internal/certs"
	"tsubame/internal/config"
	"tsubame/internal/forecast"
	"tsubame/internal/health"
	"tsubame/internal/metrics"
	"tsubame/internal/server"
)

// openAdmin builds the admin server, for its listener, its control socket
// or both: its accounts and audit log, its metrics registry, and the views
// it shows, and makes the control socket. With no user yet, it prints the
// one-time bootstrap token to the console.
func (m *Main) openAdmin(cfg *config.Config, backend tsubame.Store) error {
	accounts, err := admin.OpenAccounts(cfg.AdminDir())
	if err != nil {
		return fmt.Errorf("admin accounts: %w", err)
	}
	m.adm.audit, m.adm.alerts, err = openAuditLog(cfg, m.Logger)
	if err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if m.adm.certs != nil { // loaded by Open
		tlsConfig = m.adm.certs.Config(tls.VersionTLS12)
	}

	reg := metrics.NewRegistry(version)
	reg.MustRegister(metrics.NewCacheCollector(m.Cache.Stats), metrics.NewServerCollector(m.pub.server.Stats),
		metrics.NewRequestCollector(m.pub.server.Requests), metrics.NewAdminCollector(func() (uint64, uint64, uint64) {
			st := m.adm.audit.Stats()
			return st.AuthFailures, st.Alerts, st.WriteErrors
		}))
	reg.MustRegister(metrics.NewHealthGauges(m.readiness)...)
	if m.pub.tlsCerts != nil || m.adm.certs != nil {
		reg.MustRegister(metrics.NewCertCollector(func() map[string][]certs.Loaded {
			out := map[string][]certs.Loaded{}
			if m.pub.tlsCerts != nil {
				out["tls"] = m.pub.tlsCerts.Loaded()
			}
			if m.adm.certs != nil {
				out["admin"] = m.adm.certs.Loaded()
			}
			return out
		}))
	}
	if _, ok := m.adm.audit.SyslogStats(); ok {
		reg.MustRegister(metrics.NewAuditSyslogCollector(func() (uint64, uint64, bool) {
			st, _ := m.adm.audit.SyslogStats()
			return st.Sent, st.Dropped, st.Failing
		}))
	}
	if m.hooks.processor != nil {
		reg.MustRegister(metrics.NewWebhookCollector(m.hooks.processor.Stats))
	}
	if l := m.ads.ledger; l != nil {
		reg.MustRegister(metrics.NewBudgetCollector(l.Counts))
	}
	if c := m.ads.counters; c != nil {
		reg.MustRegister(metrics.NewFrequencyCollector(c.Stats))
	}
	if e := m.ads.engine; e != nil {
		reg.MustRegister(metrics.NewIndexCollector(e.Stats))
	}
	if svc := m.ads.svc; svc != nil {
		reg.MustRegister(metrics.NewNoFillCollector(svc.NoFills))
	}
	if b := m.ads.bidder; b != nil {
		reg.MustRegister(metrics.NewBidderCollector(b.Stats))
	}
	if a := m.ads.auction; a != nil {
		reg.MustRegister(metrics.NewSSPCollector(a.Stats, a.NoticeStats))
	}
	if m.logs.shipper != nil {
		reg.MustRegister(metrics.NewShipperCollector(m.logs.shipper.Stats))
	}
	if m.logs.roller != nil {
		reg.MustRegister(metrics.NewReportCollector(m.logs.roller.Stats))
	}
	for name, l := range map[string]*accesslog.Logger{"file": m.logs.file, "store": m.logs.store} {
		if l != nil {
			var rotations func() uint64
			if name == "file" {
				rotations = m.logs.fileSink.Rotations
			}
			reg.MustRegister(metrics.NewAccessLogCollector(name, l.Stats, rotations))
		}
	}
	opt := cfg.Admin.Options()
	opt.Logger, opt.Metrics, opt.Ready, opt.Accounts, opt.Audit, opt.TLS = m.Logger, reg, m.readiness, accounts, m.adm.audit, tlsConfig
	opt.Placements, opt.Purge, opt.ConfigView, opt.AccessLog, opt.Sample = m.Cache, m.purge(backend), m.configView, m.accessLogStatus, m.sample
	opt.Endpoints, opt.Tags = m.endpointNames, m.tagSetup
	if as, ok := backend.(tsubame.Assets); ok { // else uploads say the store keeps none
		opt.Assets, opt.AssetLimits = as, cfg.Ads.Assets.Limits()
	}
	if cs, ok := backend.(tsubame.CampaignStore); ok { // else the campaign routes say the store keeps none
		opt.Campaigns = m.campaignsForWrites(cs)
		if m.ads.engine != nil {
			q, _ := backend.(tsubame.Quotas)
			opt.LineItemStatus = m.lineItemStatus(cs, q, cfg.Ads.Budget.HistoryMax)
		}
		if q, ok := backend.(tsubame.Quotas); ok {
			engine, ledger, max := m.ads.engine, m.ads.ledger, cfg.Ads.Budget.HistoryMax
			opt.Budgets = func(ctx context.Context) (any, error) {
				us, err := budgetUsages(ctx, engine, ledger, cs, q, max)
				if us == nil {
					us = []budget.Usage{}
				}
				m.ads.history.Fill(us)
				return us, err
			}
		}
	}
	if a, ok := backend.(tsubame.Auditor); ok { // else the audit route says this store cannot
		keep := cfg.Ads.Budget.KeepDaily
		opt.StoreAudit = func(ctx context.Context, expire bool) (*tsubame.StoreAudit, error) {
			return a.Audit(ctx, tsubame.AuditOptions{KeepDaily: keep, ExpirePastDays: expire})
		}
	}
	if m.logs.roller != nil { // else the report routes say this server keeps none
		opt.Reports = m.logs.roller
		if m.ads.engine != nil {
			opt.Forecast = forecast.New(forecast.Options{Reports: m.logs.roller.Query, Index: m.ads.engine.Index,
				Days: cfg.Report.ForecastDays}).Forecast
		}
	}
	opt.ReportLocation = cfg.ReportLocation()
	if svc := m.ads.svc; svc != nil && opt.Campaigns != nil {
		opt.Explain = func(q url.Values, h http.Header) (any, error) { return svc.Explain(q, h) }
	}
	m.adm.server = admin.New(opt)
	if path := cfg.AdminSocketPath(); path != "" {
		m.adm.sock, err = admin.ListenSocket(path)
		switch {
		case errors.Is(err, admin.ErrSocketInUse) && cfg.Store.Type != "embedded":
			// Nodes of a shared store may share a data_dir; the commands
			// write to that store themselves and need no socket.
			m.Logger.Warn("another process serves the control socket: this server has none", "admin_socket", path)
		case err != nil:
			// The commands would send this server's changes to another.
			return fmt.Errorf("admin.socket: %w", err)
		}
	}
	tokenFile := filepath.Join(cfg.AdminDir(), BootstrapTokenFile)
	if tok := m.adm.server.BootstrapToken(); tok == "" {
		_ = os.Remove(tokenFile) // left by a process killed before it could remove it: its token is dead
	} else if m.AdminAddr() != "" { // the token is for the dashboard's form
		scheme := "http"
		if tlsConfig != nil {
			scheme = "https"
		}
		url := scheme + "://" + m.AdminAddr() + "/"
		if m.Console != nil {
			fmt.Fprintf(m.Console, "\nNo admin user exists yet. Open %s and create one with this one-time bootstrap token\n"+
				"(it works once, until this process stops; or run `tsubame admin create-user`):\n\n    %s\n\n", url, tok)
			return nil
		}
		// No terminal: the token goes to a file only the server's user
		// reads, not into the process log (which is shipped and kept).
		if err := writeSecretFile(tokenFile, tok+"\n"); err != nil {
			return fmt.Errorf("writing the bootstrap token: %w", err)
		}
		m.adm.tokenFile, m.adm.tokenText = tokenFile, tok+"\n"
		m.Logger.Warn("no admin user exists yet: open the admin listener and create one with the one-time bootstrap token "+
			"in the file (it works once, until this process stops), or run tsubame admin create-user", "url", url, "token_file", tokenFile)
	}
	return nil
}

// writeSecretFile writes a new file only this user reads. A file or link
// already there (planted by someone who can write the directory) is
// removed first, and the new one is created, never opened: the secret
// cannot land in a file of another's or follow a link.
func writeSecretFile(path, content string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// BootstrapTokenFile is the file in the admin directory that holds the
// one-time bootstrap token while no admin user exists and the process has
// no terminal to show it on. It is removed when the process stops.
const BootstrapTokenFile = "bootstrap-token"

// publisher is a store that tells every node to drop cached placements
// (Redis); on the others the local cache is all there is.
type publisher interface {
	Publish(ctx context.Context, ids, deps []string, all bool) error
}

func (m *Main) purge(backend tsubame.Store) func(ctx context.Context, ids, deps []string, all bool) error {
	return func(ctx context.Context, ids, deps []string, all bool) error {
		if all {
			m.Cache.InvalidateAll()
		}
		for _, id := range ids {
			m.Cache.Invalidate(id)
		}
		for _, d := range deps {
			m.Cache.InvalidateDep(d)
		}
		if p, ok := backend.(publisher); ok {
			return p.Publish(ctx, ids, deps, all)
		}
		return nil
	}
}

// configView is the effective configuration with secrets redacted, under
// the file's key names.
func (m *Main) configView() any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return toYAML(reflect.ValueOf(*m.Config))
}

// endpointNames lists the configured endpoints of every site (as the
// configuration is now: a reload changes them).
func (m *Main) endpointNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := slices.Collect(maps.Keys(m.Config.Endpoints))
	for _, site := range m.Config.Sites {
		names = slices.AppendSeq(names, maps.Keys(site.Endpoints))
	}
	return names
}

// accessLogStatus describes each access log sink.
func (m *Main) accessLogStatus() any {
	out := map[string]any{}
	for name, l := range map[string]*accesslog.Logger{"file": m.logs.file, "store": m.logs.store} {
		if l == nil {
			continue
		}
		st := l.Stats()
		v := map[string]any{"appended": st.Appended, "written": st.Written, "bytes": st.Bytes, "flushes": st.Flushes,
			"write_errors": st.WriteErrors, "waits": st.Waits, "overflows": st.Overflows, "buffered_bytes": st.Buffered,
			"failing": st.Failing, "last_error": st.LastError, "healthy": l.Healthy() == nil}
		if name == "file" && m.logs.fileSink != nil {
			v["rotations"] = m.logs.fileSink.Rotations()
			v["dir"] = m.Config.AccessLog.Dir
		}
		if name == "file" && m.logs.shipper != nil {
			ks := m.logs.shipper.Stats()
			k := map[string]any{"lines": ks.Lines, "bytes": ks.Bytes, "lag_lines": ks.Lag, "errors": ks.Errors,
				"failing": ks.Failing, "last_error": ks.LastErr, "topic": m.Config.AccessLog.Kafka.Topic}
			if !ks.Oldest.IsZero() {
				k["oldest_unshipped"] = ks.Oldest.UTC()
			}
			v["kafka"] = k
		}
		out[name] = v
	}
	return out
}

// sample gathers the counters the dashboard shows.
func (m *Main) sample() admin.Sample {
	s := admin.Sample{LatencyBounds: server.LatencyBounds, Latency: make([]uint64, len(server.LatencyBounds)+1)}
	for _, rc := range m.pub.server.Requests() {
		for i, n := range rc.Buckets {
			s.Latency[i] += n
			s.Requests += n
		}
	}
	cs := m.Cache.Stats()
	s.CacheHits, s.CacheMisses = cs.Hits+cs.Stale, cs.Misses
	for _, l := range []*accesslog.Logger{m.logs.file, m.logs.store} {
		if l != nil {
			st := l.Stats()
			s.LogBuffered += st.Buffered
			s.LogFailing = s.LogFailing || st.Failing
		}
	}
	s.ShipLag = -1
	if m.logs.shipper != nil {
		ks := m.logs.shipper.Stats()
		s.ShipLag, s.ShipFailing = int64(ks.Lag), ks.Failing
		if !ks.Oldest.IsZero() {
			s.ShipAge = time.Since(ks.Oldest)
		}
	}
	if m.hooks.processor != nil {
		ws := m.hooks.processor.Stats()
		s.HookQueued, s.HookInFlight = ws.Queued, ws.InFlight
	}
	s.Conns = m.pub.server.Stats().Conns
	rep := m.readiness()
	s.Ready = rep.Ready()
	if c, ok := rep.Find(health.Store); ok {
		s.StoreUp = c.OK
	}
	return s
}

// openAuditLog opens the audit log and, with admin.alert_webhook, the
// notifier its alerts go to (nil without).
func openAuditLog(cfg *config.Config, log *slog.Logger) (*admin.Audit, *admin.Notifier, error) {
	var notifier *admin.Notifier
	if a := cfg.Admin; a.AlertWebhook != "" {
		client := &http.Client{Timeout: 10 * time.Second}
		if a.AlertWebhookCAFile != "" {
			pool, err := certs.LoadCAPool(a.AlertWebhookCAFile)
			if err != nil {
				return nil, nil, fmt.Errorf("admin.alert_webhook_ca_file: %w", err)
			}
			client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
		}
		node, _ := os.Hostname()
		var err error
		if notifier, err = admin.NewNotifier(a.AlertWebhook, client, node, log); err != nil {
			return nil, nil, err
		}
	}
	var copyTo *admin.Syslog
	if a := cfg.Admin; a.AuditSyslog != "" {
		var tlsConf *tls.Config
		if a.AuditSyslogCAFile != "" {
			pool, err := certs.LoadCAPool(a.AuditSyslogCAFile)
			if err != nil {
				return nil, nil, fmt.Errorf("admin.audit_syslog_ca_file: %w", err)
			}
			tlsConf = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		var err error
		copyTo, err = admin.NewSyslog(admin.SyslogOptions{Address: a.AuditSyslog, Facility: a.AuditSyslogFacility,
			TLS: tlsConf, Logger: log, Notifier: notifier})
		if err != nil {
			return nil, nil, fmt.Errorf("admin.audit_syslog: %w", err)
		}
	}
	audit, err := admin.OpenAudit(admin.AuditOptions{Path: cfg.AuditLogPath(), MaxSize: int64(cfg.Admin.AuditMaxSize),
		RotateEvery: cfg.Admin.AuditRotateEvery, KeepFiles: cfg.Admin.AuditKeepFiles, Syslog: copyTo,
		AlertAt: cfg.Admin.AlertFailures, AlertWindow: cfg.Admin.AlertWindow, RepeatInterval: cfg.Admin.AuditRepeatInterval,
		Logger: log, Notifier: notifier})
	if err != nil {
		if copyTo != nil {
			copyTo.Close(context.Background())
		}
		if notifier != nil {
			notifier.Close(context.Background())
		}
		return nil, nil, fmt.Errorf("admin audit log: %w", err)
	}
	return audit, notifier, nil
}

// closeAuditLog closes the audit log, then sends the alerts still queued
// (bounded by alertDrain).
func closeAuditLog(audit *admin.Audit, notifier *admin.Notifier) error {
	err := audit.Close()
	if notifier != nil {
		ctx, cancel := context.WithTimeout(context.Background(), alertDrain)
		defer cancel()
		notifier.Close(ctx)
	}
	return err
}

// alertDrain bounds the wait for queued alerts at exit.
const alertDrain = 15 * time.Second
