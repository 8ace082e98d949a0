package bidder

import (
	"context"
	"strconv"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/openrtb"
	"tsubame/internal/render"
	"tsubame/internal/track"
)

// pixel is a transparent 1×1 GIF: the answer of the billing URL and of
// the impression URL a bid's markup fires.
var pixel = []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")

// dedupeTimeout is a notice's budget: the store tells a repeat within it
// from when the notice came (Notice's now), or the notice is logged as
// not counted.
const dedupeTimeout = time.Second

// dedupeSlack keeps a bid id a little past its token's expiry, so that a
// repeat a clock skew lets through is still caught.
const dedupeSlack = 5 * time.Minute

// Why a notice's line is not valid.
const (
	reasonRepeat  = "repeat"            // its kind was seen before for the bid, on any node: counted once
	reasonStore   = "store_unavailable" // the store could not tell a repeat: not counted
	reasonTest    = "test"              // a test auction's: never counted or billed
	reasonBillOn  = "bill_on"           // a billing notice of an exchange that bills on another event
	reasonCrawler = "crawler"           // a markup impression a crawler fetched
)

// NoticeAnswer is the answer to a notice.
type NoticeAnswer struct {
	ContentType string
	Body        []byte
}

// outcomeEvents are the event lines of the outcomes: the one place a
// kind of money event gets its line's kind.
var outcomeEvents = [...]accesslog.EventKind{tsubame.OutcomeWin: accesslog.EventWin, tsubame.OutcomeLoss: accesslog.EventLoss,
	tsubame.OutcomeBill: accesslog.EventBill}

// outcomeOf is what a notice of kind is on an exchange billing on billOn:
// the outcome it records (0 for the impression of a bid's markup, which
// is not the exchange's word), and whether it is also the bid's bill.
// Every notice's meaning is decided here.
func outcomeOf(kind track.Kind, billOn string) (what tsubame.OutcomeKind, bills bool) {
	switch kind {
	case track.KindWin:
		return tsubame.OutcomeWin, billOn == BillOnNURL
	case track.KindBill:
		return tsubame.OutcomeBill, billOn == BillOnBURL
	case track.KindLoss:
		return tsubame.OutcomeLoss, false
	case track.KindBidImp:
		return 0, billOn == BillOnMarkup
	}
	return 0, false
}

// Notice handles an exchange's win, billing or loss notice: tok is its
// path's token, price what the exchange substituted for ${AUCTION_PRICE},
// loss the loss reason code, vast the VAST version the win notice asks
// markup in. Once its token verifies, a notice is never refused: its
// lines are logged (before answering) and it is answered.
//
// The clearing price is read leniently (openrtb.ClearingPrice: any
// decimal, rounded down to the micro-unit). A win's or a bill's counts
// at most the bid's price: one above it is logged price_above_bid, with
// the exchange's figure in clearing and the bid's as the line's price;
// none readable (empty, null, the macro unsubstituted) is the bid's, and
// price_missing. A loss's is another buyer's: logged in clearing, never
// counted; the line's price is the bid's, which the loss gives back.
//
// Each kind is counted once per bid across nodes (once): a repeat is
// logged valid:false reason:repeat and answered as the first was. The
// exchange's BillOn says which notice bills (outcomeOf): the win notice
// of an exchange billing on nurl logs a bill line after its win line; a
// billing notice of one billing on another event is logged as not
// billed, reason:bill_on. A notice whose token does not verify is an
// EINVALID or EUNAUTHORIZED error (a 4xx) with nothing logged but the
// request.
func (b *Bidder) Notice(kind track.Kind, tok string, price, loss, vast []byte, now time.Time, log func(*accesslog.Event) error) (NoticeAnswer, error) {
	if kind == track.KindBidImp {
		return NoticeAnswer{}, track.ErrKind // its price is never the URL's: Impression
	}
	t, ex, err := b.verify(kind, tok, now)
	if err != nil {
		return NoticeAnswer{}, err
	}
	what, bills := outcomeOf(kind, ex.BillOn)
	b.capNotice(kind, &t, now)
	clearing, known := openrtb.ClearingPrice(price)
	e := b.noticeEvent(&t, ex)
	var answer NoticeAnswer
	var answerErr error
	switch kind {
	case track.KindWin:
		paid := b.clearing(&e, &t, clearing, known, ex.stats)
		b.record(&e, what, &t, paid, now, ex)
		if ex.MarkupOnWin {
			if body, ctype, ok := b.winMarkup(t, ex, vast); ok {
				answer = NoticeAnswer{ContentType: ctype, Body: body}
			} else {
				answerErr = errGone // logged all the same: the bid won
			}
		}
		if bills {
			if err := log(&e); err != nil {
				return NoticeAnswer{}, errLogClosed
			}
			e = b.noticeEvent(&t, ex)
			b.clearing(&e, &t, clearing, known, nil)
			b.record(&e, tsubame.OutcomeBill, &t, paid, now, ex)
		}
	case track.KindBill:
		answer = NoticeAnswer{ContentType: "image/gif", Body: pixel}
		paid := b.clearing(&e, &t, clearing, known, ex.stats)
		if bills {
			b.record(&e, what, &t, paid, now, ex)
		} else if t.Test {
			outcomeLine(&e, what, &t, paid, reasonTest)
		} else {
			outcomeLine(&e, what, &t, paid, reasonBillOn)
		}
	case track.KindLoss:
		if known {
			e.AddInt(keyClearing, int64(clearing))
		} else {
			e.AddBool(keyPriceMissing, true)
		}
		if code, err := strconv.Atoi(string(loss)); err == nil && code >= 0 {
			e.AddInt(keyLoss, int64(code))
		}
		b.record(&e, what, &t, t.Price, now, ex)
	}
	if err := log(&e); err != nil {
		return NoticeAnswer{}, errLogClosed
	}
	return answer, answerErr
}

