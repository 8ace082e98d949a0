package bidder

import (
	"context"
	"time"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/track"
)

// Caps is the port through which the bidder counts the frequency caps of
// capped line items on their wins, not their bids (budget.Counters, the
// engine's Counters, implements it): a bid usually loses, and a visitor
// who was bid on three times but shown nothing has not seen the ad. When
// the engine's Counters are Caps, a request's decisions only check the
// caps, against the visitor's record read once for all its impressions
// (decision.Request.Frequency, CapsOnWin); a bid about to be made holds
// its cap (HoldCap), so that bids in flight count against it and
// concurrent requests of one visitor cannot bid past it; its win or
// billing notice, or its markup's impression, counts it (CountCap, once
// per bid, ending the hold), and its loss notice releases it
// (ReleaseCap). A hold nobody ends lasts the bid's reservation. Without
// Caps, the decision counts a capped line item's impression at once, as
// /api/decide does. Implementations must be safe for concurrent use.
type Caps interface {
	HoldCap(ctx context.Context, l *decision.Line, visitor, bid string, now, until time.Time, rec *tsubame.FrequencyRecord) bool
	CountCap(ctx context.Context, l *decision.Line, visitor, bid string, now time.Time) bool
	ReleaseCap(ctx context.Context, l *decision.Line, visitor, bid string, now, until time.Time) bool
}

// capTimeout bounds a notice's store call for a cap, and the release of a
// cap held by a bid that was not sent.
const capTimeout = time.Second

// capHold is a cap a bid of the request holds (work.held).
type capHold struct {
	line *decision.Line
	bid  string
}

// caps returns the engine's Counters as Caps, or nil.
func (b *Bidder) caps() Caps {
	c, _ := b.opt.Engine.Counters().(Caps)
	return c
}

// capsFor readies w's decision request for its caps: one record of the
// visitor for all the request's impressions and formats, and, with Caps,
// decisions that only check.
func (b *Bidder) capsFor(w *work) {
	w.freq.Reset()
	clear(w.held)
	w.held = w.held[:0]
	w.dreq.Frequency = &w.freq
	w.dreq.CapsOnWin = b.caps() != nil
}

// holdCap holds l's cap for bid, the request's bid about to be made (every
// check that could drop it passed): false when the bid must not be made
// (a concurrent request of the visitor took the last of the cap, or the
// store could not tell by the request's deadline). The hold lasts the
// bid's reservation unless a notice ends it first.
func (b *Bidder) holdCap(w *work, l *decision.Line, bid string, now time.Time) bool {
	d := &w.dreq
	c := b.caps()
	if c == nil || d.Test || len(l.Frequency) == 0 {
		return true
	}
	if !c.HoldCap(d.Context, l, d.User, bid, now, d.ReserveUntil, d.Frequency) {
		return false
	}
	w.held = append(w.held, capHold{line: l, bid: bid})
	return true
}

// releaseHeld releases the caps held by the request's bids from the
// from-th on: they are not sent (too late, or their log line failed).
func (b *Bidder) releaseHeld(w *work, from int, now time.Time) {
	c := b.caps()
	if c == nil || from >= len(w.held) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), capTimeout)
	defer cancel()
	for _, h := range w.held[from:] {
		c.ReleaseCap(ctx, h.line, w.dreq.User, h.bid, now, w.dreq.ReserveUntil)
	}
	clear(w.held[from:])
	w.held = w.held[:from]
}

// capNotice counts the cap of a notice's bid when its line item is capped:
// a win, a bill or the markup's impression counts it (once per bid,
// whichever comes first), a loss releases its hold. Test auctions count
// nothing; a line item no longer in the index is not counted (it serves
// no more).
func (b *Bidder) capNotice(kind track.Kind, t *track.Token, now time.Time) {
	c := b.caps()
	if c == nil || t.Test || t.User == "" {
		return
	}
	l, ok := b.opt.Engine.Index().LineByID(t.LineItem)
	if !ok || len(l.Frequency) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(capTimeout))
	defer cancel()
	if kind == track.KindLoss {
		c.ReleaseCap(ctx, l, t.User, t.Decision, now, t.Reserved) // zero but for a limited line item's bid
	} else {
		c.CountCap(ctx, l, t.User, t.Decision, now)
	}
}
