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
type Audit struct {
	mu   sync.Mutex
	f    *os.File
	log  *slog.Logger
	now  func() time.Time
	errs atomic.Uint64

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
}

// OpenAudit opens (creating) the audit log at path. alertAt failures within
// window raise an alert.
func OpenAudit(path string, alertAt int, window time.Duration, log *slog.Logger) (*Audit, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Audit{f: f, log: log, now: time.Now, alertAt: alertAt, alertWindow: window}, nil
}

// Record appends rec (its Time set now) and, for an authentication failure,
// counts it towards the alert.
func (a *Audit) Record(rec AuditRecord) {
	rec.Time = a.now().UTC()
	line, err := json.Marshal(rec)
	if err != nil {
		a.errs.Add(1)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.f.Write(append(line, '\n')); err != nil {
		if a.errs.Add(1) == 1 {
			a.log.Error("audit log write failed", "err", err)
		}
	}
	if rec.Result != "ok" && (rec.Action == "login" || rec.Action == "auth" || rec.Action == "setup") {
		a.authFails.Add(1)
		a.countFailure(rec.Time)
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

// Close syncs and closes the file.
func (a *Audit) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.f.Sync()
	return a.f.Close()
}
