package server

import (
	"github.com/valyala/fasthttp"

	"tsubame/internal/health"
	"tsubame/internal/render"
)

// Load balancers probe the port they send traffic to, so GET /healthz and
// GET /readyz answer on the public listener too, as on the admin one but
// without details: 200 "ok" while the process runs; 200 "ready" or 503 "not
// ready" from Options.Ready's required checks. GET /readyz?verbose lists
// every check by name and state, the reported-only ones (the store) too,
// and nothing else: no detail of a failure, which may name hosts, reaches
// the public listener. The checks are read from state kept by others (the
// store is probed in the background), so a flood of /readyz costs the
// store nothing.

var (
	healthPath = []byte("/healthz")
	readyPath  = []byte("/readyz")
	valNoStore = []byte("no-store")
)

// readiness reads Options.Ready.
type readiness struct {
	probe func() health.Report // nil: always ready
}

func (r *readiness) report() health.Report {
	if r.probe == nil {
		return nil
	}
	return r.probe()
}

// serveHealth answers /healthz (health) or /readyz.
func (s *Server) serveHealth(ctx *fasthttp.RequestCtx, ready bool) {
	if !allowRead(ctx) {
		return
	}
	ctx.Response.Header.SetCanonical(hdrCacheControl, valNoStore)
	if !ready {
		plain(ctx, fasthttp.StatusOK, "ok")
		return
	}
	rep := s.ready.report()
	status := fasthttp.StatusOK
	if !rep.Ready() {
		status = fasthttp.StatusServiceUnavailable
	}
	switch {
	case ctx.QueryArgs().Has("verbose"):
		answer(ctx, status, render.ContentTypeText)
		_ = rep.WriteVerbose(ctx, false)
	case status == fasthttp.StatusOK:
		plain(ctx, status, "ready")
	default:
		plain(ctx, status, "not ready")
	}
}
