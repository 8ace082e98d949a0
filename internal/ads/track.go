package ads

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/server"
	"tsubame/internal/track"
)

// pixel is a transparent 1×1 GIF, the impression URL's answer.
var pixel = []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")

// dedupeTimeout is an impression's or a click's budget: the store tells
// a repeat within it from when the request was read, or the event is
// logged as not counted.
const dedupeTimeout = time.Second

// dedupeSlack keeps an event id a little past its token's expiry, so a
// repeat a clock skew between nodes lets through is still caught.
const dedupeSlack = 5 * time.Minute

// serveImp answers /t/i/<token> with a 1×1 GIF and logs the impression:
// counted (valid) the first time on any node, not for repeats and
// crawlers. A tampered, expired or foreign token is a 4xx with nothing
// logged but the request's line.
func (s *Service) serveImp(w server.Response, r server.Request) error {
	t, err := s.verify(r, PathImp, track.KindImp)
	if errors.Is(err, track.ErrKind) {
		t, err = s.verify(r, PathImp, track.KindSale)
	}
	if err != nil {
		return err
	}
	counted, err := s.countOnce(r, &t, accesslog.EventImp, "imp:", int64(t.Price))
	if err != nil {
		return err
	}
	if counted && t.Kind == track.KindSale && t.Click != "" && s.opt.Auction != nil {
		s.opt.Auction.Bill(t.Click) // the bid's burl, once across nodes: the impression is
	}
	w.Header("Cache-Control", "no-store")
	w.Body("image/gif", pixel)
	return nil
}

// serveClick answers /t/c/<token> with a 302 to the creative's click URL
// the token carries (signed: never an open redirect) and logs the click as
// serveImp does the impression.
func (s *Service) serveClick(w server.Response, r server.Request) error {
	t, err := s.verify(r, PathClick, track.KindClick)
	if err != nil {
		return err
	}
	if err := s.count(r, &t, accesslog.EventClick, "click:", 0); err != nil {
		return err
	}
	w.Header("Cache-Control", "no-store")
	w.Redirect(t.Click, http.StatusFound)
	return nil
}

// once tells the first sighting of event id of t on any node. An
// impression of a decision that holds money (t.Holder) is recorded as the
// bill of that money (tsubame.Outcomes), which counts it once too: its
// holder's ledger spends what the decision held. Others are deduped.
func (s *Service) once(ctx context.Context, t *track.Token, kind accesslog.EventKind, id string) (bool, error) {
	ttl := time.Until(t.Expires) + dedupeSlack
	if kind != accesslog.EventImp || t.Holder == "" || s.opt.Outcomes == nil || t.Reserved.IsZero() {
		return s.opt.Dedupe.FirstSeen(ctx, id, ttl)
	}
	o := tsubame.Outcome{Kind: tsubame.OutcomeBill, Bid: t.Decision, LineItem: t.LineItem, Due: t.Reserved.Unix(), Price: t.Price}
	return s.opt.Outcomes.Record(ctx, t.Holder, &o, min(max(ttl, time.Second), tsubame.MaxOutcomeTTL))
}

func (s *Service) verify(r server.Request, prefix string, kind track.Kind) (track.Token, error) {
	tok, _ := bytes.CutPrefix(r.Path(), []byte(prefix))
	if len(tok) > track.MaxTokenLen {
		return track.Token{}, track.ErrMalformed
	}
	return s.signer.Load().VerifyKind(string(tok), kind, time.Now())
}

// count logs the event of t: valid unless it is a test auction's (the
// click of a test bid's markup: never counted, as its notices are not), a
// crawler fetched it, the id was seen before, or the store could not
// tell.
func (s *Service) count(r server.Request, t *track.Token, kind accesslog.EventKind, idPrefix string, price int64) error {
	_, err := s.countOnce(r, t, kind, idPrefix, price)
	return err
}

// countOnce is count, reporting whether the event was counted (valid).
// A sold slot's impression (track.KindSale) carries its partner, auction
// and deal.
func (s *Service) countOnce(r server.Request, t *track.Token, kind accesslog.EventKind, idPrefix string, price int64) (bool, error) {
	id := idPrefix + t.Decision
	reason := ""
	switch {
	case t.Test:
		reason = reasonTest // nothing to count: the store is not asked
	case s.opt.Device != nil && s.opt.Device(r.UserAgent()).Bot:
		reason = reasonCrawler // and its fetch does not use up the id
	default:
		ctx, cancel := context.WithDeadline(context.Background(), r.Time().Add(dedupeTimeout))
		first, err := s.once(ctx, t, kind, id)
		cancel()
		switch {
		case err != nil:
			reason = reasonStore
			if s.opt.Log != nil {
				s.opt.Log.Warn("cannot tell a repeated event; logged as not counted", "event", kind.String(), "err", err)
			}
		case !first:
			reason = reasonRepeat
		}
	}
	// An impression after its reservation ended is counted (it was shown)
	// but its price may no longer be held: reports count it as overage.
	late := kind == accesslog.EventImp && !t.Reserved.IsZero() && !time.Now().Before(t.Reserved.Add(s.opt.Grace))
	e := accesslog.Event{Kind: kind, ID: accesslog.String(id), Decision: accesslog.String(t.Decision),
		LineItem: accesslog.String(t.LineItem), Campaign: accesslog.String(t.Campaign), Creative: accesslog.String(t.Creative),
		Placement: accesslog.String(t.Placement), UID: accesslog.String(t.User), Price: price,
		Currency: accesslog.String(s.opt.Currency), Valid: reason == ""}
	e.AddOrigin(t.Advertiser, t.Site, t.Country, t.Device)
	if reason != "" {
		e.AddText(keyReason, accesslog.String(reason))
	}
	if t.Test {
		e.AddBool(keyTest, true)
	}
	if late {
		e.AddBool(keyLate, true)
	}
	if t.Kind == track.KindSale {
		e.AddText(keyPartner, accesslog.String(t.Exchange))
		e.AddText(keyAuction, accesslog.String(t.Auction))
		if t.Deal != "" {
			e.AddText(keyDeal, accesslog.String(t.Deal))
		}
	}
	return reason == "", s.logEvent(r, &e)
}
