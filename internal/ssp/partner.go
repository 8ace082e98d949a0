package ssp

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

	"tsubame/internal/openrtb"
	"tsubame/internal/privacy"
)

// Outcome is how a call to a partner ended: one of the Outcome constants,
// the access log's and the metrics' status of a bid_received line.
type Outcome string

// A call's outcomes. Bid and NoBid are answers; the others are failures,
// counted per partner and logged at a bounded rate.
const (
	OutcomeBid       Outcome = "bid"        // answered with bids
	OutcomeNoBid     Outcome = "no_bid"     // 204, or an answer without bids
	OutcomeTimeout   Outcome = "timeout"    // not answered by its deadline
	OutcomeError     Outcome = "error"      // the connection failed or was reset
	OutcomeStatus    Outcome = "status"     // an HTTP status other than 200 and 204
	OutcomeInvalid   Outcome = "invalid"    // not an OpenRTB bid response
	OutcomeTooLarge  Outcome = "too_large"  // past ssp.max_response, gunzipped too
	OutcomeHTTP10    Outcome = "http10"     // answered in HTTP/1.0 (no keep-alive)
	OutcomeThrottled Outcome = "throttled"  // not asked: over its qps or max_in_flight
	OutcomeClosed    Outcome = "not_called" // not asked: its deadline had passed already
)

// partner is a demand partner as auctions use it: its configuration
// parsed, its HTTP client, its bounds and its counts.
type partner struct {
	name      string
	url       string
	cfg       Partner
	client    *http.Client
	transport *http.Transport
	// fast calls a plain http partner that is not to speak HTTP/2:
	// fasthttp's client, which allocates a fraction of net/http's and has
	// no goroutines of its own per connection (nil: net/http).
	fast      *fasthttp.HostClient
	adjust    int64 // parts per million
	currency  string
	header    http.Header
	limiter   *rate.Limiter // nil: no qps bound
	maxFlight int64
	inFlight  *atomic.Int64 // shared with the partner it replaced by a reload
	maxBody   int64
	places    map[string]bool // nil: every placement
	deals     map[string]bool // nil: every deal of the placements
	sites     []string        // nil: every site
	stats     *PartnerStats
	log       *slog.Logger
	logEvery  int64
	logged    sync.Map // Outcome -> *atomic.Int64: when it was last logged
	missed    sync.Map // Outcome -> *atomic.Int64: failures not logged since
}

// PartnerStats are a partner's counts since the server started, kept
// across reloads.
type PartnerStats struct {
	Requests, Bids, NoBids, Timeouts, Errors, Throttled atomic.Uint64
	// Invalid counts bids dropped by validation, Wins auctions won.
	Invalid, Wins atomic.Uint64
}

// newPartner returns the partner name configured as cfg. prev, when not
// nil, is the one it replaces (a reload): a partner at the same URL keeps
// its connections, its calls in flight and, at the same qps, its rate
// bound, so that a reload neither resets a hung partner's bound nor makes
// every connection again.
func newPartner(name string, cfg Partner, maxBody int64, stats *PartnerStats, log *slog.Logger, logEvery time.Duration, prev *partner) *partner {
	adj, _ := parseAdjustment(cfg.BidAdjustment) // Validate has checked it
	if prev != nil && prev.cfg.URL == cfg.URL && prev.cfg.HTTP2 == cfg.HTTP2 {
		p := prev.configure(name, cfg, adj, maxBody, stats, log, logEvery)
		p.transport, p.client, p.inFlight, p.fast = prev.transport, prev.client, prev.inFlight, prev.fast
		if prev.cfg.QPS == cfg.QPS {
			p.limiter = prev.limiter
		}
		return p
	}
	t := &http.Transport{
		Proxy:                  nil, // a partner is called directly, never through the environment's proxy
		DialContext:            (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:           0,
		MaxIdleConnsPerHost:    256,
		MaxConnsPerHost:        0,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    2 * time.Second,
		ExpectContinueTimeout:  0,
		DisableCompression:     true, // the answer's gzip is read here, bounded
		ResponseHeaderTimeout:  0,    // each call's context bounds it
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		MaxResponseHeaderBytes: 64 << 10,
	}
	if cfg.HTTP2 && strings.HasPrefix(cfg.URL, "http://") {
		t.Protocols = new(http.Protocols)
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	p := (*partner)(nil).configure(name, cfg, adj, maxBody, stats, log, logEvery)
	p.transport, p.inFlight = t, new(atomic.Int64)
	p.client = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // a bid endpoint that redirects is broken, not followed
	}}
	if u, err := url.Parse(cfg.URL); err == nil && u.Scheme == "http" && !cfg.HTTP2 {
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
		p.fast = &fasthttp.HostClient{Addr: addr, NoDefaultUserAgentHeader: true, MaxConns: int(p.maxFlight),
			MaxIdleConnDuration: 90 * time.Second, MaxResponseBodySize: int(maxBody), DisablePathNormalizing: true,
			Dial: (&fasthttp.TCPDialer{Concurrency: 0}).Dial}
	}
	return p
}

