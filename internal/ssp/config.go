package ssp

import (
	_ "embed"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"tsubame"
	"tsubame/internal/privacy"
	"tsubame/internal/units"
)

// DefaultsYAML is the module's documented defaults: the ssp section of the
// configuration, loaded after config's own (the module owns its keys,
// their defaults and their validation).
//
//go:embed defaults.yaml
var DefaultsYAML []byte

// Config is the ssp section of the configuration. A reload (SIGHUP)
// applies all of it.
type Config struct {
	// Seller is this server as a seller: the supply chain node it
	// appends and the owner of /sellers.json.
	Seller Seller `koanf:"seller"`
	// TMax is an auction's deadline when its placement sets none, from
	// when the ad request is read; Margin is kept of it for the answer's
	// way out: partners are cut off at TMax less Margin.
	TMax   time.Duration `koanf:"tmax"`
	Margin time.Duration `koanf:"margin"`
	// MarkupTime is kept of the deadline for fetching a winning bid's
	// markup from its nurl (a bid without adm): partners are cut off at
	// tmax less Margin less MarkupTime.
	MarkupTime time.Duration `koanf:"markup_time"`
	// Auction is the price a winner pays: first (its bid) or second (the
	// next price plus PriceStep, at least the floor).
	Auction   string `koanf:"auction"`
	PriceStep string `koanf:"price_step"`
	// GuaranteedPriority: a direct line item of this priority or a more
	// urgent one (a smaller number) wins outright, with no auction.
	GuaranteedPriority int `koanf:"guaranteed_priority"`
	// MaxResponse bounds a partner's answer, after gunzip too.
	MaxResponse units.ByteSize `koanf:"max_response"`
	// Notices are the win, billing and loss URLs called server to server.
	Notices Notices `koanf:"notices"`
	// LogEvery bounds how often a partner's failures are logged: once
	// per this, per partner and kind, with the count meanwhile.
	LogEvery time.Duration `koanf:"log_every"`
	// Demand are the demand partners by name; Placements the placements
	// sold in an auction by id; Publishers the publishers they belong to.
	Demand     map[string]Partner   `koanf:"demand"`
	Placements map[string]Placement `koanf:"placements"`
	Publishers map[string]Publisher `koanf:"publishers"`
}

// Seller is the operator as a seller.
type Seller struct {
	// Domain is the seller's own domain: the asi of the supply chain node
	// it appends, and where /sellers.json and ads.txt lines point.
	Domain string `koanf:"domain"`
	// Name is the operator's name in /sellers.json, ContactEmail its
	// contact_email (empty: left out).
	Name         string `koanf:"name"`
	ContactEmail string `koanf:"contact_email"`
}

// Notices configure the calls of partners' notice URLs.
type Notices struct {
	// Workers call them; Queue bounds those waiting (a notice past it
	// is dropped and counted).
	Workers int `koanf:"workers"`
	Queue   int `koanf:"queue"`
	// Timeout bounds one call.
	Timeout time.Duration `koanf:"timeout"`
	// AllowPrivate lets notice URLs reach loopback and private addresses
	// (partners on the operator's own network). Off, a partner's nurl,
	// burl or lurl may only reach a public address.
	AllowPrivate bool `koanf:"allow_private"`
}

