package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// APIOptions configure the external API client.
type APIOptions struct {
	URL        string
	Token      string // Authorization: Bearer; never logged
	Timeout    time.Duration
	Retries    int
	Backoff    time.Duration
	MaxBackoff time.Duration
	H2C        bool // HTTP/2 without TLS to an http:// URL
	MaxConns   int  // bound on HTTP/1.1 connections (one per call in flight)
	H2Conns    int  // bound on HTTP/2 connections (each carries many calls)
}

// apiClient calls a platform's API once per message, retrying what may
// succeed later.
type apiClient struct {
	opt       APIOptions
	client    *http.Client
	keyHeader string                              // the platform's RetryHeader
	check     func(status int, body []byte) error // classifies an answer by its body too; nil: by its status
}

func newAPIClient(opt APIOptions, keyHeader string, check func(status int, body []byte) error) *apiClient {
	tr := &http.Transport{
		Proxy:               nil, // loopback and private APIs must not go through an environment proxy
		MaxIdleConns:        opt.MaxConns,
		MaxIdleConnsPerHost: opt.MaxConns,
		MaxConnsPerHost:     opt.MaxConns,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	if opt.H2C {
		var p http.Protocols
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	return &apiClient{opt: opt, client: &http.Client{Transport: tr}, keyHeader: keyHeader, check: check}
}

// permanentError is a failure a retry cannot fix (a 4xx other than 408/429).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks an API's answer as one a retry cannot change: the
// message goes to the dead-letter file at once.
func Permanent(err error) error { return &permanentError{err} }

// retryWait is the wait after failed attempt n (from 1): the server's
// Retry-After if it gave one, else a random wait (full jitter) below
// Backoff doubled per attempt; never more than MaxBackoff. Both transports
// retry by it.
func (o *APIOptions) retryWait(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, o.MaxBackoff)
	}
	ceiling := o.Backoff
	for i := 1; i < attempt && ceiling < o.MaxBackoff; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, o.MaxBackoff)
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// call sends body for m, retrying network errors and what the answer's
// check calls retryable (408, 429 and 5xx) with exponential backoff and
// full jitter (honouring Retry-After up to MaxBackoff). It returns the
// number of attempts made.
func (c *apiClient) call(ctx context.Context, m *Message, body []byte, onRetry func()) (int, error) {
	for attempt := 1; ; attempt++ {
		retryAfter, err := c.once(ctx, m, body)
		if err == nil {
			return attempt, nil
		}
		var perm *permanentError
		if errors.As(err, &perm) || attempt > c.opt.Retries || ctx.Err() != nil {
			return attempt, err
		}
		wait := c.opt.retryWait(attempt, retryAfter)
		onRetry()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return attempt, ctx.Err()
		}
	}
}

// once makes one attempt; on a retryable failure it may return how long
// the API asked us to wait.
func (c *apiClient) once(ctx context.Context, m *Message, body []byte) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.opt.URL, bytes.NewReader(body))
	if err != nil {
		return 0, &permanentError{err}
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	if c.keyHeader != "" {
		req.Header.Set(c.keyHeader, m.RetryKey.String())
	}
	if c.opt.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opt.Token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	var answer []byte
	if c.check != nil {
		answer, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // the rest, so that the connection is kept
	resp.Body.Close()
	var wait time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		wait = time.Duration(s) * time.Second
	}
	switch {
	case err != nil:
		return wait, fmt.Errorf("reading the external API's answer: %w", err)
	case c.check != nil:
		return wait, c.check(resp.StatusCode, answer)
	}
	return wait, statusError(resp.StatusCode)
}

// statusError classifies an answer: nil for 2xx, a retryable error for
// 408, 429 and 5xx, a permanentError for the rest.
func statusError(status int) error {
	switch {
	case status >= 200 && status < 300:
		return nil
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
		return fmt.Errorf("external API answered %d", status)
	}
	return &permanentError{fmt.Errorf("external API refused the message with %d", status)}
}

func (c *apiClient) close() { c.client.CloseIdleConnections() }
