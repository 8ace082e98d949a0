package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/admin"
	"tsubame/internal/asset"
	"tsubame/internal/cache"
	"tsubame/internal/certs"
	"tsubame/internal/config"
	"tsubame/internal/device"
	"tsubame/internal/health"
	"tsubame/internal/logship"
	"tsubame/internal/ratelog"
	"tsubame/internal/render"
	"tsubame/internal/report"
	"tsubame/internal/server"
	"tsubame/internal/static"
	"tsubame/internal/store/embedded"
	"tsubame/internal/store/memory"
	"tsubame/internal/store/redis"
	"tsubame/internal/webhook"
)

// Main is the running server: the store, the cache over it and the two
// listeners. Open builds and starts it; Close stops it in order. The
// caller sets the first group of fields; Open makes the rest.
type Main struct {
	Config *config.Config
	Logger *slog.Logger
	// Level is the process log's level, changed by a reload.
	Level *slog.LevelVar
	// Demo loads the demo placements into an empty store on Open.
	Demo bool
	// Console receives what only the operator at the console may see: the
	// admin bootstrap token. Nil (no terminal): the token is written to
	// BootstrapTokenFile and the log says where.
	Console io.Writer

	Store   tsubame.Store // the cache over the backend: writes here invalidate
	Cache   *cache.Cache
	backend tsubame.Store // the store under the cache

	logs  accessLogs
	hooks webhooks
	ads   adsSide
	pub   publicSide
	adm   adminSide
	run   running

	mu sync.Mutex // guards Config against a reload during Close
}

// accessLogs are the access logs of endpoints with access_log: file and
// store (nil when no endpoint uses them) and the file log's shipper.
type accessLogs struct {
	file, store *accesslog.Logger
	fileSink    *accesslog.FileSink
	shipper     *logship.Shipper // access_log.kafka; nil without
	roller      *report.Roller   // report.enabled; nil without
	stopLagWarn context.CancelFunc
}

// webhooks are the webhook receivers' processor and receiver; nil when
// no webhook endpoint is on.
type webhooks struct {
	processor *webhook.Processor
	receiver  *webhook.Receiver
}

// publicSide is the public listener: the server, its plain and TLS
// listeners, their certificates and the /lib/ servers.
type publicSide struct {
	server     *server.Server
	ln         net.Listener
	tlsLn      net.Listener              // nil without tls.listen
	tlsCerts   *certs.Store              // read again by a reload
	static     *static.Server            // the default site's /lib/
	siteStatic map[string]*static.Server // each site's /lib/, by site name
	assets     *asset.Server             // /assets/, the creatives' uploaded files; nil: a store without
}

// adminSide is the admin listener and what it keeps: the audit log and
// the alerts.
type adminSide struct {
	server *admin.Server
	ln     net.Listener
	sock   net.Listener // the control socket (admin.socket); nil when off
	certs  *certs.Store // if it speaks TLS
	// tokenFile holds tokenText, the bootstrap token, while this process
	// runs ("": none).
	tokenFile, tokenText string
	audit                *admin.Audit
	alerts               *admin.Notifier // admin.alert_webhook; nil without
}

// running is the state of the listeners' loops and of a handover.
type running struct {
	served     chan error
	nListeners int
	stopWatch  context.CancelFunc
	watching   chan struct{}
	handover   *handover      // set when this process succeeds another (restart.go)
	primed     *primedCatalog // the previous process's campaigns, compiled (catalog.go); nil without
	storeFile  *fileID        // the embedded store's file as opened; nil for another store, or unknown
	exe        string         // the binary as started (launchPath): what a restart starts
	adopted    net.Listener   // the idle connections the previous process hands over; nil without
	serving    bool           // the listeners' Serve loops run
	leaving    bool           // Close hands over to a successor that rolls up the same reports (sameReports): it counts the last lines
	ready      atomic.Bool    // open and not draining (readiness)
	warmed     atomic.Bool    // the cache's warm-up at Open has run
	store      *health.Probe  // whether the store answers, probed in the background
}

// PublicAddr is the address the public listener is bound to.
func (m *Main) PublicAddr() string { return m.pub.ln.Addr().String() }

// TLSAddr is the address the public TLS listener is bound to, or "".
func (m *Main) TLSAddr() string {
	if m.pub.tlsLn == nil {
		return ""
	}
	return m.pub.tlsLn.Addr().String()
}

// AdminAddr is the address the admin listener is bound to, or "" if disabled.
func (m *Main) AdminAddr() string {
	if m.adm.ln == nil {
		return ""
	}
	return m.adm.ln.Addr().String()
}

