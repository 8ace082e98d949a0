package bidder

import (
	"cmp"
	"context"
	"log/slog"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/time/rate"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/deadline"
	"tsubame/internal/decision"
	"tsubame/internal/device"
	"tsubame/internal/openrtb"
	"tsubame/internal/privacy"
	"tsubame/internal/render"
	"tsubame/internal/track"
)

// Options configure a Bidder.
type Options struct {
	// Engine keeps the decision index of the campaigns.
	Engine *decision.Engine
	// Signer signs the notice URLs and the markup's click URL.
	Signer *track.Signer
	// Currency is the account currency (every CPM's).
	Currency string
	// Rates convert it into the currencies requests allow.
	Rates *tsubame.Rates
	// NoticeURL is the scheme and host of the notice URLs
	// (https://ads.example.com): exchanges call them server to server, so
	// there is no request of theirs to take one from.
	NoticeURL string
	// TTL is how long notice URLs are honoured.
	TTL time.Duration
	// Grace is the budget ledger's: a billing notice later than the bid's
	// reservation and this is logged late.
	Grace time.Duration
	// Timeout bounds a bid request's budget: its deadline is its tmax less
	// its exchange's network time, at most this long after it was received
	// (DefaultTimeout when 0), and this when it has no tmax. Every store
	// call the request makes (a frequency cap's count) ends by then.
	Timeout time.Duration
	// Dedupe tells a repeated billing notice, across nodes.
	Dedupe tsubame.Deduper
	// Holder is the budget ledger's holder: the notice URLs of a bid that
	// holds a line item's money carry it, and each notice's first sighting
	// is recorded in Outcomes as the bid's outcome (tsubame.Outcome), on
	// whichever node it comes to, for that ledger to settle. Empty, or
	// without Outcomes: nothing is recorded (no ledger holds money).
	Holder   string
	Outcomes tsubame.Outcomes
	// Geo maps an address to a country and region (nil: none); Device
	// parses a User-Agent (nil: none), reading ua only during the call:
	// it is a view of the request's text, never to be kept or written.
	Geo    func(netip.Addr) (country, region string)
	Device func(ua []byte) device.Info
	// AdSystem names the ad server in VAST documents.
	AdSystem string
	// TCFVendorID is the operator's IAB TCF vendor id: where GDPR applies,
	// a visitor is kept only with a consent string granting it consent
	// (and purpose 1). 0: none, and no visitor is kept where GDPR applies.
	TCFVendorID int
	Log         *slog.Logger
}

// DefaultTimeout is the longest a bid request is worked on when Options
// sets no bound: an exchange's tmax is rarely above it.
const DefaultTimeout = 500 * time.Millisecond

// Bidder answers the bid requests of exchanges (OpenRTB 2.6) with the
// decision engine's line items, and their win, billing and loss notices.
// It is transport-neutral (http.go adapts it to the public listener) and
// safe for concurrent use.
type Bidder struct {
	opt       Options
	signer    atomic.Pointer[track.Signer]
	rates     atomic.Pointer[tsubame.Rates]
	exchanges atomic.Pointer[map[string]*exchange]
	// secureMarkup: the notice URL is https, so the markup's own URLs
	// (the click tracker, a video's impression) may go on a secure page.
	secureMarkup bool
	// plainNotices: the notice URL needs no escaping in JSON, so neither
	// do the notice URLs of a kind whose path and query need none (their
	// tokens are base64url): the response copies them (openrtb.Bid.Plain).
	plainNotices bool
}

// exchange is an Exchange and what the bidder keeps of it.
type exchange struct {
	Exchange
	limiter *rate.Limiter // nil: no QPS bound
	stats   *Stats
}

// New checks opt and returns a Bidder for exchanges.
func New(opt Options, exchanges []Exchange) (*Bidder, error) {
	switch {
	case opt.Engine == nil || opt.Signer == nil || opt.Rates == nil || opt.Dedupe == nil:
		return nil, tsubame.Errorf(tsubame.EINVALID, "bidder: an engine, a signer, rates and a deduper are needed")
	case opt.TTL <= 0:
		return nil, tsubame.Errorf(tsubame.EINVALID, "bidder: notice URLs need a positive TTL")
	case opt.TCFVendorID < 0 || opt.TCFVendorID > privacy.MaxVendorID:
		return nil, tsubame.Errorf(tsubame.EINVALID, "bidder: a TCF vendor id is 0 (none) to %d", privacy.MaxVendorID)
	}
	u, err := url.Parse(opt.NoticeURL)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Path != "" && u.Path != "/" {
		return nil, tsubame.Errorf(tsubame.EINVALID, "bidder: the notice URL %q is not a scheme and host", opt.NoticeURL)
	}
	opt.NoticeURL = strings.TrimSuffix(opt.NoticeURL, "/")
	opt.Currency = cmp.Or(opt.Currency, tsubame.DefaultCurrency)
	opt.AdSystem = cmp.Or(opt.AdSystem, "Tsubame")
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	b := &Bidder{opt: opt, secureMarkup: u.Scheme == "https", plainNotices: render.IsPlainJSON(opt.NoticeURL)}
	b.signer.Store(opt.Signer)
	b.rates.Store(opt.Rates)
	if err := b.SetExchanges(exchanges, nil); err != nil {
		return nil, err
	}
	return b, nil
}

