package budget

import (
	"context"
	"strings"
	"sync"
	"time"

	"tsubame"
)

// Retries of the cap updates the store did not take when asked: each is
// sent again, one at a time, within retryTimeout, after a pause that
// doubles from retryFirst to retryLast while the store keeps failing.
const (
	retryTimeout = time.Second
	retryFirst   = 50 * time.Millisecond
	retryLast    = 5 * time.Second
)

// A pendingUpdate is a cap update to send again, when it was kept, and
// how long after its time (u.Now) it stops mattering: a release of a hold
// that has ended by itself (0: never). The wait is measured on this
// process's clock from when it was kept, as u.Now may not be now.
type pendingUpdate struct {
	u     tsubame.FrequencyUpdate
	kept  time.Time
	lasts time.Duration
	// after is when it may be sent first: the release of a hold whose
	// answer came late waits for the hold itself, which may still be on
	// its way to the store on another connection.
	after time.Time
}

// retries keeps the cap updates the store did not take when asked (a
// win's count, a loss's release, the release of a hold or the cancel of a
// take that may have landed after its request gave up) and sends them
// again until it does: a count lost would let the visitor past its cap
// once the bid's hold ends, a release lost would keep the visitor under
// it for the hold's whole reservation, a cancel lost for the window of
// an impression never shown. One goroutine sends them while any wait, in
// turns: one the store refuses goes to the back, so that one it cannot
// take (a cluster's master down) does not hold back the others, and the
// sender pauses only after a turn in which the store took none.
type retries struct {
	mu       sync.Mutex
	queue    []pendingUpdate
	sending  int // the update the sender took from the queue: 1 while it is out
	releases int // the updates kept, that one out included, that are not counts (releases, cancels)
	cancels  int // those of them that are cancels
	max      int
	running  bool
	stopping bool      // Close was called
	closed   bool      // no update is kept or sent any more
	idle     sync.Cond // signalled when the sender stops

	// closing ends the sender's pause when Close is called: it tries
	// once more at once, and gives up if the store still fails.
	closing chan struct{}
	// stop ends the sender's call and pause when Close gives up.
	stop   context.Context
	cancel context.CancelFunc

	dropped uint64    // updates not kept (the queue full, the update invalid, or left at Close)
	logged  time.Time // when an update not kept for a full queue was last logged
	sent    uint64    // updates the store took on a retry
}

func (r *retries) init(max int) {
	r.max = max
	r.idle.L = &r.mu
	r.closing = make(chan struct{})
	r.stop, r.cancel = context.WithCancel(context.Background())
}

// keep keeps u to send again, copying its strings (a caller's may view
// memory it reuses), not before after, until the store takes it or, when
// until is set, its time passes (measured from u.Now). It reports false
// when u was not kept: the queue is full, or closed. Releases and cancels
// fill at most half of it, cancels at most a quarter: a store that hangs
// times out every bid's hold and every decision's take, each kept as a
// release or a cancel, and these must not crowd out the counts of wins (a
// count lost lets a visitor past its cap, a release or a cancel lost only
// holds it under), nor the cancels of /api/decide's traffic the bidder's
// releases.
func (c *Counters) keep(u tsubame.FrequencyUpdate, until, after time.Time) bool {
	r := &c.retries
	u.Visitor, u.Bid = strings.Clone(u.Visitor), strings.Clone(u.Bid)
	release, cancel := u.Op != tsubame.FrequencyCount, u.Op == tsubame.FrequencyCancel
	r.mu.Lock()
	if r.closed || len(r.queue)+r.sending >= r.max || release && r.releases >= max(r.max/2, 1) ||
		cancel && r.cancels >= max(r.max/4, 1) {
		r.dropped++
		n, now := r.dropped, time.Now()
		logIt := !r.closed && now.Sub(r.logged) >= time.Duration(c.logEvery)
		if logIt {
			r.logged = now
		}
		r.mu.Unlock()
		if logIt && c.log != nil {
			c.log.Error("frequency caps' updates are lost: too many wait for the store", "op", u.Op.String(), "line_item", u.LineItem,
				"pending", r.max, "lost", n)
		}
		return false
	}
	p := pendingUpdate{u: u, kept: time.Now(), after: after}
	if !until.IsZero() {
		p.lasts = max(until.Sub(u.Now), 1)
	}
	r.queue = append(r.queue, p)
	if release {
		r.releases++
	}
	if cancel {
		r.cancels++
	}
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start {
		go c.sendRetries()
	}
	return true
}