// Open opens the store, builds the cache and endpoints, binds both listeners
// and starts serving. On error everything opened so far is closed.
func (m *Main) Open(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			m.closeAll(context.Background())
		}
	}()
	cfg := m.Config
	// Listeners first: a successor (see restart.go) takes them over from its
	// predecessor and must have them before it waits for the store.
	if err := m.bindListeners(cfg); err != nil {
		return err
	}
	if h := m.run.handover; h != nil {
		if cfg.Ads.Enabled {
			// While the predecessor still accepts: from ready on, neither
			// process does until this one serves.
			device.Load()
		}
		if h.catalog != nil {
			m.run.primed = primeFromCatalog(h.catalog, cfg, m.Logger)
			h.catalog = nil
		}
		if h.conns != nil {
			// Taken off the socket from now on, served once we serve.
			if m.run.adopted, err = server.Adopt(h.conns); err != nil {
				m.Logger.Warn("cannot take the previous process's idle connections", "err", err)
			}
			h.conns = nil
		}
		h.ready(m.Logger)
		h.waitRelease(m.Logger)
	}
	backend, err := openStore(cfg, false)
	if errors.Is(err, embedded.ErrInUse) {
		return tsubame.Errorf(tsubame.ECONFLICT, "data_dir %s is in use by another tsubame server (its store, %s, is locked): "+
			"stop that server, or give this one a data_dir of its own (TSUBAME_DATA_DIR)", cfg.DataDir, cfg.StorePath())
	}
	if err != nil {
		return err
	}
	m.backend = backend
	if cfg.Store.Type == "embedded" {
		// The file opened, for handCatalog: a reload may point the
		// configuration at another since.
		if id, err := storeFileID(cfg.StorePath()); err == nil {
			m.run.storeFile = &id
		}
	}
	copt := cfg.Cache.Options()
	copt.Encoders, copt.Logger = m.encoders(cfg, servedFormats(cfg)), m.Logger
	m.Cache, err = cache.New(backend, copt)
	if err != nil {
		_ = backend.Close()
		return err
	}
	m.Store = m.Cache
	m.watchStore(ctx, backend)
	if err := m.openLogs(backend); err != nil {
		return err
	}
	if m.Demo {
		if err := loadDemo(ctx, m.Store, m.Logger); err != nil {
			return err
		}
	}
	warmCache(ctx, m.Cache, cfg, m.Logger)
	m.run.warmed.Store(true)
	receiver, err := m.openWebhook(backend)
	if err != nil {
		return err
	}

	m.hooks.receiver = receiver
	if err := m.openAds(ctx, cfg, backend); err != nil {
		return err
	}
	if err := m.openStatic(cfg); err != nil {
		return err
	}
	if err := m.openAssets(cfg, backend); err != nil {
		return err
	}
	m.pub.server, err = server.New(m.serverOptions(cfg), m.endpoints(cfg))
	if err != nil {
		return err
	}
	if m.pub.tlsLn != nil {
		m.pub.tlsCerts = new(certs.Store)
	}
	if cfg.Admin.Listen != "" && cfg.Admin.TLSCert != "" {
		m.adm.certs = new(certs.Store)
	}
	if err := m.loadCerts(cfg); err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if m.pub.tlsCerts != nil {
		minVersion, _ := certs.MinVersion(cfg.TLS.MinVersion) // checked by Validate
		tlsConfig = m.pub.tlsCerts.Config(minVersion)
	}
	if cfg.Admin.Listen != "" || cfg.AdminSocketPath() != "" {
		if err := m.openAdmin(cfg, backend); err != nil {
			return err
		}
	}

	if m.logs.shipper != nil {
		lctx, cancel := context.WithCancel(context.Background())
		m.logs.stopLagWarn = cancel
		go m.watchShipLag(lctx, cfg.AccessLog.Kafka.LagAlert)
	}
	m.run.served = make(chan error, 4)
	m.run.serving = true
	m.run.nListeners = 1
	go func() { m.run.served <- m.pub.server.Serve(m.pub.ln) }()
	if m.pub.tlsLn != nil {
		m.run.nListeners++
		go func() { m.run.served <- m.pub.server.ServeTLS(m.pub.tlsLn, tlsConfig) }()
	}
	if m.run.adopted != nil {
		// In the background, not one of nListeners: it ends when the
		// previous process is done handing over.
		m.pub.server.ServeAdopted(m.run.adopted)
	}
	m.run.ready.Store(true)
	if m.adm.server != nil {
		if m.adm.ln != nil {
			m.run.nListeners++
			go func() { m.run.served <- m.adm.server.Serve(m.adm.ln) }()
		}
		if m.adm.sock != nil {
			m.run.nListeners++
			go func() { m.run.served <- m.adm.server.ServeSocket(m.adm.sock) }()
		}
		m.adm.server.SetReady(true)
	}
	m.logSubsystems(cfg)
	return nil
}