// SetExchanges puts exchanges in use (a reload), each checked against
// maxHold when given; an exchange kept by name keeps its counters.
func (b *Bidder) SetExchanges(exchanges []Exchange, validate func(*Exchange) error) error {
	old := b.exchanges.Load()
	next := make(map[string]*exchange, len(exchanges))
	for _, e := range exchanges {
		if validate != nil {
			if err := validate(&e); err != nil {
				return err
			}
		}
		if _, dup := next[e.Name]; dup {
			return tsubame.Errorf(tsubame.EINVALID, "exchange %q given twice", e.Name)
		}
		if e.BillOn == "" {
			e.BillOn = BillOnBURL
		} else if !contains(BillOns, e.BillOn) {
			return tsubame.Errorf(tsubame.EINVALID, "exchange %q: bill_on %q is not burl, nurl or markup", e.Name, e.BillOn)
		}
		x := &exchange{Exchange: e, stats: &Stats{}}
		if old != nil {
			if prev, ok := (*old)[e.Name]; ok {
				x.stats = prev.stats
			}
		}
		if e.QPS > 0 {
			x.limiter = rate.NewLimiter(rate.Limit(e.QPS), e.QPS)
		}
		next[e.Name] = x
	}
	b.exchanges.Store(&next)
	return nil
}

// SetSigner replaces the signing keys (a reload).
func (b *Bidder) SetSigner(s *track.Signer) { b.signer.Store(s) }

// SetRates replaces the exchange rates (a reload).
func (b *Bidder) SetRates(r *tsubame.Rates) { b.rates.Store(r) }

