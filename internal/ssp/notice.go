package ssp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// notifier calls partners' notice URLs (nurl, burl, lurl) server to
// server: two bounded queues and a fixed set of workers, so that a partner
// whose notice endpoint hangs holds Workers goroutines at most, never one
// per notice. Win and billing notices (money) have a queue of their own,
// taken first and retried; loss notices wait behind them and are not
// retried: a flood of them never crowds out a bill.
//
// The URLs are the partners': unless AllowPrivate, a call may only reach
// a public address (checked when it dials, so a name that resolves to a
// private one is refused too), and the markup fetch follows no redirect.
type notifier struct {
	client *http.Client // notices: up to 3 redirects
	fetchC *http.Client // a winner's markup: none
	money  chan notice
	loss   chan notice
	log    *slog.Logger
	wg     sync.WaitGroup
	mu     sync.RWMutex // guards closed against a push on a closed queue
	closed bool

	sent, failed, dropped atomic.Uint64
	lastLog               atomic.Int64
}

// notice is a URL to call and the tries it has had.
type notice struct {
	url   string
	tries int
}

// moneyTries bounds the calls of a win or billing notice; retryAfter is
// the wait before each retry.
const moneyTries = 3

var retryAfter = [moneyTries]time.Duration{0, time.Second, 5 * time.Second}

var errPrivateAddress = errors.New("a partner's notice URL may only reach a public address")

func newNotifier(cfg Notices, log *slog.Logger) *notifier {
	dialer := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	if !cfg.AllowPrivate {
		dialer.Control = publicOnly
	}
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: 64,
		MaxConnsPerHost:     64, // one slow host cannot take every socket
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 2 * time.Second,
		ForceAttemptHTTP2:   true,
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12},
	}
	n := &notifier{
		client: &http.Client{Transport: t, Timeout: cfg.Timeout,
			CheckRedirect: func(_ *http.Request, via []*http.Request) error {
				if len(via) >= 3 {
					return http.ErrUseLastResponse
				}
				return nil
			}},
		fetchC: &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		money:  make(chan notice, max(cfg.Queue, 1)),
		loss:   make(chan notice, max(cfg.Queue, 1)),
		log:    log,
	}
	for range max(cfg.Workers, 1) {
		n.wg.Go(n.work)
	}
	return n
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
func (n *notifier) pushMoney(u string) { n.push(n.money, notice{url: u}) }
func (n *notifier) pushLoss(u string)  { n.push(n.loss, notice{url: u}) }

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
	if _, err := n.get(context.Background(), n.client, no.url, 0); err != nil {
		if money && no.tries < moneyTries && !errors.Is(err, errPrivateAddress) {
			time.AfterFunc(retryAfter[no.tries], func() { n.push(n.money, no) })
			return
		}
		n.failed.Add(1)
		n.warn("notice call failed", "err", safeErr(err), "failed", n.failed.Load())
		return
	}
	n.sent.Add(1)
}

// fetch calls u now, within ctx, and returns its body (at most limit
// bytes: a longer one is an error). It follows no redirect.
func (n *notifier) fetch(ctx context.Context, u string, limit int64) ([]byte, error) {
	return n.get(ctx, n.fetchC, u, limit)
}

var errNoticeTooLarge = errors.New("notice answer too large")

// get calls u; with limit over 0 it returns the body, else it reads and
// drops up to 64 KiB of it (so the connection is kept).
func (n *notifier) get(ctx context.Context, c *http.Client, u string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, errors.New("HTTP status " + strconv.Itoa(resp.StatusCode))
	}
	if limit <= 0 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, errNoticeTooLarge
	}
	return body, nil
}

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
// or for ctx to end. Retries not yet due are dropped (and counted).
func (n *notifier) drain(ctx context.Context) {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.money)
		close(n.loss)
	}
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
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
