package config

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"tsubame"
	"tsubame/internal/asset"
	"tsubame/internal/privacy"
)

// SourceDecide is the endpoint source that decides an ad per request (the
// campaigns, line items and creatives in the store): JSONP, JSON or VAST
// answers of /api/decide's shape.
const SourceDecide = "decide"

// Ads configures deciding (/api/decide and source: decide endpoints) and
// tracking.
type Ads struct {
	// Enabled serves /api/decide and the tracking URLs (and lets endpoints
	// take source: decide); it needs a store that keeps campaigns.
	Enabled bool `koanf:"enabled"`
	// Currency is the ISO 4217 code of every amount.
	Currency string `koanf:"currency"`
	// Refresh is how often the store's campaigns version is checked (Redis
	// also tells of a change at once).
	Refresh  time.Duration `koanf:"refresh"`
	Tracking Tracking      `koanf:"tracking"`
	Cookie   AdsCookie     `koanf:"cookie"`
	// Privacy is how visitors' privacy signals are met on sites that do not
	// set their own (Site.Privacy): PrivacySignals or PrivacyNoCookies.
	Privacy string `koanf:"privacy"`
	// TCFVendorID is the operator's IAB TCF vendor id, for /api/decide
	// and the bidder alike: where GDPR applies, a visitor is kept only
	// with a TCF v2 consent string granting purpose 1 and consent to this
	// vendor. 0: none, and no visitor is kept where GDPR applies.
	TCFVendorID int `koanf:"tcf_vendor_id"`
	// HeadlessIsBot treats headless browsers as crawlers (204, not counted).
	HeadlessIsBot bool `koanf:"headless_is_bot"`
	// CapsTimeout is a decision request's budget for the store: its
	// frequency caps' counts end this long after it was read; a capped
	// line item not counted by then does not serve.
	CapsTimeout time.Duration `koanf:"caps_timeout"`
	// CapsPending bounds the updates of frequency caps the store did not
	// take when asked (a win's count, a loss's release, a late count's
	// cancel), kept and sent again until it does.
	CapsPending int `koanf:"caps_pending"`
	// CORSOrigins are the page origins allowed to read /api/decide's
	// answers (with the visitor cookie), or "*" alone for every page
	// (without it); CORSMaxAge is a preflight's Access-Control-Max-Age.
	CORSOrigins []string      `koanf:"cors_origins"`
	CORSMaxAge  time.Duration `koanf:"cors_max_age"`
	// Reservation is how long a decision of a line item with an impression
	// limit or a campaign budget holds its impression and price for its
	// impression URL; past it an impression is counted late.
	Reservation time.Duration `koanf:"reservation"`
	Budget      AdsBudget     `koanf:"budget"`
	Assets      AdsAssets     `koanf:"assets"`
}

// AdsAssets bound the creatives' files editors upload and what each node
// caches of them.
type AdsAssets struct {
	MaxImageBytes ByteSize `koanf:"max_image_bytes"`
	MaxVideoBytes ByteSize `koanf:"max_video_bytes"`
	CacheBytes    ByteSize `koanf:"cache_bytes"`
}

// Limits are the upload limits, as internal/asset takes them.
func (a AdsAssets) Limits() asset.Limits {
	return asset.Limits{MaxImageBytes: int64(a.MaxImageBytes), MaxVideoBytes: int64(a.MaxVideoBytes)}
}