func (b *Bidder) exchange(name string) *exchange {
	if m := b.exchanges.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// Outcome is the answer to one bid request.
type Outcome struct {
	// Status is 200 (Body is the response), 204 (no bid) or 400 (not a
	// usable bid request: no body).
	Status int
	Body   []byte
	// Reason is why there is no bid (a NoBid reason) or why the request
	// was refused, for the metrics and the log.
	Reason string
	// Bids is the number of bids in Body.
	Bids int
}

// No-bid reasons, counted per exchange.
const (
	NoBidMalformed = "malformed"  // 400: not a bid request
	NoBidThrottled = "throttled"  // over the exchange's QPS
	NoBidTimeout   = "tmax"       // tmax, less the network, left no time
	NoBidCurrency  = "currency"   // no allowed currency has a rate
	NoBidNoMatch   = "no_match"   // no line item fits any impression
	NoBidFloor     = "floor"      // the line item that fit is under the floor
	NoBidBadIDs    = "ids"        // an id a notice URL cannot carry
	NoBidLog       = "log_closed" // the access log refused the bid's line
	NoBidSeat      = "seat"       // the request's wseat leaves our seat out, or its bseat names it
	NoBidOverload  = "overloaded" // the server's in-flight limit of ad requests was full: not read
	NoBidSecure    = "secure"     // imp.secure: the line items that fit have a creative or markup with http URLs
	NoBidDuplicate = "duplicate"  // a request of the same source.tid was bid on first (another reseller's)
)

// Paths of the notice URLs on the public listener.
const (
	PathWin  = "/t/win/"
	PathBill = "/t/bill/"
	PathLoss = "/t/loss/"
	// PathBidImp is the impression URL of a bid's markup: a viewer's
	// player or page calls it, not the exchange.
	PathBidImp = "/t/bi/"
	// PathBid is the bid requests' prefix: /rtb/<exchange>.
	PathBid = "/rtb/"
)

// work is the scratch of one bid request, pooled.
//
// buf holds the request's text: its bids' notice URLs and markup are
// appended to it and read as views of it (text), not copied into strings
// of their own; they were 60 % of the bytes a bid allocated, garbage the
// moment the response was written (a server's allocation profile under
// the rtb bench). The views are valid until the work goes back to the
// pool: nothing of a bid but the response (appended to the caller's
// buffer) and its event line (written before) outlives the request. buf
// is only appended to while a request runs: a view's bytes never change,
// and one taken before buf grew keeps the old array alive.
type work struct {
	dreq    decision.Request
	out     [1]decision.Decision
	reserve [1]string
	deals   [decision.MaxDeals]string
	mins    [decision.MaxDeals]tsubame.Money
	sizes   [16]decision.Size
	offers  [2]decision.Offer
	buf     []byte
	event   accesslog.Event
	// dec decodes the request into memory the work keeps; bids are its
	// bids, the response's list.
	dec  openrtb.Decoder
	bids []openrtb.Bid
	// ctx is the request's deadline, which bounds its store calls; kept
	// with the pooled work while unarmed (see deadline.Context).
	ctx *deadline.Context
	// freq is the visitor's frequency record, read at most once per
	// request, and held the caps its bids hold (caps.go).
	freq tsubame.FrequencyRecord
	held []capHold
	// tid is the request's source.tid when its exchange bids once per
	// transaction, claimed (state) by the first of its impressions that
	// would bid: see Bidder.decide.
	tid   string
	claim claimState
}

var works = sync.Pool{New: func() any { return &work{buf: make([]byte, 0, 4096)} }}

// maxWorkText bounds the text a pooled work keeps: a rare request of many
// impressions does not hold its buffer for good.
const maxWorkText = 64 << 10

func getWork() *work {
	w := works.Get().(*work)
	w.buf = w.buf[:0]
	return w
}

func putWork(w *work) {
	if cap(w.buf) > maxWorkText {
		w.buf = make([]byte, 0, 4096)
	}
	if w.ctx != nil {
		w.ctx.Stop()
	}
	w.dreq.Context = nil
	w.tid, w.offers = "", [2]decision.Offer{} // the request's strings: not kept alive by the pool
	clear(w.bids)
	w.bids = w.bids[:0]
	w.dec.Clear()
	works.Put(w)
}

// context readies w.ctx for a request that must be done at end, or when
// parent ends.
func (w *work) context(parent context.Context, end time.Time) *deadline.Context {
	if w.ctx == nil || !w.ctx.Reset(parent, end) {
		w.ctx = deadline.New(parent, end)
	}
	return w.ctx
}

// text is buf[from:to] as a string, without a copy: see work.
func (w *work) text(from, to int) string {
	if from == to {
		return ""
	}
	return unsafe.String(&w.buf[from], to-from)
}

// Bid answers the bid request body of exchange name, received at at, from
// client; log writes each bid's event line before the answer goes (an
// error: the log is closed, and that bid is not made). A response is
// appended to dst (Outcome.Body): a caller with a buffer to reuse passes
// it, and the answer costs no allocation of its own.
func (b *Bidder) Bid(dst []byte, name string, body []byte, at time.Time, client netip.Addr, log func(*accesslog.Event) error) Outcome {
	return b.BidContext(context.Background(), dst, name, body, at, client, log)
}

// BidContext is Bid within ctx: the request's deadline, its
// tmax less the exchange's network time (at most Options.Timeout after
// at), is brought forward to ctx's, and its store calls end when ctx
// does.
func (b *Bidder) BidContext(ctx context.Context, dst []byte, name string, body []byte, at time.Time, client netip.Addr,
	log func(*accesslog.Event) error) Outcome {
	ex := b.exchange(name)
	if ex == nil {
		return Outcome{Status: 404, Reason: "unknown exchange"}
	}
	ex.stats.Requests.Add(1)
	start := time.Now()
	o := b.bid(ctx, dst, ex, body, at, log)
	ex.stats.count(o, time.Since(start))
	return o
}

func (b *Bidder) bid(ctx context.Context, dst []byte, ex *exchange, body []byte, at time.Time, log func(*accesslog.Event) error) Outcome {
	w := getWork()
	defer putWork(w)
	req, err := w.dec.Decode(body)
	if err != nil {
		return Outcome{Status: 400, Reason: NoBidMalformed}
	}
	now := time.Now()
	end := at.Add(b.opt.Timeout)
	if req.TMax > 0 {
		if d := at.Add(time.Duration(req.TMax)*time.Millisecond - ex.Network); d.Before(end) {
			end = d
		}
	}
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		end = d
	}
	if !now.Before(end) {
		return Outcome{Status: 204, Reason: NoBidTimeout}
	}
	if len(req.WSeat) > 0 && !contains(req.WSeat, ex.Seat) || contains(req.BSeat, ex.Seat) {
		return Outcome{Status: 204, Reason: NoBidSeat}
	}
	rates := b.rates.Load()
	cur := b.currency(req, rates)
	if cur == "" {
		return Outcome{Status: 204, Reason: NoBidCurrency}
	}
	b.common(req, now, &w.dreq)
	w.dreq.Context = w.context(ctx, end)
	b.capsFor(w)
	if req.AT == 1 { // first price: what is bid is paid
		w.dreq.Shading = ex.Shading
	}
	w.tid, w.claim = "", claimNone
	if src := req.Source; src != nil && !ex.BidEveryTID && req.Test != 1 && validTID(src.TID.Value) {
		w.tid = src.TID.Value
	}
	test := req.Test == 1
	idx := b.opt.Engine.Index()
	sg := b.signer.Load()

	bids := w.bids[:0]
	reason := NoBidNoMatch
	for i := range req.Imp {
		imp := &req.Imp[i]
		if !track.ValidAuctionID(req.ID) || !track.ValidAuctionID(imp.ID) {
			reason = NoBidBadIDs
			continue
		}
		bid, why := b.bidImp(ex, req, imp, cur, rates, now, test, idx, sg, w, log)
		if why != "" {
			if why != NoBidNoMatch || reason == NoBidNoMatch {
				reason = why
			}
			continue
		}
		bids = append(bids, bid)
	}
	w.bids = bids
	if len(bids) == 0 {
		return Outcome{Status: 204, Reason: reason}
	}
	if !time.Now().Before(end) {
		// The bids are logged (their reservations are released when they
		// end unbilled, their caps' holds at once); the answer would come
		// too late to count.
		b.releaseHeld(w, 0, now)
		return Outcome{Status: 204, Reason: NoBidTimeout}
	}
	seat := [1]openrtb.SeatBid{{Seat: ex.Seat, Bid: bids}}
	from := len(w.buf)
	w.buf = track.AppendID(w.buf, now)
	resp := openrtb.BidResponse{ID: req.ID, BidID: w.text(from, len(w.buf)), Cur: cur, SeatBid: seat[:]}
	return Outcome{Status: 200, Body: openrtb.AppendResponse(dst, &resp), Bids: len(bids)}
}

// TIDWindow is how long a transaction (source.tid) is remembered once
// bid on: the copies of one impression that resellers and exchanges send
// arrive within the page's auction, a second or two.
const TIDWindow = 30 * time.Second

// maxTID bounds the tid a transaction is remembered by (with its "tid:"
// prefix, an event id of tsubame.MaxEventIDLength bytes at most).
const maxTID = tsubame.MaxEventIDLength - len("tid:")

func validTID(tid string) bool { return tid != "" && len(tid) <= maxTID }

// claimState is what a request knows of its transaction (work.tid).
type claimState uint8

const (
	claimNone claimState = iota // not asked yet
	claimOurs                   // the first bid of its transaction, or it could not be told
	claimLost                   // another request of its transaction was bid on first
)