// Impression handles the impression URL of a bid's markup (a video's VAST
// impression, a banner's pixel), which a viewer's player or page calls:
// ua is its User-Agent. It counts the bid's own price, never a price from
// the URL. It logs a bid_imp line, counted once per bid across nodes
// (not a crawler's, nor a test auction's), after, on an exchange billing
// on the markup, a bill line that counts as it does. It is answered with
// a 1×1 GIF.
func (b *Bidder) Impression(tok string, ua []byte, now time.Time, log func(*accesslog.Event) error) (NoticeAnswer, error) {
	t, ex, err := b.verify(track.KindBidImp, tok, now)
	if err != nil {
		return NoticeAnswer{}, err
	}
	_, bills := outcomeOf(track.KindBidImp, ex.BillOn)
	reason := ""
	switch {
	case t.Test:
		reason = reasonTest
	case b.opt.Device != nil && len(ua) > 0 && b.opt.Device(ua).Bot:
		reason = reasonCrawler // and its fetch does not use up the bid's
	default:
		b.capNotice(track.KindBidImp, &t, now)
	}
	if bills {
		bill := b.noticeEvent(&t, ex)
		if reason == "" {
			reason = b.record(&bill, tsubame.OutcomeBill, &t, t.Price, now, ex)
		} else {
			outcomeLine(&bill, tsubame.OutcomeBill, &t, t.Price, reason)
		}
		if err := log(&bill); err != nil {
			return NoticeAnswer{}, errLogClosed
		}
	} else if reason == "" {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(dedupeTimeout))
		first, err := b.opt.Dedupe.FirstSeen(ctx, bidImpKey(t.Decision), t.Expires.Sub(now)+dedupeSlack)
		cancel()
		reason = b.verdict(accesslog.EventBidImp, &t, first, err)
	}
	e := b.noticeEvent(&t, ex)
	e.Kind, e.ID, e.Price, e.Valid = accesslog.EventBidImp, accesslog.String(bidImpKey(t.Decision)), int64(t.Price), reason == ""
	if reason != "" {
		e.AddText(keyReason, accesslog.String(reason))
	} else {
		ex.stats.BidImps.Add(1)
	}
	if err := log(&e); err != nil {
		return NoticeAnswer{}, errLogClosed
	}
	return NoticeAnswer{ContentType: "image/gif", Body: pixel}, nil
}

// bidImpKey is the id a bid's markup impression is counted once by, and
// its line's event_id.
func bidImpKey(bid string) string { return accesslog.EventBidImp.String() + ":" + bid }

// verify checks a notice's token, of kind, and finds its exchange: one
// removed by a reload since the bid is read with the defaults and
// counters of its own.
func (b *Bidder) verify(kind track.Kind, tok string, now time.Time) (track.Token, *exchange, error) {
	if len(tok) > track.MaxTokenLen {
		return track.Token{}, nil, track.ErrMalformed
	}
	t, err := b.signer.Load().VerifyKind(tok, kind, now)
	if err != nil {
		return track.Token{}, nil, err
	}
	ex := b.exchange(t.Exchange)
	if ex == nil {
		ex = &exchange{Exchange: Exchange{Name: t.Exchange, BillOn: BillOnBURL}, stats: &Stats{}}
	}
	return t, ex, nil
}

