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

// pixel is a transparent 1×1 GIF: the billing URL's answer, which a video
// player fires as the VAST impression.
var pixel = []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")

// dedupeTimeout is a billing notice's budget: the store tells a repeat
// within it from when the notice came (Notice's now), or the notice is
// logged as not billed.
const dedupeTimeout = time.Second

// dedupeSlack keeps a bid id a little past its token's expiry, so that a
// repeat a clock skew lets through is still caught.
const dedupeSlack = 5 * time.Minute

// Why a notice's line is not valid.
const (
	reasonRepeat = "repeat"            // a billing notice seen before: billed once
	reasonStore  = "store_unavailable" // the store could not tell a repeat: not billed
	reasonTest   = "test"              // a test auction's: never billed
)

// NoticeAnswer is the answer to a notice.
type NoticeAnswer struct {
	ContentType string
	Body        []byte
}

// Notice handles a win, billing or loss notice: tok is its path's token,
// price the clearing price as the exchange substituted ${AUCTION_PRICE}
// (empty or unsubstituted: unknown), loss the loss reason code, vast the
// VAST version the win notice asks markup in. It checks the signature and
// that the clearing price is not above the bid's, logs the notice's event
// line (before answering) and, for a billing notice, tells a repeat apart
// across nodes (FirstSeen of bill:<bid>): a repeat is answered as the
// first was and never billed twice. A refused notice is an EINVALID or
// EUNAUTHORIZED error (a 4xx) with nothing logged but the request.
func (b *Bidder) Notice(kind track.Kind, tok string, price, loss, vast []byte, now time.Time, log func(*accesslog.Event) error) (NoticeAnswer, error) {
	if len(tok) > track.MaxTokenLen {
		return NoticeAnswer{}, track.ErrMalformed
	}
	t, err := b.signer.Load().VerifyKind(tok, kind, now)
	if err != nil {
		return NoticeAnswer{}, err
	}
	var stats *Stats
	seat := ""
	if ex := b.exchange(t.Exchange); ex != nil {
		stats, seat = ex.stats, ex.Seat
	}
	clearing, known, err := clearingPrice(price)
	if err != nil || known && clearing > t.Price {
		if stats != nil {
			stats.Rejected.Add(1)
		}
		if err != nil {
			return NoticeAnswer{}, err
		}
		return NoticeAnswer{}, errAboveBid
	}
	if !known {
		clearing = t.Price // first price: what was bid
	}
	e := accesslog.Event{Decision: accesslog.String(t.Decision), LineItem: accesslog.String(t.LineItem),
		Campaign: accesslog.String(t.Campaign), Creative: accesslog.String(t.Creative), Placement: accesslog.String(t.Placement),
		UID: accesslog.String(t.User), Price: int64(clearing), Currency: accesslog.String(t.Currency), Valid: !t.Test}
	e.AddOrigin(t.Advertiser, t.Site, t.Country, t.Device)
	e.AddText(keyExchange, accesslog.String(t.Exchange))
	e.AddText(keySeat, accesslog.String(seat))
	e.AddText(keyAuction, accesslog.String(t.Auction))
	e.AddText(keyImp, accesslog.String(t.Imp))
	e.AddText(keyDeal, accesslog.String(t.Deal))
	if t.Test {
		e.AddBool(keyTest, true)
		e.AddText(keyReason, accesslog.String(reasonTest))
	}
	if !known {
		e.AddBool(keyPriceMissing, true)
	}
	var answer NoticeAnswer
	switch kind {
	case track.KindWin:
		e.Kind, e.ID = accesslog.EventWin, accesslog.String("win:"+t.Decision)
		if stats != nil {
			stats.Wins.Add(1)
		}
		if ex := b.exchange(t.Exchange); ex != nil && ex.MarkupOnWin {
			body, ctype, ok := b.winMarkup(t, vast)
			if !ok {
				return NoticeAnswer{}, errGone
			}
			answer = NoticeAnswer{ContentType: ctype, Body: body}
		}
	case track.KindBill:
		e.Kind, e.ID = accesslog.EventBill, accesslog.String("bill:"+t.Decision)
		if !t.Test {
			b.bill(&e, &t, clearing, now, stats)
		}
		answer = NoticeAnswer{ContentType: "image/gif", Body: pixel}
	case track.KindLoss:
		e.Kind, e.ID = accesslog.EventLoss, accesslog.String("loss:"+t.Decision)
		e.Valid = false // a loss bills nothing
		if code, err := strconv.Atoi(string(loss)); err == nil && code >= 0 {
			e.AddInt(keyLoss, int64(code))
		}
		if stats != nil {
			stats.Losses.Add(1)
		}
	}
	if err := log(&e); err != nil {
		return NoticeAnswer{}, errLogClosed
	}
	return answer, nil
}

