package ads

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/decision"
	"tsubame/internal/openrtb"
	"tsubame/internal/server"
	"tsubame/internal/ssp"
	"tsubame/internal/track"
)

var (
	errAuctionCount = tsubame.Errorf(tsubame.EINVALID, "a placement sold in an auction answers one slot: count must be 1")
	errBadPage      = tsubame.Errorf(tsubame.EINVALID, "page and ref must be http or https URLs of at most 2048 printable bytes")
	errBadGPPSID    = tsubame.Errorf(tsubame.EINVALID, "gpp_sid must be a comma-separated list of at most 32 section ids")
	errBadApp       = tsubame.Errorf(tsubame.EINVALID, "app must be an app's bundle or store id: 1 to 128 letters, digits and -_.")
)

// Extra fields of the sell side's event lines.
var (
	keyPartner  = accesslog.MustKey("partner")
	keyAsked    = accesslog.MustKey("asked")
	keyAnswered = accesslog.MustKey("answered")
	keyTimedOut = accesslog.MustKey("timed_out")
	keyWinner   = accesslog.MustKey("winner")
	keyFloor    = accesslog.MustKey("floor")
	keyOutcome  = accesslog.MustKey("outcome")
	keyStatus   = accesslog.MustKey("http_status")
	keyLatency  = accesslog.MustKey("latency_us")
	keyBids     = accesslog.MustKey("bids")
	keyWon      = accesslog.MustKey("won")
	keyInvalid  = accesslog.MustKey("invalid")
	keyDeal     = accesslog.MustKey("deal")
	keyAuction  = accesslog.MustKey("auction")
	keyGross    = accesslog.MustKey("partner_price")
	keyCurrency = accesslog.MustKey("partner_currency")
)

// winnerDirect is an auction line's winner when the direct line item won.
const winnerDirect = "direct"

// sell holds the auction of a placement sold to demand partners: the
// direct line item the index draws is only checked (it takes its budget
// once it has won), the partners are asked, and the winner fills the
// slot. It logs the request line, the auction line, a bid_received line
// per partner, and the winner's decision line.
func (s *Service) sell(r server.Request, placement []byte, a *answer, v visitor, now time.Time) error {
	au := s.opt.Auction
	req := &a.req
	if req.Count > 1 {
		return errAuctionCount
	}
	opp, err := s.opportunity(r, a, v, now)
	if err != nil {
		return err
	}
	var reserved time.Time
	a.ids[0] = opp.ID
	if s.opt.Reservation > 0 {
		reserved = decision.HoldEnd(now, s.opt.Reservation)
		req.Reserve, req.ReserveUntil = a.ids[:1], reserved
	}
	// Only checked until it wins; the line item of the highest CPM
	// competes, as in an exchange's auction.
	req.Check, req.ByValue = true, true
	ix := s.opt.Engine.Index()
	out := ix.Decide(req, a.out[:0], nil)
	var direct ssp.Direct
	if len(out) > 0 {
		d := &out[0]
		direct = ssp.Direct{Line: d.Line, Creative: d.Creative, Take: func(by time.Time) bool {
			// The check's deadline may be spent by the auction: the take
			// (a capped line item's count) gets the decision's own, within
			// the auction's.
			now := time.Now()
			req.Check, req.Context = false, a.context(now, max(min(s.opt.Timeout, by.Sub(now)), time.Millisecond))
			return ix.Take(req, d, 0)
		}}
	}
	res := au.Run(context.Background(), opp, direct)
	switch {
	case res.DirectWon:
		a.n = 1
	case res.Sold != nil:
		a.n, a.sale = 1, res
	}
	if err := s.logRequest(r, placement, now, a); err != nil {
		return err
	}
	if err := s.logAuction(r, placement, opp, res, v); err != nil {
		return err
	}
	if a.sale != nil {
		err = s.trackSale(r, placement, a, opp, v, now)
	} else {
		err = s.track(r, placement, a, v, now, reserved)
	}
	if err == nil {
		au.Commit(res) // served: the partners hear of it
	}
	return err
}