// configure returns a partner of cfg without its connections, calls in
// flight and rate bound, which newPartner gives it.
func (*partner) configure(name string, cfg Partner, adj, maxBody int64, stats *PartnerStats, log *slog.Logger, logEvery time.Duration) *partner {
	p := &partner{name: name, url: cfg.URL, cfg: cfg, adjust: adj, currency: cfg.currency(), header: http.Header{},
		maxFlight: int64(cfg.MaxInFlight), maxBody: maxBody, stats: stats, log: log, logEvery: int64(logEvery)}
	if p.maxFlight == 0 {
		p.maxFlight = DefaultMaxInFlight
	}
	if cfg.QPS > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(cfg.QPS), max(1, cfg.QPS/10))
	}
	for h, v := range cfg.Headers {
		p.header.Set(h, v)
	}
	if cfg.Token != "" {
		p.header.Set(cfg.TokenHeader, cfg.Token)
	}
	p.header.Set("Content-Type", "application/json")
	p.header.Set("X-Openrtb-Version", "2.6")
	p.header.Set("Accept-Encoding", "gzip")
	if cfg.Gzip {
		p.header.Set("Content-Encoding", "gzip")
	}
	if len(cfg.Placements) > 0 {
		p.places = make(map[string]bool, len(cfg.Placements))
		for _, pl := range cfg.Placements {
			p.places[pl] = true
		}
	}
	p.sites = slices.Clone(cfg.Sites)
	if len(cfg.Deals) > 0 {
		p.deals = make(map[string]bool, len(cfg.Deals))
		for _, d := range cfg.Deals {
			p.deals[d] = true
		}
	}
	return p
}

// mayBid reports whether the partner may bid on placement on site.
func (p *partner) mayBid(placement, site string) bool {
	if p.places != nil && !p.places[placement] {
		return false
	}
	if p.sites == nil {
		return true
	}
	for _, s := range p.sites {
		if site == s || strings.HasSuffix(site, "."+s) {
			return true
		}
	}
	return false
}

// private reports whether opp's visitor is private for the partner:
// private for the operator (opp.Private), or the GDPR applying without a
// consent string that grants purpose 1 and consent to the partner's TCF
// vendor id (a partner without one has none). A private visitor's ids are
// not sent the partner, its address is truncated, and it is offered no
// user sync.
func (p *partner) private(opp *Opportunity) bool {
	return opp.Private || p.refused(&opp.Signals)
}

// refused reports whether sg, where the GDPR applies, withhold consent
// from the partner.
func (p *partner) refused(sg *privacy.Signals) bool {
	switch sg.GDPR {
	case privacy.Absent, privacy.Off:
		return false
	case privacy.On:
		return sg.Consent.Unreadable || !privacy.TCFConsent(sg.Consent.Value, p.cfg.GVLID)
	}
	return true // unreadable
}

// offered reports whether the partner is offered deal.
func (p *partner) offered(deal string) bool { return p.deals == nil || p.deals[deal] }

// admit takes a place for one call: false when the partner is over its
// qps or its calls in flight (it is then not asked).
func (p *partner) admit() bool {
	if p.inFlight.Add(1) > p.maxFlight {
		p.inFlight.Add(-1)
		return false
	}
	if p.limiter != nil && !p.limiter.Allow() {
		p.inFlight.Add(-1)
		return false
	}
	return true
}

// answer is what one call to a partner brought back.
type answer struct {
	partner *partner
	outcome Outcome
	status  int
	latency time.Duration
	resp    *openrtb.BidResponse
	err     error
}

var (
	errTooLarge = errors.New("answer past ssp.max_response")
	errHTTP10   = errors.New("answered in HTTP/1.0")
)

// call posts body (gzipped already when the partner takes gzip) and reads
// the answer, within ctx. The caller has admitted the call; call releases
// its place.
func (p *partner) call(ctx context.Context, body []byte) answer {
	defer p.inFlight.Add(-1)
	p.stats.Requests.Add(1)
	start := time.Now()
	a := answer{partner: p}
	if p.fast != nil {
		return p.callFast(ctx, body, start)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		a.outcome, a.err = OutcomeError, err
		return p.done(a, start)
	}
	// Shared, read only: the transport reads a request's headers and
	// never writes them, and no redirect is followed (a copy per call was
	// an allocation of every header).
	req.Header = p.header
	resp, err := p.client.Do(req)
	if err != nil {
		a.outcome, a.err = OutcomeError, err
		if ctx.Err() != nil || isTimeout(err) {
			a.outcome = OutcomeTimeout
		}
		return p.done(a, start)
	}
	defer resp.Body.Close()
	a.status = resp.StatusCode
	switch {
	case resp.ProtoMajor == 1 && resp.ProtoMinor == 0:
		a.outcome, a.err = OutcomeHTTP10, errHTTP10
		return p.done(a, start)
	case resp.StatusCode == http.StatusNoContent:
		a.outcome = OutcomeNoBid
		return p.done(a, start)
	case resp.StatusCode != http.StatusOK:
		a.outcome, a.err = OutcomeStatus, errors.New("HTTP status "+strconv.Itoa(resp.StatusCode))
		return p.done(a, start)
	}
	data, err := p.read(resp)
	if err != nil {
		a.outcome, a.err = OutcomeError, err
		switch {
		case errors.Is(err, errTooLarge):
			a.outcome = OutcomeTooLarge
		case ctx.Err() != nil || isTimeout(err):
			a.outcome = OutcomeTimeout
		}
		return p.done(a, start)
	}
	return p.decoded(a, data, start)
}

