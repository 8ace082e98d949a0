package budget

import (
	"cmp"
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"tsubame"
	"tsubame/internal/decision"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds one store call of frequency caps: a capped
	// line item that the store does not clear by then is not served, and
	// the decision goes on without it.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultLogEvery is the least time between two log lines about the
	// store failing.
	DefaultLogEvery = 10 * time.Second
	// DefaultPending bounds the cap updates waiting to be sent again
	// (Options.Pending).
	DefaultPending = 1 << 16
)

// Options tune Counters.
type Options struct {
	// Ledger keeps impression limits and budgets; nil: they are not
	// enforced (line items serve past them), only frequency caps are.
	Ledger *Ledger
	// Timeout bounds one store call of a request without a deadline of
	// its own (decision.Request.Context; DefaultTimeout when zero).
	Timeout time.Duration
	// Log gets the store's failures, at most one line per LogEvery
	// (DefaultLogEvery when zero), and a line when it answers again; nil:
	// none.
	Log      *slog.Logger
	LogEvery time.Duration
	// Pending bounds the updates of frequency caps the store did not take
	// when asked, kept and sent again until it does (a win's count, a
	// loss's release, the release of a hold or the cancel of a take that
	// may have landed after its request gave up; DefaultPending when
	// zero): past it, the newest are lost, counted (Counters.Stats) and
	// logged.
	Pending int
}

// Counters is the decision.Counters of a server: it lets a line item
// without frequency caps serve at once, and one with caps serve only when
// the store takes the impression for the request's visitor, or, for an
// auction's bid, when the visitor's record allows one more and the bid's
// hold is then taken (see the package comment). It is safe for concurrent
// use and keeps nothing of a request but what it leaves in the request's
// record.
type Counters struct {
	freq     tsubame.FrequencyCounter
	ledger   *Ledger
	timeout  time.Duration
	log      *slog.Logger
	logEvery int64 // nanoseconds

	retries retries // the cap updates to send again

	errors  atomic.Uint64
	logged  atomic.Int64 // when the last failure was logged, Unix nanoseconds
	failing atomic.Bool  // a failure was logged and no store call has succeeded since
	_       [0]func()    // not comparable, not copyable by value
}

var _ decision.Counters = (*Counters)(nil)

// New returns Counters that take capped impressions from freq.
func New(freq tsubame.FrequencyCounter, opt Options) *Counters {
	c := &Counters{freq: freq, ledger: opt.Ledger, timeout: cmp.Or(opt.Timeout, DefaultTimeout), log: opt.Log,
		logEvery: int64(cmp.Or(opt.LogEvery, DefaultLogEvery))}
	c.retries.init(cmp.Or(opt.Pending, DefaultPending))
	return c
}