// opportunity reads what the auction's bid request carries beyond the
// decision's own parameters: the page and its referrer (page, else the
// Referer; ref), an app's bundle (app), the privacy signals with gpp_sid's
// sections, an incoming supply chain (schain, in the IAB's serialized
// form), and test.
func (s *Service) opportunity(r server.Request, a *answer, v visitor, now time.Time) (*ssp.Opportunity, error) {
	req := &a.req
	// The opportunity is the auction's, which may use it after the
	// request (its partners' notices): what a keeps (answer.keep) is
	// cloned.
	opp := &ssp.Opportunity{ID: track.NewID(now), Placement: strings.Clone(req.Placement), Site: strings.Clone(req.Site), UA: string(r.UserAgent()),
		IP: r.Client(), Country: req.Country, Region: req.Region, Device: req.Device, OS: req.OS, User: strings.Clone(v.uid),
		Private: v.private, Signals: signals(r), Format: req.Format, W: req.W, H: req.H, Start: r.Time()}
	page := r.Query("page")
	if page == nil {
		page = r.Header("Referer")
		if !pageURL(page) {
			page = nil // a Referer is the browser's: one that is no page URL is not sent
		}
	} else if !pageURL(page) {
		return nil, errBadPage
	}
	opp.Page = string(page)
	opp.Language = language(r.Header("Accept-Language"))
	if ref := r.Query("ref"); ref != nil {
		if !pageURL(ref) {
			return nil, errBadPage
		}
		opp.Ref = string(ref)
	}
	if app := r.Query("app"); app != nil {
		if !validBundle(app) {
			return nil, errBadApp
		}
		opp.App = string(app)
	}
	if sid := r.Query("gpp_sid"); len(sid) > 0 {
		for part := range strings.SplitSeq(string(sid), ",") {
			n, err := strconv.Atoi(strings.TrimSpace(part))
			if err != nil || n < -1 || n > 1<<16 || len(opp.GPPSID) == openrtb.MaxSections {
				return nil, errBadGPPSID
			}
			opp.GPPSID = append(opp.GPPSID, n)
		}
	}
	if sc := r.Query("schain"); sc != nil {
		chain, err := openrtb.ParseSupplyChain(string(sc))
		if err != nil {
			return nil, err
		}
		opp.SChain = chain
	}
	if t := r.Query("test"); t != nil {
		opp.Test = string(t) == "1"
		req.Test = opp.Test
	}
	if !v.private {
		opp.BuyerUIDs = s.partnerUIDs(r)
	}
	// Secure: the page is https (the connection may be plain behind a
	// proxy that ends TLS), or the tag says so.
	opp.Secure = r.TLS() || strings.HasPrefix(opp.Page, "https://") || string(r.Query("secure")) == "1"
	return opp, nil
}

