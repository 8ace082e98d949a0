package server

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pires/go-proxyproto"
	"github.com/valyala/fasthttp"
)

// Reasons a request or connection was refused, as reported in Stats.
const (
	ReasonConns            = "max_conns"          // too many connections: 503 and close
	ReasonInFlightAds      = "in_flight_ads"      // too many ad requests at once (/api/, /rtb/): 503, a bare 204 for a bid
	ReasonInFlightTracking = "in_flight_tracking" // too many tracking and notice requests at once (/t/): 503
	ReasonInFlightHooks    = "in_flight_hooks"    // too many webhook requests at once: 503
	ReasonHeader           = "header_too_large"   // request head over max_header_bytes: 431
	ReasonBody             = "body_too_large"     // body over max_body_bytes: 413
	ReasonTimeout          = "read_timeout"       // request not read within read_timeout (slowloris): 408
	ReasonMalformed        = "malformed"          // unparsable request: 400
	ReasonFraming          = "framing"            // ambiguous framing (smuggling shapes): 400 and close
	ReasonCallbackAuth     = "callback_auth"      // POST /callback without its bearer token: 401
	ReasonTLSHandshake     = "tls_handshake"      // TLS handshake failed (no shared version or suite, unknown name, plain HTTP): close
)

// Stats counts what the limits refused, by reason.
type Stats struct {
	Refused map[string]uint64
	Conns   int64  // connections open now
	Panics  uint64 // handler panics answered with a 500
}

type counters struct {
	conns, adsLimit, trackLimit, hookLimit, header, body, timeout, malformed, framing, callbackAuth, tlsHandshake atomic.Uint64
	panics                                                                                                        atomic.Uint64
}

// gate bounds how many requests of one class run at once. Acquiring costs an
// atomic add on the fast path; over the bound, the request waits up to wait
// for a slot (polling, since slots free in microseconds) and is then refused.
type gate struct {
	max     int64
	wait    time.Duration
	current atomic.Int64
}

func (g *gate) enter() bool {
	if g == nil || g.max <= 0 {
		return true
	}
	if g.current.Add(1) <= g.max {
		return true
	}
	g.current.Add(-1)
	if g.wait <= 0 {
		return false
	}
	deadline := time.Now().Add(g.wait)
	for pause := 50 * time.Microsecond; time.Now().Before(deadline); pause = min(2*pause, 5*time.Millisecond) {
		time.Sleep(pause)
		if g.current.Add(1) <= g.max {
			return true
		}
		g.current.Add(-1)
	}
	return false
}

func (g *gate) leave() {
	if g != nil && g.max > 0 {
		g.current.Add(-1)
	}
}

// limitListener refuses connections over max with a fast 503 (rather than
// letting them queue in a worker pool or hang), and counts open ones.
type limitListener struct {
	net.Listener
	max     int64
	open    *atomic.Int64 // shared by the plain and TLS listeners: one bound for the process
	refused *atomic.Uint64
	dl      *deadlines
	// tls, if set, makes this a TLS listener: an accepted connection is
	// returned wrapped for the handshake (tls.go), and one over the bound
	// is closed without an answer (a plain-text 503 is not TLS).
	tls *tlsServing
	// adopted: the connections come from a predecessor (handoff.go), each
	// waiting for its next request up to idle rather than read_timeout.
	adopted bool
	idle    time.Duration
	// readTimeout bounds an adopted connection's request from its first byte.
	readTimeout time.Duration
}

var refusal = []byte("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 31\r\nConnection: close\r\n\r\ntoo many connections, retry later")

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max > 0 && l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			if l.tls != nil || l.adopted {
				// No plain-text 503 for a TLS client, nor an unasked one
				// on a connection its client thinks kept alive.
				_ = c.Close()
				continue
			}
			go func() {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Write(refusal)
				_ = c.Close()
			}()
			continue
		}
		if l.max <= 0 {
			l.open.Add(1)
		}
		cc := &countedConn{Conn: c, l: l, plain: l.tls == nil, fresh: true, adopted: l.adopted}
		if pc, ok := c.(*proxyproto.Conn); ok {
			cc.viaProxy = true
			// The client's address is in a PROXY header not read yet:
			// reading it here would let one slow peer hold the accept loop.
			cc.peer, cc.proxied = tcpAddr(pc.Raw()), true
		} else if ac, ok := c.(*adoptedConn); ok && ac.remote != nil {
			// Handed over with the client address its PROXY header named.
			cc.peer, cc.remote = tcpAddr(ac.Conn), ac.remote.AddrPort().Addr().Unmap()
		} else {
			cc.peer = tcpAddr(c)
			cc.remote = cc.peer
		}
		l.dl.add(cc)
		if l.tls != nil {
			return l.tls.wrap(cc), nil
		}
		return cc, nil
	}
}

// countedConn is an accepted connection: counted while open, with its
// deadlines kept for the sweep (deadlines.go).
type countedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once

	dl       *deadlines
	shard    *deadlineShard
	rd, wd   atomic.Int64  // deadlines for the sweep, unix nanoseconds; 0: none
	armedAny atomic.Uint32 // armed, for a lock-free look
	mu       sync.Mutex    // guards armed and real deadline changes
	armed    uint32        // kinds with a real deadline set on Conn
	closed   atomic.Bool   // Close was called
	// remote is the client's address, read once at accept: beside the
	// deadlines every request touches, where the access log reads it
	// without two cache misses on the socket's address objects.
	remote netip.Addr
	// peer is the TCP peer's address; proxied says remote is still to be
	// read from the PROXY header (by the connection's own goroutine, at
	// its first request, when the header has been read).
	peer    netip.Addr
	proxied bool

	// idle is when the connection became idle (deadlines' clock), or
	// connBusy, or connClaimed (drain.go).
	idle atomic.Int64
	// plain is a connection without TLS, which a drain may hand over;
	// one viaProxy only once answered (its PROXY header read).
	plain, viaProxy bool
	answered        atomic.Bool
	// fresh is a connection that has not read a byte yet; adopted, one a
	// predecessor handed over (for fasthttp a new connection, though its
	// client sees one kept alive); mute drops what is written. Only the
	// connection's own goroutine reads and writes these.
	fresh, adopted, mute bool
	// handoff, set by a drain's claim under mu, receives the connection
	// instead of it being closed.
	handoff *Handoff
}

// tcpAddr is c's peer address, or the zero Addr for another kind of conn.
func tcpAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// Write drops what fasthttp writes to a muted connection (see errorHandler).
func (c *countedConn) Write(b []byte) (int, error) {
	if c.mute {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// handingOff reports whether a drain claimed c for its successor.
func (c *countedConn) handingOff() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handoff != nil
}

func (c *countedConn) Close() error {
	c.closed.Store(true)
	c.once.Do(func() {
		c.mu.Lock()
		h := c.handoff
		c.mu.Unlock()
		if h != nil {
			// Claimed idle by a drain, with nothing read since: the
			// successor serves it from here. Closing this copy then ends
			// nothing.
			_ = h.send(c.Conn)
		}
		c.l.open.Add(-1)
		c.dl.remove(c)
	})
	return c.Conn.Close()
}

// errorHandler answers requests fasthttp could not read, and counts them.
func (s *Server) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	if handshakeFailed(ctx) {
		return // counted by the TLS connection; there is no channel to answer on
	}
	if c := rawConn(ctx.Conn()); c != nil && c.fresh && (c.adopted || c.handingOff()) {
		// Not a byte read: an adopted connection ends as a keep-alive one
		// does, without an answer, and one a drain hands over must reach
		// the successor as it came.
		c.mute = true
		return
	}
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.As(err, &small):
		s.counters.header.Add(1)
		plain(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "request head too large")
	case errors.Is(err, fasthttp.ErrBodyTooLarge) && s.unauthorizedCallback(&ctx.Request.Header):
		// Bounded to a byte by headerReceived: the body was never read.
		s.authorized(ctx, s.routes.Load().callbackKey)
		ctx.SetConnectionClose()
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		s.counters.body.Add(1)
		plain(ctx, fasthttp.StatusRequestEntityTooLarge, "request body too large")
	case errors.As(err, &netErr) && netErr.Timeout():
		s.counters.timeout.Add(1)
		plain(ctx, fasthttp.StatusRequestTimeout, "request not received in time")
	default:
		s.counters.malformed.Add(1)
		plain(ctx, fasthttp.StatusBadRequest, "malformed request")
	}
}

// Stats returns the refusal counters.
func (s *Server) Stats() Stats {
	st := Stats{Refused: map[string]uint64{
		ReasonConns:            s.counters.conns.Load(),
		ReasonInFlightAds:      s.counters.adsLimit.Load(),
		ReasonInFlightTracking: s.counters.trackLimit.Load(),
		ReasonInFlightHooks:    s.counters.hookLimit.Load(),
		ReasonHeader:           s.counters.header.Load(),
		ReasonBody:             s.counters.body.Load(),
		ReasonTimeout:          s.counters.timeout.Load(),
		ReasonMalformed:        s.counters.malformed.Load(),
		ReasonFraming:          s.counters.framing.Load(),
		ReasonCallbackAuth:     s.counters.callbackAuth.Load(),
		ReasonTLSHandshake:     s.counters.tlsHandshake.Load(),
	}, Panics: s.counters.panics.Load()}
	st.Conns = s.open.Load()
	return st
}