// Allow reports whether l may serve req now, and takes what serving it
// costs. A line item with frequency caps is first checked against the
// request's visitor: false when the request has no visitor (it could not
// be counted), and, when the request's record (req.Frequency) has been
// read, when the record says a cap is reached, with no store call. A line
// item with an impression limit or a campaign budget then takes its
// impression and price from this node's leases (the Ledger): false when a
// lease is short (the ledger tops it up in the background). Then a capped
// line item takes the impression for the visitor in the store, an atomic
// check and count that also reads the visitor's whole record into
// req.Frequency in the same call: false when a cap is reached, and when
// the store fails or does not answer by the request's deadline
// (req.Context, else the timeout of Options); what the leases gave is then
// given back. With req.CapsOnWin the caps are only checked (reading the
// record first if it is not yet): the caller holds them for its bid
// (HoldCap) and counts the win (CountCap). With req.Check nothing is
// taken: the caps are checked (reading the record) and the leases asked
// whether they could pay, for a decision that takes once it has won an
// auction (decision.Index.Take). What is taken is held under
// req.Reserve[slot] until req.ReserveUntil (spent at once without one). A
// test request (req.Test) takes nothing.
//
// So a request costs one store call for all its capped line items when
// the first one drawn serves or none does (the read, or the take that
// reads), and one more for each capped line item that serves after the
// record refused another.
func (c *Counters) Allow(l *decision.Line, req *decision.Request, slot int, now time.Time) bool {
	if req.Test {
		// A test decision spends nothing: the line item serves if its
		// leases could pay for it now; caps are not counted.
		return !l.Limited || c.ledger == nil || c.ledger.could(l, now)
	}
	capped := len(l.Frequency) > 0
	if capped && !c.checkCap(l, req, now) {
		return false
	}
	if req.Check {
		// Only whether it could: the decision takes once it has won.
		return !l.Limited || c.ledger == nil || c.ledger.could(l, now)
	}
	var r reservation
	var due, until, winBy, share int64 // until 0: spent at once, whole
	if l.Limited && c.ledger != nil {
		at, need := now.UnixNano(), now.UnixNano()
		if !req.ReserveUntil.IsZero() {
			until = max(at, min(req.ReserveUntil.UnixNano(), at+int64(c.ledger.opt.MaxHold)))
			due, need, share = req.ReserveUntil.Unix(), until, req.HoldShare
			if !req.WinBy.IsZero() {
				winBy = min(until, max(at, req.WinBy.UnixNano()))
			}
		}
		var ok bool
		// A decision waits for an empty hand's top-up (once); an auction's
		// bid does not: the exchange's next request comes within
		// milliseconds, a bid's deadline is the exchange's, and at a
		// budget's end bids held by a share must not crowd in.
		waited := &req.Waited
		if req.CapsOnWin {
			waited = nil
		}
		if r, ok = c.ledger.take(l, now, need, int64(req.Price(l)), share, waited); !ok { // a shaded bid holds what it bids
			return false
		}
		// Only a whole hold pays a kept bid's price: a share's pool does
		// not, and its late bill is debited as late.
		r.keepWon = until > 0 && req.KeepWon && r.share == 0
		if req.CapsOnWin { // an auction's bid
			for i := range r.n {
				if a := r.slots[i].acct; !a.bids.Load() {
					a.bids.Store(true)
				}
			}
		}
	}
	if capped && !req.CapsOnWin && !c.takeCap(l, req, slot, now) {
		if r.n > 0 {
			c.ledger.cancel(&r)
		}
		return false
	}
	if r.n > 0 {
		c.ledger.hold(l, &r, now.UnixNano(), due, until, winBy)
	}
	return true
}

// validVisitor reports whether a request's visitor can be counted.
func validVisitor(v string) bool { return v != "" && len(v) <= tsubame.MaxObjectIDLength }

// checkCap checks l's caps for the request's visitor in the request's
// record, reading it first for a request that only checks (CapsOnWin); a
// request that counts reads it with its first take instead.
func (c *Counters) checkCap(l *decision.Line, req *decision.Request, now time.Time) bool {
	if !validVisitor(req.User) {
		return false
	}
	rec := req.Frequency
	if !req.CapsOnWin && !req.Check && (rec == nil || !rec.Read) {
		return true // takeCap checks in the store
	}
	if rec == nil {
		rec = &tsubame.FrequencyRecord{}
	}
	if !rec.Read {
		ctx, cancel := c.context(req.Context)
		err := c.freq.Read(ctx, req.User, rec)
		cancel()
		if err != nil {
			rec.Read, rec.Failed = true, true
			c.failed("read", l.ID, err)
			return false
		}
		c.answered()
	}
	return !rec.Failed && rec.Allows(l.ID, l.Frequency, now)
}