// pageURL admits a page's URL: http or https, printable, at most 2048
// bytes.
func pageURL(b []byte) bool {
	if len(b) == 0 || len(b) > 2048 || !(bytes.HasPrefix(b, []byte("https://")) || bytes.HasPrefix(b, []byte("http://"))) {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// validBundle admits an app's bundle ("com.example.app") or numeric store
// id.
func validBundle(b []byte) bool {
	if len(b) == 0 || len(b) > 128 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// logAuction logs the auction line (its id "a:" and the decision's; the
// winning price; the partners asked, answered and timed out; the winner:
// a partner's name, direct, or none) and a bid_received line per partner
// asked or not asked (throttled).
func (s *Service) logAuction(r server.Request, placement []byte, opp *ssp.Opportunity, res *ssp.Result, v visitor) error {
	asked, answered, timedOut := res.Asked()
	winner := ""
	switch {
	case res.DirectWon:
		winner = winnerDirect
	case res.Sold != nil:
		winner = res.Sold.Partner
	}
	e := accesslog.Event{Kind: accesslog.EventAuction, ID: accesslog.String("a:" + opp.ID), Decision: accesslog.String(opp.ID),
		Placement: accesslog.Bytes(placement), UID: accesslog.String(v.uid), Price: int64(res.Price),
		Currency: accesslog.String(s.opt.Currency), Valid: !opp.Test}
	s.addOrigin(&e, opp, "")
	e.AddInt(keyAsked, int64(asked))
	e.AddInt(keyAnswered, int64(answered))
	e.AddInt(keyTimedOut, int64(timedOut))
	e.AddText(keyWinner, accesslog.String(winner))
	e.AddInt(keyFloor, int64(res.Floor))
	if res.Unsold != "" {
		e.AddText(keyReason, accesslog.String(res.Unsold))
	}
	if opp.Test {
		e.AddBool(keyTest, true)
	}
	if err := s.logEvent(r, &e); err != nil {
		return err
	}
	for _, c := range res.Calls {
		e := accesslog.Event{Kind: accesslog.EventBidReceived, ID: accesslog.String("br:" + opp.ID + ":" + c.Partner),
			Decision: accesslog.String(opp.ID), Placement: accesslog.Bytes(placement), Price: int64(c.Best),
			Currency: accesslog.String(s.opt.Currency), Valid: !opp.Test}
		s.addOrigin(&e, opp, "")
		e.AddText(keyPartner, accesslog.String(c.Partner))
		e.AddText(keyOutcome, accesslog.String(string(c.Outcome)))
		e.AddInt(keyStatus, int64(c.Status))
		e.AddInt(keyLatency, c.Latency.Microseconds())
		e.AddInt(keyBids, int64(c.Bids))
		if c.Invalid > 0 {
			e.AddInt(keyInvalid, int64(c.Invalid))
			e.AddText(keyReason, accesslog.String(c.Reason))
		}
		e.AddBool(keyWon, res.Sold != nil && res.Sold.Partner == c.Partner)
		if opp.Test {
			e.AddBool(keyTest, true)
		}
		if err := s.logEvent(r, &e); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) addOrigin(e *accesslog.Event, opp *ssp.Opportunity, advertiser string) {
	site := opp.Site
	if opp.App != "" {
		site = opp.App
	}
	o := track.Origin{Advertiser: advertiser, Site: site, Country: opp.Country, Device: opp.Device}.Clean()
	e.AddOrigin(o.Advertiser, o.Site, o.Country, o.Device)
}

// trackSale signs the impression URL of a sold slot (its token carries
// the auction and the bid's billing URL, called once the impression is
// counted) and logs the sale's decision line.
func (s *Service) trackSale(r server.Request, placement []byte, a *answer, opp *ssp.Opportunity, v visitor, now time.Time) error {
	sale := a.sale
	b := sale.Sold
	a.base = s.trackingBase(r, a.baseBuf[:0])
	site := opp.Site
	if opp.App != "" {
		site = opp.App
	}
	tk := track.Token{Kind: track.KindSale, Decision: opp.ID, Placement: opp.Placement, User: v.uid, Price: sale.Price,
		Expires: now.Add(s.opt.TTL), Exchange: b.Partner, Auction: opp.ID, Imp: b.ImpID, Deal: b.DealID, Currency: s.opt.Currency,
		Click: sale.BillURL, Test: opp.Test,
		Origin: track.Origin{Site: site, Country: opp.Country, Device: opp.Device}.Clean()}
	if !track.ValidAuctionID(tk.Deal) {
		tk.Deal = "" // a deal id a token cannot carry is logged, not tracked
	}
	u := append(append(a.urlBuf[:0], a.base...), PathImp...)
	u, err := s.signer.Load().AppendSign(u, tk)
	if err != nil {
		return tsubame.WrapError(tsubame.EINTERNAL, err, "cannot sign the impression of a sale to %q", b.Partner)
	}
	a.imp[0], a.urlBuf = a.keep(u), u
	e := accesslog.Event{Kind: accesslog.EventDecision, ID: accesslog.String("d:" + opp.ID), Decision: accesslog.String(opp.ID),
		Placement: accesslog.Bytes(placement), UID: accesslog.String(v.uid), Price: int64(sale.Price),
		Currency: accesslog.String(s.opt.Currency), Valid: !opp.Test}
	s.addOrigin(&e, opp, "")
	e.AddText(keyPartner, accesslog.String(b.Partner))
	e.AddText(keyAuction, accesslog.String(opp.ID))
	if b.DealID != "" {
		e.AddText(keyDeal, accesslog.String(b.DealID))
	}
	e.AddInt(keyGross, int64(sale.Gross))
	e.AddText(keyCurrency, accesslog.String(b.Cur))
	if opp.Test {
		e.AddBool(keyTest, true)
	}
	return s.logEvent(r, &e)
}

// language is the first language of an Accept-Language header as ISO
// 639-1 (two lower-case letters), or "" when it names none.
func language(h []byte) string {
	if len(h) < 2 {
		return ""
	}
	a, b := h[0]|0x20, h[1]|0x20
	if a < 'a' || a > 'z' || b < 'a' || b > 'z' || len(h) > 2 && h[2] != '-' && h[2] != ',' && h[2] != ';' && h[2] != ' ' {
		return ""
	}
	return string([]byte{a, b})
}