// AdsBudget tunes how a node keeps its share of budgets and impression
// limits (internal/budget's Ledger).
type AdsBudget struct {
	// Interval is how often leases are topped up, renewed and given back,
	// and reservations settled.
	Interval time.Duration `koanf:"interval"`
	// Grace is how long after its end a reservation is settled: an
	// impression counted on another node is seen by then.
	Grace time.Duration `koanf:"grace"`
	// Lease is how long a node spends a lease without renewing it: with
	// the store gone, line items with a budget or a limit stop after it.
	Lease time.Duration `koanf:"lease"`
	// Holder names this node's leases in the store, followed by random
	// characters new at every start; empty: the host name and process id.
	Holder string `koanf:"holder"`
	// HistoryEvery is how often a node records what every budget and
	// limit has committed, for the dashboard's pacing charts; 0: never.
	HistoryEvery time.Duration `koanf:"history_every"`
	// HistoryMax bounds the budgets and limits the charts record, and the
	// dashboard's budget list reads: those with the most requests on this
	// node first; 0: all of them.
	HistoryMax int `koanf:"history_max"`
	// Wait is the longest a decision waits for its line item's empty share
	// to be topped up; 0: never.
	Wait time.Duration `koanf:"wait"`
	// Warm is how many budgets and limits a node leases for ahead of
	// their line item's first decision; 0: none.
	Warm int `koanf:"warm"`
	// Idle is how long a budget or limit no decision asked of keeps its
	// lease on a node; 0: while its period lasts.
	Idle time.Duration `koanf:"idle"`
	// CatchUp is the percent of an hour's plan a paced limit behind it may
	// commit in the hour; 0: all at once.
	CatchUp int `koanf:"catch_up"`
	// KeepDaily is how long the store keeps a day's budget and limit keys
	// after the day; 0: forever.
	KeepDaily time.Duration `koanf:"keep_daily"`
}

// Privacy modes (ads.privacy, sites.<name>.privacy).
const (
	// PrivacySignals sets and reads the visitor cookie unless the request
	// carries a privacy signal (gdpr=1 without consent to purpose 1 and to
	// Ads.TCFVendorID, a us_privacy opt-out, gpp, gpp_sid, coppa=1, DNT or
	// Sec-GPC, or one of them unreadable).
	PrivacySignals = "signals"
	// PrivacyNoCookies never sets or reads the cookie: only an explicit uid
	// identifies a visitor.
	PrivacyNoCookies = "no_cookies"
)

// PrivacyModes lists the privacy modes.
var PrivacyModes = []string{PrivacySignals, PrivacyNoCookies}

// Tracking configures the signed impression and click URLs.
type Tracking struct {
	// URL is the scheme and host tracking URLs start with
	// (https://ads.example.com); empty takes the ad request's own.
	URL string `koanf:"url"`
	// TTL is how long a tracking URL is honoured after its decision.
	TTL time.Duration `koanf:"ttl"`
	// KeysFile holds the signing keys, one "ID SECRET" line each, the
	// first line the key that signs (the others still verify: rotation).
	// Empty means <data_dir>/tracking.keys, made with one random key at
	// first start: every node behind one host name must share it.
	KeysFile string `koanf:"keys_file"`
}

// AdsCookie configures the visitor cookie.
type AdsCookie struct {
	Name   string        `koanf:"name"`
	MaxAge time.Duration `koanf:"max_age"`
}

// Geo configures the country and region of a client address.
type Geo struct {
	// Database is a MaxMind-format database file (GeoLite2 or GeoIP2
	// Country or City); empty: no geography (country and region targeting
	// never match).
	Database string `koanf:"database"`
}

// Device configures the User-Agent parser.
type Device struct {
	// CacheSize bounds the parsed User-Agents kept.
	CacheSize int `koanf:"cache_size"`
}

// TrackingKeysPath is ads.tracking.keys_file, or tracking.keys in the data
// directory.
func (c *Config) TrackingKeysPath() string {
	if c.Ads.Tracking.KeysFile != "" {
		return c.Ads.Tracking.KeysFile
	}
	return strings.TrimSuffix(c.DataDir, "/") + "/tracking.keys"
}

