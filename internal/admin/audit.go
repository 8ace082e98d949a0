package admin

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Audit is the admin audit log: one JSON object per line, appended to a
// file opened O_APPEND (mode 0600), separate from the access log. Every
// admin action and every authentication failure is recorded with who, from
// where, what and the result. Values are JSON-encoded, so no input can
// forge a line or a field. A burst of authentication failures raises an
// alert: a warning in the process log and the alerts counter.
//
// Failures repeat (a password-guessing script, a client with a stale
// token): the first of a kind, by client address, user, action and result,
// is written in full; others of that kind within the repeat interval are
// counted, and one line with "repeated": N (and "since", the first of them)
// is written when the interval is over, so a flood of attempts costs a line
// per client and user per interval, not a line per attempt. Successes are
// always written.
type Audit struct {
	mu   sync.Mutex
	f    *os.File
	log  *slog.Logger
	now  func() time.Time
	errs atomic.Uint64

	repeatEvery time.Duration
	repeats     map[string]*repeat // by failure kind
	stop        chan struct{}
	stopped     chan struct{}

	alertAt     int
	alertWindow time.Duration
	failures    []time.Time // failure times within the window, oldest first
	alerting    bool
	alerts      atomic.Uint64
	authFails   atomic.Uint64
}

// AuditRecord is one audit line.
type AuditRecord struct {
	Time   time.Time `json:"time"`
	Actor  string    `json:"actor"`            // user name, "token:<id>", or "" when unknown
	Remote string    `json:"remote"`           // client address
	Action string    `json:"action"`           // e.g. login, placement.put, cache.purge
	Target string    `json:"target,omitempty"` // what the action was on
	Result string    `json:"result"`           // ok, denied, invalid, error, throttled
	Detail string    `json:"detail,omitempty"`
	// Repeated is how many more failures of this kind (client, user,
	// action, result) came since Since and are left out; on a summary line.
	Repeated int       `json:"repeated,omitempty"`
	Since    time.Time `json:"since,omitzero"`
}

// repeat is the current interval of one kind of failure.
type repeat struct {
	start time.Time   // when its last full line was written
	n     int         // failures since, left out
	first time.Time   // the first of them
	last  AuditRecord // the last of them
}

// maxRepeatKinds bounds the kinds tracked at once; past it, failures are
// written in full (the login throttle bounds how fast one client fails).
const maxRepeatKinds = 10000

// AuditOptions configure the audit log.
type AuditOptions struct {
	Path string
	// AlertAt authentication failures within AlertWindow raise an alert.
	AlertAt     int
	AlertWindow time.Duration
	// RepeatInterval is how long repeated failures of one kind are counted
	// before a line says how many; 0 writes every one.
	RepeatInterval time.Duration
	Logger         *slog.Logger
}

// OpenAudit opens (creating) the audit log at opt.Path.
func OpenAudit(opt AuditOptions) (*Audit, error) {
	if err := os.MkdirAll(filepath.Dir(opt.Path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(opt.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	a := &Audit{f: f, log: opt.Logger, now: time.Now, alertAt: opt.AlertAt, alertWindow: opt.AlertWindow,
		repeatEvery: opt.RepeatInterval, repeats: map[string]*repeat{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go a.run()
	return a, nil
}

// Record appends rec (its Time set now) and, for an authentication failure,
// counts it towards the alert. A repeated failure is counted, not written
// (see Audit).
func (a *Audit) Record(rec AuditRecord) {
	rec.Time = a.now().UTC()
	a.mu.Lock()
	defer a.mu.Unlock()
	if rec.Result != "ok" && (rec.Action == "login" || rec.Action == "auth" || rec.Action == "setup") {
		a.authFails.Add(1)
		a.countFailure(rec.Time)
	}
	if rec.Result != "ok" && a.repeatEvery > 0 {
		key := rec.Remote + "\x00" + rec.Target + "\x00" + rec.Actor + "\x00" + rec.Action + "\x00" + rec.Result
		r := a.repeats[key]
		switch {
		case r != nil && rec.Time.Sub(r.start) < a.repeatEvery:
			if r.n == 0 {
				r.first = rec.Time
			}
			r.n++
			r.last = rec
			return
		case r != nil:
			a.summarise(r)
			r.start = rec.Time
		case len(a.repeats) < maxRepeatKinds:
			a.repeats[key] = &repeat{start: rec.Time}
		}
	}
	a.write(rec)
}

// summarise writes the line for the failures r left out, if any. a.mu held.
func (a *Audit) summarise(r *repeat) {
	if r.n == 0 {
		return
	}
	line := r.last
	line.Repeated, line.Since = r.n, r.first
	r.n = 0
	a.write(line)
}

// write appends one line. a.mu held.
func (a *Audit) write(rec AuditRecord) {
	line, err := json.Marshal(rec)
	if err != nil {
		a.errs.Add(1)
		return
	}
	if _, err := a.f.Write(append(line, '\n')); err != nil {
		if a.errs.Add(1) == 1 {
			a.log.Error("audit log write failed", "err", err)
		}
	}
}

// run writes the counts of kinds whose interval is over, and forgets kinds
// quiet for an interval, until Close.
func (a *Audit) run() {
	defer close(a.stopped)
	if a.repeatEvery <= 0 {
		<-a.stop
		return
	}
	t := time.NewTicker(a.repeatEvery / 4)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.flush(false)
		}
	}
}

// flush writes every count whose interval is over (all: every count).
func (a *Audit) flush(all bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for key, r := range a.repeats {
		if !all && now.Sub(r.start) < a.repeatEvery {
			continue
		}
		if r.n == 0 {
			delete(a.repeats, key)
			continue
		}
		a.summarise(r)
		r.start = now
	}
}

// countFailure keeps the failure times inside the window and alerts once per
// burst: when the count reaches alertAt, and again only after it fell below.
func (a *Audit) countFailure(now time.Time) {
	cut := now.Add(-a.alertWindow)
	i := 0
	for i < len(a.failures) && a.failures[i].Before(cut) {
		i++
	}
	a.failures = append(a.failures[i:], now)
	if len(a.failures) > a.alertAt {
		a.failures = a.failures[len(a.failures)-a.alertAt:]
	}
	switch {
	case len(a.failures) >= a.alertAt && !a.alerting:
		a.alerting = true
		a.alerts.Add(1)
		a.log.Warn("ALERT: burst of admin authentication failures; see the audit log",
			"failures", len(a.failures), "within", a.alertWindow)
	case len(a.failures) < a.alertAt:
		a.alerting = false
	}
}

// AuditStats are the audit log's counters.
type AuditStats struct {
	AuthFailures, Alerts, WriteErrors uint64
}

// Stats returns the counters.
func (a *Audit) Stats() AuditStats {
	return AuditStats{AuthFailures: a.authFails.Load(), Alerts: a.alerts.Load(), WriteErrors: a.errs.Load()}
}

// Close writes the counts left, syncs and closes the file.
func (a *Audit) Close() error {
	close(a.stop)
	<-a.stopped
	a.flush(true)
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.f.Sync()
	return a.f.Close()
}