// logSubsystems writes one line for each subsystem that is on, then
// "serving": what an operator reads first to see what this process does.
func (m *Main) logSubsystems(cfg *config.Config) {
	switch cfg.Store.Type {
	case "embedded":
		m.Logger.Info("store", "type", cfg.Store.Type, "path", cfg.StorePath())
	case "redis":
		m.Logger.Info("store", "type", cfg.Store.Type, "addrs", strings.Join(cfg.Store.Redis.Addrs, ","))
	default:
		m.Logger.Info("store", "type", cfg.Store.Type)
	}
	m.Logger.Info("cache", "ttl", cfg.Cache.TTL, "max_bytes", cfg.Cache.MaxBytes.String(), "stale_if_error", cfg.Cache.StaleIfError)
	attrs := []any{"listen", m.PublicAddr(), "endpoints", len(cfg.Endpoints)}
	if cfg.Static.Root != "" {
		attrs = append(attrs, "static", cfg.Static.Root)
	}
	m.Logger.Info("public listener", attrs...)
	if len(cfg.Sites) > 0 {
		names := slices.Sorted(maps.Keys(cfg.Sites))
		m.Logger.Info("sites", "count", len(names), "names", strings.Join(names, ","), "unknown_hosts", cfg.UnknownHosts)
	}
	if m.pub.tlsLn != nil {
		def, sites := cfg.TLSCertificates()
		m.Logger.Info("tls listener", "listen", m.TLSAddr(), "default_certificate", !def.Empty(), "site_certificates", len(sites),
			"min_version", cfg.TLS.MinVersion)
	}
	if m.adm.server != nil {
		socket := cfg.AdminSocketPath()
		if socket == "" {
			socket = "off"
		}
		listen := m.AdminAddr()
		if listen == "" {
			listen = "off"
		}
		m.Logger.Info("admin listener", "listen", listen, "socket", socket, "tls", cfg.Admin.TLSCert != "")
	}
	if cfg.Ads.Enabled {
		m.Logger.Info("ads and tracking", "tracking_url", cfg.Ads.Tracking.URL, "keys_file", cfg.TrackingKeysPath(),
			"ttl", cfg.Ads.Tracking.TTL, "currency", cfg.Ads.Currency, "tcf_vendor_id", cfg.Ads.TCFVendorID)
		for _, n := range cfg.Notices() {
			m.Logger.Info(n)
		}
	}
	if m.logs.file != nil {
		m.Logger.Info("access log", "dir", cfg.AccessLog.Dir, "file", cfg.AccessLog.FileName, "format", cfg.AccessLog.Format,
			"durability", cfg.AccessLog.Durability)
	}
	if m.logs.store != nil {
		m.Logger.Info("access log in the store", "store", cfg.Store.Type)
	}
	if k := cfg.AccessLog.Kafka; m.logs.shipper != nil {
		m.Logger.Info("kafka shipper", "brokers", strings.Join(k.Brokers, ","), "topic", k.Topic, "tls", k.TLS.Enabled, "sasl", k.SASL.Mechanism)
	}
	if m.hooks.processor != nil {
		var platforms []string
		for _, p := range cfg.Webhook.Platforms() {
			platforms = append(platforms, string(p.Source()))
		}
		m.Logger.Info("webhooks", "platforms", strings.Join(platforms, ","), "callback", cfg.Webhook.CallbackToken != "")
	}
	if len(cfg.RTB.Exchanges) > 0 {
		m.Logger.Info("rtb bidder", "exchanges", strings.Join(slices.Sorted(maps.Keys(cfg.RTB.Exchanges)), ","))
	}
	if m.logs.roller != nil {
		m.Logger.Info("reports", "path", cfg.ReportPath(), "interval", cfg.Report.Interval, "commit_every", cfg.Report.CommitEvery, "burst", cfg.Report.Burst)
	}
	m.Logger.Info("serving", "version", version, "pid", os.Getpid())
}

