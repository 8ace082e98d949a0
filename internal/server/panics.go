package server

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// panicLogEvery bounds the panics logged with their stack: the first one in
// every interval is logged whole, the rest are counted into the next line
// (the panics_total metric counts every one).
const panicLogEvery = time.Second

// panicLog limits the stacks written to the process log.
type panicLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether a panic at now is logged, and how many were not
// since the last one that was.
func (l *panicLog) allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < panicLogEvery {
		l.suppressed++
		return false, 0
	}
	l.last, suppressed, l.suppressed = now, l.suppressed, 0
	return true, suppressed
}

// recovered answers a request whose handler panicked with p: a 500 in place
// of whatever the handler had started, counted, and logged with its stack
// (at a bounded rate). The connection is closed after the answer: the
// panic may have left the request's state half-written.
func (s *Server) recovered(ctx *fasthttp.RequestCtx, p any) {
	s.counters.panics.Add(1)
	if ok, suppressed := s.panics.allow(time.Now()); ok {
		s.log.Error("public handler panicked; answered 500",
			"panic", fmt.Sprint(p), "method", string(ctx.Method()), "path", string(ctx.Path()),
			"stack", string(debug.Stack()), "not_logged_since_last", suppressed)
	}
	ctx.Response.Reset()
	ctx.Response.Header.SetCanonical(hdrNosniff, valNosniff)
	ctx.SetConnectionClose()
	plain(ctx, fasthttp.StatusInternalServerError, "internal error")
}