// Partner is one demand partner (ssp.demand.<name>).
type Partner struct {
	// URL is where bid requests are posted: http or https.
	URL string `koanf:"url"`
	// Enabled: false keeps the partner configured but out of auctions.
	Enabled *bool `koanf:"enabled"`
	// HTTP2 speaks HTTP/2 to a plain http URL (prior knowledge, h2c); an
	// https URL negotiates it whatever this says. Otherwise HTTP/1.1 with
	// keep-alive.
	HTTP2 bool `koanf:"http2"`
	// Timeout cuts the partner off sooner than the auction does; 0: the
	// auction's deadline alone.
	Timeout time.Duration `koanf:"timeout"`
	// QPS bounds the requests sent a second (past it the partner is not
	// asked); MaxInFlight those waiting for an answer at once.
	QPS         int `koanf:"qps"`
	MaxInFlight int `koanf:"max_in_flight"`
	// Gzip compresses the requests sent (Content-Encoding: gzip).
	Gzip bool `koanf:"gzip"`
	// Headers are sent with every request; TokenHeader and Token too (a
	// secret: never logged).
	Headers     map[string]string `koanf:"headers"`
	TokenHeader string            `koanf:"token_header"`
	Token       string            `koanf:"token" secret:"true"`
	// Currency is what the partner bids in (it must have a rate in
	// rtb.rates, or be ads.currency).
	Currency string `koanf:"currency"`
	// BidAdjustment multiplies every bid before it competes ("0.85": a
	// 15 % revenue share kept); empty: 1.
	BidAdjustment string `koanf:"bid_adjustment"`
	// Placements and Sites it may bid on; empty: every one. Deals are
	// the placements' deals it is offered; empty: all of them.
	Placements []string `koanf:"placements"`
	Sites      []string `koanf:"sites"`
	Deals      []string `koanf:"deals"`
	// Sync is the partner's user sync URL (an image pixel or an iframe),
	// listed by /cookie_sync.
	Sync string `koanf:"sync"`
	// OpenRTB is the version the partner reads: "2.6" (empty too), or
	// "2.5", which also gets the privacy signals and the supply chain in
	// the extensions 2.5 had them in (regs.ext, user.ext.consent,
	// source.ext.schain).
	OpenRTB string `koanf:"openrtb"`
	// GVLID is the partner's IAB TCF vendor id (in the Global Vendor
	// List). Where the GDPR applies, a partner is sent the visitor's ids
	// and full address, and offered a user sync, only when the consent
	// string grants purpose 1 and consent to this vendor; 0: never.
	GVLID int `koanf:"gvl_id"`
}

// The OpenRTB versions a partner may read.
const (
	OpenRTB26 = "2.6"
	OpenRTB25 = "2.5"
)

// On reports whether the partner takes part in auctions.
func (p Partner) On() bool { return p.Enabled == nil || *p.Enabled }

// Placement is a placement sold in an auction (ssp.placements.<id>).
type Placement struct {
	// Publisher is the key of the publisher it belongs to (in
	// ssp.publishers): the schain node's sid and site.publisher.
	Publisher string `koanf:"publisher"`
	// Floor is the least price that wins it, a CPM in ads.currency ("0.5").
	Floor string `koanf:"floor"`
	// TMax is its auction's deadline (0: ssp.tmax).
	TMax time.Duration `koanf:"tmax"`
	// Partners asked for it (empty: every partner that may bid on it).
	Partners []string `koanf:"partners"`
	// Formats it takes (banner, video; empty: banner), its banner Sizes
	// ("300x250") and its Video settings.
	Formats []string `koanf:"formats"`
	Sizes   []string `koanf:"sizes"`
	Video   Video    `koanf:"video"`
	// BCat and BAdv are the IAB categories and advertiser domains it
	// blocks.
	BCat []string `koanf:"bcat"`
	BAdv []string `koanf:"badv"`
	// Deals are the private deals on offer for it: id: floor.
	Deals map[string]string `koanf:"deals"`
}

// Video is a placement's video settings (OpenRTB's imp.video).
type Video struct {
	MIMEs       []string `koanf:"mimes"`
	MinDuration int      `koanf:"min_duration"`
	MaxDuration int      `koanf:"max_duration"`
	Protocols   []int    `koanf:"protocols"`
	W           int      `koanf:"w"`
	H           int      `koanf:"h"`
	// Plcmt is OpenRTB 2.6's video placement type (1 instream, 2
	// accompanying content, 3 interstitial, 4 no content).
	Plcmt int `koanf:"plcmt"`
}

// Publisher is one publisher whose inventory is sold (ssp.publishers.<key>).
type Publisher struct {
	// SellerID is the publisher's id in this seller's system: the
	// schain node's sid and its /sellers.json entry's seller_id.
	SellerID string `koanf:"seller_id"`
	Name     string `koanf:"name"`
	Domain   string `koanf:"domain"`
	// Sites are the other domains it sells on. With a domain or sites, a
	// page's site (a subdomain too) must be one of them for partners to be
	// asked: a request naming another publisher's site is not sold under
	// this one's seller id (domain spoofing). Apps are not checked.
	Sites []string `koanf:"sites"`
	// Type is its /sellers.json seller_type: PUBLISHER (the default),
	// INTERMEDIARY or BOTH.
	Type string `koanf:"type"`
}

// sells reports whether the publisher sells on site: any site when it
// names none.
func (p Publisher) sells(site string) bool {
	if p.Domain == "" && len(p.Sites) == 0 {
		return true
	}
	for _, d := range append([]string{p.Domain}, p.Sites...) {
		if d != "" && (site == d || strings.HasSuffix(site, "."+d)) {
			return true
		}
	}
	return false
}