// noticeEvent is the line of a notice of t, all but its kind, id, price
// and validity: the bid's fields, origin and auction.
func (b *Bidder) noticeEvent(t *track.Token, ex *exchange) accesslog.Event {
	e := accesslog.Event{Decision: accesslog.String(t.Decision), LineItem: accesslog.String(t.LineItem),
		Campaign: accesslog.String(t.Campaign), Creative: accesslog.String(t.Creative), Placement: accesslog.String(t.Placement),
		UID: accesslog.String(t.User), Currency: accesslog.String(t.Currency)}
	e.AddOrigin(t.Advertiser, t.Site, t.Country, t.Device)
	e.AddText(keyExchange, accesslog.String(t.Exchange))
	e.AddText(keySeat, accesslog.String(ex.Seat))
	e.AddText(keyAuction, accesslog.String(t.Auction))
	e.AddText(keyImp, accesslog.String(t.Imp))
	e.AddText(keyDeal, accesslog.String(t.Deal))
	if t.Test {
		e.AddBool(keyTest, true)
	}
	return e
}

// clearing is what a win or billing notice counts as paid: the clearing
// price, at most the bid's (one above it flagged, and kept in clearing),
// or the bid's when none was readable (flagged). stats, when given,
// counts the flags.
func (b *Bidder) clearing(e *accesslog.Event, t *track.Token, clearing tsubame.Money, known bool, stats *Stats) tsubame.Money {
	switch {
	case !known:
		e.AddBool(keyPriceMissing, true)
		if stats != nil {
			stats.PriceMissing.Add(1)
		}
		return t.Price // first price: what was bid
	case clearing > t.Price:
		e.AddBool(keyAboveBid, true)
		e.AddInt(keyClearing, int64(clearing))
		if stats != nil {
			stats.AboveBid.Add(1)
		}
		return t.Price
	}
	return clearing
}

// record makes e the line of outcome what of t's bid, at price (a
// bill's: what it spends), and decides whether it counts: not a test
// auction's, and the first of its kind for the bid on any node (once).
// It returns why it does not count ("" when it does). A bill after the
// bid's reservation and the grace counts and is marked late (the ad was
// shown; its price may have been released).
func (b *Bidder) record(e *accesslog.Event, what tsubame.OutcomeKind, t *track.Token, price tsubame.Money, now time.Time, ex *exchange) string {
	stats := ex.stats
	if t.Test {
		outcomeLine(e, what, t, price, reasonTest)
		return reasonTest
	}
	spent := tsubame.Money(0)
	if what == tsubame.OutcomeBill {
		spent = price
	}
	first, err := b.once(what, t, spent, now)
	reason := b.verdict(outcomeEvents[what], t, first, err)
	outcomeLine(e, what, t, price, reason)
	switch {
	case reason == reasonRepeat && what == tsubame.OutcomeWin:
		stats.WinRepeats.Add(1)
	case reason == reasonRepeat && what == tsubame.OutcomeLoss:
		stats.LossRepeats.Add(1)
	case reason == reasonRepeat && what == tsubame.OutcomeBill:
		stats.BillRepeats.Add(1)
	case reason != "":
	case what == tsubame.OutcomeWin:
		stats.Wins.Add(1)
		stats.WinDelayed(now.Sub(t.Expires.Add(-b.opt.TTL))) // the token expires TTL after its bid
	case what == tsubame.OutcomeLoss:
		stats.Losses.Add(1)
	case what == tsubame.OutcomeBill:
		stats.Bills.Add(1)
		if !t.Reserved.IsZero() && !now.Before(t.Reserved.Add(b.opt.Grace)) {
			e.AddBool(keyLate, true)
			stats.Late.Add(1)
		}
		if m, ok := b.rates.Load().ToAccount(price, t.Currency); ok {
			stats.Spend.Add(int64(m))
		}
	}
	return reason
}