// decide makes the decision of d, reserving what it spends. A request of
// a transaction (w.tid) first claims it, across every node sharing the
// store, once one of its impressions would bid: a decision that spends
// nothing says so, so that a request bidding nothing (a reseller's higher
// floor) leaves the transaction to its other copies. dup reports that the
// claim was lost: another copy of the impression was bid on.
func (b *Bidder) decide(idx *decision.Index, d *decision.Request, w *work) (out []decision.Decision, dup bool) {
	switch {
	case w.claim == claimLost:
		return nil, true
	case w.tid != "" && w.claim == claimNone:
		d.Test = true
		out = idx.Decide(d, w.out[:0], nil)
		d.Test = false
		if len(out) == 0 {
			return nil, false
		}
		if !b.claimTID(d, w.tid) {
			w.claim = claimLost
			return nil, true
		}
		w.claim = claimOurs
	}
	return idx.Decide(d, w.out[:0], nil), false
}

// claimTID reports whether tid is seen first, within the request's
// deadline. A store that cannot tell lets the request bid: a transaction
// bid on twice holds its price twice until the loss, never overspends.
func (b *Bidder) claimTID(d *decision.Request, tid string) bool {
	ctx := d.Context
	if ctx == nil {
		ctx = context.Background()
	}
	// "tid:"+tid is a new string: the store may keep it (the memory one
	// as a map key), and tid is a view of the pooled decoder's buffer,
	// rewritten by its next request.
	first, err := b.opt.Dedupe.FirstSeen(ctx, "tid:"+tid, TIDWindow)
	return first || err != nil
}

// currency picks the bid's currency: the account's when the request
// allows it, else the first allowed one with a rate; none allowed means
// USD (the specification's default).
func (b *Bidder) currency(req *openrtb.BidRequest, rates *tsubame.Rates) string {
	allowed := req.Cur
	if len(allowed) == 0 {
		allowed = []string{"USD"}
	}
	for _, c := range allowed {
		if c == b.opt.Currency {
			return c
		}
	}
	for _, c := range allowed {
		if rates.Has(c) {
			return c
		}
	}
	return ""
}

// common fills what a request's impressions share: the visitor, the site
// or app, the device, the place, the blocks.
func (b *Bidder) common(req *openrtb.BidRequest, now time.Time, d *decision.Request) {
	*d = decision.Request{Time: now, Count: 1, User: visitor(req, b.opt.TCFVendorID), Test: req.Test == 1,
		BlockedCategories: req.BCat, BlockedDomains: req.BAdv, BlockedApps: req.BApp}
	if s := req.Site; s != nil {
		d.Site = siteDomain(s)
	}
	if a := req.App; a != nil {
		d.App = a.Bundle
	}
	if dev := req.Device; dev != nil {
		if b.opt.Device != nil && dev.UA != "" {
			// A view, not a copy: the parser reads ua only during the call
			// and copies what it keeps (device.Parser.Parse).
			p := b.opt.Device(unsafe.Slice(unsafe.StringData(dev.UA), len(dev.UA)))
			d.Device, d.OS, d.Browser = p.Device, p.OS, p.Browser
		}
		if t := deviceType(dev.DeviceType); t != "" {
			d.Device = t
		}
		if g := dev.Geo; g != nil && g.Country != "" {
			if c, ok := openrtb.Alpha2(g.Country); ok {
				d.Country = c
				if g.Region != "" {
					d.Region = c + "-" + strings.ToUpper(g.Region)
				}
			}
		}
		if d.Country == "" && b.opt.Geo != nil {
			ip := dev.IP
			if ip == "" {
				ip = dev.IPv6
			}
			if ip != "" { // not parsed: its error would be an allocation a bid
				if a, err := netip.ParseAddr(ip); err == nil {
					d.Country, d.Region = b.opt.Geo(a)
				}
			}
		}
	}
}

// siteDomain is the site's domain, lower-case, else its page's host.
func siteDomain(s *openrtb.Site) string {
	d := s.Domain
	if d == "" && s.Page != "" {
		if u, err := url.Parse(s.Page); err == nil {
			d = u.Hostname()
		}
	}
	return strings.ToLower(d)
}

// deviceType maps OpenRTB's device types (AdCOM's list) to targeting's.
func deviceType(t openrtb.Int) string {
	switch t {
	case 1, 4: // mobile/tablet (general), phone
		return "mobile"
	case 2:
		return "desktop"
	case 3, 7: // connected TV, set top box
		return "tv"
	case 5:
		return "tablet"
	}
	return ""
}

// bidImp decides one impression and makes its bid, or says why not.
func (b *Bidder) bidImp(ex *exchange, req *openrtb.BidRequest, imp *openrtb.Imp, cur string, rates *tsubame.Rates, now time.Time,
	test bool, idx *decision.Index, sg *track.Signer, w *work, log func(*accesslog.Event) error) (openrtb.Bid, string) {
	d := &w.dreq
	d.Placement = ""
	if imp.TagID != "" && tsubame.ValidID(imp.TagID) == nil {
		d.Placement = imp.TagID
	}
	// Floors, in the account currency (rounded up).
	floorCur := cmp.Or(imp.BidFloorCur, "USD")
	d.MinCPM = 0
	if imp.BidFloor > 0 {
		m, ok := rates.Convert(imp.BidFloor.Money(), floorCur, b.opt.Currency)
		if !ok {
			return openrtb.Bid{}, NoBidCurrency
		}
		d.MinCPM = m
	}
	d.Deals, d.DealMins, d.PrivateAuction = nil, nil, false
	if p := imp.Pmp; p != nil {
		d.PrivateAuction = p.PrivateAuction == 1
		n := 0
		for _, deal := range p.Deals {
			if n == len(w.deals) || !track.ValidAuctionID(deal.ID) || len(deal.WSeat) > 0 && !contains(deal.WSeat, ex.Seat) {
				continue
			}
			m, ok := rates.Convert(deal.BidFloor.Money(), cmp.Or(deal.BidFloorCur, "USD"), b.opt.Currency)
			if !ok {
				continue
			}
			w.deals[n], w.mins[n] = deal.ID, m
			n++
		}
		d.Deals, d.DealMins = w.deals[:n], w.mins[:n]
	}
	// The bid's id is a view of w's text like its URLs: nothing that
	// outlives the request keeps it but a copy (decision.Counters, the
	// frequency stores), and a bid costs no allocation of its own.
	from := len(w.buf)
	w.buf = track.AppendID(w.buf, now)
	bidID := w.text(from, len(w.buf))
	if !test {
		w.reserve[0] = bidID
		// A bid given back at its win window is counted by the second of
		// its end; one held to its end, by a span of the reservation
		// (decision.HoldEnd): the node's counts stay few either way.
		d.Reserve = w.reserve[:]
		d.HoldShare, d.KeepWon = 0, ex.KeepWonNow(ex.stats)
		if win := ex.winWindow(); win > 0 {
			d.ReserveUntil, d.WinBy = decision.RoundUp(now.Add(ex.Reservation), time.Second), now.Add(win)
		} else {
			d.ReserveUntil, d.WinBy = decision.HoldEnd(now, ex.Reservation), time.Time{}
			d.HoldShare = ex.HoldShareNow(ex.stats)
		}
	} else {
		d.Reserve = nil
	}
	// Every format the impression offers is one decision: the dearest line
	// item of the first priority that has any bids, whatever its format
	// (a banner is not tried before a video).
	var (
		vast  string
		proto openrtb.Int
		n     int
	)
	if imp.Banner != nil {
		w.offers[n] = decision.Offer{Format: tsubame.FormatBanner, Sizes: bannerSizes(imp.Banner, w.sizes[:0])}
		n++
	}
	if v := imp.Video; v != nil {
		var ok bool
		if vast, proto, ok = vastVersion(v.Protocols); ok { // a player scales: any size of video
			w.offers[n] = decision.Offer{Format: tsubame.FormatVideo, MIMEs: v.MIMEs, MinDuration: int(v.MinDuration),
				MaxDuration: int(v.MaxDuration)}
			n++
		}
	}
	if n == 0 {
		return openrtb.Bid{}, NoBidNoMatch
	}
	d.Offers, d.ByValue, d.Secure = w.offers[:n], true, imp.Secure.Raised()
	if d.Secure && !b.secureMarkup {
		return openrtb.Bid{}, NoBidSecure // the markup's own URLs (click, impression) are http
	}
	out, dup := b.decide(idx, d, w)
	if dup {
		return openrtb.Bid{}, NoBidDuplicate
	}
	if len(out) == 0 {
		if d.MinCPM > 0 || len(d.Deals) > 0 {
			// Say whether a floor was what ruled the line items out: the
			// same decision without floors, spending nothing.
			test, minCPM, mins := d.Test, d.MinCPM, d.DealMins
			d.Test, d.MinCPM, d.DealMins = true, 0, nil
			found := len(idx.Decide(d, w.out[:0], nil)) > 0
			d.Test, d.MinCPM, d.DealMins = test, minCPM, mins
			if found {
				return openrtb.Bid{}, NoBidFloor
			}
		}
		if d.Secure {
			// Or whether it was that they are not all https.
			test, minCPM, mins := d.Test, d.MinCPM, d.DealMins
			d.Test, d.MinCPM, d.DealMins, d.Secure = true, 0, nil, false
			found := len(idx.Decide(d, w.out[:0], nil)) > 0
			d.Test, d.MinCPM, d.DealMins, d.Secure = test, minCPM, mins, true
			if found {
				return openrtb.Bid{}, NoBidSecure
			}
		}
		return openrtb.Bid{}, NoBidNoMatch
	}
	dec := out[0]
	l, c := dec.Line, dec.Creative
	mtype := openrtb.MTypeBanner
	if c.Format == tsubame.FormatVideo {
		mtype = openrtb.MTypeVideo
	}
	price, ok := rates.ToCurrency(l.CPM, cur)
	if !ok {
		return openrtb.Bid{}, NoBidCurrency
	}
	// The floor the bid must clear: its deal's, else the impression's,
	// in the bid's currency (rounded up).
	deal := ""
	floor := tsubame.Money(0)
	if len(l.Deals) > 0 {
		for k, id := range d.Deals {
			if contains(l.Deals, id) && l.CPM >= d.DealMins[k] {
				deal = id
				floor = dealFloor(imp, id, cur, rates)
				break
			}
		}
	} else if imp.BidFloor > 0 {
		floor, _ = rates.Convert(imp.BidFloor.Money(), floorCur, cur)
	}
	if s := d.Price(l); s < l.CPM {
		// Shaded: the floor (in the account currency, rounded up) and the
		// step keep it over the floor in the bid's, barring a rounding the
		// floor then takes up.
		if p, ok := rates.ToCurrency(s, cur); ok {
			price = min(price, max(p, floor))
		}
	}
	if price < floor || price == 0 && l.CPM > 0 {
		return openrtb.Bid{}, NoBidFloor
	}
	bid := openrtb.Bid{ID: bidID, ImpID: imp.ID, Price: openrtb.Price(price), AdID: c.ID, CrID: c.ID, CID: l.Campaign,
		ADomain: l.Domains, Bundle: c.App, Cat: c.Categories, DealID: deal, MType: mtype, W: openrtb.Int(c.W), H: openrtb.Int(c.H)}
	tk := track.Token{Decision: bidID, LineItem: l.ID, Campaign: l.Campaign, Creative: c.ID, Placement: placementOf(imp),
		User: d.User, Price: price, Expires: now.Add(b.opt.TTL), Exchange: ex.Name, Auction: req.ID, Imp: imp.ID,
		Deal: deal, Currency: cur, Test: test,
		Origin: track.Origin{Advertiser: l.Advertiser, Site: cmp.Or(d.Site, d.App), Country: d.Country, Device: d.Device}.Clean()}
	if l.Limited && !test {
		tk.Reserved = d.ReserveUntil
		if b.opt.Outcomes != nil {
			tk.Holder = b.opt.Holder // its notices settle the money held
		}
	}
	// The markup's impression URL: a video's, and a banner's where it
	// bills (none when the markup comes with the win notice).
	withImp := !ex.MarkupOnWin && (c.Format == tsubame.FormatVideo || ex.BillOn == BillOnMarkup)
	// The URLs and the markup are views of w's text (see work): bid must
	// not outlive the request.
	var impURL, click string
	var err error
	if bid.NURL, bid.BURL, bid.LURL, impURL, click, err = b.notices(w, sg, tk, c, vast, withImp); err != nil {
		return openrtb.Bid{}, NoBidBadIDs
	}
	bid.Plain = b.plainURLs(vast)
	if mtype == openrtb.MTypeVideo {
		bid.Protocol, bid.Dur = proto, openrtb.Int(c.Duration)
	}
	if !ex.MarkupOnWin {
		if c.HTML != "" && c.Format != tsubame.FormatVideo && impURL == "" {
			bid.AdM = c.HTML
		} else {
			from = len(w.buf)
			asJSON := b.plainBanner(c)
			w.buf = b.appendMarkup(w.buf, dec, bidID, vast, impURL, click, asJSON)
			bid.AdM = w.text(from, len(w.buf))
			if asJSON {
				bid.Plain |= openrtb.EscapedAdM
			}
		}
	}
	// The bid is made: its line item's frequency cap, if it has one, is
	// held for it until its win counts it (caps.go).
	held := len(w.held)
	if !b.holdCap(w, l, bidID, now) {
		return openrtb.Bid{}, NoBidNoMatch // a concurrent bid for the visitor took the cap's last
	}
	e := &w.event // the log takes its pointer: kept in w, off the heap's churn
	from = len(w.buf)
	w.buf = append(append(w.buf, "bid:"...), bidID...)
	*e = accesslog.Event{Kind: accesslog.EventBid, ID: accesslog.String(w.text(from, len(w.buf))), Decision: accesslog.String(bidID),
		LineItem: accesslog.String(l.ID), Campaign: accesslog.String(l.Campaign), Creative: accesslog.String(c.ID),
		Placement: accesslog.String(tk.Placement), UID: accesslog.String(d.User), Price: int64(price),
		Currency: accesslog.String(cur), Valid: !test}
	e.AddOrigin(tk.Advertiser, tk.Site, tk.Country, tk.Device)
	auctionFields(e, ex, req, imp.ID, deal, test)
	err = log(e)
	*e = accesslog.Event{} // the pool does not keep the line's strings alive
	if err != nil {
		b.releaseHeld(w, held, now)
		return openrtb.Bid{}, NoBidLog
	}
	return bid, ""
}

