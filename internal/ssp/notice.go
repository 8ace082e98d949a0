package ssp

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// notifier calls partners' notice URLs (nurl, burl, lurl) server to
// server: two bounded queues and a fixed set of workers, so that a partner
// whose notice endpoint hangs holds Workers goroutines at most, never one
// per notice. Win and billing notices (money) have a queue of their own,
// taken first and retried; loss notices wait behind them and are not
// retried: a flood of them never crowds out a bill. With a journal, the
// money notices not yet called survive the process (see journal).
//
// The URLs are the partners': unless AllowPrivate, a call may only reach
// a public address (checked when it dials, so a name that resolves to a
// private one is refused too), and the markup fetch follows no redirect.
type notifier struct {
	client  *fasthttp.Client // notices: up to noticeRedirects redirects
	fetchC  *fasthttp.Client // a winner's markup: none
	timeout time.Duration    // a notice's call, each redirect's too
	money   chan notice
	loss    chan notice
	journal *journal // nil: none (the money notices live in memory only)
	stop    chan struct{}
	log     *slog.Logger
	wg      sync.WaitGroup
	mu      sync.RWMutex // guards closed against a push on a closed queue
	closed  bool

	sent, failed, dropped atomic.Uint64
	lastLog               atomic.Int64
}

// notice is a URL to call, the tries it has had, and its sequence number
// in the journal (0: not journaled).
type notice struct {
	url   string
	tries int
	seq   uint64
}

// moneyTries bounds the calls of a win or billing notice; retryAfter is
// the wait before each retry.
const moneyTries = 3

var retryAfter = [moneyTries]time.Duration{0, time.Second, 5 * time.Second}

var errPrivateAddress = errors.New("a partner's notice URL may only reach a public address")

// noticeRedirects bounds the redirects a notice call follows; noticeBody
// the answer's body read (and dropped) so that its connection is kept.
const (
	noticeRedirects = 3
	noticeBody      = 64 << 10
)

// newNotifier calls notices through fasthttp's client: the notices of
// every auction (a win and a loss per partner) are as many calls as its
// bid requests, and net/http's client cost them twice fasthttp's CPU
// (its two goroutines per connection and allocations per call).
// With a journal directory, the win and billing notices not yet called
// are kept in a file there (see journal), and those a dead process left
// are called: at the start, then every orphanEvery.
func newNotifier(cfg Notices, journalDir string, log *slog.Logger) (*notifier, error) {
	dialer := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	if !cfg.AllowPrivate {
		dialer.Control = publicOnly
	}
	client := func(maxBody int) *fasthttp.Client {
		return &fasthttp.Client{
			Dial:                     func(addr string) (net.Conn, error) { return dialer.Dial("tcp", addr) },
			NoDefaultUserAgentHeader: true,
			MaxConnsPerHost:          64, // one slow host cannot take every socket
			MaxConnWaitTimeout:       cfg.Timeout,
			MaxIdleConnDuration:      90 * time.Second,
			MaxResponseBodySize:      maxBody,
			DisablePathNormalizing:   true, // a partner's URL is called as written
			TLSConfig:                &tls.Config{MinVersion: tls.VersionTLS12},
		}
	}
	n := &notifier{
		client:  client(noticeBody),
		fetchC:  client(MaxMarkup),
		timeout: cfg.Timeout,
		money:   make(chan notice, max(cfg.Queue, 1)),
		loss:    make(chan notice, max(cfg.Queue, 1)),
		stop:    make(chan struct{}),
		log:     log,
	}
	if journalDir != "" {
		j, err := openJournal(journalDir, log)
		if err != nil {
			return nil, fmt.Errorf("the notice journal: %w", err)
		}
		n.journal = j
	}
	for range max(cfg.Workers, 1) {
		n.wg.Go(n.work)
	}
	if n.journal != nil {
		n.adoptOrphans()
		go n.watchOrphans()
	}
	return n, nil
}

// orphanEvery is how often the journals of dead processes are looked for
// after the start (a peer killed during a restart's handover leaves one
// while this process runs).
const orphanEvery = time.Minute

func (n *notifier) watchOrphans() {
	t := time.NewTicker(orphanEvery)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.adoptOrphans()
		}
	}
}

// adoptOrphans queues the notices of dead processes' journals, journaled
// in this one's first.
func (n *notifier) adoptOrphans() {
	urls, remove := n.journal.orphans()
	for _, u := range urls {
		n.pushMoney(u)
	}
	remove()
	if len(urls) > 0 && n.log != nil {
		n.log.Info("win and billing notices taken over from a stopped process's journal", "notices", len(urls))
	}
}

// publicOnly refuses a connection to an address that is not a public
// unicast one: loopback, private (RFC 1918, fc00::/7), link-local (the
// cloud metadata address), shared (100.64/10), unspecified or multicast.
func publicOnly(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return errPrivateAddress
	}
	a := ap.Addr().Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() || shared.Contains(a) {
		return errPrivateAddress
	}
	return nil
}

