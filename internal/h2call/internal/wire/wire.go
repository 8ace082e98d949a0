// Package wire is the part of an HTTP/2 connection both ends of h2call
// share, the client and the stand-in API (fakeapi): a framer over buffered
// I/O whose writes, made under the owner's lock, are flushed by one
// goroutine so that a burst of frames shares one write; the opening
// SETTINGS and connection window; the flow-control credit given back for
// DATA read; and the close that stops the flusher. The frames' meaning
// (streams, requests, answers) stays with each end.
//
// It imports nothing of this module.
package wire

import (
	"bufio"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Window is the connection-level receive window each end opens to: large
// enough that many small streams never wait for credit.
const Window = 1 << 30

// ackEvery is how much DATA is read before the connection-level credit is
// given back, in one WINDOW_UPDATE.
const ackEvery = 1 << 19

// writeTimeout bounds one flush: a peer that stops reading breaks the
// connection instead of holding the writer.
const writeTimeout = 10 * time.Second

// Conn is one HTTP/2 connection's framing. Fr's write half and everything
// marked "under the lock" are guarded by the owner's mutex, given to New;
// Fr's read half belongs to the owner's read loop.
type Conn struct {
	Fr          *http2.Framer
	nc          net.Conn
	bw          *bufio.Writer
	mu          *sync.Mutex
	flush       chan struct{} // a write is buffered
	stop        chan struct{} // closed with the connection
	closed      bool          // under the lock
	recvUnacked uint32        // DATA bytes read since the last connection WINDOW_UPDATE; under the lock
}

// New frames nc, whose writes are made under mu.
func New(nc net.Conn, mu *sync.Mutex, maxHeaderList uint32) *Conn {
	c := &Conn{nc: nc, mu: mu, bw: bufio.NewWriterSize(nc, 32<<10), flush: make(chan struct{}, 1), stop: make(chan struct{})}
	c.Fr = http2.NewFramer(c.bw, bufio.NewReaderSize(nc, 32<<10))
	c.Fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if maxHeaderList > 0 {
		c.Fr.MaxHeaderListSize = maxHeaderList
	}
	return c
}

// Open writes the preface (a client's; empty for a server), the
// settings and the connection window, and flushes them within timeout.
// It runs before the flusher starts.
func (c *Conn) Open(preface string, timeout time.Duration, settings ...http2.Setting) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
	defer func() { _ = c.nc.SetWriteDeadline(time.Time{}) }()
	if _, err := c.bw.WriteString(preface); err != nil {
		return err
	}
	if err := c.Fr.WriteSettings(settings...); err != nil {
		return err
	}
	if err := c.Fr.WriteWindowUpdate(0, Window-65535); err != nil {
		return err
	}
	return c.bw.Flush()
}

// Kick asks the flusher to write what is buffered.
func (c *Conn) Kick() {
	select {
	case c.flush <- struct{}{}:
	default:
	}
}

// Buffered reports whether writes wait for a flush. Under the lock.
func (c *Conn) Buffered() bool { return c.bw.Buffered() > 0 }

// FlushLoop writes what is buffered after each Kick until the connection
// closes (nil) or a write fails (its error, for the owner to close on).
func (c *Conn) FlushLoop() error {
	for {
		select {
		case <-c.stop:
			return nil
		case <-c.flush:
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		err := c.bw.Flush()
		c.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// Received gives back the flow-control credit of a DATA frame read: the
// connection's in batches, the stream's at once while it stays open
// (streamOpen: known to the owner and not ended by this frame). Under the
// lock; the caller kicks the flusher.
func (c *Conn) Received(f *http2.DataFrame, streamOpen bool) error {
	c.recvUnacked += f.Length
	if c.recvUnacked >= ackEvery {
		if err := c.Fr.WriteWindowUpdate(0, c.recvUnacked); err != nil {
			return err
		}
		c.recvUnacked = 0
	}
	if streamOpen && f.Length > 0 {
		return c.Fr.WriteWindowUpdate(f.StreamID, f.Length)
	}
	return nil
}

// Pong answers a PING that asks for it. Under the lock.
func (c *Conn) Pong(f *http2.PingFrame) error {
	if f.IsAck() {
		return nil
	}
	return c.Fr.WritePing(true, f.Data)
}

// CloseLocked marks the connection closed, reporting whether it was open
// (only that caller goes on to Shut). Under the lock.
func (c *Conn) CloseLocked() bool {
	if c.closed {
		return false
	}
	c.closed = true
	return true
}

// Closed reports whether CloseLocked ran. Under the lock.
func (c *Conn) Closed() bool { return c.closed }

// Shut stops the flusher and closes the socket, after CloseLocked and
// without the lock.
func (c *Conn) Shut() {
	close(c.stop)
	_ = c.nc.Close()
}