// loadCerts reads the public TLS listener's and the admin listener's
// certificates from their files, for Open and for a reload (renewed files
// take effect on the next handshake). Nothing changes unless all load. Each
// certificate in use is logged with its expiry; one that has expired or
// expires within certWarnBefore is logged as a warning.
func (m *Main) loadCerts(cfg *config.Config) error {
	if m.pub.tlsCerts != nil {
		def, sites := cfg.TLSCertificates()
		if err := m.pub.tlsCerts.Load(def, sites); err != nil {
			return err
		}
	}
	if m.adm.certs != nil {
		if err := m.adm.certs.Load(certs.Pair{Cert: cfg.Admin.TLSCert, Key: cfg.Admin.TLSKey}, nil); err != nil {
			return fmt.Errorf("admin.tls_cert/tls_key: %w", err)
		}
	}
	now := time.Now()
	for _, l := range []struct {
		name  string
		store *certs.Store
	}{{"tls", m.pub.tlsCerts}, {"admin", m.adm.certs}} {
		if l.store == nil {
			continue
		}
		for _, c := range l.store.Loaded() {
			args := []any{"listener", l.name, "site", c.Site, "names", c.Subject, "not_after", c.NotAfter.UTC().Format(time.RFC3339)}
			switch left := c.NotAfter.Sub(now); {
			case left <= 0:
				m.Logger.Error("TLS certificate has expired: clients will refuse it", args...)
			case left < certWarnBefore:
				m.Logger.Warn("TLS certificate expires soon", append(args, "in", left.Round(time.Hour))...)
			default:
				m.Logger.Info("TLS certificate loaded", args...)
			}
		}
	}
	return nil
}

// certWarnBefore is how long before its expiry a certificate is warned about
// at each load.
const certWarnBefore = 14 * 24 * time.Hour

// bindListeners opens the public and admin listeners, or takes them over
// from the process this one succeeds.
// A listener the new configuration turns off is closed; one it turns on is
// opened.
func (m *Main) bindListeners(cfg *config.Config) error {
	var err error
	if m.run.handover != nil {
		if m.pub.ln, m.adm.ln, m.pub.tlsLn, err = m.run.handover.listeners(); err != nil {
			return err
		}
	} else if m.pub.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("cannot listen on %s: %w", cfg.Listen, err)
	}
	for _, l := range []struct {
		ln   *net.Listener
		addr string
		what string
	}{{&m.adm.ln, cfg.Admin.Listen, " (admin)"}, {&m.pub.tlsLn, cfg.TLS.Listen, " (tls)"}} {
		switch {
		case *l.ln != nil && l.addr == "":
			_ = (*l.ln).Close()
			*l.ln = nil
		case *l.ln == nil && l.addr != "":
			if *l.ln, err = net.Listen("tcp", l.addr); err != nil {
				return fmt.Errorf("cannot listen on %s%s: %w", l.addr, l.what, err)
			}
		}
	}
	return nil
}

func (m *Main) serverOptions(cfg *config.Config) server.Options {
	opt := cfg.Server.Options()
	opt.Webhook, opt.CallbackToken, opt.Static = m.hooks.receiver, cfg.Webhook.CallbackToken, m.pub.static
	opt.Sites, opt.RejectUnknownHosts = m.sites(cfg), cfg.UnknownHosts == "reject"
	opt.Ready, opt.Logger = m.readiness, m.Logger
	opt.HSTS = cfg.TLS.HSTSHeader()
	if m.ads.svc != nil {
		opt.Routes = m.ads.svc.Routes(m.logs.file)
	}
	if m.ads.bidder != nil {
		opt.Routes = append(opt.Routes, m.ads.bidder.Routes(m.logs.file, int(cfg.RTB.MaxBody))...)
	}
	if m.pub.assets != nil {
		opt.Routes = append(opt.Routes, m.pub.assets.Route())
	}
	return opt
}

func (m *Main) endpoints(cfg *config.Config) []server.Endpoint {
	return m.endpointsOf(cfg, cfg.Endpoints, compileTemplates(cfg, ""))
}

// compileTemplates compiles the templates a site sees. Validate has
// compiled them already, so an error here is unexpected; such a template
// is left out and the endpoint using it answers JSONP.
func compileTemplates(cfg *config.Config, site string) map[string]*template.Template {
	out := map[string]*template.Template{}
	for name, t := range cfg.TemplatesFor(site) {
		text, err := t.Source()
		if err != nil {
			continue
		}
		if tmpl, err := render.CompileTemplate(name, text); err == nil {
			out[name] = tmpl
		}
	}
	return out
}

