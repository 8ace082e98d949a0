// Package h2call is an event-driven HTTP/2 client for many small calls to
// one API: each call is a stream, a call in flight is a record the caller
// embeds in its own (no goroutine waits on it), and its owner learns the
// outcome from the connection's reader. The stream table (internal/streams),
// the framing it shares with the stand-in API server (internal/wire) and
// that server, for tests and benchmarks (fakeapi), sit beside it.
//
// It imports nothing of this module but its own stream table and framing.
package h2call

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/google/uuid"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tsubame/internal/h2call/internal/streams"
	"tsubame/internal/h2call/internal/wire"
)

// Client is an event-driven HTTP/2 client for one origin: a call in flight
// is a stream and a small struct, not a goroutine. Each connection has one
// goroutine reading frames and one flushing coalesced writes; completions
// are callbacks run by the reader. This is what lets tens of thousands of
// calls wait on a slow API at a few hundred bytes each, where net/http
// holds two goroutines (and their stacks) per call.
//
// net/http has no such mode, and no maintained library offers one, so the
// client is written here on x/net's Framer and HPACK codec, which do the
// wire format; this file does the connection and stream state (RFC 9113
// §5, §6.5, §6.8, §6.9).
type Client struct {
	scheme, authority, path string
	addr                    string
	header                  []hpack.HeaderField // sent with every call
	keyHeader               string              // the name of each call's key header
	timeout                 time.Duration       // every call's bound, from do to its end
	tls                     *tls.Config         // nil: h2c with prior knowledge
	maxConns                int
	dialTimeout             time.Duration
	log                     *slog.Logger

	mu      sync.Mutex
	conns   []*conn
	dialing int
	waiting []*Call // calls with no stream yet, oldest first
	closed  bool
	noH2    atomic.Bool // the server does not speak HTTP/2 (TLS without "h2")

	// Every call has the same timeout from do, and waiting calls take
	// streams in order, so deadlines grow along the waiting list and along
	// each connection's stream ids: a sweeper cancels the expired calls
	// from those fronts, and a call needs no timer of its own.
	stopT chan struct{}
}

// sweepEvery is how often expired calls are looked for: a call is cut
// between timeout and timeout + sweepEvery after do.
const sweepEvery = 20 * time.Millisecond

// maxDialing bounds the connections being dialed at once.
const maxDialing = 4

// ErrNoH2 reports a TLS server that did not agree to HTTP/2.
var ErrNoH2 = errors.New("the API server does not speak HTTP/2")

// errConnLost is a call whose connection broke before its answer: it may or
// may not have been processed, like any network error.
var errConnLost = errors.New("connection to the API lost")

// Call is one request: a POST of body, with the client's headers and
// the call's key header. owner.h2Done runs once, with the status and the
// Retry-After the answer carried, or an error. A caller embeds the Call
// in its own record, so a call in flight is one allocation.
type Call struct {
	// What an answer reads first, together: it arrives when the call has
	// long left the CPU's caches.
	owner      Owner
	finished   atomic.Bool
	id         uint32 // stream id; id and the fields below are guarded by the connection's lock
	status     int
	retryAfter time.Duration
	deadline   int64     // monotonic nanoseconds; set by do under the client's lock
	window     int64     // the stream's flow-control window for the body
	sent       int       // body bytes sent
	key        uuid.UUID // the value of the client's key header (X-Line-Retry-Key)
	body       []byte    // dropped once sent
}

// Owner learns how a call ended.
type Owner interface {
	CallDone(status int, retryAfter time.Duration, err error)
}

// Reset makes c a new call for owner, carrying key under the client's key
// header and body (reset before each attempt: a call lets its body go once
// sent).
func (c *Call) Reset(owner Owner, key uuid.UUID, body []byte) {
	*c = Call{owner: owner, key: key, body: body}
}

// AnswerReads is how far into a Call an answer reads (its owner and state
// come first; the deadline starts here): a caller that embeds a Call keeps
// it within its own first cache lines.
const AnswerReads = unsafe.Offsetof(Call{}.deadline)

// finish tells the owner once; later calls do nothing.
func (c *Call) finish(status int, retryAfter time.Duration, err error) {
	if !c.finished.CompareAndSwap(false, true) {
		return
	}
	c.owner.CallDone(status, retryAfter, err)
}

