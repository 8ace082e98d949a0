// Package fakeapi is a stand-in for the LINE Messaging API's reply endpoint,
// for tests and benchmarks: it checks each request the way the platform
// would (method, JSON shape, retry key, bearer token), answers after a
// random delay (2–3 s in the LINE-bot stress test), counts calls per retry key, and can be
// told to fail. It speaks HTTP/1.1 and HTTP/2 without TLS.
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
)

// Options shape the fake's behaviour.
type Options struct {
	MinDelay, MaxDelay time.Duration // each answer waits a uniform random time in [MinDelay, MaxDelay]
	Token              string        // if set, Authorization must be "Bearer <Token>"
	FailFirst          int           // answer 500 to the first FailFirst attempts of each retry key
	Reject             bool          // answer 400 to everything (a permanent failure)
}

// Server is a running fake API.
type Server struct {
	URL string

	opt      Options
	delayMin atomic.Int64
	delayMax atomic.Int64
	srv      *http.Server
	calls    atomic.Int64
	bad      atomic.Int64
	inflight atomic.Int64
	peak     atomic.Int64
	mu       sync.Mutex
	attempts map[string]int // retry key -> attempts
	texts    map[string]string
}

// Start listens on a random loopback port.
func Start(opt Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String() + "/v2/bot/message/reply", opt: opt,
		attempts: map[string]int{}, texts: map[string]string{}}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.handle),
		Protocols:         &protocols,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: 100000},
		ReadHeaderTimeout: 10 * time.Second,
	}
	s.SetDelay(opt.MinDelay, opt.MaxDelay)
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
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

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	var body replyBody
	key := r.Header.Get("X-Line-Retry-Key")
	ok := r.Method == http.MethodPost && key != "" &&
		json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body) == nil &&
		len(body.Messages) == 1 && body.Messages[0].Type == "text" &&
		(s.opt.Token == "" || r.Header.Get("Authorization") == "Bearer "+s.opt.Token)
	if !ok || s.opt.Reject {
		s.bad.Add(1)
		http.Error(w, `{"message":"The request body has 1 error(s)"}`, http.StatusBadRequest)
		return
	}
	if lo, hi := s.delayMin.Load(), s.delayMax.Load(); hi > 0 {
		time.Sleep(time.Duration(lo + rand.Int64N(hi-lo+1)))
	}
	s.mu.Lock()
	s.attempts[key]++
	attempt := s.attempts[key]
	s.texts[key] = body.Messages[0].Text
	s.mu.Unlock()
	if attempt <= s.opt.FailFirst {
		http.Error(w, `{"message":"Internal error"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}"))
}

// Calls is the number of requests received.
func (s *Server) Calls() int64 { return s.calls.Load() }

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
		maxAttempts = max(maxAttempts, n)
	}
	return len(s.attempts), maxAttempts
}

// Texts returns how often each message text was received (by distinct retry key).
func (s *Server) Texts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, t := range s.texts {
		out[t]++
	}
	return out
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }
