package server

import (
	"context"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// Draining without a client error. A keep-alive client may send its next
// request at any moment, so closing a connection that sits between requests
// (what fasthttp's Shutdown and nginx's graceful quit do at once) races with
// that request: the client sees a FIN or an RST after sending, and clients
// that do not retry (wrk, ad SDKs, exchanges' bid callers) count an error.
// So Shutdown instead:
//
//  1. stops accepting (the listeners close; fasthttp's workers keep serving
//     the connections they have);
//  2. answers every request from then on with "Connection: close", so a
//     busy connection ends cleanly after its next response, closed by the
//     client that read that header;
//  3. with a successor that adopts connections (SetHandoff), passes each
//     idle plain-text connection to it at once, socket and all: bytes the
//     client sends meanwhile wait in the kernel's buffer for the successor,
//     so nothing races (a connection through the PROXY protocol goes once
//     its header is read, after its first answer, with the client address
//     it named);
//  4. ends any other connection (TLS, a PROXY connection that has not
//     sent a request yet, or every one without a successor) only
//     once it has sat idle for DrainGrace since its last answer: a client
//     that sends its requests back to back meets a Connection: close, and
//     one silent that long is unlikely to be mid-send. Counting from the
//     last answer rather than from the stop keeps a drain short: it lasts
//     DrainGrace at most, and a handover on the embedded store waits for it
//     (the store's lock passes when the drain is over).
//
// An idle connection is let go by expiring its read deadline: fasthttp's
// wait for the next request returns with nothing read and it closes the
// connection without an answer (a connection that never sent a request is
// answered 408, which clients take as "retry on a new connection").

// Connection states kept in countedConn.idle besides the coarse clock
// (deadlines.now) at which the connection became idle.
const (
	connBusy    = 0  // reading or answering a request
	connClaimed = -1 // the drain is letting it go
)

// connState is fasthttp's ConnState hook: it records when a connection
// becomes idle, as one atomic store on the connection.
func (s *Server) connState(nc net.Conn, st fasthttp.ConnState) {
	c := rawConn(nc)
	if c == nil {
		return
	}
	switch st {
	case fasthttp.StateIdle:
		if !c.answered.Load() {
			c.answered.Store(true)
		}
		c.idle.Store(s.deadlines.now.Load())
	case fasthttp.StateNew:
		c.idle.Store(s.deadlines.now.Load())
	case fasthttp.StateActive:
		// fasthttp says Active before a connection's first request has
		// sent a byte; Read marks that one busy when its bytes come.
		if c.answered.Load() {
			c.busy()
		}
	}
}

// busy marks the connection as reading or answering a request. If the
// drain claimed it as its request arrived, the request is answered (with
// Connection: close) here: take back the expired deadline before fasthttp
// reads on.
func (c *countedConn) busy() {
	if c.idle.Swap(connBusy) == connClaimed {
		c.unclaim()
	}
}

// Read marks a new plain connection busy when its first request bytes
// come (a PROXY header is read by proxyproto before fasthttp sees a byte,
// which a drain's claim may cut short like any wait); a TLS connection is
// marked busy by tlsConn.Read, on its first decrypted byte, so that one
// that only shook hands (a preconnect) stays idle for the drain. On an
// adopted connection the first byte starts read_timeout for the request.
func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.fresh && n > 0 && c.plain {
		c.firstBytes()
	}
	return n, err
}

// firstBytes marks a new connection busy at its first request bytes.
func (c *countedConn) firstBytes() {
	c.fresh = false
	c.busy()
	if c.adopted {
		_ = c.SetReadDeadline(time.Now().Add(c.l.readTimeout))
	}
}

// rawConn is the accepted connection under nc, or nil.
func rawConn(nc net.Conn) *countedConn {
	switch c := nc.(type) {
	case *countedConn:
		return c
	case *tlsConn:
		return c.raw
	}
	return nil
}

// claim ends an idle connection's wait for its next request, unless it has
// just become busy; h, if set, receives the connection when fasthttp
// closes it. The claim and the expiry are one step under c.mu, so an
// unclaim (which takes c.mu after the request's first byte) always follows
// a whole expiry.
func (c *countedConn) claim(since int64, h *Handoff) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.idle.CompareAndSwap(since, connClaimed) {
		return false
	}
	c.handoff = h
	c.armed |= readDeadline
	c.armedAny.Store(c.armed)
	_ = c.setReal(readDeadline, aLongTimeAgo)
	return true
}

// unclaim undoes claim for a connection whose request arrived as it was
// claimed: it stays here, and its read deadline is fasthttp's again.
func (c *countedConn) unclaim() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handoff = nil
	// While claimed, setDeadline left the expired deadline in place and
	// only recorded fasthttp's, which the sweep now enforces.
	c.armed &^= readDeadline
	c.armedAny.Store(c.armed)
	_ = c.setReal(readDeadline, time.Time{})
}

// drain waits, after the listeners have closed, until every connection has
// ended or ctx ends, letting idle ones go as described above.
func (s *Server) drain(ctx context.Context) error {
	grace := int64(s.drainGrace)
	h := s.handoff.Load()
	if h != nil {
		h.probe()
	}
	var idle []*countedConn
	var since []int64
	for s.open.Load() > 0 || s.loops.Load() > 0 {
		now := time.Now().UnixNano()
		handing := h != nil && !h.Failed()
		idle, since = s.idleConns(idle[:0], since[:0])
		for i, c := range idle {
			switch {
			case handing && c.plain && (!c.viaProxy || c.answered.Load()):
				c.claim(since[i], h)
			case now-since[i] >= grace:
				c.claim(since[i], nil)
			}
			idle[i] = nil
		}
		// A handover waits for its last connection: look often while
		// connections go to the successor; a look walks every connection,
		// so less often while only the grace runs.
		wait := drainTick
		if !handing {
			wait = graceTick
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// How often a drain looks for connections to let go: during a handover,
// and while only the grace runs.
const (
	drainTick = 2 * time.Millisecond
	graceTick = 25 * time.Millisecond
)

// idleConns appends the idle connections and the times they became idle.
func (s *Server) idleConns(out []*countedConn, since []int64) ([]*countedConn, []int64) {
	for i := range s.deadlines.shards {
		sh := &s.deadlines.shards[i]
		sh.mu.Lock()
		for c := range sh.conns {
			if t := c.idle.Load(); t > 0 {
				out, since = append(out, c), append(since, t)
			}
		}
		sh.mu.Unlock()
	}
	return out, since
}
