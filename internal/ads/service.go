package ads

import (
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/decision"
	"tsubame/internal/device"
	"tsubame/internal/privacy"
	"tsubame/internal/server"
	"tsubame/internal/ssp"
	"tsubame/internal/track"
)

// Device is what a User-Agent tells: the values targeting compares
// (tsubame.Devices, lower-case OS and browser tokens), and whether it is a
// crawler.
type Device = device.Info

// Deduper tells a repeated event apart, across every node sharing the store
// (tsubame.Deduper).
type Deduper = tsubame.Deduper

// Options configure a Service.
type Options struct {
	Engine *decision.Engine
	Signer *track.Signer
	// Currency is the ISO 4217 code of every price.
	Currency string
	// TrackingURL is the scheme and host of tracking URLs
	// (https://ads.example.com); empty takes the ad request's own.
	TrackingURL string
	// TTL is how long tracking URLs are honoured.
	TTL time.Duration
	// Reservation is how long a decision holds the price of a line item
	// with a budget or an impression limit for its impression (at most
	// TTL); an impression after it is logged late. 0: nothing is held
	// (the counters spend a decision at once).
	Reservation time.Duration
	// Grace is how long after its reservation ends an impression is still
	// settled against it (the budget ledger's grace): one later is late.
	Grace time.Duration
	// Timeout is a decision request's budget: every store call it makes
	// (a frequency cap's count) ends this long after the request was read
	// (DefaultTimeout when 0). A capped line item the store has not
	// cleared by then does not serve that request.
	Timeout time.Duration
	// CookieName and CookieMaxAge are the visitor cookie's.
	CookieName   string
	CookieMaxAge time.Duration
	// Privacy is the mode of each site by name; others take DefaultPrivacy.
	Privacy        map[string]Privacy
	DefaultPrivacy Privacy
	// TCFVendorID is the operator's IAB TCF vendor id: where GDPR applies,
	// a visitor is kept only with a consent string granting it consent
	// (and purpose 1). 0: none, and no visitor is kept where GDPR applies.
	TCFVendorID int
	// Geo maps a client address to its country and region; nil: none.
	Geo func(netip.Addr) (country, region string)
	// Device parses a User-Agent (valid only during the call); nil: none
	// (no device targeting, no crawler is recognised).
	Device func(ua []byte) Device
	// Dedupe counts a repeated impression or click once.
	Dedupe Deduper
	// Holder is the budget ledger's holder: the impression URL of a
	// decision that holds a line item's money carries it, and its first
	// sighting is recorded in Outcomes as the bill that spends the money
	// (tsubame.Outcome), on whichever node it comes to. Empty, or without
	// Outcomes: nothing is recorded (no ledger holds money).
	Holder   string
	Outcomes tsubame.Outcomes
	// Auction sells the placements it names in an auction of the direct
	// line item and demand partners (nil: none is sold).
	Auction *ssp.Auctioneer
	// AdSystem names the ad server in VAST documents.
	AdSystem string
	// CORS lets pages of its origins read /api/decide's answers; listed
	// origins with the visitor cookie (CORS.Credentials is implied), "*"
	// every page without it. No origins: no CORS headers.
	CORS server.CORS
	Log  *slog.Logger
}

// Service answers decisions and their tracking URLs. It is safe for
// concurrent use.
type Service struct {
	opt     Options
	signer  atomic.Pointer[track.Signer]
	privacy atomic.Pointer[privacyModes]
	cors    *server.CORSPolicy // /api/decide's
	// bufs holds answer buffers.
	bufs sync.Pool
	// nofill counts the direct decisions that filled nothing, by cause.
	nofill [decision.NumNoFills]atomic.Uint64
}

// NoFills returns how many direct decisions (not a sold placement's
// auction, not a crawler's request) filled nothing, by cause
// (decision.NoFill; Filled's count stays 0).
func (s *Service) NoFills() [decision.NumNoFills]uint64 {
	var n [decision.NumNoFills]uint64
	for i := range n {
		n[i] = s.nofill[i].Load()
	}
	return n
}

// DefaultTimeout is a decision request's budget when Options sets none.
const DefaultTimeout = 50 * time.Millisecond

// Route names and paths.
const (
	RouteDecide = "decide"
	RouteImp    = "track_imp"
	RouteClick  = "track_click"

	PathDecide = "/api/decide"
	PathImp    = track.PathImpression
	PathClick  = track.PathClick
)