// New makes a client for the origin of rawURL; every call carries
// header and its key under keyHeader (none if empty), and ends within
// timeout.
func New(rawURL string, h2c bool, maxConns int, header []hpack.HeaderField, keyHeader string,
	timeout time.Duration, log *slog.Logger) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	c := &Client{scheme: u.Scheme, authority: u.Host, path: u.RequestURI(), maxConns: max(maxConns, 1),
		header: header, keyHeader: keyHeader, timeout: timeout, dialTimeout: 10 * time.Second, log: log,
		stopT: make(chan struct{})}
	port := u.Port()
	switch {
	case u.Scheme == "https":
		c.tls = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
		if port == "" {
			port = "443"
		}
	case u.Scheme == "http" && h2c:
		if port == "" {
			port = "80"
		}
	default:
		return nil, fmt.Errorf("%s: HTTP/2 needs https, or http with h2c", rawURL)
	}
	c.addr = net.JoinHostPort(u.Hostname(), port)
	go c.sweep()
	return c, nil
}

// monotonic is a clock for deadlines.
var epoch = time.Now()

func Monotonic() int64 { return int64(time.Since(epoch)) }

// sweep cancels calls past their deadline until the client closes.
func (c *Client) sweep() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	var expired []*Call
	for {
		select {
		case <-c.stopT:
			return
		case <-t.C:
		}
		now := Monotonic()
		c.mu.Lock()
		for len(c.waiting) > 0 && c.waiting[0].deadline <= now {
			expired = append(expired, c.waiting[0])
			c.waiting[0] = nil
			c.waiting = c.waiting[1:]
		}
		conns := slices.Clone(c.conns)
		c.mu.Unlock()
		for _, cc := range conns {
			expired = cc.expire(now, expired)
		}
		for _, call := range expired {
			call.finish(0, 0, context.DeadlineExceeded)
		}
		if len(expired) > 0 {
			clear(expired)
			expired = expired[:0]
			c.mu.Lock()
			c.scheduleLocked()
			c.mu.Unlock()
		}
	}
}

// do starts call; its owner hears when it ends, within the client's timeout.
func (c *Client) Do(call *Call) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		call.finish(0, 0, errors.New("API client closed"))
		return
	}
	if c.noH2.Load() {
		c.mu.Unlock()
		call.finish(0, 0, ErrNoH2)
		return
	}
	call.deadline = Monotonic() + int64(c.timeout)
	c.waiting = append(c.waiting, call)
	c.scheduleLocked()
	c.mu.Unlock()
}

// scheduleLocked gives waiting calls to connections with free streams and
// dials more connections while calls wait and the bound allows.
func (c *Client) scheduleLocked() {
	if c.closed {
		return
	}
	for len(c.waiting) > 0 {
		call := c.waiting[0]
		var conn *conn
		for _, cc := range c.conns {
			if cc.reserve() {
				conn = cc
				break
			}
		}
		if conn == nil {
			break
		}
		c.waiting[0] = nil
		c.waiting = c.waiting[1:]
		conn.start(call)
	}
	if len(c.waiting) == 0 {
		c.waiting = nil // let the backing array go
		return
	}
	// Dial one connection per ~100 waiting calls, within the bound, a few
	// at a time.
	want := min(c.maxConns-len(c.conns), (len(c.waiting)+99)/100, maxDialing) - c.dialing
	for range max(want, 0) {
		c.dialing++
		go c.dial()
	}
}

func (c *Client) dial() {
	conn, err := c.connect()
	c.mu.Lock()
	c.dialing--
	if err != nil {
		var fail []*Call
		if errors.Is(err, ErrNoH2) {
			c.noH2.Store(true)
		}
		if len(c.conns) == 0 && c.dialing == 0 {
			// Nothing will serve the waiting calls: fail them (they are retried).
			fail, c.waiting = c.waiting, nil
		}
		c.mu.Unlock()
		c.log.Warn("webhook API: cannot connect", "addr", c.addr, "err", err)
		for _, call := range fail {
			call.finish(0, 0, err)
		}
		return
	}
	if c.closed {
		c.mu.Unlock()
		conn.close(errors.New("API client closed"))
		return
	}
	c.conns = append(c.conns, conn)
	c.scheduleLocked()
	c.mu.Unlock()
}

