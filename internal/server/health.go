package server

import (
	"context"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Load balancers probe the port they send traffic to, so GET /healthz and
// GET /readyz answer on the public listener too, as on the admin one but
// without details: 200 "ok" while the process runs; 200 "ready" or 503 "not
// ready" from Options.Ready. Anyone may call them, so a probe result is
// reused for readyEvery: a flood of /readyz costs one store read a second.

const (
	readyEvery   = time.Second
	readyTimeout = 2 * time.Second
)

var (
	healthPath = []byte("/healthz")
	readyPath  = []byte("/readyz")
	valNoStore = []byte("no-store")
)

// readiness runs Options.Ready at most once per readyEvery; callers that
// come while a probe runs wait for its result.
type readiness struct {
	probe func(ctx context.Context) error // nil: always ready
	mu    sync.Mutex
	at    time.Time
	err   error
}

func (r *readiness) check(now time.Time) error {
	if r.probe == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && now.Sub(r.at) < readyEvery {
		return r.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	r.err, r.at = r.probe(ctx), time.Now()
	return r.err
}

// serveHealth answers /healthz (health) or /readyz.
func (s *Server) serveHealth(ctx *fasthttp.RequestCtx, ready bool) {
	if !allowRead(ctx) {
		return
	}
	ctx.Response.Header.SetCanonical(hdrCacheControl, valNoStore)
	switch {
	case !ready:
		plain(ctx, fasthttp.StatusOK, "ok")
	case s.ready.check(time.Now()) != nil:
		plain(ctx, fasthttp.StatusServiceUnavailable, "not ready")
	default:
		plain(ctx, fasthttp.StatusOK, "ready")
	}
}