// New checks opt and returns a Service.
func New(opt Options) (*Service, error) {
	switch {
	case opt.Engine == nil:
		return nil, tsubame.Errorf(tsubame.EINVALID, "ads: no decision engine")
	case opt.Signer == nil:
		return nil, tsubame.Errorf(tsubame.EINVALID, "ads: no signing keys")
	case opt.Dedupe == nil:
		return nil, tsubame.Errorf(tsubame.EINVALID, "ads: no deduper: a repeated impression would count twice")
	case opt.TTL <= 0:
		return nil, tsubame.Errorf(tsubame.EINVALID, "ads: tracking TTL must be positive")
	case opt.Reservation < 0 || opt.Reservation > opt.TTL:
		return nil, tsubame.Errorf(tsubame.EINVALID, "ads: a reservation must last 0 to the tracking TTL (%v)", opt.TTL)
	case opt.CookieName == "":
		return nil, tsubame.Errorf(tsubame.EINVALID, "ads: no cookie name")
	case opt.TCFVendorID < 0 || opt.TCFVendorID > privacy.MaxVendorID:
		return nil, tsubame.Errorf(tsubame.EINVALID, "ads: a TCF vendor id is 0 (none) to %d", privacy.MaxVendorID)
	}
	if opt.Currency == "" {
		opt.Currency = tsubame.DefaultCurrency
	}
	if opt.AdSystem == "" {
		opt.AdSystem = "Tsubame"
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	s := &Service{opt: opt, cors: server.NewCORSPolicy(decideCORS(opt.CORS), decideMethods...)}
	s.signer.Store(opt.Signer)
	s.SetPrivacy(opt.DefaultPrivacy, opt.Privacy)
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	return s, nil
}

// SetCORS replaces /api/decide's CORS policy (a reload).
func (s *Service) SetCORS(c server.CORS) { s.cors.Set(decideCORS(c)) }

// decideCORS is c with the visitor cookie: /api/decide's answers depend
// on it (frequency caps), so a listed origin's fetch sends it.
func decideCORS(c server.CORS) server.CORS {
	c.Credentials = true
	return c
}

// SetSigner replaces the signing keys (a reload after a rotation).
func (s *Service) SetSigner(sg *track.Signer) { s.signer.Store(sg) }

// privacyModes are the sites' privacy modes.
type privacyModes struct {
	bySite map[string]Privacy
	def    Privacy
}

// SetPrivacy replaces the privacy modes: def for sites bySite does not
// name (a reload). bySite is kept: the caller must not change it.
func (s *Service) SetPrivacy(def Privacy, bySite map[string]Privacy) {
	s.privacy.Store(&privacyModes{bySite: bySite, def: def})
}

// privacyOf is the mode of the named site.
func (s *Service) privacyOf(site string) Privacy {
	p := s.privacy.Load()
	if m, ok := p.bySite[site]; ok {
		return m
	}
	return p.def
}

// decideMethods are /api/decide's.
var decideMethods = []string{"GET"}

// Routes are the public routes of the service: /api/decide, in flight
// under the ad requests' limit, and the impression and click URLs, under
// the tracking one; each request and event logged to log.
func (s *Service) Routes(log *accesslog.Logger) []server.Route {
	get := []string{"GET"}
	return append([]server.Route{
		{Name: RouteDecide, Path: PathDecide, Methods: decideMethods, Handler: server.HandlerFunc(s.serveDecide), Log: log, Limit: server.LimitAds,
			CORS: s.cors},
		{Name: RouteImp, Path: PathImp, Methods: get, Handler: server.HandlerFunc(s.serveImp), Log: log, Limit: server.LimitTracking},
		{Name: RouteClick, Path: PathClick, Methods: get, Handler: server.HandlerFunc(s.serveClick), Log: log, Limit: server.LimitTracking},
	}, s.sellRoutes(log)...)
}

// Extra fields of event lines.
var (
	keyReason = accesslog.MustKey("reason")
	keyLate   = accesslog.MustKey("late")
	keyTest   = accesslog.MustKey("test")
	keySlots  = accesslog.MustKey("slots")  // a request line's: the slots it asked
	keyFilled = accesslog.MustKey("filled") // and how many were filled
)

// Why an event line is not valid.
const (
	reasonRepeat  = "repeat"
	reasonCrawler = "crawler"
	reasonStore   = "store_unavailable" // the deduper could not tell: not counted
	reasonTest    = "test"              // a test auction's: never counted
)

var errLog = tsubame.Errorf(tsubame.EUNAVAILABLE, "access log unavailable")

func (s *Service) logEvent(r server.Request, e *accesslog.Event) error {
	if err := r.LogEvent(e); err != nil {
		if s.opt.Log != nil {
			s.opt.Log.Error("access log refused an event line; not serving it", "event", e.Kind.String(), "err", err)
		}
		return errLog
	}
	return nil
}