// dealFloor is deal id's floor in cur, rounded up.
func dealFloor(imp *openrtb.Imp, id, cur string, rates *tsubame.Rates) tsubame.Money {
	for _, d := range imp.Pmp.Deals {
		if d.ID == id {
			f, _ := rates.Convert(d.BidFloor.Money(), cmp.Or(d.BidFloorCur, "USD"), cur)
			return f
		}
	}
	return 0
}

// placementOf is what a notice's token names as the placement: the
// impression's tag id when it is one the model takes, else its id.
func placementOf(imp *openrtb.Imp) string {
	if imp.TagID != "" && tsubame.ValidID(imp.TagID) == nil && len(imp.TagID) <= track.MaxIDLen {
		return imp.TagID
	}
	if tsubame.ValidID(imp.ID) == nil {
		return imp.ID
	}
	return "imp"
}

func bannerSizes(bn *openrtb.Banner, dst []decision.Size) []decision.Size {
	for _, f := range bn.Format {
		if f.W > 0 && f.H > 0 && len(dst) < cap(dst) {
			dst = append(dst, decision.Size{W: int(f.W), H: int(f.H)})
		}
	}
	if len(dst) == 0 && bn.W > 0 && bn.H > 0 {
		dst = append(dst, decision.Size{W: int(bn.W), H: int(bn.H)})
	}
	return dst
}