var shared = netip.MustParsePrefix("100.64.0.0/10")

// pushMoney queues a win or billing notice; pushLoss a loss notice. They
// never block: past its queue's bound a notice is dropped and counted.
// A money notice dropped stays in the journal, if any, for the next start.
func (n *notifier) pushMoney(u string) {
	no := notice{url: u}
	if n.journal != nil {
		no.seq = n.journal.add(u)
	}
	n.push(n.money, no)
}

func (n *notifier) pushLoss(u string) { n.push(n.loss, notice{url: u}) }

func (n *notifier) push(q chan notice, no notice) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		n.dropped.Add(1)
		return
	}
	select {
	case q <- no:
	default:
		n.dropped.Add(1)
		n.warn("notice queue full: a notice was dropped", "dropped", n.dropped.Load())
	}
}

func (n *notifier) work() {
	for {
		// Money first, whenever there is any.
		select {
		case no, ok := <-n.money:
			if !ok {
				n.drainLoss()
				return
			}
			n.call(no, true)
			continue
		default:
		}
		select {
		case no, ok := <-n.money:
			if !ok {
				n.drainLoss()
				return
			}
			n.call(no, true)
		case no, ok := <-n.loss:
			if ok {
				n.call(no, false)
			}
		}
	}
}

// drainLoss calls the loss notices left once the queues are closed.
func (n *notifier) drainLoss() {
	for no := range n.loss {
		n.call(no, false)
	}
}

// call calls no's URL; a win or billing notice that fails is tried again
// later, up to moneyTries calls.
func (n *notifier) call(no notice, money bool) {
	no.tries++
	if err := n.notify(no.url); err != nil {
		if money && no.tries < moneyTries && !errors.Is(err, errPrivateAddress) {
			time.AfterFunc(retryAfter[no.tries], func() { n.push(n.money, no) })
			return
		}
		n.failed.Add(1)
		n.warn("notice call failed", "err", safeErr(err), "failed", n.failed.Load())
		n.done(no)
		return
	}
	n.sent.Add(1)
	n.done(no)
}

// done ends a money notice's life in the journal.
func (n *notifier) done(no notice) {
	if n.journal != nil {
		n.journal.done(no.seq)
	}
}

// notify calls a notice URL, following up to noticeRedirects redirects,
// each call within the notices' timeout. A 2xx answer is a notice
// delivered, even one whose body is past noticeBody (which is not read).
func (n *notifier) notify(u string) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(u)
	req.SetTimeout(n.timeout)
	err := n.client.DoRedirects(req, resp, noticeRedirects)
	if err != nil && !errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return err
	}
	if c := resp.StatusCode(); c < 200 || c > 299 {
		return errors.New("HTTP status " + strconv.Itoa(c))
	}
	return nil
}

// fetch calls u now, by ctx's deadline (or the notices' timeout), and
// returns its body (at most MaxMarkup bytes: a longer one is an error).
// It follows no redirect.
func (n *notifier) fetch(ctx context.Context, u string) ([]byte, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(n.timeout)
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(u)
	if err := n.fetchC.DoDeadline(req, resp, deadline); err != nil {
		if errors.Is(err, fasthttp.ErrBodyTooLarge) {
			return nil, errNoticeTooLarge
		}
		return nil, err
	}
	if c := resp.StatusCode(); c < 200 || c > 299 {
		return nil, errors.New("HTTP status " + strconv.Itoa(c))
	}
	return bytes.Clone(resp.Body()), nil
}

var errNoticeTooLarge = errors.New("notice answer too large")

// warn logs at most once a second.
func (n *notifier) warn(msg string, args ...any) {
	if n.log == nil {
		return
	}
	now := time.Now().UnixNano()
	last := n.lastLog.Load()
	if now-last < int64(time.Second) || !n.lastLog.CompareAndSwap(last, now) {
		return
	}
	n.log.Warn(msg, args...)
}

func (n *notifier) stats() (sent, failed, dropped uint64) {
	return n.sent.Load(), n.failed.Load(), n.dropped.Load()
}

// drain stops taking notices and waits for the queued ones to be called,
// or for ctx to end. Retries not yet due are dropped (and counted); with a
// journal, they and the money notices not called stay in it, for the next
// process to call.
func (n *notifier) drain(ctx context.Context) {
	n.mu.Lock()
	first := !n.closed
	if first {
		n.closed = true
		close(n.money)
		close(n.loss)
		close(n.stop)
	}
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	if first && n.journal != nil {
		n.journal.close()
	}
}

// close stops the workers at once.
func (n *notifier) close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n.drain(ctx)
}

// safeErr is err's text without the URL a *url.Error carries (a
// partner's URL may hold a token in its query).
func safeErr(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}