// connect dials, negotiates and sends the connection preface.
func (c *Client) connect() (*conn, error) {
	d := net.Dialer{Timeout: c.dialTimeout, KeepAlive: 30 * time.Second}
	var nc net.Conn
	var err error
	if c.tls != nil {
		td := tls.Dialer{NetDialer: &d, Config: c.tls}
		nc, err = td.Dial("tcp", c.addr)
		if err == nil && nc.(*tls.Conn).ConnectionState().NegotiatedProtocol != "h2" {
			nc.Close()
			return nil, ErrNoH2
		}
	} else {
		nc, err = d.Dial("tcp", c.addr)
	}
	if err != nil {
		return nil, err
	}
	cc := &conn{client: c, nextID: 1,
		maxStreams: 100, // until the server's SETTINGS say otherwise (RFC 9113 §6.5.2 suggests ≥ 100)
		sendWindow: 65535, initialWindow: 65535, maxFrame: 16384}
	cc.w = wire.New(nc, &cc.mu, 64<<10)
	cc.fr = cc.w.Fr
	cc.henc = hpack.NewEncoder(&cc.hbuf)
	err = cc.w.Open(http2.ClientPreface, c.dialTimeout,
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: 64 << 10},
	)
	if err != nil {
		nc.Close()
		return nil, err
	}
	go cc.readLoop()
	go func() {
		if err := cc.w.FlushLoop(); err != nil {
			cc.close(err)
		}
	}()
	return cc, nil
}

// abort ends every call waiting or in flight with err (a shutdown past its
// deadline) and closes the connections.
func (c *Client) Abort(err error) {
	c.mu.Lock()
	if !c.closed {
		close(c.stopT)
	}
	c.closed = true
	waiting, conns := c.waiting, c.conns
	c.waiting, c.conns = nil, nil
	c.mu.Unlock()
	for _, call := range waiting {
		call.finish(0, 0, err)
	}
	for _, cc := range conns {
		cc.close(err)
	}
}

// usable reports whether the client can carry calls (false after the
// server refused HTTP/2).
func (c *Client) Usable() bool { return !c.noH2.Load() }

func (c *Client) removeConn(cc *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.conns {
		if x == cc {
			c.conns = append(c.conns[:i], c.conns[i+1:]...)
			break
		}
	}
	c.scheduleLocked()
}

// conn is one connection. mu guards everything but the read half of the
// framer, which only readLoop uses.
type conn struct {
	client *Client
	w      *wire.Conn
	fr     *http2.Framer // w.Fr

	mu            sync.Mutex
	henc          *hpack.Encoder
	hbuf          bytes.Buffer
	streams       streams.Table[Call]
	reserved      int // streams promised by reserve, not yet started
	nextID        uint32
	maxStreams    uint32
	sendWindow    int64   // connection-level flow-control window for our DATA
	initialWindow int64   // the server's per-stream window
	pending       []*Call // streams with body bytes waiting for window
	maxFrame      uint32
	goingAway     bool
}

// reserve takes a stream slot if the connection can open another stream.
func (cc *conn) reserve() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.w.Closed() || cc.goingAway || uint32(cc.streams.Len()+cc.reserved) >= cc.maxStreams || cc.nextID > 1<<31-2 {
		return false
	}
	cc.reserved++
	return true
}

