package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"tsubame"
	"tsubame/internal/ads"
	"tsubame/internal/bidder"
	"tsubame/internal/budget"
	"tsubame/internal/config"
	"tsubame/internal/decision"
	"tsubame/internal/device"
	"tsubame/internal/geo"
	"tsubame/internal/server"
	"tsubame/internal/ssp"
	"tsubame/internal/track"
)

// adsSide is the decision engine and the service answering /api/decide,
// source: decide endpoints and the tracking URLs; zero when ads.enabled is
// false.
type adsSide struct {
	engine *decision.Engine
	svc    *ads.Service
	geo    atomic.Pointer[geo.DB] // nil without geo.database; swapped by a reload
	ledger *budget.Ledger
	// counters count frequency caps, and keep the updates the store did
	// not take to send them again: the last are sent when the server stops.
	counters *budget.Counters
	// dataDir keeps the ledger's traffic file (TrafficFile).
	dataDir string
	// history holds what budgets committed over time, for the dashboard.
	history budget.History
	// bidder answers exchanges (rtb.exchanges); nil: none configured.
	bidder *bidder.Bidder
	// auction sells the placements of ssp.placements to ssp.demand.
	auction *ssp.Auctioneer
	stop    context.CancelFunc
	done    chan struct{}
}

// openAds compiles the first decision index from the store's campaigns and
// starts keeping it current.
func (m *Main) openAds(ctx context.Context, cfg *config.Config, backend tsubame.Store) error {
	if !cfg.Ads.Enabled {
		return nil
	}
	cs, ok := backend.(tsubame.CampaignStore)
	if !ok {
		return usagef("store type %q keeps no campaigns: set ads.enabled: false", cfg.Store.Type)
	}
	dd, ok := backend.(tsubame.Deduper)
	if !ok {
		return usagef("store type %q cannot tell a repeated impression: set ads.enabled: false", cfg.Store.Type)
	}
	fc, ok := backend.(tsubame.FrequencyCounter)
	if !ok {
		return usagef("store type %q cannot count frequency caps: set ads.enabled: false", cfg.Store.Type)
	}
	quotas, ok := backend.(tsubame.Quotas)
	if !ok {
		return usagef("store type %q cannot keep budgets and impression limits: set ads.enabled: false", cfg.Store.Type)
	}
	outcomes, ok := backend.(tsubame.Outcomes)
	if !ok {
		return usagef("store type %q cannot record the outcomes of bids: set ads.enabled: false", cfg.Store.Type)
	}
	b := cfg.Ads.Budget
	longest := cfg.LongestReservation()         // of a decision, or a bid on any exchange
	handovers, _ := backend.(tsubame.Handovers) // every store has them; without, holds count as spent at a stop
	ledger, err := budget.NewLedger(quotas, outcomes, budget.LedgerOptions{Holder: b.Holder, Interval: b.Interval,
		Grace: b.Grace, Lease: b.Lease, MaxHold: longest, Handovers: handovers, Log: m.Logger,
		Wait: cmp.Or(b.Wait, -1), Warm: cmp.Or(b.Warm, -1), Idle: b.Idle, CatchUp: cmp.Or(b.CatchUp, -1), KeepDaily: b.KeepDaily}) // 0 in the file: off
	if err != nil {
		return usagef("ads.budget: %v", err)
	}
	loadTraffic(ledger, cfg.DataDir, m.Logger)
	m.ads.dataDir = cfg.DataDir
	signer, err := loadTrackingKeys(cfg.TrackingKeysPath(), cfg.Ads.Tracking.KeysFile == "")
	if err != nil {
		return err
	}
	opt := ads.Options{
		Signer: signer, Currency: cfg.Ads.Currency, TrackingURL: strings.TrimSuffix(cfg.Ads.Tracking.URL, "/"),
		TTL: cfg.Ads.Tracking.TTL, Reservation: cfg.Ads.Reservation, Grace: cfg.Ads.Budget.Grace, Timeout: cfg.Ads.CapsTimeout,
		CookieName: cfg.Ads.Cookie.Name, CookieMaxAge: cfg.Ads.Cookie.MaxAge, TCFVendorID: cfg.Ads.TCFVendorID,
		Dedupe: dd, Holder: ledger.Holder(), Outcomes: outcomes, AdSystem: cfg.VAST.AdSystem, Log: m.Logger,
		CORS: decideCORS(cfg),
	}
	opt.DefaultPrivacy, opt.Privacy = privacyModes(cfg)
	if err := m.openGeo(cfg); err != nil {
		return err
	}
	opt.Geo = func(a netip.Addr) (string, string) {
		if db := m.ads.geo.Load(); db != nil {
			l := db.Lookup(a)
			return l.Country, l.Region
		}
		return "", ""
	}
	if opt.Device, err = newDeviceParser(cfg); err != nil {
		return err
	}
	if m.Demo {
		if err := loadDemoCampaigns(ctx, cs, m.Logger); err != nil {
			return err
		}
	}
	m.ads.ledger = ledger
	counters := budget.New(fc, budget.Options{Ledger: ledger, Timeout: cfg.Ads.CapsTimeout, Pending: cfg.Ads.CapsPending, Log: m.Logger})
	m.ads.counters = counters
	m.ads.engine = decision.NewEngine(cs, decision.EngineOptions{Counters: counters, Currency: cfg.Ads.Currency, Log: m.Logger,
		Primed: m.run.primed.checkPrimed(cfg.StorePath(), m.Logger)})
	m.run.primed = nil
	if c, ok := backend.(tsubame.CampaignCopies); ok {
		c.UseCampaignCopy(m.ads.engine.Set) // a delete checks against the engine's set, not a read of the store's
	}
	if _, err := m.ads.engine.Refresh(ctx); err != nil {
		// The index stays empty (no ads) until a refresh succeeds: a
		// store that answers placements but not campaigns yet must not
		// keep the ad tags down.
		m.Logger.Error("cannot compile the decision index; serving no decisions until the store answers", "err", err)
	}
	if set, _ := m.ads.engine.Set(); set != nil && m.ads.geo.Load() == nil {
		warnGeoTargeting(m.Logger, set)
	}
	opt.Engine = m.ads.engine
	rates, err := tsubame.NewRates(cfg.Ads.Currency, cfg.RTB.Rates)
	if err != nil {
		return usagef("%v", err)
	}
	if m.ads.auction, err = ssp.New(cfg.SSP, ssp.Options{Currency: cfg.Ads.Currency, Rates: rates, Log: m.Logger,
		JournalDir: cfg.DataDir}); err != nil {
		return usagef("%v", err)
	}
	opt.Auction = m.ads.auction
	if n := len(cfg.SSP.Placements); n > 0 {
		m.Logger.Info("sell side", "placements", n, "partners", len(cfg.SSP.Demand))
	}
	if m.ads.svc, err = ads.New(opt); err != nil {
		return err
	}
	if len(cfg.RTB.Exchanges) > 0 {
		m.ads.bidder, err = bidder.New(bidder.Options{Engine: m.ads.engine, Signer: signer, Currency: cfg.Ads.Currency,
			Rates: rates, NoticeURL: cfg.RTBNoticeURL(), TTL: cfg.Ads.Tracking.TTL, Grace: cfg.Ads.Budget.Grace, Timeout: cfg.RTB.Timeout, Dedupe: dd,
			Holder: ledger.Holder(), Outcomes: outcomes,
			Geo: opt.Geo, Device: opt.Device, AdSystem: cfg.VAST.AdSystem, TCFVendorID: cfg.Ads.TCFVendorID, Log: m.Logger},
			exchanges(cfg))
		if err != nil {
			return usagef("rtb: %v", err)
		}
		m.Logger.Info("OpenRTB bidder", "exchanges", len(cfg.RTB.Exchanges), "notice_url", cfg.RTBNoticeURL())
	}
	rctx, cancel := context.WithCancel(context.Background())
	m.ads.stop, m.ads.done = cancel, make(chan struct{})
	engine := m.ads.engine // closeAds clears m.ads's fields while these goroutines stop
	m.Logger.Info("budgets and impression limits", "holder", ledger.Holder(), "reservation", cfg.Ads.Reservation.String())
	go func() {
		defer close(m.ads.done)
		if feed, ok := backend.(tsubame.CampaignFeed); ok {
			go func() { _ = feed.WatchCampaigns(rctx, engine.Changed) }()
		}
		go ledger.Run(rctx)
		go keepTraffic(rctx, ledger, cfg.DataDir, m.Logger)
		if every := cfg.Ads.Budget.HistoryEvery; every > 0 {
			go m.recordBudgets(rctx, engine, ledger, cs, quotas, every, cfg.Ads.Budget.HistoryMax)
		}
		engine.Run(rctx, cfg.Ads.Refresh)
	}()
	return nil
}

// budgetUsages reads what the dashboard shows of the budgets and limits:
// those of the stored set (the engine's copy when it is at the store's
// version, so that a node reads one version rather than the set), the
// max busiest on this node (budget.Ledger.Busiest; max 0: all), each read
// from the store.
func budgetUsages(ctx context.Context, engine *decision.Engine, ledger *budget.Ledger, cs tsubame.CampaignStore, q tsubame.Quotas, max int) ([]budget.Usage, error) {
	var set *tsubame.CampaignSet
	if engine != nil {
		v, err := cs.CampaignsVersion(ctx)
		if err != nil {
			return nil, err
		}
		if s, at := engine.Set(); s != nil && at == v {
			set = s
		}
	}
	if set == nil {
		var err error
		if set, _, err = cs.Snapshot(ctx); err != nil {
			return nil, err
		}
	}
	us, err := budget.Plan(set, time.Now())
	if err != nil {
		return nil, err
	}
	switch {
	case ledger != nil:
		us = ledger.Busiest(us, max)
	case max > 0 && len(us) > max:
		us = us[:max]
	}
	if err := budget.Fill(ctx, q, us); err != nil {
		return nil, err
	}
	return us, nil
}

// recordBudgets records what the budgets and limits commit (budgetUsages),
// every interval until ctx ends (for the dashboard's charts).
func (m *Main) recordBudgets(ctx context.Context, engine *decision.Engine, ledger *budget.Ledger, cs tsubame.CampaignStore, q tsubame.Quotas, every time.Duration, max int) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		us, err := budgetUsages(ctx, engine, ledger, cs, q, max)
		if err == nil {
			m.ads.history.Record(us, time.Now())
		}
		if err != nil && ctx.Err() == nil {
			m.Logger.Warn("cannot record the budgets for the dashboard", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// closeAds stops keeping the index current and gives the budget leases
// back. No request may decide any more.
func (m *Main) closeAds(ctx context.Context) {
	if m.ads.stop != nil {
		m.ads.stop()
		<-m.ads.done
		m.ads.stop = nil
	}
	if m.ads.auction != nil {
		m.ads.auction.Close(ctx) // the queued notices are called
		m.ads.auction = nil
	}
	if m.ads.counters != nil {
		// Before the store closes: the caps' counts and releases it did
		// not take yet are each sent once more, and on while it takes
		// them, until ctx ends.
		if err := m.ads.counters.Close(ctx); err != nil {
			m.Logger.Error("frequency caps' updates not sent", "err", err)
		}
		m.ads.counters = nil
	}
	if m.ads.ledger != nil {
		saveTraffic(m.ads.ledger, m.ads.dataDir, m.Logger)
		if err := m.ads.ledger.Close(ctx); err != nil {
			m.Logger.Error("budget leases not given back", "err", err)
		}
		m.ads.ledger = nil
	}
	if db := m.ads.geo.Swap(nil); db != nil {
		_ = db.Close()
	}
}

// reloadAds applies what a reload may change of deciding: the tracking
// keys (a rotation), the geo database (a new release of the file, or
// another file), the sites' privacy modes and /api/decide's CORS origins. Nothing changes unless the
// keys and the database load.
func (m *Main) reloadAds(cfg *config.Config) error {
	if m.ads.svc == nil {
		return nil
	}
	signer, err := loadTrackingKeys(cfg.TrackingKeysPath(), false)
	if err != nil {
		return err
	}
	if err := m.openGeo(cfg); err != nil {
		return err
	}
	rates, err := tsubame.NewRates(cfg.Ads.Currency, cfg.RTB.Rates)
	if err != nil {
		return err
	}
	if m.ads.auction != nil {
		if err := m.ads.auction.Reload(cfg.SSP, rates); err != nil {
			return err
		}
	}
	if m.ads.bidder != nil {
		if err := m.ads.bidder.SetExchanges(exchanges(cfg), nil); err != nil {
			return err
		}
		m.ads.bidder.SetRates(rates)
		m.ads.bidder.SetSigner(signer)
	}
	m.ads.svc.SetSigner(signer)
	m.ads.svc.SetPrivacy(privacyModes(cfg))
	m.ads.svc.SetCORS(decideCORS(cfg))
	return nil
}

// decideCORS is /api/decide's CORS policy as configured.
func decideCORS(cfg *config.Config) server.CORS {
	return server.CORS{Origins: cfg.Ads.CORSOrigins, MaxAge: cfg.Ads.CORSMaxAge}
}

// exchanges are rtb.exchanges as the bidder takes them (Validate has
// checked them).
func exchanges(cfg *config.Config) []bidder.Exchange {
	var out []bidder.Exchange
	for name, e := range cfg.RTB.Exchanges {
		shading, _ := bidder.ParseShading(e.Shading, e.ShadingStep)
		win, _ := bidder.ParseWinWindow(e.WinWindow)
		out = append(out, bidder.Exchange{Name: name, Seat: e.Seat, TokenHeader: e.TokenHeader, Token: e.Token,
			Sources: e.SourcePrefixes(), QPS: e.QPS, Network: time.Duration(e.NetworkMS) * time.Millisecond,
			PriceEncoding: cmp.Or(e.PriceEncoding, bidder.PricePlain), Reservation: cfg.ExchangeReservation(e),
			BidEveryTID: e.BidEveryTID, Shading: shading, MarkupOnWin: e.MarkupOnWin, BillOn: e.BillOn, WinWindow: win,
			WinRateHolds: e.WinRateHolds, KeepWon: e.KeepWon})
	}
	return out
}

// warnGeoTargeting warns, once at start, when line items of set target
// countries or regions while no geo database is configured: no request
// then has a country, and that targeting never matches (the admin API's
// line item status says so too).
func warnGeoTargeting(log *slog.Logger, set *tsubame.CampaignSet) {
	var n int
	var first []string
	for _, li := range set.LineItems {
		if decision.GeoTargeted(li) {
			if n++; len(first) < 5 {
				first = append(first, li.ID)
			}
		}
	}
	if n > 0 {
		log.Warn("line items target countries or regions, but no geo database is configured (geo.database): that targeting never matches",
			"line_items", n, "first", first)
	}
}

// openGeo opens geo.database (none when empty) and puts it in use,
// closing the one it replaces.
func (m *Main) openGeo(cfg *config.Config) error {
	var db *geo.DB
	if cfg.Geo.Database != "" {
		var err error
		if db, err = geo.Open(cfg.Geo.Database); err != nil {
			return fmt.Errorf("geo.database: %w", err)
		}
		m.Logger.Info("geo database", "path", cfg.Geo.Database, "database", db.Metadata().String())
	}
	if old := m.ads.geo.Swap(db); old != nil {
		_ = old.Close() // lookups running on it answer nothing, then it is gone
	}
	return nil
}

// privacyModes are ads.privacy and each site's mode (checked by Validate).
func privacyModes(cfg *config.Config) (ads.Privacy, map[string]ads.Privacy) {
	def, _ := ads.ParsePrivacy(cfg.Ads.Privacy)
	bySite := make(map[string]ads.Privacy, len(cfg.Sites))
	for name := range cfg.Sites {
		bySite[name], _ = ads.ParsePrivacy(cfg.SitePrivacy(name))
	}
	return def, bySite
}

// loadTrackingKeys reads the signing keys: one "ID SECRET" line each, the
// first the key that signs; blank lines and # comments are skipped. When
// the file is missing and create is set (the default path in the data
// directory), it is made with one random key, readable by this user only.
func loadTrackingKeys(path string, create bool) (*track.Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		if b, err = createTrackingKeys(path); err != nil {
			return nil, fmt.Errorf("cannot create the tracking keys file: %w", err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ads.tracking.keys_file: %w", err)
	}
	var keys []track.Key
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			// The line is not echoed: it may hold a secret.
			return nil, tsubame.Errorf(tsubame.EINVALID, "%s: line %d is not \"ID SECRET\"", path, n)
		}
		keys = append(keys, track.Key{ID: f[0], Secret: []byte(f[1])})
	}
	if len(keys) == 0 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "%s: no signing key", path)
	}
	s, err := track.NewSigner(keys[0].ID, keys...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func createTrackingKeys(path string) ([]byte, error) {
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, err
	}
	id := make([]byte, 6)
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	for i := range id {
		id[i] = alphabet[int(r[i])%len(alphabet)]
	}
	body := fmt.Sprintf("# Tracking URL signing keys: \"ID SECRET\" per line, the first signs.\n"+
		"# Every node serving the same tracking host needs the same file.\n%s %s\n",
		id, base64.RawURLEncoding.EncodeToString(secret[:]))
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path) // another process made it first
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.WriteString(body); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return []byte(body), f.Close()
}

// newDeviceParser is the User-Agent parser ads targeting reads.
func newDeviceParser(cfg *config.Config) (func([]byte) ads.Device, error) {
	p, err := device.New(device.Options{CacheSize: cfg.Device.CacheSize, HeadlessIsBrowser: !cfg.Ads.HeadlessIsBot})
	if err != nil {
		return nil, fmt.Errorf("device: %w", err)
	}
	return p.Parse, nil
}

// notifying is a CampaignStore that tells the decision engine of each
// write it makes, so that a change through the admin API (or the control
// socket) is served by this process at once rather than at the next
// refresh tick. Other nodes learn of it through the store's feed (Redis)
// or their own tick.
type notifying struct {
	tsubame.CampaignStore
	changed func()
}

func (n notifying) after(err error) error {
	if err == nil {
		n.changed()
	}
	return err
}

// PutObject writes o, then tells the engine.
func (n notifying) PutObject(ctx context.Context, o tsubame.CampaignObject) error {
	return n.after(n.CampaignStore.PutObject(ctx, o))
}

// DeleteObject deletes, then tells the engine.
func (n notifying) DeleteObject(ctx context.Context, k tsubame.CampaignKind, id string) error {
	return n.after(n.CampaignStore.DeleteObject(ctx, k, id))
}

