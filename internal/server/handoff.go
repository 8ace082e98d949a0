package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pires/go-proxyproto"
)

// Handing idle connections to a successor process (see drain.go). The two
// processes share a SOCK_SEQPACKET Unix socket pair; each message carries one
// connection's socket as SCM_RIGHTS and one byte. The sender's copy is closed
// once sent, which ends nothing: the successor's copy keeps the connection
// open, and a request the client sends meanwhile waits in the socket.

// HandoffPair returns a connected socket pair for a handover: the
// predecessor keeps one end for NewHandoff, the successor inherits the other
// for Adopt.
func HandoffPair() (predecessor, successor *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot make the handover socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "handoff"), os.NewFile(uintptr(fds[1]), "handoff"), nil
}

// Handoff sends idle connections to a successor. Safe for concurrent use.
type Handoff struct {
	conn   *net.UnixConn
	mu     sync.Mutex
	sent   int
	err    error       // the first send that failed; later ones are not tried
	failed atomic.Bool // err is set: the drain falls back to its grace
}

// sendTimeout bounds one send: a successor that does not take what is sent
// (stalled, or an older build that does not adopt) must not hold the drain,
// which then closes idle connections after its grace instead.
const sendTimeout = time.Second

// unixConnOf takes over f, one end of a HandoffPair.
func unixConnOf(f *os.File) (*net.UnixConn, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("handover socket is not a unix socket")
	}
	return uc, nil
}

// NewHandoff takes over f, the predecessor's end of a HandoffPair.
func NewHandoff(f *os.File) (*Handoff, error) {
	uc, err := unixConnOf(f)
	if err != nil {
		return nil, err
	}
	return &Handoff{conn: uc}, nil
}

// SetHandoff makes a drain pass idle plain-text connections to h instead
// of waiting for them. Call it before Shutdown.
func (s *Server) SetHandoff(h *Handoff) { s.handoff.Store(h) }

// Message kinds: a plain connection, or one whose client address came in a
// PROXY header (already read), sent as text after the kind.
const (
	msgPlain   = 'c'
	msgProxied = 'p'
	msgProbe   = 'n' // no socket: see probe
)