// start opens a stream for call on a reserved slot and writes its request.
// It runs under the client's lock, so it never runs a callback itself.
func (cc *conn) start(call *Call) {
	cc.mu.Lock()
	cc.reserved--
	if cc.w.Closed() {
		cc.mu.Unlock()
		go call.finish(0, 0, errConnLost)
		return
	}
	id := cc.nextID
	cc.nextID += 2
	if cc.nextID > 1<<31-2 {
		cc.goingAway = true // stream ids used up: new calls go to another connection
	}
	call.id = id
	cc.streams.Add(id, call) // ids only grow: it always takes them
	cc.hbuf.Reset()
	enc := func(name, value string) { _ = cc.henc.WriteField(hpack.HeaderField{Name: name, Value: value}) }
	enc(":method", "POST")
	enc(":scheme", cc.client.scheme)
	enc(":authority", cc.client.authority)
	enc(":path", cc.client.path)
	for _, f := range cc.client.header {
		_ = cc.henc.WriteField(f)
	}
	// Each call's key is new: sent as a literal never put in HPACK's
	// table, where it would only push out the fields that repeat.
	if cc.client.keyHeader != "" {
		_ = cc.henc.WriteField(hpack.HeaderField{Name: cc.client.keyHeader, Value: call.key.String(), Sensitive: true})
	}
	enc("content-length", strconv.Itoa(len(call.body)))
	err := cc.writeHeaders(id, cc.hbuf.Bytes(), len(call.body) == 0)
	if err == nil && len(call.body) > 0 {
		call.window = cc.initialWindow
		cc.pending = append(cc.pending, call)
		err = cc.pump()
	}
	if call.finished.Load() { // ended on the way here
		cc.streams.Delete(id)
		_ = cc.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	cc.mu.Unlock()
	if err != nil {
		go cc.close(err)
		return
	}
	cc.w.Kick()
}

// writeHeaders writes a header block, split into CONTINUATION frames when
// longer than a frame.
func (cc *conn) writeHeaders(id uint32, block []byte, endStream bool) error {
	first := true
	for len(block) > 0 || first {
		n := min(len(block), int(cc.maxFrame))
		chunk := block[:n]
		block = block[n:]
		var err error
		if first {
			err = cc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: chunk,
				EndStream: endStream, EndHeaders: len(block) == 0})
			first = false
		} else {
			err = cc.fr.WriteContinuation(id, len(block) == 0, chunk)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pump sends the body bytes the flow-control windows allow.
func (cc *conn) pump() error {
	rest := cc.pending[:0]
	for _, call := range cc.pending {
		if call.finished.Load() {
			continue
		}
		for call.sent < len(call.body) && cc.sendWindow > 0 && call.window > 0 {
			n := min(int64(len(call.body)-call.sent), cc.sendWindow, call.window, int64(cc.maxFrame))
			end := call.sent+int(n) == len(call.body)
			if err := cc.fr.WriteData(call.id, end, call.body[call.sent:call.sent+int(n)]); err != nil {
				return err
			}
			call.sent += int(n)
			cc.sendWindow -= n
			call.window -= n
		}
		if call.sent < len(call.body) {
			rest = append(rest, call)
		} else {
			call.body = nil // sent: the wait for the answer holds no copy
		}
	}
	for i := len(rest); i < len(cc.pending); i++ {
		cc.pending[i] = nil
	}
	cc.pending = rest
	return nil
}

// expire ends the streams whose deadline passed by now (the oldest ones:
// deadlines grow with stream ids), tells the server, and appends their
// calls to out for the caller to finish.
func (cc *conn) expire(now int64, out []*Call) []*Call {
	n := len(out)
	cc.mu.Lock()
	for {
		id, call := cc.streams.Oldest()
		if call == nil || call.deadline > now {
			break
		}
		cc.streams.Delete(id)
		_ = cc.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		out = append(out, call)
	}
	cc.mu.Unlock()
	if len(out) > n {
		cc.w.Kick()
	}
	return out
}

// readLoop reads frames until the connection fails, completing calls.
func (cc *conn) readLoop() {
	var done []ending // reused: most frames end one call
	for {
		f, err := cc.fr.ReadFrame()
		if err != nil {
			cc.close(err)
			return
		}
		clear(done)
		done = done[:0]
		cc.mu.Lock()
		err = cc.handle(f, &done)
		writes := cc.w.Buffered()
		cc.mu.Unlock()
		for _, e := range done {
			if e.err != nil {
				e.call.finish(0, 0, e.err)
			} else {
				e.call.finish(e.call.status, e.call.retryAfter, nil)
			}
		}
		if len(done) > 0 {
			cc.client.mu.Lock()
			cc.client.scheduleLocked()
			cc.client.mu.Unlock()
		}
		if writes {
			cc.w.Kick()
		}
		if err != nil {
			cc.close(err)
			return
		}
		if cc.drained() {
			cc.close(errors.New("server closed the connection (GOAWAY)"))
			return
		}
	}
}

// drained reports a connection going away with no stream left.
func (cc *conn) drained() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.goingAway && cc.streams.Len() == 0 && cc.reserved == 0
}

// ending is a call that a frame completed, with an error if it failed.
type ending struct {
	call *Call
	err  error
}

// handle applies one frame; it appends the calls it ends to done, whose
// callbacks run after the lock is released.
func (cc *conn) handle(f http2.Frame, done *[]ending) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		call := cc.streams.Get(f.StreamID)
		if call == nil {
			return nil // a stream we reset
		}
		if call.status == 0 {
			status, err := strconv.Atoi(f.PseudoValue("status"))
			if err != nil {
				return fmt.Errorf("malformed :status %q", f.PseudoValue("status"))
			}
			if status < 200 {
				return nil // informational
			}
			call.status = status
			for _, hf := range f.RegularFields() {
				if hf.Name == "retry-after" {
					if s, err := strconv.Atoi(hf.Value); err == nil && s > 0 {
						call.retryAfter = time.Duration(s) * time.Second
					}
				}
			}
		}
		if f.StreamEnded() {
			cc.endStream(call, done)
		}
	case *http2.DataFrame:
		call := cc.streams.Get(f.StreamID)
		if err := cc.w.Received(f, call != nil && !f.StreamEnded()); err != nil {
			return err
		}
		if call != nil && f.StreamEnded() {
			cc.endStream(call, done)
		}
	case *http2.RSTStreamFrame:
		if call := cc.streams.Delete(f.StreamID); call != nil {
			*done = append(*done, ending{call, fmt.Errorf("API reset the stream: %v", f.ErrCode)})
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		err := f.ForeachSetting(func(s http2.Setting) error {
			switch s.ID {
			case http2.SettingMaxConcurrentStreams:
				cc.maxStreams = s.Val
			case http2.SettingInitialWindowSize:
				delta := int64(s.Val) - cc.initialWindow
				cc.initialWindow = int64(s.Val)
				for _, call := range cc.pending {
					call.window += delta
				}
			case http2.SettingMaxFrameSize:
				cc.maxFrame = s.Val
			case http2.SettingHeaderTableSize:
				cc.henc.SetMaxDynamicTableSizeLimit(s.Val)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := cc.fr.WriteSettingsAck(); err != nil {
			return err
		}
		return cc.pump()
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			cc.sendWindow += int64(f.Increment)
		} else if call := cc.streams.Get(f.StreamID); call != nil {
			call.window += int64(f.Increment)
		}
		return cc.pump()
	case *http2.PingFrame:
		return cc.w.Pong(f)
	case *http2.GoAwayFrame:
		cc.goingAway = true
		var unprocessed []uint32
		for id := range cc.streams.All() {
			if id > f.LastStreamID {
				unprocessed = append(unprocessed, id)
			}
		}
		for _, id := range unprocessed {
			// Never processed (RFC 9113 §6.8): safe to send again.
			call := cc.streams.Delete(id)
			*done = append(*done, ending{call, fmt.Errorf("API closed the connection before the request (GOAWAY %v)", f.ErrCode)})
		}
	}
	return nil
}

func (cc *conn) endStream(call *Call, done *[]ending) {
	cc.streams.Delete(call.id)
	if call.status == 0 {
		call.status = 502 // ended without a response head
	}
	*done = append(*done, ending{call: call})
}

// close fails every stream of the connection and drops it from the pool.
func (cc *conn) close(err error) {
	cc.mu.Lock()
	if !cc.w.CloseLocked() {
		cc.mu.Unlock()
		return
	}
	var calls []*Call
	for _, call := range cc.streams.All() {
		calls = append(calls, call)
	}
	cc.streams.Reset()
	cc.pending = nil
	cc.mu.Unlock()
	cc.w.Shut()
	if errors.Is(err, io.EOF) {
		err = errConnLost
	}
	for _, call := range calls {
		call.finish(0, 0, fmt.Errorf("%w: %v", errConnLost, err))
	}
	cc.client.removeConn(cc)
}