// ReplaceAll replaces the set, then tells the engine.
func (n notifying) ReplaceAll(ctx context.Context, set *tsubame.CampaignSet) error {
	return n.after(n.CampaignStore.ReplaceAll(ctx, set))
}

// ReplaceAllAt replaces the set if it is at version, then tells the engine.
func (n notifying) ReplaceAllAt(ctx context.Context, set *tsubame.CampaignSet, version uint64) error {
	return n.after(n.CampaignStore.ReplaceAllAt(ctx, set, version))
}

// ReplaceAllRebasing replaces the set, carrying the writes made since
// version into it (tsubame.ReplaceAllRebasing), then tells the engine.
func (n notifying) ReplaceAllRebasing(ctx context.Context, set *tsubame.CampaignSet, version uint64, rebase tsubame.CampaignRebase) error {
	return n.after(tsubame.ReplaceAllRebasing(ctx, n.CampaignStore, set, version, rebase))
}

// PutObjectAt writes o if the set is at version, then tells the engine.
func (n notifying) PutObjectAt(ctx context.Context, o tsubame.CampaignObject, version uint64) error {
	return n.after(n.CampaignStore.PutObjectAt(ctx, o, version))
}

// campaignsForWrites is cs as the admin API should write it: telling this
// process's engine of each change when deciding is on.
func (m *Main) campaignsForWrites(cs tsubame.CampaignStore) tsubame.CampaignStore {
	if m.ads.engine == nil {
		return cs
	}
	return notifying{CampaignStore: cs, changed: m.ads.engine.Changed}
}
