// Package admin is the admin listener, on net/http and separate from the
// public one: health and readiness now; the placement API, metrics and the
// dashboard build on it. /metrics serves Prometheus metrics. It listens on loopback by default.
package admin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure the admin listener.
type Options struct {
	// Probe checks the backends a ready server needs (the store). It is
	// called by /readyz with a short deadline; nil means always healthy.
	Probe func(ctx context.Context) error
	// Metrics is served at /metrics in the Prometheus text format; nil
	// disables the route.
	Metrics prometheus.Gatherer
	Logger  *slog.Logger
}

// Server is the admin listener.
type Server struct {
	http  *http.Server
	probe func(ctx context.Context) error
	log   *slog.Logger
	ready atomic.Bool
}

// New returns an admin Server; it reports not ready until SetReady(true).
func New(opt Options) *Server {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	s := &Server{probe: opt.Probe, log: opt.Logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	if opt.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(opt.Metrics, promhttp.HandlerOpts{
			ErrorLog:            slog.NewLogLogger(opt.Logger.Handler(), slog.LevelWarn),
			MaxRequestsInFlight: 4,
		}))
	}
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(opt.Logger.Handler(), slog.LevelDebug),
	}
	return s
}

// SetReady sets what /readyz reports: true once serving, false while draining.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// Serve accepts connections on ln until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops the listener and waits for in-flight requests until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

// healthz answers 200 while the process runs: for liveness checks.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	text(w, http.StatusOK, "ok")
}

// readyz answers 200 when the server takes traffic and its store answers,
// 503 otherwise: for load balancers, which stop sending traffic on drain.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		text(w, http.StatusServiceUnavailable, "not ready")
		return
	}
	if s.probe != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.probe(ctx); err != nil {
			s.log.Warn("readiness probe failed", "err", err)
			text(w, http.StatusServiceUnavailable, "store unavailable")
			return
		}
	}
	text(w, http.StatusOK, "ready")
}

func text(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}