// sites builds the virtual hosts; their static roots were opened by Open
// (a site added by a reload serves /lib/ only after a restart).
func (m *Main) sites(cfg *config.Config) []server.Site {
	var out []server.Site
	for _, name := range slices.Sorted(maps.Keys(cfg.Sites)) {
		sc := cfg.Sites[name]
		out = append(out, server.Site{Name: name, Hosts: sc.Hosts, Endpoints: m.endpointsOf(cfg, sc.Endpoints, compileTemplates(cfg, name)),
			Static: m.pub.siteStatic[name]})
	}
	return out
}

// openStatic opens the default site's and every site's static root.
func (m *Main) openStatic(cfg *config.Config) error {
	open := func(root string) (*static.Server, error) {
		st, err := static.New(cfg.Static.Options(root))
		if err != nil {
			return nil, fmt.Errorf("cannot open static root %q: %w", root, err)
		}
		return st, nil
	}
	var err error
	if cfg.Static.Root != "" {
		if m.pub.static, err = open(cfg.Static.Root); err != nil {
			return err
		}
	}
	m.pub.siteStatic = map[string]*static.Server{}
	for name, sc := range cfg.Sites {
		if sc.StaticRoot != "" {
			if m.pub.siteStatic[name], err = open(sc.StaticRoot); err != nil {
				return err
			}
		}
	}
	return nil
}

// encoders are the payload encoders of the given formats, with the
// configuration's VAST options.
func (m *Main) encoders(cfg *config.Config, formats []render.Format) [render.MaxEncodings]render.Encoder {
	return render.Encoders(render.EncoderOptions{VAST: render.VASTOptions{AdSystem: cfg.VAST.AdSystem,
		ImpressionURL: cfg.VAST.ImpressionURL}}, formats)
}

// servedFormats lists the formats any endpoint of cfg serves (the cache
// keeps a payload for each of their encodings).
func servedFormats(cfg *config.Config) []render.Format {
	var out []render.Format
	add := func(eps map[string]config.Endpoint) {
		for _, ec := range eps {
			for _, f := range ec.Formats {
				if format, ok := render.ParseFormat([]byte(f)); ok && !slices.Contains(out, format) {
					out = append(out, format)
				}
			}
		}
	}
	add(cfg.Endpoints)
	for _, site := range cfg.Sites {
		add(site.Endpoints)
	}
	return out
}

func (m *Main) endpointsOf(cfg *config.Config, eps map[string]config.Endpoint, templates map[string]*template.Template) []server.Endpoint {
	backend := m.backend
	var out []server.Endpoint
	for name, ec := range eps {
		ep := server.Endpoint{Name: name, CacheControl: ec.ResponseCacheControl(), Template: templates[ec.Template],
			CORSOrigins: ec.CORSOrigins, CORSMaxAge: ec.CORSMaxAge}
		switch ec.AccessLog {
		case config.LogFile:
			ep.Log = m.logs.file
		case config.LogStore:
			ep.Log = m.logs.store
		}
		for _, f := range ec.Formats {
			format, _ := render.ParseFormat([]byte(f))
			ep.Formats = append(ep.Formats, format)
		}
		switch {
		case ec.Source == config.SourceFixed:
			ep.Source = server.FixedURLs(ec.URLs, m.encoders(cfg, ep.Formats))
		case ec.Source == config.SourceDecide:
			if m.ads.svc != nil {
				ep.Source = m.ads.svc.Source()
			} // else server.New refuses the endpoint without a source
		case ec.Cache:
			ep.Source = server.Cached{Cache: m.Cache}
		default:
			ep.Source = server.Direct{Store: backend, Encoders: m.encoders(cfg, ep.Formats)}
		}
		out = append(out, ep)
	}
	return out
}

// Wait blocks until a listener fails or ctx ends. It returns the listener's
// error, or nil when ctx ended.
func (m *Main) Wait(ctx context.Context) error {
	select {
	case err := <-m.run.served:
		m.run.nListeners--
		if err == nil {
			err = errors.New("listener stopped")
		}
		return err
	case <-ctx.Done():
		return nil
	}
}

// Close drains and stops the server: readiness goes false, the public
// listener stops accepting and finishes in-flight requests (bounded by
// server.shutdown_timeout), then the store is closed and the admin listener
// stops.
func (m *Main) Close() error {
	m.mu.Lock()
	timeout := m.Config.Server.ShutdownTimeout
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return m.closeAll(ctx)
}