// send passes c's socket to the successor. On failure the caller closes
// c; the drain then lets the remaining idle connections go after its grace
// (Failed).
func (h *Handoff) send(c net.Conn) error {
	msg := []byte{msgPlain}
	switch pc := c.(type) {
	case *proxyproto.Conn:
		// Only after a request: the header is read, and RemoteAddr (the
		// client's address) does not wait for it.
		msg = append([]byte{msgProxied}, pc.RemoteAddr().String()...)
		c = pc.Raw()
	case *adoptedConn:
		if pc.remote != nil {
			msg = append([]byte{msgProxied}, pc.remote.String()...)
		}
		c = pc.Conn
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return errors.New("not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return h.err
	}
	var werr error
	_ = h.conn.SetWriteDeadline(time.Now().Add(sendTimeout))
	if err := rc.Control(func(fd uintptr) {
		_, _, werr = h.conn.WriteMsgUnix(msg, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		werr = err
	}
	if werr != nil {
		h.err = werr
		h.failed.Store(true)
		return werr
	}
	h.sent++
	return nil
}

// probe checks, before the drain claims connections for it, that the
// successor's end is still there: a message without a socket, which Adopt
// skips. A successor gone since it said ready then costs nothing: the idle
// connections get the grace, as without one.
func (h *Handoff) probe() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return
	}
	_ = h.conn.SetWriteDeadline(time.Now().Add(sendTimeout))
	if _, _, err := h.conn.WriteMsgUnix([]byte{msgProbe}, nil, nil); err != nil {
		h.err = err
		h.failed.Store(true)
	}
}

// Failed reports whether a send failed; later ones are not tried.
func (h *Handoff) Failed() bool { return h.failed.Load() }

// Close ends the handover: the successor's Adopt listener then returns
// net.ErrClosed once it has handed out every connection sent. It returns
// how many connections were passed.
func (h *Handoff) Close() (int, error) {
	_ = h.conn.SetWriteDeadline(aLongTimeAgo) // a send still waiting gives up
	h.mu.Lock()
	defer h.mu.Unlock()
	var err error
	if h.err != nil && !errors.Is(h.err, net.ErrClosed) {
		err = fmt.Errorf("handing connections over: %w", h.err)
	}
	if h.err == nil {
		h.err = net.ErrClosed
		h.failed.Store(true)
	}
	return h.sent, errors.Join(err, h.conn.Close())
}

// Adopt returns a listener that yields the connections a predecessor hands
// over on f, the successor's end of a HandoffPair, for ServeAdopted. They
// are taken off the socket as they come, before anything serves them (the
// predecessor's sends must never wait for this process, which waits for
// its release); Accept returns net.ErrClosed once the predecessor has
// closed its end and every connection sent has been handed out.
func Adopt(f *os.File) (net.Listener, error) {
	uc, err := unixConnOf(f)
	if err != nil {
		return nil, err
	}
	l := &adoptListener{conn: uc, more: make(chan struct{}, 1), received: make(chan struct{})}
	go l.receive()
	return l, nil
}

type adoptListener struct {
	conn     *net.UnixConn
	mu       sync.Mutex
	queue    []net.Conn
	done     bool          // the predecessor has closed its end
	more     chan struct{} // a conn was queued, or done
	received chan struct{} // closed when the predecessor is done sending
	closed   sync.Once
}

func (l *adoptListener) receive() {
	buf := make([]byte, 128) // a kind and an address
	oob := make([]byte, syscall.CmsgSpace(4))
	defer func() {
		// Closed here, whatever ended the loop: a sender must never wait
		// on a socket nobody reads.
		_ = l.conn.Close()
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
		l.signal()
		close(l.received)
	}()
	for {
		n, oobn, _, _, err := l.conn.ReadMsgUnix(buf, oob)
		if err != nil || (n == 0 && oobn == 0) {
			return // the predecessor is done, or gone
		}
		if c := connFromRights(oob[:oobn]); c != nil {
			if n > 1 && buf[0] == msgProxied {
				if ap, err := netip.ParseAddrPort(string(buf[1:n])); err == nil {
					c = &adoptedConn{Conn: c, remote: net.TCPAddrFromAddrPort(ap)}
				}
			}
			l.mu.Lock()
			l.queue = append(l.queue, c)
			l.mu.Unlock()
			l.signal()
		}
	}
}

func (l *adoptListener) signal() {
	select {
	case l.more <- struct{}{}:
	default:
	}
}

// adoptedConn is a handed-over connection whose client came through a
// proxy: it keeps the address the PROXY header named.
type adoptedConn struct {
	net.Conn
	remote *net.TCPAddr
}

func (c *adoptedConn) RemoteAddr() net.Addr { return c.remote }

// connFromRights makes a net.Conn of the one socket in oob, or returns nil.
func connFromRights(oob []byte) net.Conn {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if got, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil
	}
	f := os.NewFile(uintptr(fds[0]), "adopted")
	defer f.Close()
	c, err := net.FileConn(f) // a duplicate, made non-blocking
	if err != nil {
		return nil
	}
	return c
}

func (l *adoptListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if len(l.queue) > 0 {
			c := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			l.mu.Unlock()
			return c, nil
		}
		done := l.done
		l.mu.Unlock()
		if done {
			return nil, net.ErrClosed
		}
		<-l.more
	}
}

// Close stops receiving; connections not yet handed out are closed.
func (l *adoptListener) Close() error { return l.closeInto(context.Background(), nil) }

// closeInto waits (until ctx ends) for the predecessor to finish sending,
// then passes the connections not yet handed out to h (when this process
// is replaced right after it took over: they have not been read, so they go
// as they came), or closes them.
func (l *adoptListener) closeInto(ctx context.Context, h *Handoff) error {
	var err error
	l.closed.Do(func() {
		if h != nil {
			// Closing the socket now would close the connections still in
			// it; the predecessor closes its end once it has sent them all.
			select {
			case <-l.received:
			case <-ctx.Done():
			}
		}
		err = l.conn.Close()
		l.mu.Lock()
		queue := l.queue
		l.queue = nil
		l.mu.Unlock()
		for _, c := range queue {
			if h != nil {
				_ = h.send(c)
			}
			c.Close()
		}
	})
	return err
}

func (l *adoptListener) Addr() net.Addr { return l.conn.LocalAddr() }

// ServeAdopted starts serving, in the background, the connections a
// predecessor hands over (Adopt), until it is done or Shutdown. They are
// served as accepted ones, without a PROXY header: one that came with a
// header is handed over after it was read, with the client's address it
// named. A Shutdown that comes before they are served passes them on to
// its own successor (SetHandoff) as they came, or closes them.
func (s *Server) ServeAdopted(ln net.Listener) {
	if !s.register(ln) {
		return
	}
	go func() {
		if err := s.serveRegistered(ln, nil, false, true); err != nil {
			s.log.Warn("serving the connections the previous process handed over", "err", err)
		}
	}()
}