// outcomeLine makes e the line of outcome what of t's bid at price:
// valid when reason is "", else not, for reason.
func outcomeLine(e *accesslog.Event, what tsubame.OutcomeKind, t *track.Token, price tsubame.Money, reason string) {
	e.Kind, e.ID, e.Price, e.Valid = outcomeEvents[what], accesslog.String(tsubame.OutcomeKey(what, t.Decision)), int64(price), reason == ""
	if reason != "" {
		e.AddText(keyReason, accesslog.String(reason))
	}
}

// verdict is why an event of kind of t's bid does not count, from the
// store's answer to whether it is the first ("" when it is).
func (b *Bidder) verdict(kind accesslog.EventKind, t *track.Token, first bool, err error) string {
	switch {
	case err != nil:
		if b.opt.Log != nil {
			b.opt.Log.Warn("cannot tell a repeated notice; logged as not counted", "event", kind.String(), "exchange", t.Exchange, "err", err)
		}
		return reasonStore
	case !first:
		return reasonRepeat
	}
	return ""
}

// once records the outcome what of t's bid (price: a bill's clearing
// price in the bid's currency, 0 for the others) and reports whether it is
// the first of its kind for the bid on any node sharing the store. It is
// the one place a notice asks the store whether it counts. A bid that
// holds money (its token names the ledger holding it) has its outcome
// recorded for that ledger (tsubame.Outcomes.Record, which is the dedupe
// too): a loss gives the money back at once, a win keeps it for the bill,
// the bill spends it at its price in the account's currency. Other bids'
// notices are deduped (the Deduper's FirstSeen of
// tsubame.OutcomeKey(what, bid)). Either is remembered for the token's
// life and dedupeSlack.
func (b *Bidder) once(what tsubame.OutcomeKind, t *track.Token, price tsubame.Money, now time.Time) (bool, error) {
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(dedupeTimeout))
	defer cancel()
	ttl := t.Expires.Sub(now) + dedupeSlack
	if t.Holder == "" || b.opt.Outcomes == nil || t.Reserved.IsZero() {
		return b.opt.Dedupe.FirstSeen(ctx, tsubame.OutcomeKey(what, t.Decision), ttl)
	}
	o := tsubame.Outcome{Kind: what, Bid: t.Decision, LineItem: t.LineItem, Due: t.Reserved.Unix()}
	if what == tsubame.OutcomeBill {
		// In the account's currency, rounded down: a CPM the ledger spends
		// at most the bid's held price of.
		m, ok := b.rates.Load().ToAccount(price, t.Currency)
		if !ok {
			m = tsubame.MaxCPM // the rate is gone: the hold is spent at its own price
		}
		o.Price = min(max(m, 0), tsubame.MaxCPM)
	}
	return b.opt.Outcomes.Record(ctx, t.Holder, &o, min(max(ttl, time.Second), tsubame.MaxOutcomeTTL))
}

// winMarkup is the markup a win notice serves: the bid's creative, if it
// is still in the index, in the VAST version the notice asks for (4.2 when
// none).
func (b *Bidder) winMarkup(t track.Token, ex *exchange, vast []byte) ([]byte, string, bool) {
	d, ok := b.opt.Engine.Index().Lookup(t.LineItem, t.Creative)
	if !ok {
		return nil, "", false
	}
	version := render.VASTInline4
	if v, ok := render.ParseVASTVersion(vast); ok {
		version = v
	}
	w := getWork()
	defer putWork(w)
	ns, err := b.signer.Load().Notices(t)
	if err != nil {
		return nil, "", false
	}
	defer ns.Close()
	imp := ""
	if d.Creative.Format == tsubame.FormatVideo || ex.BillOn == BillOnMarkup {
		if imp, err = b.noticeURL(w, &ns, track.KindBidImp, ""); err != nil {
			return nil, "", false
		}
	}
	click, err := b.clickURL(w, &ns, d.Creative)
	if err != nil {
		return nil, "", false
	}
	m := b.appendMarkup(nil, d, t.Decision, version, imp, click, false)
	if d.Creative.Format == tsubame.FormatVideo {
		return m, "application/xml; charset=utf-8", true
	}
	return m, "text/html; charset=utf-8", true
}

var (
	errGone      = tsubame.Errorf(tsubame.ENOTFOUND, "the bid's creative is no longer served")
	errLogClosed = tsubame.Errorf(tsubame.EUNAVAILABLE, "access log unavailable")
)

// Extra fields of the notices' lines.
var (
	keyPriceMissing = accesslog.MustKey("price_missing")
	keyAboveBid     = accesslog.MustKey("price_above_bid")
	keyClearing     = accesslog.MustKey("clearing")
)
