package server

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// TLS on the public listener.
//
// The TLS listener serves the same handler as the plain one, over HTTP/1.1:
// fasthttp has no HTTP/2, so ALPN offers only http/1.1 and clients that
// would speak h2 fall back to it. Connections are accepted, counted and
// bounded like plain ones (one bound for both); the handshake runs on the
// connection's own goroutine, at its first read, under read_timeout, so a
// slow or silent client never holds the accept loop. Certificates come from
// tls.Config (GetCertificate), which the caller may swap underneath.

// ServeTLS accepts TLS connections on ln until Shutdown, presenting the
// certificates cfg picks. It returns like Serve.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	return s.serveOn(ln, &tlsServing{cfg: cfg, failed: &s.counters.tlsHandshake, timedOut: &s.counters.timeout})
}

// tlsServing wraps accepted connections in TLS.
type tlsServing struct {
	cfg              *tls.Config
	failed, timedOut *atomic.Uint64
}

func (t *tlsServing) wrap(c *countedConn) net.Conn {
	return &tlsConn{Conn: tls.Server(c, t.cfg), raw: c, t: t}
}

// tlsConn is a server-side TLS connection that completes its handshake on
// the first read, counting failures, and answers plain HTTP with a 400 in
// plain text rather than a TLS alert the client cannot read.
type tlsConn struct {
	*tls.Conn
	raw *countedConn
	t   *tlsServing
	// Only the connection's goroutine reads: no lock.
	shook  bool
	failed bool // the handshake failed: the error handler has nothing to answer
}

// Handshake runs the handshake once, counting a failure; the engine calls
// it before reading, Read calls it in case it did not.
func (c *tlsConn) Handshake() error {
	if c.shook {
		return c.Conn.Handshake() // done: its result again
	}
	c.shook = true
	err := c.Conn.Handshake()
	if err != nil {
		c.handshakeFailed(err)
	}
	return err
}

func (c *tlsConn) Read(b []byte) (int, error) {
	if !c.shook {
		if err := c.Handshake(); err != nil {
			return 0, err
		}
	}
	n, err := c.Conn.Read(b)
	if c.raw.fresh && n > 0 {
		c.raw.firstBytes()
	}
	return n, err
}

// handshakeFailed reports whether ctx's connection is a TLS one whose
// handshake failed: the engine then reports the read error to the error
// handler, which must neither count it again nor answer.
func handshakeFailed(ctx *fasthttp.RequestCtx) bool {
	c, ok := ctx.Conn().(*tlsConn)
	return ok && c.failed
}

// plainOnTLS is the answer to an HTTP request sent to the TLS port, as
// net/http gives it.
var plainOnTLS = []byte("HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"Client sent an HTTP request to an HTTPS server.\n")

func (c *tlsConn) handshakeFailed(err error) {
	c.failed = true
	if errors.Is(err, io.EOF) {
		return // connected and left without a word: a TCP health check
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// A handshake not finished within read_timeout is a slow client
		// like one that does not finish its request head.
		c.t.timedOut.Add(1)
		return
	}
	c.t.failed.Add(1)
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) && rh.Conn != nil && looksLikeHTTP(rh.RecordHeader[:]) {
		_ = rh.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = rh.Conn.Write(plainOnTLS)
	}
}

// looksLikeHTTP reports whether the first five bytes of a connection are
// the start of an HTTP/1 request line.
func looksLikeHTTP(hdr []byte) bool {
	for _, m := range [...]string{"GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH"} {
		if bytes.HasPrefix(hdr, []byte(m)) {
			return true
		}
	}
	return false
}