// bill decides whether a billing notice bills: the first for its bid on
// any node, in time or late (past the reservation and its grace: still
// billed, the ad was shown, but its price may have been released).
func (b *Bidder) bill(e *accesslog.Event, t *track.Token, clearing tsubame.Money, now time.Time, stats *Stats) {
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(dedupeTimeout))
	first, err := b.opt.Dedupe.FirstSeen(ctx, "bill:"+t.Decision, time.Until(t.Expires)+dedupeSlack)
	cancel()
	switch {
	case err != nil:
		e.Valid = false
		e.AddText(keyReason, accesslog.String(reasonStore))
		if b.opt.Log != nil {
			b.opt.Log.Warn("cannot tell a repeated billing notice; logged as not billed", "exchange", t.Exchange, "err", err)
		}
	case !first:
		e.Valid = false
		e.AddText(keyReason, accesslog.String(reasonRepeat))
		if stats != nil {
			stats.BillRepeats.Add(1)
		}
	default:
		late := !t.Reserved.IsZero() && !now.Before(t.Reserved.Add(b.opt.Grace))
		if late {
			e.AddBool(keyLate, true)
		}
		if stats != nil {
			stats.Bills.Add(1)
			if late {
				stats.Late.Add(1)
			}
			if m, ok := b.rates.Load().ToAccount(clearing, t.Currency); ok {
				stats.Spend.Add(int64(m))
			}
		}
	}
}

// winMarkup is the markup a win notice serves: the bid's creative, if it
// is still in the index, in the VAST version the notice asks for (4.2 when
// none).
func (b *Bidder) winMarkup(t track.Token, vast []byte) ([]byte, string, bool) {
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
	sg := b.signer.Load()
	bill, err := b.noticeURL(w, sg, t, track.KindBill, "")
	if err != nil {
		return nil, "", false
	}
	click, err := b.clickURL(w, sg, t, d.Creative)
	if err != nil {
		return nil, "", false
	}
	m := b.appendMarkup(nil, d, t.Decision, version, bill, click)
	if d.Creative.Format == tsubame.FormatVideo {
		return m, "application/xml; charset=utf-8", true
	}
	return m, "text/html; charset=utf-8", true
}

var (
	errAboveBid  = tsubame.Errorf(tsubame.EINVALID, "clearing price above the bid")
	errBadPrice  = tsubame.Errorf(tsubame.EINVALID, "clearing price is not a decimal number")
	errGone      = tsubame.Errorf(tsubame.ENOTFOUND, "the bid's creative is no longer served")
	errLogClosed = tsubame.Errorf(tsubame.EUNAVAILABLE, "access log unavailable")
)

var keyPriceMissing = accesslog.MustKey("price_missing")

// clearingPrice reads a plain clearing price: a decimal of the bid's
// currency. Empty, the macro left unsubstituted and AUDIT (a render for
// ad quality) are unknown, not errors.
func clearingPrice(b []byte) (tsubame.Money, bool, error) {
	switch s := string(b); s {
	case "", "${AUCTION_PRICE}", "AUDIT":
		return 0, false, nil
	}
	var p openrtb.Price
	if err := p.UnmarshalJSON(b); err != nil {
		return 0, false, errBadPrice
	}
	return p.Money(), true, nil
}