// vastVersion picks the VAST version of an InLine answer from the
// protocols an impression allows (AdCOM's creative subtypes): 4.2 (13),
// else 3.0 (3), else 2.0 (2); none listed allows them all (4.2).
func vastVersion(protocols []openrtb.Int) (string, openrtb.Int, bool) {
	if len(protocols) == 0 {
		return render.VASTInline4, 13, true
	}
	for _, p := range [...]struct {
		proto openrtb.Int
		v     string
	}{{13, render.VASTInline4}, {3, render.VASTInline3}, {2, render.VASTInline2}} {
		for _, q := range protocols {
			if q == p.proto {
				return p.v, p.proto, true
			}
		}
	}
	return "", 0, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// notices signs the win, billing and loss URLs of tk, each with the
// specification's macros for the clearing price (and the loss reason),
// with withImp the markup's impression URL (PathBidImp), and the click URL
// of its markup (a click tracker of /t/c/ to the creative's destination),
// appended to w's text and returned as views of it (see work.text).
//
// A video's win URL names the VAST version of its markup (vast=), for an
// exchange that takes the markup from the win notice.
func (b *Bidder) notices(w *work, sg *track.Signer, tk track.Token, c *tsubame.Creative, vast string, withImp bool) (nurl, burl, lurl, imp, click string, err error) {
	// The notices' token is checked and laid out once, and signed for
	// each kind and for the click (track.NoticeSigner).
	ns, err := sg.Notices(tk)
	if err != nil {
		return
	}
	defer ns.Close()
	if nurl, err = b.noticeURL(w, &ns, track.KindWin, vast); err != nil {
		return
	}
	if burl, err = b.noticeURL(w, &ns, track.KindBill, ""); err != nil {
		return
	}
	if lurl, err = b.noticeURL(w, &ns, track.KindLoss, ""); err != nil {
		return
	}
	if withImp {
		if imp, err = b.noticeURL(w, &ns, track.KindBidImp, ""); err != nil {
			return
		}
	}
	click, err = b.clickURL(w, &ns, c)
	return
}

// noticePath is each notice kind's path and query: the exchange's notices
// take its clearing price, the markup's impression none.
func noticePath(k track.Kind) (path, query string) {
	switch k {
	case track.KindWin:
		return PathWin, "?price=${AUCTION_PRICE}"
	case track.KindBill:
		return PathBill, "?price=${AUCTION_PRICE}"
	case track.KindLoss:
		return PathLoss, "?price=${AUCTION_PRICE}&loss=${AUCTION_LOSS}"
	case track.KindBidImp:
		return PathBidImp, ""
	}
	return "", ""
}

// plainKinds are the notice kinds whose path and query need no escaping
// in JSON but their '&'s.
var plainKinds = func() (plain [track.KindBidImp + 1]bool) {
	for _, k := range []track.Kind{track.KindWin, track.KindBill, track.KindLoss, track.KindBidImp} {
		path, query := noticePath(k)
		plain[k] = render.IsPlainJSON(path + query + "&vast=")
	}
	return
}()

// plainURLs is which of a bid's notice URLs (noticeURL, with vast given
// to the win's) need no escaping in JSON but their '&'s (openrtb.Plain).
func (b *Bidder) plainURLs(vast string) openrtb.Plain {
	if !b.plainNotices {
		return 0
	}
	var p openrtb.Plain
	if plainKinds[track.KindWin] && render.IsPlainJSON(vast) {
		p |= openrtb.PlainNURL
	}
	if plainKinds[track.KindBill] {
		p |= openrtb.PlainBURL
	}
	if plainKinds[track.KindLoss] {
		p |= openrtb.PlainLURL
	}
	return p
}

// noticeURL appends the notice URL of kind for ns's token to w's text
// (with vast= when vast is given) and returns it as a view; w's text is
// unchanged on an error.
func (b *Bidder) noticeURL(w *work, ns *track.NoticeSigner, kind track.Kind, vast string) (string, error) {
	path, query := noticePath(kind)
	from := len(w.buf)
	buf, err := ns.AppendSign(append(append(w.buf, b.opt.NoticeURL...), path...), kind)
	if err != nil {
		return "", err
	}
	buf = append(buf, query...)
	if vast != "" {
		buf = append(append(buf, "&vast="...), vast...)
	}
	w.buf = buf
	return w.text(from, len(buf)), nil
}

// clickURL appends the click URL of the markup of ns's bid (creative c's
// destination) to w's text and returns it as a view; w's text is unchanged
// on an error. Its token is signed with the notices' (NoticeSigner's
// AppendClick: their fields checked and laid out once): a test auction's
// says so, and its click is never counted.
func (b *Bidder) clickURL(w *work, ns *track.NoticeSigner, c *tsubame.Creative) (string, error) {
	from := len(w.buf)
	buf, err := ns.AppendClick(append(append(w.buf, b.opt.NoticeURL...), track.PathClick...), c.Click)
	if err != nil {
		return "", err
	}
	w.buf = buf
	return w.text(from, len(buf)), nil
}

// appendMarkup appends the ad a winning bid shows: a video's VAST
// document, a banner's HTML, or its image in a link to click, the click
// tracker. imp is the markup's impression URL (PathBidImp), never the
// exchange's billing URL: a viewer's player or page calls it, and must
// not bill a price of its choosing. It is a video's VAST impression, and
// a banner's 1×1 pixel after the ad when given.
//
// With asJSON (plainBanner) it writes a banner's markup as JSON writes it,
// between the quotes (openrtb.EscapedAdM): its constant parts escaped
// once, at init, and its URLs copied with their '&'s replaced. Escaped
// byte by byte by the encoder, a banner's kilobyte of markup, two notice
// URLs of ~400 bytes, cost the bidder more than the rest of its response.
func (b *Bidder) appendMarkup(dst []byte, d decision.Decision, id, vast, imp, click string, asJSON bool) []byte {
	c := d.Creative
	if c.Format == tsubame.FormatVideo {
		mime := "video/mp4"
		if len(c.MIMEs) > 0 {
			mime = c.MIMEs[0]
		}
		ad := [1]render.VASTAd{{ID: id, AdSystem: b.opt.AdSystem, Title: c.ID, Advertiser: d.Line.Advertiser,
			CreativeID: c.ID, Duration: c.Duration, Media: c.Media, MIME: mime, W: c.W, H: c.H,
			Impression: imp, ClickThrough: click, Categories: c.Categories}}
		return render.AppendVASTInline(dst, vast, ad[:])
	}
	text, attr := markupHTML, appendHTMLAttr
	if asJSON {
		text, attr = markupJSON, appendPlainAttrJSON
	}
	if c.HTML != "" {
		dst = append(dst, c.HTML...)
	} else {
		dst = append(dst, text[linkOpen]...)
		dst = attr(dst, click)
		dst = append(dst, text[imgOpen]...)
		dst = attr(dst, c.Image)
		dst = strconv.AppendInt(append(dst, text[width]...), int64(c.W), 10)
		dst = strconv.AppendInt(append(dst, text[height]...), int64(c.H), 10)
		dst = append(dst, text[linkClose]...)
	}
	if imp != "" {
		dst = append(dst, text[pixelOpen]...)
		dst = attr(dst, imp)
		dst = append(dst, text[pixelClose]...)
	}
	return dst
}

// The constant parts of a banner's markup.
const (
	linkOpen = iota
	imgOpen
	width
	height
	linkClose
	pixelOpen
	pixelClose
)

// markupHTML are the constant parts of a banner's markup, and markupJSON
// the same as JSON writes them (between a string's quotes).
var markupHTML = [...]string{
	linkOpen:   `<a href="`,
	imgOpen:    `" target="_blank" rel="noopener"><img src="`,
	width:      `" width="`,
	height:     `" height="`,
	linkClose:  `" alt="" style="border:0"></a>`,
	pixelOpen:  `<img src="`,
	pixelClose: `" width="1" height="1" alt="" style="position:absolute;border:0">`,
}

var markupJSON = func() (out [len(markupHTML)]string) {
	for i, s := range markupHTML {
		q := render.AppendJSONString(nil, s)
		out[i] = string(q[1 : len(q)-1])
	}
	return
}()

// plainBanner reports whether c's markup can be written as JSON by
// appendMarkup: a banner of an image in a link whose URLs, the bidder's
// own (click, impression) and the image's, need no escaping in JSON but
// their '&'s (render.IsPlainJSON), and so none in an HTML attribute but
// those. Any other markup is escaped by the encoder.
func (b *Bidder) plainBanner(c *tsubame.Creative) bool {
	return b.plainNotices && plainClick && plainKinds[track.KindBidImp] && c.Format != tsubame.FormatVideo &&
		c.HTML == "" && render.IsPlainJSON(c.Image)
}

// plainClick: the click tracker's path needs no escaping in JSON.
var plainClick = render.IsPlainJSON(track.PathClick)

// appendPlainAttrJSON appends s, a string render.IsPlainJSON is true of,
// escaped for a double-quoted HTML attribute (its '&'s as "&amp;") and
// then as JSON writes it ("\u0026amp;").
func appendPlainAttrJSON(dst []byte, s string) []byte {
	for {
		i := strings.IndexByte(s, '&')
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(append(dst, s[:i]...), `\u0026amp;`...)
		s = s[i+1:]
	}
}

// appendHTMLAttr appends s escaped for a double-quoted HTML attribute. The
// runs between the bytes it escapes are copied whole: a notice URL (most
// of a markup's bytes) has none but a query's '&'.
func appendHTMLAttr(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		var esc string
		switch s[i] {
		case '&':
			esc = "&amp;"
		case '"':
			esc = "&quot;"
		case '<':
			esc = "&lt;"
		case '>':
			esc = "&gt;"
		default:
			continue
		}
		dst = append(append(dst, s[start:i]...), esc...)
		start = i + 1
	}
	return append(dst, s[start:]...)
}