func (m *Main) closeAll(ctx context.Context) error {
	var errs []error
	m.run.ready.Store(false)
	if m.adm.server != nil {
		m.adm.server.SetReady(false)
	}
	drained := true
	if m.pub.server != nil && m.run.serving {
		if err := m.pub.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("public listener: %w", err))
			drained = false
		}
	} else {
		// Never served: the listeners are only bound.
		for _, ln := range []net.Listener{m.pub.ln, m.pub.tlsLn, m.run.adopted} {
			if ln != nil {
				_ = ln.Close()
			}
		}
	}
	// The public listener has drained: no message or record comes in any
	// more. Process the queued messages (for up to webhook.drain_timeout),
	// then write every access-log record, before the store closes.
	if m.hooks.processor != nil {
		m.mu.Lock()
		drain := m.Config.Webhook.DrainTimeout
		m.mu.Unlock()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
		if err := m.hooks.processor.Close(dctx); err != nil {
			errs = append(errs, fmt.Errorf("webhook: %w", err))
		}
		cancel()
	}
	m.closeAds(ctx) // no request decides any more
	if m.logs.roller != nil && m.run.leaving {
		// The successor serves nothing until it has reports.db: it counts
		// and commits the last lines (up to report.commit_every of them,
		// which took this close up to a second on a busy ad log), paced
		// once it serves. Before the log closes: a pass started on the
		// file it closes into would commit it whole here.
		left, err := m.logs.roller.Leave()
		if err != nil {
			errs = append(errs, fmt.Errorf("report: %w", err))
		}
		m.Logger.Info("reports: the last lines are left to the next process", "lines", left)
		m.logs.roller = nil
	}
	for _, l := range []*accesslog.Logger{m.logs.file, m.logs.store} {
		if l != nil {
			if err := l.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if m.logs.shipper != nil {
		// The last file is closed out: ship it while Kafka answers, then
		// stop (what is not acknowledged is sent by the next start).
		if m.logs.stopLagWarn != nil {
			m.logs.stopLagWarn()
		}
		m.logs.shipper.Drain(ctx)
		if err := m.logs.shipper.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if m.logs.roller != nil {
		// The last lines are rolled up before the file is let go: a report
		// after a stop is whole without waiting for the next start.
		if err := m.logs.roller.CatchUp(ctx); err != nil && !errors.Is(err, report.ErrClosed) {
			errs = append(errs, fmt.Errorf("report: %w", err))
		}
		if err := m.logs.roller.Close(); err != nil {
			errs = append(errs, fmt.Errorf("report: %w", err))
		}
		m.logs.roller = nil
	}
	if !drained {
		// Requests still held by a failing log are answered 503 (and
		// recorded in the fallback file) now that it has closed: let
		// those answers go out.
		wctx, cancel := context.WithTimeout(context.Background(), idleGrace)
		_ = m.pub.server.WaitIdle(wctx)
		cancel()
	}
	m.mu.Lock()
	warmIDs, dataDir := m.Config.Cache.WarmIDs, m.Config.DataDir
	m.mu.Unlock()
	saveHotIDs(m.Cache, warmIDs, dataDir, m.Logger)
	if m.run.stopWatch != nil {
		m.run.stopWatch()
		<-m.run.watching
	}
	if m.pub.static != nil {
		_ = m.pub.static.Close()
	}
	for _, st := range m.pub.siteStatic {
		_ = st.Close()
	}
	if m.pub.assets != nil {
		m.pub.assets.Close()
	}
	if m.Store != nil {
		if err := m.Store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("store: %w", err))
		}
	}
	if m.adm.server != nil && m.run.serving && (m.adm.ln != nil || m.adm.sock != nil) {
		// Closes the listener and the control socket (removing its file).
		if err := m.adm.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("admin listener: %w", err))
		}
	} else {
		for _, ln := range []net.Listener{m.adm.ln, m.adm.sock} {
			if ln != nil {
				_ = ln.Close()
			}
		}
		if m.adm.server != nil {
			m.adm.server.StopStats()
		}
	}
	if m.adm.tokenFile != "" {
		// The token dies with the process. The file is removed only if it
		// is still this process's: a successor (restart) may have written
		// its own there once the store was released above.
		if b, err := os.ReadFile(m.adm.tokenFile); err == nil && string(b) == m.adm.tokenText {
			_ = os.Remove(m.adm.tokenFile)
		}
		m.adm.tokenFile, m.adm.tokenText = "", ""
	}
	if m.adm.audit != nil {
		if err := closeAuditLog(m.adm.audit, m.adm.alerts); err != nil {
			errs = append(errs, fmt.Errorf("admin audit log: %w", err))
		}
		m.adm.audit, m.adm.alerts = nil, nil
	}
	// The loops have returned, or return now that their listeners are
	// closed; the stop is bounded all the same: a loop that does not
	// return (an accept stuck in the kernel) must not hold the exit.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idleGrace)
	defer cancel()
	for ; m.run.nListeners > 0; m.run.nListeners-- {
		select {
		case err := <-m.run.served:
			if err != nil {
				errs = append(errs, err)
			}
		case <-wctx.Done():
			errs = append(errs, fmt.Errorf("%d listener(s) did not stop; exiting all the same", m.run.nListeners))
			m.run.nListeners = 0
			return errors.Join(errs...)
		}
	}
	return errors.Join(errs...)
}

