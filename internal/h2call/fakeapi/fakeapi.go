// Package fakeapi is a stand-in for the LINE Messaging API's reply endpoint,
// for tests and benchmarks: it checks each request the way the platform
// would (method, JSON shape, retry key, bearer token), answers after a
// random delay (2–3 s in the LINE-bot stress test), counts calls per retry key, and can be
// told to fail. It speaks HTTP/1.1 and HTTP/2 without TLS. Over HTTP/2 a
// request waiting out its delay is a timer, not a goroutine, so the fake
// can hold the tens of thousands of calls a benchmark puts in flight
// without taking the cores and memory the server under test needs.
package fakeapi

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/net/http2"
)

// Options shape the fake's behaviour.
type Options struct {
	MinDelay, MaxDelay time.Duration // each answer waits a uniform random time in [MinDelay, MaxDelay]
	Token              string        // if set, Authorization must be "Bearer <Token>"
	FailFirst          int           // answer 500 to the first FailFirst attempts of each retry key
	Reject             bool          // answer 400 to everything (a permanent failure)
	MaxStreams         uint32        // HTTP/2 streams per connection at once; default 100,000
	RecordTexts        bool          // keep each retry key's text, for Texts
	// ReplyEndpoint checks bodies as LINE's reply endpoint does: a
	// replyToken and a non-empty text are required (else 400).
	ReplyEndpoint bool
}

// Server is a running fake API.
type Server struct {
	URL string

	opt      Options
	delayMin atomic.Int64
	delayMax atomic.Int64
	ln       net.Listener
	h1       *chanListener
	srv      *http.Server
	connMu   sync.Mutex
	conns    map[*h2Conn]bool
	calls    atomic.Int64
	answered atomic.Int64
	bad      atomic.Int64
	inflight atomic.Int64
	peak     atomic.Int64
	mu       sync.Mutex
	attempts map[[16]byte]uint32 // retry key (a UUID) -> attempts; no pointers for the GC to scan
	texts    map[[16]byte]string // with RecordTexts
	wheel    wheel               // HTTP/2 answers waiting out their delay
	holdMu   sync.Mutex
	hold     chan struct{} // while Hold is in force: closed by Release
}

// Start listens on a random loopback port.
func Start(opt Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String() + "/v2/bot/message/reply", opt: opt, ln: ln,
		attempts: map[[16]byte]uint32{}, texts: map[[16]byte]string{}, h1: newChanListener(ln.Addr()), conns: map[*h2Conn]bool{}}
	s.wheel.start(s)
	s.srv = &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
	s.SetDelay(opt.MinDelay, opt.MaxDelay)
	go func() { _ = s.srv.Serve(s.h1) }()
	go s.accept()
	return s, nil
}

// accept sends HTTP/2 connections (those opening with the client preface)
// to the event-driven server and the rest to net/http.
func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.h1.close()
			return
		}
		go func() {
			buf := make([]byte, len(http2.ClientPreface))
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := io.ReadFull(c, buf)
			_ = c.SetReadDeadline(time.Time{})
			if err == nil && string(buf) == http2.ClientPreface {
				s.serveH2(c)
				return
			}
			s.h1.deliver(&prefixConn{Conn: c, prefix: buf[:n]})
		}()
	}
}

// SetDelay changes the answer delay range for the requests that follow.
func (s *Server) SetDelay(minDelay, maxDelay time.Duration) {
	s.delayMin.Store(int64(minDelay))
	s.delayMax.Store(int64(max(minDelay, maxDelay)))
}

type replyBody struct {
	ReplyToken string `json:"replyToken"`
	Messages   []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"messages"`
}

// HTTP/1.1: a goroutine per request, asleep for the delay.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	fail, ok := s.begin(r.Method, r.Header.Get("X-Line-Retry-Key"), r.Header.Get("Authorization"), body)
	defer s.inflight.Add(-1)
	if !ok {
		http.Error(w, badBody, http.StatusBadRequest)
		return
	}
	time.Sleep(s.delay())
	if g := s.held(); g != nil {
		<-g
	}
	s.answered.Add(1)
	if fail {
		http.Error(w, internalError, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}"))
}

const (
	badBody       = `{"message":"The request body has 1 error(s)"}`
	internalError = `{"message":"Internal error"}`
)

// begin counts a request and checks it as the platform would; it returns
// whether the request is well-formed and, if it is, whether to answer 500
// (Options.FailFirst). A well-formed request counts as an attempt of its
// retry key when it arrives: the API has it, whatever becomes of the answer.
func (s *Server) begin(method, key, auth string, raw []byte) (fail, ok bool) {
	s.calls.Add(1)
	n := s.inflight.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	var body replyBody
	id, keyErr := uuid.Parse(key) // LINE requires a UUID
	ok = method == http.MethodPost && keyErr == nil && json.Unmarshal(raw, &body) == nil &&
		len(body.Messages) == 1 && body.Messages[0].Type == "text" &&
		(!s.opt.ReplyEndpoint || body.ReplyToken != "" && body.Messages[0].Text != "") &&
		(s.opt.Token == "" || auth == "Bearer "+s.opt.Token) && !s.opt.Reject
	if !ok {
		s.bad.Add(1)
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[id]++
	if s.opt.RecordTexts {
		s.texts[id] = body.Messages[0].Text
	}
	return s.attempts[id] <= uint32(s.opt.FailFirst), true
}

func (s *Server) delay() time.Duration {
	if lo, hi := s.delayMin.Load(), s.delayMax.Load(); hi > 0 {
		return time.Duration(lo + rand.Int64N(hi-lo+1))
	}
	return 0
}

// Hold keeps every answer, of calls received before or after, until
// Release: a test can then tell a caller that waits for the API from one
// that does not without measuring time.
func (s *Server) Hold() {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	if s.hold == nil {
		s.hold = make(chan struct{})
	}
}

// Release lets the answers held since Hold go, each when its delay is over.
func (s *Server) Release() {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
}

// held returns the channel Release closes, or nil when answers flow.
func (s *Server) held() chan struct{} {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	return s.hold
}

// ResetKeys forgets the retry keys seen (and the texts recorded), so that
// Keys and Texts describe what follows; counters are kept. Call it when no
// request is on its way, or those in flight count for what follows.
func (s *Server) ResetKeys() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = map[[16]byte]uint32{}
	s.texts = map[[16]byte]string{}
}

// Calls is the number of requests received.
func (s *Server) Calls() int64 { return s.calls.Load() }

// Answered is the number of requests answered (200 or 500).
func (s *Server) Answered() int64 { return s.answered.Load() }

// Bad is the number of malformed requests received.
func (s *Server) Bad() int64 { return s.bad.Load() }

// PeakInFlight is the most requests handled at once.
func (s *Server) PeakInFlight() int64 { return s.peak.Load() }

// Keys returns the number of distinct retry keys seen and the largest
// number of attempts any key had.
func (s *Server) Keys() (distinct, maxAttempts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.attempts {
		maxAttempts = max(maxAttempts, int(n))
	}
	return len(s.attempts), maxAttempts
}

// Texts returns how often each message text was received (by distinct
// retry key); it needs Options.RecordTexts.
func (s *Server) Texts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, t := range s.texts {
		out[t]++
	}
	return out
}

// Close stops the server and drops every connection.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.wheel.stop()
	s.connMu.Lock()
	conns := s.conns
	s.conns = map[*h2Conn]bool{}
	s.connMu.Unlock()
	for c := range conns {
		c.close()
	}
	if cerr := s.srv.Close(); err == nil {
		err = cerr
	}
	return err
}
