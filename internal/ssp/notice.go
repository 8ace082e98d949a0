package ssp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// notifier calls partners' notice URLs (nurl, burl, lurl) server to
// server: a bounded queue and a fixed set of workers, so that a partner
// whose notice endpoint hangs holds Workers goroutines at most, never one
// per notice.
type notifier struct {
	client *http.Client
	queue  chan string
	log    *slog.Logger
	wg     sync.WaitGroup
	mu     sync.RWMutex // guards closed against a push on the closed queue
	closed bool

	sent, failed, dropped atomic.Uint64
	lastLog               atomic.Int64
}

func newNotifier(cfg Notices, log *slog.Logger) *notifier {
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
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
		queue: make(chan string, max(cfg.Queue, 1)),
		log:   log,
	}
	for range max(cfg.Workers, 1) {
		n.wg.Go(n.work)
	}
	return n
}

// push queues a call of u; it never blocks: past the queue's bound the
// notice is dropped and counted.
func (n *notifier) push(u string) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		n.dropped.Add(1)
		return
	}
	select {
	case n.queue <- u:
	default:
		n.dropped.Add(1)
		n.warn("notice queue full: a notice was dropped", "dropped", n.dropped.Load())
	}
}

func (n *notifier) work() {
	for u := range n.queue {
		if _, err := n.get(context.Background(), u, 0); err != nil {
			n.failed.Add(1)
			n.warn("notice call failed", "err", err.Error(), "failed", n.failed.Load())
			continue
		}
		n.sent.Add(1)
	}
}

// fetch calls u now, within ctx, and returns its body (at most limit
// bytes: a longer one is an error).
func (n *notifier) fetch(ctx context.Context, u string, limit int64) ([]byte, error) {
	return n.get(ctx, u, limit)
}

var errNoticeTooLarge = errors.New("notice answer too large")

// get calls u; with limit over 0 it returns the body, else it reads and
// drops up to 64 KiB of it (so the connection is kept).
func (n *notifier) get(ctx context.Context, u string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := n.client.Do(req)
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
// or for ctx to end.
func (n *notifier) drain(ctx context.Context) {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.queue)
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