// takeCap takes a capped impression for the request's visitor, within
// the request's deadline (req.Context): every cap of one request shares
// its budget. Only a request without one gets the timeout of Options. The
// request's record, if it has one, is filled in the same call.
//
// A take the store cannot answer in time may still be made (its answer
// late): the line item does not serve, so that impression, never shown,
// would count against the visitor's caps for their whole window. A take
// that names its decision (req.Reserve) is then cancelled, sent and sent
// again as a release is, until the store takes the cancel or the
// impression falls out of every window (a day at most). Cancels fill at
// most a quarter of the updates kept: a store that is down fails every
// take of every decision, and their cancels must leave room for the
// bidder's releases and counts.
func (c *Counters) takeCap(l *decision.Line, req *decision.Request, slot int, now time.Time) bool {
	u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyTake, Visitor: req.User, LineItem: l.ID, Caps: l.Frequency, Now: now}
	if slot < len(req.Reserve) {
		u.Bid = req.Reserve[slot]
	}
	ctx, cancel := c.context(req.Context)
	// A take is not sent past the request's deadline (the draws before it
	// spent it): the store never sees it, and nothing is to be cancelled.
	err := ctx.Err()
	sent, ok := err == nil, false
	if sent {
		ok, err = c.freq.Update(ctx, &u, req.Frequency)
	}
	cancel()
	if err != nil {
		if rec := req.Frequency; rec != nil {
			rec.Read, rec.Failed = true, true
		}
		if !sent {
			return false // not the store's failure: neither counted nor logged
		}
		c.failed("take", l.ID, err)
		if u.Bid != "" && tsubame.ErrorCode(err) != tsubame.EINVALID {
			// As a late hold's release, the cancel waits a retry's time
			// for the take, which may still be on its way; it lasts as
			// long as the impression counts, a day at most.
			x := u
			x.Op = tsubame.FrequencyCancel
			lasts := min(time.Duration(tsubame.LongestFrequencyWindow(u.Caps))*time.Microsecond, tsubame.MaxFrequencyHold)
			c.keep(x, now.Add(lasts), time.Now().Add(retryTimeout))
		}
		return false
	}
	c.answered()
	return ok
}

// HoldCap holds one impression of l's caps for bid, an auction's bid for
// visitor about to be made (after every check that could still drop it),
// until until: false when the caps are full (a concurrent request of the
// visitor took the last one) or the store cannot tell by ctx's deadline
// (else the timeout of Options). rec, the request's record, learns the
// hold, so that the request's next impressions see it. The hold ends when
// the bid is counted (CountCap), released (ReleaseCap) or until passes. A
// line item without caps holds nothing and returns true.
func (c *Counters) HoldCap(ctx context.Context, l *decision.Line, visitor, bid string, now, until time.Time, rec *tsubame.FrequencyRecord) bool {
	if len(l.Frequency) == 0 {
		return true
	}
	if !validVisitor(visitor) {
		return false
	}
	u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyHold, Visitor: visitor, LineItem: l.ID, Caps: l.Frequency, Bid: bid, Now: now,
		Until: until}
	if longest := now.Add(tsubame.MaxFrequencyHold); until.After(longest) {
		u.Until = longest
	}
	ok, err := c.update(ctx, &u)
	if err != nil {
		// The store may have made the hold after all, answering after the
		// request's deadline: no bid is sent, so no notice would end it,
		// and it would keep a share of the visitor's cap to its end.
		// Releasing a hold never made changes nothing.
		// The release waits a retry's time: the hold may still be on its
		// way to the store on another connection, and a release that
		// came first would find nothing to end.
		r := u
		r.Op, r.Until = tsubame.FrequencyRelease, time.Time{}
		c.keep(r, u.Until, time.Now().Add(retryTimeout))
	}
	if ok && rec != nil && rec.Read && !rec.Failed {
		rec.Apply(&u)
	}
	return ok && err == nil
}

