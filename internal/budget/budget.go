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
	// Timeout bounds one store call (DefaultTimeout when zero).
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
	return &Counters{freq: freq, timeout: cmp.Or(opt.Timeout, DefaultTimeout), log: opt.Log,
		logEvery: int64(cmp.Or(opt.LogEvery, DefaultLogEvery))}
}

// Allow reports whether l may serve req now: true for a line item without
// frequency caps; for one with caps, false when the request has no
// visitor (it could not be counted) and otherwise whether the store took
// the impression (false when the store fails or does not answer within
// the timeout).
func (c *Counters) Allow(l *decision.Line, req *decision.Request, now time.Time) bool {
	if len(l.Frequency) == 0 {
		return true
	}
	if req.User == "" || len(req.User) > tsubame.MaxObjectIDLength {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	ok, err := c.freq.Take(ctx, tsubame.FrequencyKey(l.ID, req.User), l.Frequency, now)
	cancel()
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
