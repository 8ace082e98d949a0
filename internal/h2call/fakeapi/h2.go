package fakeapi

import (
	"bytes"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tsubame/internal/h2call/internal/streams"
	"tsubame/internal/h2call/internal/wire"
)

// h2Conn serves one HTTP/2 connection: one goroutine reads frames, answers
// wait on timers, and a second goroutine flushes coalesced writes (the
// framing the client uses too, internal/wire).
type h2Conn struct {
	s  *Server
	w  *wire.Conn
	fr *http2.Framer // w.Fr

	mu         sync.Mutex
	henc       *hpack.Encoder
	hbuf       bytes.Buffer
	streams    streams.Table[h2Req] // a request being read, or served once it is waiting for its answer
	sendWindow int64
}

type h2Req struct {
	method, key, auth string
	body              []byte
}

// served stands for every request read and waiting for its answer: what
// it carried is no longer needed.
var served = &h2Req{}

func (s *Server) serveH2(nc net.Conn) {
	c := &h2Conn{s: s, sendWindow: 65535}
	c.w = wire.New(nc, &c.mu, 0)
	c.fr = c.w.Fr
	c.henc = hpack.NewEncoder(&c.hbuf)
	maxStreams := s.opt.MaxStreams
	if maxStreams == 0 {
		maxStreams = 100000
	}
	s.connMu.Lock()
	s.conns[c] = true
	s.connMu.Unlock()
	err := c.w.Open("", 10*time.Second, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: maxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	if err != nil {
		c.close()
		return
	}
	go func() {
		if c.w.FlushLoop() != nil {
			c.close()
		}
	}()
	c.readLoop()
}

func (c *h2Conn) readLoop() {
	defer c.close()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		c.mu.Lock()
		var ready []uint32
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			r := &h2Req{method: f.PseudoValue("method")}
			for _, hf := range f.RegularFields() {
				switch hf.Name {
				case "x-line-retry-key":
					r.key = hf.Value
				case "authorization":
					r.auth = hf.Value
				}
			}
			if !c.streams.Add(f.StreamID, r) {
				err = http2.ConnectionError(http2.ErrCodeProtocol) // a stream id not above the last one
			} else if f.StreamEnded() {
				ready = append(ready, f.StreamID)
			}
		case *http2.DataFrame:
			r := c.streams.Get(f.StreamID)
			open := r != nil && r != served
			err = c.w.Received(f, open && !f.StreamEnded())
			if open {
				if len(r.body)+len(f.Data()) <= 1<<20 {
					r.body = append(r.body, f.Data()...)
				}
				if f.StreamEnded() {
					ready = append(ready, f.StreamID)
				}
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = c.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			err = c.w.Pong(f)
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.sendWindow += int64(f.Increment)
			}
		case *http2.RSTStreamFrame:
			c.streams.Delete(f.StreamID) // the client gave up: no answer
		case *http2.GoAwayFrame:
			c.mu.Unlock()
			return
		}
		reqs := make([]*h2Req, len(ready))
		for i, id := range ready {
			reqs[i] = c.streams.Get(id)
			c.streams.Set(id, served)
		}
		c.mu.Unlock()
		c.w.Kick()
		if err != nil {
			return
		}
		for i, id := range ready {
			c.serve(id, reqs[i])
		}
	}
}

// serve checks a complete request and answers it after the delay, on a
// timer.
func (c *h2Conn) serve(id uint32, r *h2Req) {
	fail, ok := c.s.begin(r.method, r.key, r.auth, r.body)
	if !ok {
		c.s.inflight.Add(-1)
		c.respond(id, 400, badBody)
		return
	}
	c.s.wheel.add(time.Now().Add(c.s.delay()), pending{c: c, id: id, fail: fail})
}

func (c *h2Conn) respond(id uint32, status int, body string) {
	c.mu.Lock()
	defer c.w.Kick()
	defer c.mu.Unlock()
	c.respondLocked(id, status, body)
}

func (c *h2Conn) respondLocked(id uint32, status int, body string) {
	if c.w.Closed() || c.streams.Delete(id) == nil {
		return // reset by the client, or the connection is gone
	}
	// Answers are tiny; past the client's window the body is left out.
	withBody := int64(len(body)) <= c.sendWindow
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: itoa(status)})
	_ = c.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/json"})
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(),
		EndHeaders: true, EndStream: !withBody}); err != nil {
		return
	}
	if withBody {
		c.sendWindow -= int64(len(body))
		_ = c.fr.WriteData(id, true, []byte(body))
	}
}

func itoa(n int) string {
	switch n {
	case 200:
		return "200"
	case 400:
		return "400"
	}
	return "500"
}

func (c *h2Conn) close() {
	c.mu.Lock()
	if !c.w.CloseLocked() {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.w.Shut()
	c.s.connMu.Lock()
	delete(c.s.conns, c)
	c.s.connMu.Unlock()
}