// CountCap counts bid's impression of l for visitor at now, whatever the
// caps (the bid won: its impression is shown and paid), and ends its hold.
// It reports whether it was counted now: false for a bid counted before
// (a repeated notice), one whose line item has no caps, and when the store
// cannot tell (counted by Errors, and logged): the count is then sent
// again until the store takes it (Counters.Stats), at its time now.
func (c *Counters) CountCap(ctx context.Context, l *decision.Line, visitor, bid string, now time.Time) bool {
	if len(l.Frequency) == 0 || !validVisitor(visitor) {
		return false
	}
	u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyCount, Visitor: visitor, LineItem: l.ID, Caps: l.Frequency, Bid: bid, Now: now}
	ok, err := c.update(ctx, &u)
	if err != nil {
		c.keep(u, time.Time{}, time.Time{})
	}
	return ok && err == nil
}

// ReleaseCap ends bid's hold of l's caps for visitor (the bid lost), and
// reports whether it was open. When the store cannot tell, the release is
// sent again until it does (Counters.Stats), or until the hold has ended
// by itself: at until, the hold's end, when the caller knows it (else the
// longest a hold lasts).
func (c *Counters) ReleaseCap(ctx context.Context, l *decision.Line, visitor, bid string, now, until time.Time) bool {
	if len(l.Frequency) == 0 || !validVisitor(visitor) {
		return false
	}
	u := tsubame.FrequencyUpdate{Op: tsubame.FrequencyRelease, Visitor: visitor, LineItem: l.ID, Caps: l.Frequency, Bid: bid, Now: now}
	ok, err := c.update(ctx, &u)
	if err != nil {
		if until.IsZero() || until.After(now.Add(tsubame.MaxFrequencyHold)) {
			until = now.Add(tsubame.MaxFrequencyHold)
		}
		if until.After(now) { // else the hold has ended by itself
			c.keep(u, until, time.Time{})
		}
	}
	return ok && err == nil
}

// update runs u within ctx's deadline (else the timeout of Options),
// counting and logging a failure.
func (c *Counters) update(ctx context.Context, u *tsubame.FrequencyUpdate) (bool, error) {
	ctx, cancel := c.context(ctx)
	defer cancel()
	ok, err := c.freq.Update(ctx, u, nil)
	if err != nil {
		c.failed(u.Op.String(), u.LineItem, err)
		return false, err
	}
	c.answered()
	return ok, nil
}

// context is ctx (context.Background when nil), bounded by the timeout of
// Options when it has no deadline of its own.
func (c *Counters) context(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// answered notes a store call that succeeded, logging the recovery after
// a logged failure.
func (c *Counters) answered() {
	if c.failing.Load() && c.failing.CompareAndSwap(true, false) && c.log != nil {
		c.log.Info("frequency caps are counted again: capped line items serve", "errors", c.errors.Load())
	}
}

// Errors is the number of frequency store calls that failed (the store
// down, slow or refusing): a read or take of a request, whose capped line
// items then did not serve, or a bid's hold, count or release.
func (c *Counters) Errors() uint64 { return c.errors.Load() }

// failed counts a failed store call and logs it unless another was logged
// within LogEvery.
func (c *Counters) failed(op, lineItem string, err error) {
	n := c.errors.Add(1)
	if c.log == nil {
		return
	}
	now := time.Now().UnixNano()
	last := c.logged.Load()
	if now-last < c.logEvery || !c.logged.CompareAndSwap(last, now) {
		return
	}
	c.failing.Store(true)
	c.log.Error("cannot count frequency caps: capped line items are not serving", "op", op, "err", err, "line_item", lineItem, "errors", n)
}

// Warm leases, ahead of their first decision, for the limited line items
// of a new index that serve now and were not in the one it replaces, prev
// (Ledger.Warm); it does nothing without a Ledger. The decision engine
// calls it with every index it compiles: the first, at start, before it
// serves; the next ones as they serve.
func (c *Counters) Warm(ctx context.Context, ix, prev *decision.Index) int {
	if c.ledger == nil {
		return 0
	}
	return c.ledger.Warm(ctx, ix, prev)
}
