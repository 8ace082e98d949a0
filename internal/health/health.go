// Package health is what a node's readiness is made of: named checks, each
// either required (without it the node cannot serve, and /readyz answers
// 503) or reported only. The store is reported only: a node rides out a
// store outage on its cache (cached ids are served, uncached ones get fast
// 503s), so a store that fails must not take every node out of a load
// balancer's pool at once. Both listeners' /readyz, the metrics and the
// admin's stats read the same checks.
//
// It imports no package of ours (arch_test.go).
package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// The names of the checks a node reports, short and stable: probes and
// alerts match them.
const (
	Serving        = "serving"          // open and not draining
	CacheWarm      = "cache_warm"       // the warm-up at start has run
	AccessLogFile  = "access_log_file"  // the file access log can write
	AccessLogStore = "access_log_store" // the store access log can write
	Store          = "store"            // the store answers (reported only)
)

// Check is one thing readiness looks at, as of when it was read.
type Check struct {
	Name string
	OK   bool
	// Required: a failing check makes the node not ready. A check that is
	// not required is reported only.
	Required bool
	// Detail says why a check fails, for the operator. It may name hosts
	// and addresses, so it goes to the admin listener and the process log,
	// never to the public listener.
	Detail string
}

// Report is the checks of one moment, in the order they are shown.
type Report []Check

// Ready tells whether every required check passes.
func (r Report) Ready() bool {
	for _, c := range r {
		if c.Required && !c.OK {
			return false
		}
	}
	return true
}

// Find returns the named check.
func (r Report) Find(name string) (Check, bool) {
	for _, c := range r {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// With returns r with c in place of the check of the same name, or with c
// added last. r is not modified.
func (r Report) With(c Check) Report {
	out := make(Report, 0, len(r)+1)
	found := false
	for _, x := range r {
		if x.Name == c.Name {
			x, found = c, true
		}
		out = append(out, x)
	}
	if !found {
		out = append(out, c)
	}
	return out
}

// WriteVerbose writes r as /readyz?verbose answers: a line per check,
// "[+]name ok" or "[-]name failed", "(reported, not required)" after a
// check that does not count, and last "ready" or "not ready". With details
// a failed check's line carries its Detail; without (the public listener)
// nothing but the names and states.
func (r Report) WriteVerbose(w io.Writer, details bool) error {
	var b []byte
	for _, c := range r {
		if c.OK {
			b = fmt.Appendf(b, "[+]%s ok", c.Name)
		} else {
			b = fmt.Appendf(b, "[-]%s failed", c.Name)
			if details && c.Detail != "" {
				b = fmt.Appendf(b, ": %s", c.Detail)
			}
		}
		if !c.Required {
			b = append(b, " (reported, not required)"...)
		}
		b = append(b, '\n')
	}
	if r.Ready() {
		b = append(b, "ready\n"...)
	} else {
		b = append(b, "not ready\n"...)
	}
	_, err := w.Write(b)
	return err
}

// Probe checks a dependency in the background, every interval, and keeps
// the last result: readers (a probe request, a scrape, the dashboard) never
// wait for the dependency nor add load to it, however many they are. It
// logs each change of state. Safe for concurrent use.
type Probe struct {
	name  string
	check func(ctx context.Context) error
	every time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	checked bool      // a check has been recorded
	err     error     // the last check's error
	since   time.Time // when the state (up or down) last changed
}

// NewProbe returns a probe of the dependency called name, which check
// checks; every is how often Run checks, and bounds each check.
func NewProbe(name string, check func(ctx context.Context) error, every time.Duration, log *slog.Logger) *Probe {
	if log == nil {
		log = slog.Default()
	}
	return &Probe{name: name, check: check, every: every, log: log}
}

// Run checks every interval until ctx ends.
func (p *Probe) Run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Check(ctx)
		}
	}
}

// Check checks once now, within the interval, and records the result. A
// check cut short by ctx's end is not recorded.
func (p *Probe) Check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, p.every)
	err := p.check(cctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %w", p.every, err)
	}
	now := time.Now()
	p.mu.Lock()
	first, wasUp, since := !p.checked, p.err == nil, p.since
	changed := first || wasUp != (err == nil)
	p.checked, p.err = true, err
	if changed {
		p.since = now
	}
	p.mu.Unlock()
	switch {
	case err != nil && changed:
		p.log.Warn(p.name+" does not answer", "err", err)
	case err == nil && changed && !first:
		p.log.Info(p.name+" answers again", "down_for", now.Sub(since).Round(time.Millisecond))
	}
}

// Up tells whether the last check passed (false before the first).
func (p *Probe) Up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checked && p.err == nil
}

// Result returns the last check as a Check named as the probe; its Detail
// says how long the dependency has been down and why.
func (p *Probe) Result(required bool) Check {
	p.mu.Lock()
	checked, err, since := p.checked, p.err, p.since
	p.mu.Unlock()
	c := Check{Name: p.name, OK: checked && err == nil, Required: required}
	switch {
	case !checked:
		c.Detail = "not checked yet"
	case err != nil:
		c.Detail = fmt.Sprintf("down for %v: %v", time.Since(since).Round(time.Second), err)
	}
	return c
}