// idleGrace bounds how long a stop past its deadline waits for the last
// answers (see closeAll).
const idleGrace = 2 * time.Second

// openLogs opens the access logs the endpoints use.
func (m *Main) openLogs(backend tsubame.Store) error {
	al := m.Config.AccessLog
	opts := al.LoggerOptions()
	opts.Logger = m.Logger
	if m.Config.UsesLog(config.LogFile) {
		fo := accesslog.FileOptions{
			Dir:         al.Dir,
			Name:        al.FileName,
			RotateEvery: al.RotateEvery,
			MaxSize:     int64(al.MaxSize),
			Gzip:        al.Gzip,
			OnClose:     al.OnClose,
			KeepFiles:   al.KeepFiles,
			KeepFor:     time.Duration(al.KeepDays) * 24 * time.Hour,
			Logger:      m.Logger,
		}
		var err error
		if al.Kafka.Enabled() {
			// Made first: retention asks it, from the start, what is shipped.
			if m.logs.shipper, err = m.newShipper(al); err != nil {
				return fmt.Errorf("access_log.kafka: %w", err)
			}
		}
		if m.Config.Report.Enabled {
			// Made first too: retention keeps what is not rolled up.
			if m.logs.roller, err = m.newRoller(al, backend); err != nil {
				if m.logs.shipper != nil {
					_ = m.logs.shipper.Close(context.Background())
					m.logs.shipper = nil
				}
				return fmt.Errorf("report: %w", err)
			}
		}
		fo.Hold = holdFor(m.logs.shipper, m.logs.roller)
		if al.Durability == "async" {
			if m.logs.fileSink, err = accesslog.OpenFile(fo); err == nil {
				m.logs.file = accesslog.New(m.logs.fileSink, opts)
			}
		} else {
			m.logs.file, m.logs.fileSink, err = accesslog.OpenMapped(fo, opts)
		}
		if err != nil {
			if m.logs.shipper != nil {
				_ = m.logs.shipper.Close(context.Background())
				m.logs.shipper = nil
			}
			if m.logs.roller != nil {
				_ = m.logs.roller.Close()
				m.logs.roller = nil
			}
			return err
		}
		if m.logs.shipper != nil {
			m.logs.shipper.Start()
		}
		if m.logs.roller != nil {
			m.logs.roller.Start()
		}
	}
	if m.Config.UsesLog(config.LogStore) {
		ls, ok := backend.(accesslog.LogStore)
		if !ok {
			return usagef("store type %q cannot hold access logs (access_log: store)", m.Config.Store.Type)
		}
		m.logs.store = accesslog.New(accesslog.NewStoreSink(ls, al.MaxWait+5*time.Second, al.StoreCompression == "s2"), opts)
	}
	return nil
}

// openWebhook starts the message processor when a webhook receiver is enabled.
func (m *Main) openWebhook(backend tsubame.Store) (*webhook.Receiver, error) {
	wc := m.Config.Webhook
	if !wc.Enabled() {
		return nil, nil
	}
	var results webhook.ResultStore
	if wc.RecordResults {
		rs, ok := backend.(webhook.ResultStore)
		if !ok {
			return nil, usagef("store type %q cannot record webhook results (webhook.record_results)", m.Config.Store.Type)
		}
		results = rs
	}
	wopt := wc.Options()
	wopt.Results, wopt.DeadLetterPath, wopt.Logger = results, m.Config.DeadLetterPath(), m.Logger
	p, err := webhook.New(wopt)
	if err != nil {
		return nil, err
	}
	m.hooks.processor = p
	if wc.LINE.ChannelSecret == "" {
		m.Logger.Debug("POST /webhook/line is off: set webhook.line.channel_secret (TSUBAME_LINE_CHANNEL_SECRET) to serve it")
	}
	if wc.Slack.SigningSecret == "" {
		m.Logger.Debug("POST /webhook/slack is off: set webhook.slack.signing_secret and bot_token (TSUBAME_SLACK_SIGNING_SECRET, TSUBAME_SLACK_BOT_TOKEN) to serve it")
	}
	return webhook.NewReceiver(p, int(wc.MaxBodyBytes), m.Logger), nil
}

