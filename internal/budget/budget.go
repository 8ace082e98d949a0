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
	// DefaultTimeout bounds one Take: a capped line item that the store
	// does not clear by then is not served, and the decision goes on
	// without it.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultLogEvery is the least time between two log lines about the
	// store failing.
	DefaultLogEvery = 10 * time.Second
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
}

// Counters is the decision.Counters of a server: it lets a line item
// without frequency caps serve at once, and one with caps serve only when
// the store takes the impression for the request's visitor (see the
// package comment). It is safe for concurrent use and keeps nothing of a
// request.
type Counters struct {
	freq     tsubame.FrequencyCounter
	ledger   *Ledger
	timeout  time.Duration
	log      *slog.Logger
	logEvery int64 // nanoseconds

	errors  atomic.Uint64
	logged  atomic.Int64 // when the last failure was logged, Unix nanoseconds
	failing atomic.Bool  // a failure was logged and no Take has succeeded since
	_       [0]func()    // not comparable, not copyable by value
}

var _ decision.Counters = (*Counters)(nil)

// New returns Counters that take capped impressions from freq.
func New(freq tsubame.FrequencyCounter, opt Options) *Counters {
	return &Counters{freq: freq, ledger: opt.Ledger, timeout: cmp.Or(opt.Timeout, DefaultTimeout), log: opt.Log,
		logEvery: int64(cmp.Or(opt.LogEvery, DefaultLogEvery))}
}

// Allow reports whether l may serve req now, and takes what serving it
// costs. A line item with an impression limit or a campaign budget first
// takes its impression and price from this node's leases (the Ledger):
// false when a lease is short (the ledger tops it up in the background).
// Then a line item with frequency caps takes the impression for the
// request's visitor from the store: false when the request has no visitor
// (it could not be counted), when a cap is reached, and when the store
// fails or does not answer by the request's deadline (req.Context, else
// the timeout of Options); what the leases gave is then given back. What
// is taken is held under req.Reserve[slot] until req.ReserveUntil (spent
// at once without one). A test request (req.Test) takes nothing.
func (c *Counters) Allow(l *decision.Line, req *decision.Request, slot int, now time.Time) bool {
	if req.Test {
		// A test decision spends nothing: the line item serves if its
		// leases could pay for it now; caps are not counted.
		return !l.Limited || c.ledger == nil || c.ledger.could(l, now)
	}
	var r reservation
	var due, until, winBy int64 // until 0: spent at once
	if l.Limited && c.ledger != nil {
		at, need := now.UnixNano(), now.UnixNano()
		if !req.ReserveUntil.IsZero() {
			until = max(at, min(req.ReserveUntil.UnixNano(), at+int64(c.ledger.opt.MaxHold)))
			due, winBy, need = req.ReserveUntil.Unix(), until, until
			if !req.WinBy.IsZero() {
				winBy = min(until, max(at, req.WinBy.UnixNano()))
			}
		}
		var ok bool
		if r, ok = c.ledger.take(l, now, need); !ok {
			return false
		}
	}
	if len(l.Frequency) > 0 && !c.takeCap(l, req, now) {
		if r.n > 0 {
			c.ledger.cancel(&r)
		}
		return false
	}
	if r.n > 0 {
		c.ledger.hold(l, &r, due, until, winBy)
	}
	return true
}

// takeCap takes a capped impression for the request's visitor, within
// the request's deadline (req.Context): every cap of one request shares
// its budget. Only a request without one gets the timeout of Options.
func (c *Counters) takeCap(l *decision.Line, req *decision.Request, now time.Time) bool {
	if req.User == "" || len(req.User) > tsubame.MaxObjectIDLength {
		return false
	}
	ctx := req.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	ok, err := c.freq.Take(ctx, tsubame.FrequencyKey(l.ID, req.User), l.Frequency, now)
	if err != nil {
		c.failed(l, err)
		return false
	}
	if c.failing.Load() && c.failing.CompareAndSwap(true, false) && c.log != nil {
		c.log.Info("frequency caps are counted again: capped line items serve", "errors", c.errors.Load())
	}
	return ok
}

// Errors is the number of Takes that failed (the store down, slow or
// refusing), each a capped line item not served.
func (c *Counters) Errors() uint64 { return c.errors.Load() }

// failed counts a failed Take and logs it unless another was logged
// within LogEvery.
func (c *Counters) failed(l *decision.Line, err error) {
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
	c.log.Error("cannot count frequency caps: capped line items are not serving", "err", err, "line_item", l.ID, "errors", n)
}