// Notices are what an operator should know of how the configuration
// behaves, though nothing in it is wrong or risky: check-config prints
// them, and the server logs them once at start.
func (c *Config) Notices() []string {
	var out []string
	if c.Ads.Enabled && c.Ads.TCFVendorID == 0 {
		out = append(out, "ads.tcf_vendor_id is not set: where GDPR applies (gdpr=1 on /api/decide, regs.gdpr in a bid request), "+
			"no request keeps its visitor, whatever its consent string says; set it to your IAB TCF vendor id to keep "+
			"those whose consent grants it")
	}
	return out
}

// SitePrivacy is the privacy mode of the named site ("" the default site).
func (c *Config) SitePrivacy(site string) string {
	if s, ok := c.Sites[site]; ok && s.Privacy != "" {
		return s.Privacy
	}
	return c.Ads.Privacy
}

// Deciding reports whether any endpoint decides (source: decide).
func (c *Config) Deciding() bool {
	for _, ep := range c.Endpoints {
		if ep.Source == SourceDecide {
			return true
		}
	}
	for _, s := range c.Sites {
		for _, ep := range s.Endpoints {
			if ep.Source == SourceDecide {
				return true
			}
		}
	}
	return false
}

func (c *Config) validateAds(p *problems) {
	a := c.Ads
	if !a.Enabled && c.Deciding() {
		p.add("ads.enabled: false, but an endpoint has source: decide")
	}
	if !validCurrency(a.Currency) {
		p.add("ads.currency: %q is not an ISO 4217 code such as USD or JPY (three upper-case letters)", a.Currency)
	}
	p.positive("ads.refresh", a.Refresh)
	if a.CapsTimeout < time.Millisecond || a.CapsTimeout > 10*time.Second {
		p.add("ads.caps_timeout: must be between 1ms and 10s (got %v)", a.CapsTimeout)
	}
	if a.CapsPending < 1 || a.CapsPending > 10_000_000 {
		p.add("ads.caps_pending: must be between 1 and 10000000 (got %d)", a.CapsPending)
	}
	validateCORS(p, "ads.", a.CORSOrigins, a.CORSMaxAge)
	for _, l := range []struct {
		key string
		v   ByteSize
	}{{"max_image_bytes", a.Assets.MaxImageBytes}, {"max_video_bytes", a.Assets.MaxVideoBytes}} {
		if l.v < 1<<10 || l.v > tsubame.MaxAssetBytes {
			p.add("ads.assets.%s: must be between 1KiB and 64MiB (got %d bytes)", l.key, int64(l.v))
		}
	}
	if a.Reservation < time.Second || a.Reservation > a.Tracking.TTL {
		p.add("ads.reservation: must be between 1s and ads.tracking.ttl (%v) (got %v)", a.Tracking.TTL, a.Reservation)
	}
	b := a.Budget
	if b.Interval < 10*time.Millisecond || b.Interval > time.Minute {
		p.add("ads.budget.interval: must be between 10ms and 1m (got %v)", b.Interval)
	}
	if b.Grace < time.Second || b.Grace > time.Hour {
		p.add("ads.budget.grace: must be between 1s and 1h (got %v)", b.Grace)
	}
	if b.Lease < 2*b.Interval || b.Lease > time.Hour {
		p.add("ads.budget.lease: must be between twice ads.budget.interval (%v) and 1h (got %v)", 2*b.Interval, b.Lease)
	}
	if a.Reservation >= time.Second && b.Grace >= time.Second && a.Reservation+b.Grace+2*b.Interval > a.Tracking.TTL {
		p.add("ads.reservation (%v), ads.budget.grace (%v) and two ads.budget.interval (%v) must fit in ads.tracking.ttl (%v): a reservation is settled by whether its impression was counted, which is known for as long as its URL is honoured",
			a.Reservation, b.Grace, 2*b.Interval, a.Tracking.TTL)
	}
	if a.Reservation+b.Grace+b.Lease > 24*time.Hour {
		p.add("ads.reservation, ads.budget.grace and ads.budget.lease add up to more than 24h, the longest lease a store keeps")
	}
	if b.HistoryMax < 0 {
		p.add("ads.budget.history_max: must be 0 (all) or more (got %d)", b.HistoryMax)
	}
	if b.HistoryEvery != 0 && (b.HistoryEvery < time.Second || b.HistoryEvery > time.Hour) {
		p.add("ads.budget.history_every: must be 0 (off) or between 1s and 1h (got %v)", b.HistoryEvery)
	}
	if b.Wait < 0 || b.Wait > time.Second {
		p.add("ads.budget.wait: must be between 0 (never) and 1s (got %v)", b.Wait)
	}
	if b.CatchUp != 0 && (b.CatchUp < 100 || b.CatchUp > 1000) {
		p.add("ads.budget.catch_up: must be 0 (all at once) or a percent of the plan from 100 to 1000 (got %d)", b.CatchUp)
	}
	if b.KeepDaily != 0 && (b.KeepDaily < 24*time.Hour || b.KeepDaily < a.Tracking.TTL) {
		p.add("ads.budget.keep_daily: must be 0 (forever) or at least 24h and ads.tracking.ttl (%v): a late impression or bill counts into its day's key (got %v)",
			a.Tracking.TTL, b.KeepDaily)
	}
	if b.Idle != 0 && (b.Idle < 2*b.Interval || b.Idle > 24*time.Hour) {
		p.add("ads.budget.idle: must be 0 (kept while the period lasts) or between two ads.budget.interval (%v) and 24h (got %v)", 2*b.Interval, b.Idle)
	}
	if b.Warm < 0 || b.Warm > 1_000_000 {
		p.add("ads.budget.warm: must be between 0 (none) and 1000000 (got %d)", b.Warm)
	}
	if len(b.Holder) > 64 || strings.IndexFunc(b.Holder, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		p.add("ads.budget.holder: must be at most 64 printable ASCII characters without spaces")
	}
	if a.Tracking.URL != "" {
		u, err := url.Parse(a.Tracking.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			p.add("ads.tracking.url: %q is not a scheme and host such as https://ads.example.com", a.Tracking.URL)
		}
	}
	if a.Tracking.TTL < time.Minute || a.Tracking.TTL > 30*24*time.Hour {
		p.add("ads.tracking.ttl: must be between 1m and 720h (got %v)", a.Tracking.TTL)
	}
	if !validCookieName(a.Cookie.Name) {
		p.add("ads.cookie.name: %q must be 1 to 64 characters of a-z, A-Z, 0-9, '-' and '_'", a.Cookie.Name)
	}
	if a.Cookie.MaxAge < time.Hour || a.Cookie.MaxAge > 400*24*time.Hour {
		p.add("ads.cookie.max_age: must be between 1h and 9600h (400 days, the most browsers keep) (got %v)", a.Cookie.MaxAge)
	}
	if !slices.Contains(PrivacyModes, a.Privacy) {
		p.add("ads.privacy: %q is not one of %s", a.Privacy, strings.Join(PrivacyModes, ", "))
	}
	if a.TCFVendorID < 0 || a.TCFVendorID > privacy.MaxVendorID {
		p.add("ads.tcf_vendor_id: must be 0 (none) or an IAB TCF vendor id, 1 to %d (got %d)", privacy.MaxVendorID, a.TCFVendorID)
	}
	for name, s := range c.Sites {
		if s.Privacy != "" && !slices.Contains(PrivacyModes, s.Privacy) {
			p.add("sites.%s.privacy: %q is not one of %s", name, s.Privacy, strings.Join(PrivacyModes, ", "))
		}
	}
	if c.Device.CacheSize < 1 || c.Device.CacheSize > 10_000_000 {
		p.add("device.cache_size: must be between 1 and 10000000 (got %d)", c.Device.CacheSize)
	}
}

func validCurrency(s string) bool {
	return len(s) == 3 && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
}

func validCookieName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