// sendRetries sends the queue's updates in turns until it is empty (or
// closed), pausing longer after each turn in which the store took none,
// and stops.
func (c *Counters) sendRetries() {
	r := &c.retries
	pause := retryFirst
	for {
		r.mu.Lock()
		turn := len(r.queue)
		r.mu.Unlock()
		// Once the server stops, every update is tried once more without
		// pausing: those due at once, then, after a wait, the releases and
		// cancels still waiting out the second their hold or take may be
		// on its way for (until Close gives up); the sender gives up after
		// a turn the store refused any of.
		closing := false
		select {
		case <-r.closing:
			closing = true
		default:
		}
		took, failed, early := false, false, time.Time{}
		for range turn {
			p, ok := r.next()
			if !ok {
				break
			}
			now := time.Now()
			if now.Before(p.after) {
				if early.IsZero() || p.after.Before(early) {
					early = p.after
				}
				r.requeue(p)
				continue
			}
			ended := p.lasts > 0 && now.Sub(p.kept) > p.lasts
			var err error
			if !ended {
				ctx, cancel := context.WithTimeout(r.stop, retryTimeout)
				_, err = c.freq.Update(ctx, &p.u, nil)
				cancel()
			}
			invalid := tsubame.ErrorCode(err) == tsubame.EINVALID // never taken: not sent again
			if err != nil && !invalid {
				if r.stop.Err() == nil { // not a call Close cut short
					c.errors.Add(1)
				}
				r.requeue(p)
				failed = true
				continue
			}
			took = took || err == nil && !ended
			r.mu.Lock()
			r.sending = 0
			if p.u.Op != tsubame.FrequencyCount {
				r.releases--
			}
			if p.u.Op == tsubame.FrequencyCancel {
				r.cancels--
			}
			switch {
			case invalid:
				r.dropped++
			case !ended:
				r.sent++
			}
			r.mu.Unlock()
			if invalid && c.log != nil {
				c.log.Error("a frequency cap's update is lost: the store refuses it", "op", p.u.Op.String(), "line_item", p.u.LineItem, "err", err)
			}
			if err == nil && !ended {
				c.answered()
			}
		}
		r.mu.Lock()
		if closing && failed {
			r.closed = true // the store still refuses: what is left is lost
		}
		if len(r.queue) == 0 || r.closed {
			r.running = false
			r.idle.Broadcast()
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		// A turn the store took none of pauses, doubling while it fails,
		// but no later than the first update not due yet (all a
		// stopping sender waits for: a failure has closed the queue).
		var wait time.Duration
		if took {
			pause = retryFirst
		} else {
			if failed {
				wait, pause = pause, min(2*pause, retryLast)
			}
			if !early.IsZero() && (!failed || time.Until(early) < wait) {
				wait = time.Until(early)
			}
		}
		if wait > 0 {
			closed := r.closing // Close ends the pause
			if closing {
				closed = nil // closed already: it would end the wait at once
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-closed:
				t.Stop()
			case <-r.stop.Done():
				t.Stop()
			}
		}
	}
}

// next takes the queue's first update, false when none is left or the
// queue is closed.
func (r *retries) next() (pendingUpdate, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 || r.closed {
		return pendingUpdate{}, false
	}
	p := r.queue[0]
	r.queue[0] = pendingUpdate{}
	r.queue = r.queue[1:]
	r.sending = 1
	return p, true
}

// requeue puts p back, at the end. The sender that took it runs until it
// has: Close counts what is left after it stops.
func (r *retries) requeue(p pendingUpdate) {
	r.mu.Lock()
	r.queue = append(r.queue, p)
	r.sending = 0
	r.mu.Unlock()
}

// CapStats count the frequency caps' store calls that failed (Errors, as
// Counters.Errors), and of the updates the store did not take when asked:
// those still waiting to be sent again (Pending), those taken on a retry
// (Sent), and those lost (Dropped: too many waiting, refused by the
// store, or left waiting when the Counters closed).
type CapStats struct {
	Errors        uint64
	Pending       int
	Sent, Dropped uint64
}

// Stats reports the caps' store failures and retries (CapStats).
func (c *Counters) Stats() CapStats {
	r := &c.retries
	r.mu.Lock()
	defer r.mu.Unlock()
	return CapStats{Errors: c.errors.Load(), Pending: len(r.queue) + r.sending, Sent: r.sent, Dropped: r.dropped}
}

// Close sends at once the cap updates waiting to be sent again, each once
// more whether due or not (a release or a cancel kept less than a second
// ago when its hold's or take's answer came late first waits out that
// second), and waits while the store takes them, until none is left, a
// turn ends in which the store refused one, or ctx ends; then it sends no
// more, and those left are lost (counted in CapStats.Dropped and logged). Updates that fail after Close
// are not kept. A server calls it when it stops, before closing its store.
func (c *Counters) Close(ctx context.Context) error {
	r := &c.retries
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		return nil
	}
	r.stopping = true
	close(r.closing)
	r.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.cancel() // the sender's call and pause end: it stops
	})
	defer stop()
	r.mu.Lock()
	for r.running {
		r.idle.Wait()
	}
	r.closed = true
	left := len(r.queue)
	r.dropped += uint64(left)
	r.queue, r.releases, r.cancels = nil, 0, 0
	r.mu.Unlock()
	r.cancel()
	if left > 0 {
		if c.log != nil {
			c.log.Error("frequency caps' updates lost at the stop: the store did not take them", "lost", left)
		}
		return tsubame.Errorf(tsubame.EUNAVAILABLE, "%d frequency cap updates not taken by the store", left)
	}
	return nil
}
