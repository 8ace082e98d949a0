package server

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// deadlines enforces the read and write deadlines the HTTP engine sets on
// every connection several times a request (idle, read, write). Setting a
// deadline on a net.Conn moves a runtime timer, with its clock read and its
// lock: about 3 % of a cached request's CPU on two cores. Here a deadline is
// an atomic store on the connection, and one goroutine sweeps all
// connections every tick and expires those past their deadline by setting a
// real deadline in the past, which ends the blocked read or write with the
// same timeout error a timer would have raised. A deadline fires at most one
// tick late; one closer than two ticks is set on the connection directly.
type deadlines struct {
	every  time.Duration
	now    atomic.Int64 // unix nanoseconds at the last tick
	next   atomic.Uint32
	shards [deadlineShards]deadlineShard
	stop   chan struct{}
	once   sync.Once
}

const deadlineShards = 16

type deadlineShard struct {
	mu    sync.Mutex
	conns map[*countedConn]struct{}
	_     [48]byte // pads the shard to 64 bytes: neighbouring locks on separate cache lines
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// aLongTimeAgo is a deadline that has passed: setting it ends a blocked read
// or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// tickFor returns the sweep interval for the given timeouts: a tenth of the
// shortest, between 5 ms and 100 ms.
func tickFor(timeouts ...time.Duration) time.Duration {
	tick := 100 * time.Millisecond
	for _, d := range timeouts {
		if d > 0 {
			tick = min(tick, d/10)
		}
	}
	return max(tick, 5*time.Millisecond)
}

func newDeadlines(every time.Duration) *deadlines {
	d := &deadlines{every: every, stop: make(chan struct{})}
	d.now.Store(time.Now().UnixNano())
	for i := range d.shards {
		d.shards[i].conns = map[*countedConn]struct{}{}
	}
	go d.run()
	return d
}

func (d *deadlines) run() {
	t := time.NewTicker(d.every)
	defer t.Stop()
	var due []*countedConn
	for {
		select {
		case <-d.stop:
			return
		case now := <-t.C:
			ns := now.UnixNano()
			d.now.Store(ns)
			for i := range d.shards {
				sh := &d.shards[i]
				sh.mu.Lock()
				for c := range sh.conns {
					if r, w := c.rd.Load(), c.wd.Load(); (r != 0 && r <= ns) || (w != 0 && w <= ns) {
						due = append(due, c)
					}
				}
				sh.mu.Unlock()
			}
			for i, c := range due {
				c.expire(ns)
				due[i] = nil
			}
			due = due[:0]
		}
	}
}

// close stops the sweep; connections still open keep only the deadlines
// already set on them.
func (d *deadlines) close() { d.once.Do(func() { close(d.stop) }) }

func (d *deadlines) add(c *countedConn) {
	c.dl = d
	c.shard = &d.shards[d.next.Add(1)%deadlineShards]
	c.shard.mu.Lock()
	c.shard.conns[c] = struct{}{}
	c.shard.mu.Unlock()
}

func (d *deadlines) remove(c *countedConn) {
	c.shard.mu.Lock()
	delete(c.shard.conns, c)
	c.shard.mu.Unlock()
}

// Deadline kinds, as bits of countedConn.armed.
const (
	readDeadline  = 1
	writeDeadline = 2
)

// SetReadDeadline records t as the connection's read deadline.
func (c *countedConn) SetReadDeadline(t time.Time) error {
	return c.setDeadline(readDeadline, t)
}

// SetWriteDeadline records t as the connection's write deadline.
func (c *countedConn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(writeDeadline, t)
}

// SetDeadline records t as both deadlines.
func (c *countedConn) SetDeadline(t time.Time) error {
	if err := c.setDeadline(readDeadline, t); err != nil {
		return err
	}
	return c.setDeadline(writeDeadline, t)
}

// setDeadline stores a deadline for the sweep, or sets a near one on the
// connection itself. The store, then the load of armed, pairs with expire's
// store of armed, then its load of the deadline: of a new deadline and an
// expiry that race, at least one sees the other, so a connection never keeps
// a real deadline in the past once a later one is recorded.
func (c *countedConn) setDeadline(kind uint32, t time.Time) error {
	// As on a net.Conn, a closed connection refuses a deadline: fasthttp
	// takes that error as the sign that a connection it was about to serve
	// was closed under it (by Shutdown closing idle connections) and drops
	// the request instead of answering into a closed socket.
	if c.closed.Load() {
		return &net.OpError{Op: "set", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: net.ErrClosed}
	}
	if c.adopted && c.fresh && kind == readDeadline && !t.IsZero() {
		// An adopted connection's first request is, for its client, the
		// next on a kept-alive connection: it may come up to idle_timeout
		// after the last one, not read_timeout.
		t = later(t, time.Now().Add(c.l.idle))
	}
	slot := &c.rd
	if kind == writeDeadline {
		slot = &c.wd
	}
	// A read deadline that a drain expired (drain.go: claim) stays expired
	// whatever fasthttp sets after it, until the claim is taken back: the
	// checks are under c.mu, as the claim is.
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
		if ns-c.dl.now.Load() < 2*int64(c.dl.every) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if kind == readDeadline && c.idle.Load() == connClaimed {
				slot.Store(ns)
				return nil
			}
			slot.Store(0)
			c.armed |= kind
			c.armedAny.Store(c.armed)
			return c.setReal(kind, t)
		}
	}
	slot.Store(ns)
	if c.armedAny.Load()&kind == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed&kind == 0 || (kind == readDeadline && c.idle.Load() == connClaimed) {
		return nil
	}
	c.armed &^= kind
	c.armedAny.Store(c.armed)
	return c.setReal(kind, time.Time{})
}

// expire ends the connection's blocked read or write whose deadline is at or
// before now.
func (c *countedConn) expire(now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, kind := range [2]uint32{readDeadline, writeDeadline} {
		slot := &c.rd
		if kind == writeDeadline {
			slot = &c.wd
		}
		was := c.armed&kind != 0
		c.armed |= kind
		c.armedAny.Store(c.armed)
		if ns := slot.Load(); ns != 0 && ns <= now {
			slot.CompareAndSwap(ns, 0) // expired once is enough
			_ = c.setReal(kind, aLongTimeAgo)
			continue
		}
		if !was {
			c.armed &^= kind
			c.armedAny.Store(c.armed)
		}
	}
}

func (c *countedConn) setReal(kind uint32, t time.Time) error {
	if kind == readDeadline {
		return c.Conn.SetReadDeadline(t)
	}
	return c.Conn.SetWriteDeadline(t)
}