// Auction kinds.
const (
	FirstPrice  = "first"
	SecondPrice = "second"
)

// Env is what validation needs from the rest of the configuration.
type Env struct {
	// Currency is ads.currency; HasRate reports whether a currency has
	// a rate (rtb.rates).
	Currency string
	HasRate  func(cur string) bool
	// AdsEnabled is ads.enabled: an auction runs in /api/decide.
	AdsEnabled bool
}

var (
	partnerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	headerName  = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
	sizeSpec    = regexp.MustCompile(`^([1-9][0-9]{0,4})x([1-9][0-9]{0,4})$`)
	domainName  = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$`)
)

// Validate reports every rule c breaks, each problem naming its key.
func (c *Config) Validate(env Env) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if c.TMax < 10*time.Millisecond || c.TMax > 5*time.Second {
		add("ssp.tmax: 10ms to 5s (got %v)", c.TMax)
	}
	if c.Margin < 0 || c.MarkupTime < 0 || c.Margin+c.MarkupTime >= c.TMax {
		add("ssp.margin, ssp.markup_time: from 0, together under ssp.tmax (got %v and %v)", c.Margin, c.MarkupTime)
	}
	if c.Auction != FirstPrice && c.Auction != SecondPrice {
		add("ssp.auction: first or second (got %q)", c.Auction)
	}
	if m, err := tsubame.ParseMoney(c.PriceStep); err != nil || m < 0 {
		add("ssp.price_step: a decimal amount such as \"0.01\" (got %q)", c.PriceStep)
	}
	if c.GuaranteedPriority < 0 || c.GuaranteedPriority > tsubame.MaxPriority {
		add("ssp.guaranteed_priority: 0 (none) to %d", tsubame.MaxPriority)
	}
	if c.MaxResponse < 1<<10 || c.MaxResponse > 16<<20 {
		add("ssp.max_response: 1KiB to 16MiB (got %v)", c.MaxResponse)
	}
	if c.Notices.Workers < 1 || c.Notices.Workers > 1024 {
		add("ssp.notices.workers: 1 to 1024")
	}
	if c.Notices.Queue < 1 || c.Notices.Queue > 1_000_000 {
		add("ssp.notices.queue: 1 to 1000000")
	}
	if c.Notices.Timeout <= 0 || c.Notices.Timeout > time.Minute {
		add("ssp.notices.timeout: over 0, at most 1m")
	}
	if c.LogEvery <= 0 {
		add("ssp.log_every: over 0")
	}
	if len(c.Placements) == 0 && len(c.Demand) == 0 && len(c.Publishers) == 0 {
		return p
	}
	if !env.AdsEnabled {
		add("ssp: selling needs ads.enabled: true (the auction runs in /api/decide)")
	}
	if c.Seller.Domain != "" && !domainName.MatchString(c.Seller.Domain) {
		add("ssp.seller.domain: %q is not a lower-case domain name", c.Seller.Domain)
	}
	if e := c.Seller.ContactEmail; e != "" && (len(e) > 254 || !strings.Contains(e, "@") || !printableASCII(e)) {
		add("ssp.seller.contact_email: %q is not an email address", e)
	}
	if len(c.Placements) > 0 && c.Seller.Domain == "" {
		add("ssp.seller.domain: needed to sell (the supply chain node's asi)")
	}
	for _, name := range sortedKeys(c.Demand) {
		c.validatePartner(add, name, c.Demand[name], env)
	}
	for _, key := range sortedKeys(c.Publishers) {
		pub := c.Publishers[key]
		at := "ssp.publishers." + key
		if !partnerName.MatchString(key) {
			add("%s: a key is 1 to 64 letters, digits, '-' and '_'", at)
		}
		if pub.SellerID == "" || len(pub.SellerID) > 64 || !printableASCII(pub.SellerID) {
			add("%s.seller_id: 1 to 64 printable characters without spaces", at)
		}
		if pub.Domain != "" && !domainName.MatchString(pub.Domain) {
			add("%s.domain: %q is not a lower-case domain name", at, pub.Domain)
		}
		for _, d := range pub.Sites {
			if !domainName.MatchString(d) {
				add("%s.sites: %q is not a lower-case domain name", at, d)
			}
		}
		if len(pub.Name) > 256 {
			add("%s.name: at most 256 bytes", at)
		}
		if pub.Type != "" && !slices.Contains([]string{"PUBLISHER", "INTERMEDIARY", "BOTH"}, pub.Type) {
			add("%s.type: PUBLISHER, INTERMEDIARY or BOTH", at)
		}
	}
	for _, id := range sortedKeys(c.Placements) {
		c.validatePlacement(add, id, c.Placements[id])
	}
	return p
}

func (c *Config) validatePartner(add func(string, ...any), name string, d Partner, env Env) {
	at := "ssp.demand." + name
	if !partnerName.MatchString(name) {
		add("%s: a name is 1 to 64 letters, digits, '-' and '_'", at)
	}
	if u, err := url.Parse(d.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		add("%s.url: %q is not an http or https URL without credentials", at, d.URL)
	}
	if d.Timeout < 0 || d.Timeout > 5*time.Second {
		add("%s.timeout: 0 (the auction's) to 5s", at)
	}
	if d.QPS < 0 || d.QPS > 1_000_000 {
		add("%s.qps: 0 (no bound) to 1000000", at)
	}
	if d.MaxInFlight < 0 || d.MaxInFlight > 100_000 {
		add("%s.max_in_flight: 0 (the default, %d) to 100000", at, DefaultMaxInFlight)
	}
	for h, v := range d.Headers {
		if !headerName.MatchString(h) || !printableHeader(v) {
			add("%s.headers.%s: a header name of letters, digits and '-', and a printable value", at, h)
		}
		if forbiddenHeader(h) {
			add("%s.headers.%s: set by the server", at, h)
		}
	}
	if d.Token != "" && (!headerName.MatchString(d.TokenHeader) || forbiddenHeader(d.TokenHeader)) {
		add("%s.token_header: a header name of your own is needed with a token", at)
	}
	if d.Token != "" && (len(d.Token) < 16 || !printableHeader(d.Token)) {
		add("%s.token: at least 16 printable characters", at)
	}
	if cur := d.currency(); cur != env.Currency && (env.HasRate == nil || !env.HasRate(cur)) {
		add("%s.currency: %q has no rate in rtb.rates (and is not ads.currency)", at, cur)
	}
	if _, err := parseAdjustment(d.BidAdjustment); err != nil {
		add("%s.bid_adjustment: %v", at, err)
	}
	for _, pl := range d.Placements {
		if _, ok := c.Placements[pl]; !ok {
			add("%s.placements: %q is not in ssp.placements", at, pl)
		}
	}
	for _, s := range d.Sites {
		if !domainName.MatchString(s) {
			add("%s.sites: %q is not a lower-case domain name", at, s)
		}
	}
	for _, deal := range d.Deals {
		found := false
		for _, pl := range c.Placements {
			_, ok := pl.Deals[deal]
			found = found || ok
		}
		if !found {
			add("%s.deals: %q is no placement's deal", at, deal)
		}
	}
	if d.Sync != "" {
		if u, err := url.Parse(d.Sync); err != nil || u.Scheme != "https" || u.Host == "" {
			add("%s.sync: %q is not an https URL", at, d.Sync)
		}
	}
	if d.OpenRTB != "" && d.OpenRTB != OpenRTB26 && d.OpenRTB != OpenRTB25 {
		add("%s.openrtb: %q or %q (got %q)", at, OpenRTB26, OpenRTB25, d.OpenRTB)
	}
	if d.GVLID < 0 || d.GVLID > privacy.MaxVendorID {
		add("%s.gvl_id: 0 (none) or an IAB TCF vendor id, 1 to %d", at, privacy.MaxVendorID)
	}
}

func (c *Config) validatePlacement(add func(string, ...any), id string, pl Placement) {
	at := "ssp.placements." + id
	if tsubame.ValidID(id) != nil || len(id) > 64 {
		add("%s: a placement id is 1 to 64 letters, digits and -_.:@", at)
	}
	if pl.Publisher == "" {
		add("%s.publisher: needed (a key of ssp.publishers)", at)
	} else if _, ok := c.Publishers[pl.Publisher]; !ok {
		add("%s.publisher: %q is not in ssp.publishers", at, pl.Publisher)
	}
	if pl.Floor != "" {
		if m, err := tsubame.ParseMoney(pl.Floor); err != nil || m < 0 {
			add("%s.floor: a decimal CPM such as \"0.50\" (got %q)", at, pl.Floor)
		}
	}
	if pl.TMax != 0 && (pl.TMax < 10*time.Millisecond || pl.TMax > 5*time.Second || pl.TMax <= c.Margin+c.MarkupTime) {
		add("%s.tmax: 0 (ssp.tmax) or 10ms to 5s, over ssp.margin and ssp.markup_time", at)
	}
	for _, name := range pl.Partners {
		if _, ok := c.Demand[name]; !ok {
			add("%s.partners: %q is not in ssp.demand", at, name)
		}
	}
	for _, f := range pl.Formats {
		if f != "banner" && f != "video" {
			add("%s.formats: %q is not banner or video", at, f)
		}
	}
	if slices.Contains(pl.Formats, "banner") || len(pl.Formats) == 0 {
		if len(pl.Sizes) == 0 {
			add("%s.sizes: a banner placement needs its sizes (\"300x250\")", at)
		}
	}
	for _, s := range pl.Sizes {
		if !sizeSpec.MatchString(s) {
			add("%s.sizes: %q is not WxH such as 300x250", at, s)
		}
	}
	if slices.Contains(pl.Formats, "video") {
		v := pl.Video
		if len(v.MIMEs) == 0 {
			add("%s.video.mimes: a video placement needs the types its player takes", at)
		}
		if v.MinDuration < 0 || v.MaxDuration < 0 || v.MaxDuration > 0 && v.MaxDuration < v.MinDuration {
			add("%s.video: durations from 0, max_duration at least min_duration", at)
		}
		if v.W < 0 || v.H < 0 || v.W > 10000 || v.H > 10000 {
			add("%s.video: w and h 0 to 10000", at)
		}
		for _, pr := range v.Protocols {
			if pr < 1 || pr > 20 {
				add("%s.video.protocols: %d is not an OpenRTB protocol", at, pr)
			}
		}
		if v.Plcmt < 0 || v.Plcmt > 4 {
			add("%s.video.plcmt: 0 to 4", at)
		}
	}
	for _, cat := range pl.BCat {
		if cat == "" || len(cat) > 64 || !printableASCII(cat) {
			add("%s.bcat: %q is not a category id", at, cat)
		}
	}
	for _, d := range pl.BAdv {
		if !domainName.MatchString(d) {
			add("%s.badv: %q is not a lower-case domain name", at, d)
		}
	}
	for deal, floor := range pl.Deals {
		if deal == "" || len(deal) > 64 || !printableASCII(deal) {
			add("%s.deals: %q is not a deal id (1 to 64 printable characters)", at, deal)
		}
		if m, err := tsubame.ParseMoney(floor); err != nil || m < 0 {
			add("%s.deals.%s: a decimal floor such as \"2.00\" (got %q)", at, deal, floor)
		}
	}
}

// DefaultMaxInFlight bounds a partner's requests waiting for an answer
// when its max_in_flight is 0.
const DefaultMaxInFlight = 512

// DefaultCurrency is what a partner bids in when it says nothing: OpenRTB's
// default.
const DefaultCurrency = "USD"

func (p Partner) currency() string {
	if p.Currency == "" {
		return DefaultCurrency
	}
	return p.Currency
}

// adjustmentScale is a bid adjustment's unit: parts per million.
const adjustmentScale = 1_000_000

// parseAdjustment reads a bid adjustment ("0.85") in parts per million:
// over 0 and at most 1. A factor over 1 would rank a bid above what its
// partner pays, and book revenue nobody pays.
func parseAdjustment(s string) (int64, error) {
	if s == "" {
		return adjustmentScale, nil
	}
	m, err := tsubame.ParseMoney(s)
	if err != nil || m <= 0 || m > adjustmentScale {
		return 0, fmt.Errorf("%q is not a factor over 0 and at most 1, such as \"0.85\"", s)
	}
	return int64(m), nil // Money is in millionths: parts per million
}

func parseSize(s string) (w, h int) {
	m := sizeSpec.FindStringSubmatch(s)
	if m == nil {
		return 0, 0
	}
	w, _ = strconv.Atoi(m[1])
	h, _ = strconv.Atoi(m[2])
	return w, h
}

func forbiddenHeader(h string) bool {
	switch http.CanonicalHeaderKey(h) {
	case "Content-Type", "Content-Length", "Content-Encoding", "Host", "Connection", "Transfer-Encoding",
		"X-Openrtb-Version", "Accept-Encoding", "Te", "Upgrade":
		return true
	}
	return false
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func printableHeader(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return strings.TrimSpace(s) == s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