// Extra fields of the auction's event lines.
var (
	keyExchange  = accesslog.MustKey("exchange")
	keySeat      = accesslog.MustKey("seat")
	keyAuction   = accesslog.MustKey("auction")
	keyImp       = accesslog.MustKey("imp")
	keyDeal      = accesslog.MustKey("deal")
	keyPublisher = accesslog.MustKey("publisher")
	keySChain    = accesslog.MustKey("schain")
	keyTest      = accesslog.MustKey("test")
	keyReason    = accesslog.MustKey("reason")
	keyLate      = accesslog.MustKey("late")
	keyLoss      = accesslog.MustKey("loss")
)

// auctionFields adds a bid's auction to its event line.
func auctionFields(e *accesslog.Event, ex *exchange, req *openrtb.BidRequest, imp, deal string, test bool) {
	e.AddText(keyExchange, accesslog.String(ex.Name))
	e.AddText(keySeat, accesslog.String(ex.Seat))
	e.AddText(keyAuction, accesslog.String(req.ID))
	e.AddText(keyImp, accesslog.String(imp))
	e.AddText(keyDeal, accesslog.String(deal))
	pub := ""
	if req.Site != nil && req.Site.Publisher != nil {
		pub = req.Site.Publisher.ID
	} else if req.App != nil && req.App.Publisher != nil {
		pub = req.App.Publisher.ID
	}
	e.AddText(keyPublisher, accesslog.String(pub))
	e.AddText(keySChain, accesslog.String(schainText(req)))
	if test {
		e.AddBool(keyTest, true)
	}
}

// schainText writes the supply chain's nodes as asi!sid, comma-separated,
// after its completeness (1: or 0:); empty without one.
func schainText(req *openrtb.BidRequest) string {
	if req.Source == nil || req.Source.SChain == nil {
		return ""
	}
	sc := req.Source.SChain
	var s strings.Builder
	s.WriteString(strconv.FormatInt(int64(sc.Complete), 10))
	s.WriteByte(':')
	for i, n := range sc.Nodes {
		if i > 0 {
			s.WriteByte(',')
		}
		s.WriteString(n.ASI)
		s.WriteByte('!')
		s.WriteString(n.SID)
	}
	return s.String()
}