// callFast is call through fasthttp's client, by the deadline of ctx.
func (p *partner) callFast(ctx context.Context, body []byte, start time.Time) answer {
	a := answer{partner: p}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = start.Add(5 * time.Second)
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(p.url)
	req.Header.SetMethod(http.MethodPost)
	for k, vs := range p.header {
		req.Header.Set(k, vs[0])
	}
	req.SetBodyRaw(body)
	err := p.fast.DoDeadline(req, resp, deadline)
	if err != nil {
		a.outcome, a.err = OutcomeError, err
		switch {
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			a.outcome = OutcomeTooLarge
		case errors.Is(err, fasthttp.ErrTimeout) || ctx.Err() != nil || isTimeout(err):
			a.outcome = OutcomeTimeout
		}
		return p.done(a, start)
	}
	a.status = resp.StatusCode()
	switch {
	case !resp.Header.IsHTTP11():
		a.outcome, a.err = OutcomeHTTP10, errHTTP10
		return p.done(a, start)
	case a.status == http.StatusNoContent:
		a.outcome = OutcomeNoBid
		return p.done(a, start)
	case a.status != http.StatusOK:
		a.outcome, a.err = OutcomeStatus, errors.New("HTTP status "+strconv.Itoa(a.status))
		return p.done(a, start)
	}
	data := resp.Body()
	if strings.EqualFold(string(resp.Header.ContentEncoding()), "gzip") {
		var err error
		if data, err = p.gunzip(bytes.NewReader(data)); err != nil {
			a.outcome, a.err = OutcomeError, err
			if errors.Is(err, errTooLarge) {
				a.outcome = OutcomeTooLarge
			}
			return p.done(a, start)
		}
	}
	return p.decoded(a, data, start)
}

// decoded finishes a's call with the answer's body: its bids, or why it
// is not OpenRTB.
func (p *partner) decoded(a answer, data []byte, start time.Time) answer {
	r, err := openrtb.DecodeResponse(data)
	if err != nil {
		a.outcome, a.err = OutcomeInvalid, err
		return p.done(a, start)
	}
	a.resp, a.outcome = r, OutcomeNoBid
	for i := range r.SeatBid {
		if len(r.SeatBid[i].Bid) > 0 {
			a.outcome = OutcomeBid
		}
	}
	return p.done(a, start)
}

// gunzip reads a gzipped answer, at most maxBody bytes once gunzipped.
func (p *partner) gunzip(r io.Reader) ([]byte, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	data, err := io.ReadAll(io.LimitReader(zr, p.maxBody+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > p.maxBody {
		return nil, errTooLarge
	}
	return data, nil
}

// read reads the answer's body, gunzipping it, at most maxBody bytes
// either way: a larger one (a 10 MB body, a gzip bomb) is cut there.
func (p *partner) read(resp *http.Response) ([]byte, error) {
	body := io.LimitReader(resp.Body, p.maxBody+1)
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		return p.gunzip(body)
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > p.maxBody {
		return nil, errTooLarge
	}
	return data, nil
}

// done counts a's outcome, logs a failure at a bounded rate, and returns
// a with its latency.
func (p *partner) done(a answer, start time.Time) answer {
	a.latency = time.Since(start)
	switch a.outcome {
	case OutcomeBid:
		p.stats.Bids.Add(1)
	case OutcomeNoBid:
		p.stats.NoBids.Add(1)
	case OutcomeTimeout:
		p.stats.Timeouts.Add(1)
	default:
		p.stats.Errors.Add(1)
		p.logFailure(a)
	}
	return a
}

// logFailure logs a failed call, at most once per logEvery for each
// partner and kind, with the count of those left out since.
func (p *partner) logFailure(a answer) {
	if p.log == nil {
		return
	}
	v, _ := p.missed.LoadOrStore(a.outcome, new(atomic.Int64))
	missed := v.(*atomic.Int64)
	v, _ = p.logged.LoadOrStore(a.outcome, new(atomic.Int64))
	last := v.(*atomic.Int64)
	now := time.Now().UnixNano()
	prev := last.Load()
	if prev != 0 && now-prev < p.logEvery || !last.CompareAndSwap(prev, now) {
		missed.Add(1)
		return
	}
	msg := ""
	if a.err != nil {
		msg = safeErr(a.err) // never the URL: it may carry a token
	}
	p.log.Warn("demand partner call failed", "partner", p.name, "outcome", string(a.outcome), "status", a.status,
		"err", msg, "repeated", missed.Swap(0))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// close ends the partner's idle connections.
func (p *partner) close() {
	p.transport.CloseIdleConnections()
	if p.fast != nil {
		p.fast.CloseIdleConnections()
	}
}
