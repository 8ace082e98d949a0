package server

import (
	"bytes"
	"net"
	"net/netip"
	"time"

	"github.com/pires/go-proxyproto"
	"github.com/valyala/fasthttp"
)

// The real client's address, behind load balancers.
//
// The connection's peer is the client unless it is a trusted proxy
// (Options.TrustedProxies). A trusted peer may send a PROXY protocol header
// (v1 or v2, with Options.ProxyProtocol; optional for it), whose source
// address then stands for the peer; from any other peer a PROXY line is
// not looked for, so it reaches the HTTP parser and is refused as a
// malformed request. If the address so far is a trusted proxy, the client
// is the rightmost untrusted address of X-Forwarded-For (or, without it,
// of Forwarded's for= parameters): each trusted proxy appends the address
// it saw, and anything left of the first untrusted one was written by the
// client. Headers from untrusted peers are ignored.

// proxyListener reads PROXY headers from trusted peers only.
func (s *Server) proxyListener(ln net.Listener, headerTimeout time.Duration) net.Listener {
	return &proxyproto.Listener{
		Listener:          ln,
		ReadHeaderTimeout: headerTimeout,
		ConnPolicy: func(o proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
			if ta, ok := o.Upstream.(*net.TCPAddr); ok && s.trusted(ta.AddrPort().Addr().Unmap()) {
				return proxyproto.USE, nil // the header is optional
			}
			return proxyproto.SKIP, nil
		},
	}
}

// trusted reports whether a is one of the trusted proxies.
func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.trustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

const (
	hdrXFF       = "X-Forwarded-For"
	hdrForwarded = "Forwarded"
)

// clientAddr returns the request's client and the connection's peer.
func (s *Server) clientAddr(ctx *fasthttp.RequestCtx) (client, peer netip.Addr) {
	var c *countedConn
	switch conn := ctx.Conn().(type) {
	case *countedConn:
		c = conn
	case *tlsConn:
		c = conn.raw
	default: // not through Serve (tests driving the handler directly)
		a, _ := netip.AddrFromSlice(ctx.RemoteIP())
		return a.Unmap(), a.Unmap()
	}
	if c.proxied {
		// Only this connection's goroutine gets here, after its first
		// request was read, so the header (if any) has been read too.
		if ta, ok := c.Conn.RemoteAddr().(*net.TCPAddr); ok {
			c.remote = ta.AddrPort().Addr().Unmap()
		}
		c.proxied = false
	}
	client, peer = c.remote, c.peer
	if !edgeChecks || len(s.trustedProxies) == 0 || !s.trusted(client) {
		return client, peer
	}
	if xff := ctx.Request.Header.PeekAll(hdrXFF); len(xff) > 0 {
		for i := len(xff) - 1; i >= 0; i-- {
			var done bool
			if client, done = s.walk(xff[i], client, forwardedFor); done {
				return client, peer
			}
		}
		return client, peer
	}
	fwd := ctx.Request.Header.PeekAll(hdrForwarded)
	for i := len(fwd) - 1; i >= 0; i-- {
		var done bool
		if client, done = s.walk(fwd[i], client, forwardedParam); done {
			return client, peer
		}
	}
	return client, peer
}

// walk goes through a comma-separated list from the right, starting from
// the address cur (trusted): each element's address becomes the client
// until one is untrusted (done) or cannot be read (done, keeping cur).
func (s *Server) walk(list []byte, cur netip.Addr, parse func([]byte) (netip.Addr, bool)) (netip.Addr, bool) {
	for len(list) > 0 {
		elem := list
		if i := bytes.LastIndexByte(list, ','); i >= 0 {
			elem, list = list[i+1:], list[:i]
		} else {
			list = nil
		}
		a, ok := parse(bytes.TrimSpace(elem))
		if !ok {
			return cur, true
		}
		cur = a
		if !s.trusted(a) {
			return cur, true
		}
	}
	return cur, false
}

// forwardedFor reads an X-Forwarded-For element: an address, possibly
// with a port.
func forwardedFor(b []byte) (netip.Addr, bool) {
	return parseNode(b)
}

// forwardedParam reads the for= node of a Forwarded element (RFC 7239):
// for=192.0.2.60, for="[2001:db8::1]:4711"; "unknown" and obfuscated
// identifiers cannot be read.
func forwardedParam(b []byte) (netip.Addr, bool) {
	for len(b) > 0 {
		pair := b
		if i := bytes.IndexByte(b, ';'); i >= 0 {
			pair, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		pair = bytes.TrimSpace(pair)
		if len(pair) > 4 && bytes.EqualFold(pair[:4], []byte("for=")) {
			v := pair[4:]
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return parseNode(v)
		}
	}
	return netip.Addr{}, false
}

// parseNode reads an address, an address:port or [v6]:port.
func parseNode(b []byte) (netip.Addr, bool) {
	s := string(b)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' { // [v6] without a port
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}
