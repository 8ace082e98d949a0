// Package ratelog bounds repeated warnings and errors in the process log.
// A store that is down makes every refresh, every request and every retry
// fail the same way, thousands of times a second; logging each would bury
// everything else and fill the disk. Metrics count every failure; the log
// needs one line for the first and then a count.
//
// Handler wraps a slog.Handler. A warning or error is identified by its
// level and message. The first of a kind is written in full; others of the
// same kind within the interval are counted, not written; the first one
// after the interval is written in full with "repeated=N" (how many were
// left out since the last line of that kind), and so on. When a kind stops
// recurring, Run writes the last one left out, with its count, once the
// interval is over, so no count is lost. Lines below Warn pass through.
//
// slog libraries that sample (drop a share of records) exist; they do not
// write what they dropped, which an operator reading an outage needs.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxKinds bounds the kinds tracked; past it, new kinds pass through (a
// program's messages are constants, so this is only a safety net).
const maxKinds = 1024

// Handler is a slog.Handler that bounds repeats; see the package comment.
type Handler struct {
	next slog.Handler
	st   *state
}

type state struct {
	interval time.Duration
	now      func() time.Time
	mu       sync.Mutex
	kinds    map[kind]*window
}

type kind struct {
	level slog.Level
	msg   string
}

// window is the current interval of one kind.
type window struct {
	start      time.Time
	suppressed uint64
	last       slog.Record  // the last one left out, for Flush
	lastH      slog.Handler // the handler (with its attributes) it came through
}

// New wraps next. An interval of 0 or less disables the bound: every
// record passes through.
func New(next slog.Handler, interval time.Duration) *Handler {
	return &Handler{next: next, st: &state{interval: interval, now: time.Now, kinds: make(map[kind]*window)}}
}

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle writes r, or counts it as a repeat.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	st := h.st
	if r.Level < slog.LevelWarn || st.interval <= 0 {
		return h.next.Handle(ctx, r)
	}
	t := st.now()
	k := kind{r.Level, r.Message}
	st.mu.Lock()
	w := st.kinds[k]
	switch {
	case w == nil:
		if len(st.kinds) < maxKinds {
			st.kinds[k] = &window{start: t}
		}
		st.mu.Unlock()
		return h.next.Handle(ctx, r)
	case t.Sub(w.start) < st.interval:
		w.suppressed++
		w.last, w.lastH = r.Clone(), h.next
		st.mu.Unlock()
		return nil
	}
	n := w.suppressed
	*w = window{start: t}
	st.mu.Unlock()
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Uint64("repeated", n))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a Handler whose records carry attrs; it shares the
// counts with h.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), st: h.st}
}

// WithGroup returns a Handler that qualifies later attributes with name; it
// shares the counts with h.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), st: h.st}
}

// Flush writes, for every kind whose interval is over, the last record left
// out with its count, and forgets kinds that have been quiet for an
// interval. With all true it writes every count now (at exit).
func (h *Handler) Flush(all bool) {
	st := h.st
	t := st.now()
	type pending struct {
		r slog.Record
		h slog.Handler
	}
	var out []pending
	st.mu.Lock()
	for k, w := range st.kinds {
		if !all && t.Sub(w.start) < st.interval {
			continue
		}
		if w.suppressed == 0 {
			delete(st.kinds, k)
			continue
		}
		r := w.last.Clone()
		r.AddAttrs(slog.Uint64("repeated", w.suppressed))
		out = append(out, pending{r, w.lastH})
		*w = window{start: t}
	}
	st.mu.Unlock()
	for _, p := range out {
		_ = p.h.Handle(context.Background(), p.r)
	}
}

// Run flushes every interval until ctx ends, then writes what is left.
func (h *Handler) Run(ctx context.Context) {
	if h.st.interval <= 0 {
		return
	}
	t := time.NewTicker(h.st.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			h.Flush(false)
		case <-ctx.Done():
			h.Flush(true)
			return
		}
	}
}
