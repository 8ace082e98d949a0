package admin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	mu    sync.Mutex
	files *auditFiles
	copy  *Syslog // nil: no copy
	log   *slog.Logger
	now   func() time.Time
	errs  atomic.Uint64

	notify      *Notifier
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
	// Seq numbers the lines of the log; Prev is the SHA-256 (hex) of the
	// line before, so an edited, removed or inserted line breaks the chain
	// (tsubame admin verify-audit).
	Seq  uint64 `json:"seq"`
	Prev string `json:"prev"`
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
	// MaxSize closes the active file before it grows past this many bytes;
	// 0: no size limit.
	MaxSize int64
	// RotateEvery closes the active file at every multiple of this
	// duration (aligned to the clock), when the next line is written; 0:
	// never.
	RotateEvery time.Duration
	// KeepFiles deletes the oldest closed files beyond this count; 0 keeps
	// every file.
	KeepFiles int
	// Syslog, if set, gets a copy of every line written; the audit log
	// owns it: Close sends what is queued (for up to SyslogDrain) and
	// stops it.
	Syslog *Syslog
	// AlertAt authentication failures within AlertWindow raise an alert.
	AlertAt     int
	AlertWindow time.Duration
	// RepeatInterval is how long repeated failures of one kind are counted
	// before a line says how many; 0 writes every one.
	RepeatInterval time.Duration
	Logger         *slog.Logger
	// Notifier, if set, gets the alerts that should reach a person.
	Notifier *Notifier
}

// OpenAudit opens (creating) the audit log at opt.Path.
func OpenAudit(opt AuditOptions) (*Audit, error) {
	files, err := openAuditFiles(opt.Path, opt.MaxSize, opt.RotateEvery, opt.KeepFiles)
	if err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	a := &Audit{files: files, copy: opt.Syslog, log: opt.Logger, now: time.Now, alertAt: opt.AlertAt, alertWindow: opt.AlertWindow,
		repeatEvery: opt.RepeatInterval, repeats: map[string]*repeat{}, stop: make(chan struct{}), stopped: make(chan struct{}),
		notify: opt.Notifier}
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
	if rec.Result == "ok" && a.notify != nil {
		by := rec.Actor
		if rec.Remote != "" {
			by += " from " + rec.Remote
		}
		switch rec.Action {
		case "user.create", "setup":
			a.notify.Notify("user %q created by %s", rec.Target, by)
		case "user.delete":
			a.notify.Notify("user %q deleted by %s", rec.Target, by)
		case "token.create":
			a.notify.Notify("API token %s created by %s", rec.Target, by)
		case "token.delete":
			a.notify.Notify("API token %s deleted by %s", rec.Target, by)
		case "user.password", "user.password+totp":
			a.notify.Notify("credentials of user %q replaced by %s", rec.Target, by)
		case "user.role":
			a.notify.Notify("role changed (%s) by %s", rec.Target, by)
		}
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

// write appends one line, chained to the line before it (in this process
// or another: see auditFiles), and copies what it wrote to syslog. a.mu
// held.
func (a *Audit) write(rec AuditRecord) {
	lines, err := a.files.append(rec)
	if err != nil {
		a.writeFailed(err)
	}
	if a.copy != nil {
		for i, line := range lines { // a checkpoint, then rec
			a.copy.Send(line, rec.Result != "ok" && i == len(lines)-1)
		}
	}
}

func (a *Audit) writeFailed(err error) {
	if a.errs.Add(1) == 1 {
		a.log.Error("audit log write failed", "err", err)
		if a.notify != nil {
			a.notify.Notify("the audit log cannot be written (%v); admin actions go unrecorded", err)
		}
	}
}

// maxAuditLine bounds the search for the last line.
const maxAuditLine = 64 << 10

// lastLine returns the file's last line without its newline (a torn last
// line as it is), or nil for an empty file.
func lastLine(f *os.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	end := st.Size()
	if end == 0 {
		return nil, nil
	}
	n := min(end, maxAuditLine)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, end-n); err != nil {
		return nil, err
	}
	buf = bytes.TrimSuffix(buf, []byte("\n"))
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf = buf[i+1:]
	}
	return buf, nil
}

// chainAfter is the sequence number and link of the line after prev.
func chainAfter(prev []byte) (uint64, string) {
	if prev == nil {
		return 1, ""
	}
	var p struct {
		Seq uint64 `json:"seq"`
	}
	_ = json.Unmarshal(prev, &p) // a line from before chaining, or torn: 0
	sum := sha256.Sum256(prev)
	return p.Seq + 1, hex.EncodeToString(sum[:])
}

// ChainBreak is where VerifyAudit found the chain broken.
type ChainBreak struct {
	File   string
	Line   int
	Reason string
}

func (b *ChainBreak) Error() string { return fmt.Sprintf("%s:%d: %s", b.File, b.Line, b.Reason) }

// AuditChain follows the chain across the files of one log, in order.
type AuditChain struct {
	prev    []byte // the last line seen
	seq     uint64
	started bool // a chained line was seen
	Lines   int  // lines checked
	First   uint64
}

// Verify reads one file of the log and returns the first break in the
// chain: a line that is not a record, a sequence number that skips (lines
// removed) or repeats (lines inserted), or a link that does not match the
// line before (a line edited or removed). Lines from before the log was
// chained are accepted before its first chained line.
func (c *AuditChain) Verify(name string, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxAuditLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		var rec struct {
			Seq  uint64  `json:"seq"`
			Prev *string `json:"prev"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return &ChainBreak{name, n, "not a complete record (torn or edited)"}
		}
		switch {
		case rec.Prev == nil && !c.started:
			// Written before the log was chained.
		case rec.Prev == nil:
			return &ChainBreak{name, n, "a line without a chain link inside the chain (inserted)"}
		case !c.started && c.prev == nil && rec.Seq != 1:
			// The first file given starts inside the chain (older files
			// were rotated away): trusted as the start.
			c.First = rec.Seq
		default:
			wantSeq, wantPrev := chainAfter(c.prev)
			if rec.Seq != wantSeq {
				what := "lines are missing before it"
				if rec.Seq < wantSeq {
					what = "lines were inserted or repeated"
				}
				return &ChainBreak{name, n, fmt.Sprintf("sequence number %d where %d was due: %s", rec.Seq, wantSeq, what)}
			}
			if *rec.Prev != wantPrev {
				return &ChainBreak{name, n, "its link does not match the line before: that line was edited or removed"}
			}
		}
		if rec.Prev != nil {
			if !c.started && c.First == 0 {
				c.First = rec.Seq
			}
			c.started = true
			c.seq = rec.Seq
		}
		c.prev = append(c.prev[:0], line...)
		c.Lines++
	}
	if err := sc.Err(); err != nil {
		return &ChainBreak{name, n + 1, err.Error()}
	}
	return nil
}

// Last is the sequence number of the last chained line verified.
func (c *AuditChain) Last() uint64 { return c.seq }

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
		if a.notify != nil {
			a.notify.Notify("ALERT: %d authentication failures within %v; see the audit log", len(a.failures), a.alertWindow)
		}
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
	err := a.files.close()
	if a.copy != nil {
		ctx, cancel := context.WithTimeout(context.Background(), SyslogDrain)
		defer cancel()
		a.copy.Close(ctx)
	}
	return err
}

// SyslogStats are the counters of the copy to syslog (zero without one).
func (a *Audit) SyslogStats() (SyslogStats, bool) {
	if a.copy == nil {
		return SyslogStats{}, false
	}
	return a.copy.Stats(), true
}