// ReopenLogs reopens the file access log (after an external rotation).
func (m *Main) ReopenLogs(ctx context.Context) error {
	if m.logs.file == nil {
		return nil
	}
	return m.logs.file.Reopen(ctx)
}

// Every backend keeps access-log lines and webhook results: the ports the
// consumers (accesslog, webhook) name.
var (
	_ accesslog.LogStore  = (*embedded.Store)(nil)
	_ accesslog.LogStore  = (*redis.Store)(nil)
	_ accesslog.LogStore  = (*memory.Store)(nil)
	_ webhook.ResultStore = (*embedded.Store)(nil)
	_ webhook.ResultStore = (*redis.Store)(nil)
	_ webhook.ResultStore = (*memory.Store)(nil)
)

// openStore opens the configured backend (without the cache).
func openStore(cfg *config.Config, readOnly bool) (tsubame.Store, error) {
	switch cfg.Store.Type {
	case "embedded":
		return embedded.Open(cfg.StorePath(), embedded.Options{LockTimeout: cfg.Store.Embedded.LockTimeout, ReadOnly: readOnly})
	case "memory":
		return memory.New(), nil
	case "redis":
		r := cfg.Store.Redis
		wait, err := r.WaitCount()
		if err != nil {
			return nil, usagef("store.redis.wait_replicas: %v", err)
		}
		return redis.Open(redis.Options{
			Addrs: r.Addrs, Username: r.Username, Password: r.Password, TLS: r.TLS, TLSCAFile: r.TLSCAFile,
			KeyPrefix: r.KeyPrefix, DialTimeout: r.DialTimeout, Timeout: r.Timeout, PoolSize: r.PoolSize,
			MaxFlushDelay: r.MaxFlushDelay, WaitReplicas: wait, WaitTimeout: r.WaitTimeout,
		})
	}
	return nil, usagef("unknown store type %q", cfg.Store.Type)
}

// DemoPlacements is the size of the demo set: ids 1..1000, id n serving
// http://ad{2n-1}.example.com/tag.js and http://ad{2n}.example.com/tag.js.
const DemoPlacements = 1000

// newLogger returns the process logger. Repeated warnings and errors are
// bounded by the returned handler (log.repeat_interval), whose Run writes
// the counts.
func newLogger(cfg *config.Config, w io.Writer) (*slog.Logger, *slog.LevelVar, *ratelog.Handler) {
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if cfg.Log.Format == "json" {
		// Durations as the text writes them ("10m0s"), not nanoseconds.
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		h = slog.NewJSONHandler(w, opts)
	}
	bounded := ratelog.New(h, cfg.Log.RepeatInterval)
	return slog.New(bounded), level, bounded
}

func logLevel(cfg *config.Config) slog.Level {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(cfg.Log.Level)))
	return level
}

// newRoller opens the reports' rollups of the file access log: in the
// shared store on Redis (every node's in one place), else in reports.db.
func (m *Main) newRoller(al config.AccessLog, backend tsubame.Store) (*report.Roller, error) {
	return report.Open(reportOptions(m.Config, backend, m.Logger))
}

// reportOptions are the rollups' options of cfg over the store backend.
func reportOptions(cfg *config.Config, backend tsubame.Store, log *slog.Logger) report.Options {
	opt := report.Options{Dir: cfg.AccessLog.Dir, Name: cfg.AccessLog.FileName, Path: cfg.ReportPath(), Node: cfg.Report.Node,
		Minutes: cfg.Report.Minutes, Interval: cfg.Report.Interval, CommitEvery: cfg.Report.CommitEvery, Burst: cfg.Report.Burst,
		Logger: log}
	if rs, ok := backend.(*redis.Store); ok {
		opt.Shared = &report.Shared{Client: rs.Client(), KeyPrefix: rs.KeyPrefix()}
	}
	return opt
}

// holdFor is the access log's retention hold: a closed file is kept while
// the shipper has not shipped it or the reports have not rolled it up.
func holdFor(shipper *logship.Shipper, roller *report.Roller) func(string) bool {
	if shipper == nil && roller == nil {
		return nil
	}
	return func(name string) bool {
		return shipper != nil && shipper.Hold(name) || roller != nil && roller.Hold(name)
	}
}
