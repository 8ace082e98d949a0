package main

import (
	"fmt"
	"reflect"
	"slices"
	"sort"

	"tsubame/internal/config"
	"tsubame/internal/render"
)

// Reload applies cfg to the running server at once: the endpoints, sites'
// hosts and endpoints, response templates, the in-flight bounds, hello_json,
// the log level, webhook.callback_token where the webhook processor
// runs (a webhook receiver was on at start), and the TLS certificates
// (read again from their files even when their names did not change; a
// site's certificate follows its hosts). The other keys take
// effect at the next restart (SIGUSR2 or tsubame restart); Reload returns
// their names. An error leaves the running configuration untouched.
func (m *Main) Reload(cfg *config.Config) (needsRestart []string, err error) {
	if cfg.UsesLog(config.LogFile) && m.logs.file == nil {
		return nil, fmt.Errorf("an endpoint now logs to the access-log file, which this process did not open: restart instead")
	}
	if cfg.UsesLog(config.LogStore) && m.logs.store == nil {
		return nil, fmt.Errorf("an endpoint now logs into the store, which this process did not set up: restart instead")
	}
	m.mu.Lock()
	old := m.Config
	m.mu.Unlock()
	// The cache keeps a payload per encoding it was made with; a format
	// needing another, or VAST options that change what it keeps, wait for
	// a restart.
	kept := servedFormats(old)
	for _, f := range servedFormats(cfg) {
		if !render.Uses(kept, f.Encoding()) {
			return nil, fmt.Errorf("an endpoint now serves .%s, whose payloads this process's cache does not keep: restart instead", f)
		}
	}
	if cfg.VAST != old.VAST && render.Uses(kept, render.EncodingVAST) {
		return nil, fmt.Errorf("vast options changed while endpoints serve .xml from the cache: restart instead")
	}
	if cfg.Deciding() && m.ads.svc == nil {
		return nil, fmt.Errorf("an endpoint now has source: decide, and this process serves no decisions (ads.enabled was false): restart instead")
	}
	if err := m.loadCerts(cfg); err != nil {
		return nil, err
	}
	if err := m.reloadAds(cfg); err != nil {
		return nil, err
	}
	if err := m.pub.server.Reload(m.serverOptions(cfg), m.endpoints(cfg)); err != nil {
		return nil, err
	}
	if m.Level != nil {
		m.Level.Set(logLevel(cfg))
	}
	m.mu.Lock()
	m.Config = cfg
	m.mu.Unlock()
	restart := restartOnly(old, cfg)
	if m.hooks.receiver != nil {
		// The webhook processor runs, so the public listener applied the
		// callback token: rotated, or /callback turned on or off.
		restart = slices.DeleteFunc(restart, func(k string) bool { return k == "webhook.callback_token" })
	}
	return restart, nil
}

// restartOnly lists the keys whose change a reload does not apply.
func restartOnly(old, cfg *config.Config) []string {
	a, b := *old, *cfg
	// What Reload applies: make it equal so it does not show up.
	b.Endpoints = a.Endpoints
	b.Server.HelloJSON = a.Server.HelloJSON
	b.Server.MaxInFlightAds = a.Server.MaxInFlightAds
	b.Server.MaxInFlightTracking = a.Server.MaxInFlightTracking
	b.Server.MaxInFlightHook = a.Server.MaxInFlightHook
	b.Server.LimitWait = a.Server.LimitWait
	b.Log.Level = a.Log.Level
	b.UnknownHosts = a.UnknownHosts
	b.Templates = a.Templates
	b.TLS.HSTS, b.TLS.HSTSSubdomains = a.TLS.HSTS, a.TLS.HSTSSubdomains
	if a.Ads.Enabled && b.Ads.Enabled { // reloadAds applies these
		b.Ads.Tracking.KeysFile, b.Ads.Privacy, b.Geo = a.Ads.Tracking.KeysFile, a.Ads.Privacy, a.Geo
		// The sell side's section but its notice workers, and the rates
		// its auctions convert with.
		notices := b.SSP.Notices
		b.SSP, b.RTB.Rates = a.SSP, a.RTB.Rates
		b.SSP.Notices = notices
		if len(a.RTB.Exchanges) > 0 && len(b.RTB.Exchanges) > 0 && a.LongestReservation() == b.LongestReservation() {
			// The bidder runs: its exchanges and rates are applied (the
			// ledger's leases last for the longest reservation: a change
			// of it waits for a restart).
			b.RTB.Exchanges, b.RTB.Rates = a.RTB.Exchanges, a.RTB.Rates
		}
	}
	if a.TLS.Listen != "" {
		// The certificates are applied where a TLS listener runs.
		b.TLS.Cert, b.TLS.Key = a.TLS.Cert, a.TLS.Key
	}
	if a.Admin.TLSCert != "" && b.Admin.TLSCert != "" {
		b.Admin.TLSCert, b.Admin.TLSKey = a.Admin.TLSCert, a.Admin.TLSKey
	}
	// Sites' hosts and endpoints are applied; a static root is not.
	sites := map[string]config.Site{}
	for name, sb := range b.Sites {
		if sa, ok := a.Sites[name]; ok {
			sb.Hosts, sb.Endpoints, sb.Templates, sb.Privacy = sa.Hosts, sa.Endpoints, sa.Templates, sa.Privacy
			sb.TLSCert, sb.TLSKey = sa.TLSCert, sa.TLSKey
		} else if sb.StaticRoot == "" && sb.TLSCert == "" {
			continue // a new site without static files: fully applied
		}
		sites[name] = sb
	}
	for name, sa := range a.Sites {
		if _, ok := b.Sites[name]; !ok && sa.StaticRoot == "" && sa.TLSCert == "" {
			sites[name] = sa // a removed site without static files: fully applied
		}
	}
	b.Sites = sites
	var out []string
	diff(reflect.ValueOf(a), reflect.ValueOf(b), "", &out)
	sort.Strings(out)
	return out
}

func diff(a, b reflect.Value, path string, out *[]string) {
	if a.Kind() == reflect.Struct {
		for i := range a.NumField() {
			if !a.Type().Field(i).IsExported() {
				continue // not configuration (Config's note of the file's lines)
			}
			name := a.Type().Field(i).Tag.Get("koanf")
			if path != "" {
				name = path + "." + name
			}
			diff(a.Field(i), b.Field(i), name, out)
		}
		return
	}
	if !reflect.DeepEqual(a.Interface(), b.Interface()) {
		*out = append(*out, path)
	}
}
