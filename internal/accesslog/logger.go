// Package accesslog writes the access log, which is billing data: every
// response served by a logged endpoint becomes one line, and no line is ever
// dropped.
//
// Requests format their record straight into one of several sharded
// in-memory buffers (picked by connection, so there is no global lock on the
// request path). One writer goroutine group-commits: every flush interval, or
// sooner when a buffer fills, it takes all buffers and writes them to the
// sink in one go. If the sink fails, the writer keeps the batch and retries
// with backoff; meanwhile the buffers fill, and then requests wait for room
// (bounded by MaxWait) before they borrow from a reserve of the same size
// again; once that is full too they wait for the writer, however long it
// takes. Memory stays bounded, nothing is dropped, and the failure is visible
// in Stats (and so in metrics and readiness).
//
// Guarantees, tested in this package and in cmd/tsubame:
//   - after Close (a graceful stop), every appended record is in the sink;
//   - a hard kill loses at most the records of the last FlushInterval;
//   - with Sync, Append returns only after the record is written and fsynced.
//
// It must not import the listeners, config or the store backends: sinks are given to it (arch_test.go).
package accesslog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Logger. Zero values take the documented defaults.
type Options struct {
	Format Format
	// FlushInterval is the longest a record waits in memory. Default 100ms.
	FlushInterval time.Duration
	// BufferBytes bounds the records held in memory before requests wait.
	// Default 8 MiB; a reserve of the same size is used after MaxWait.
	BufferBytes int
	// MaxWait bounds how long a request waits for buffer room before it
	// uses the reserve. Default 1s.
	MaxWait time.Duration
	// Sync makes Append wait until its record is written and fsynced.
	Sync bool
	// Shards is the number of buffers. Default 4 × GOMAXPROCS, rounded up to a power of 2.
	Shards int
	// RetryMin and RetryMax bound the backoff between attempts to write a
	// batch the sink refused. Defaults 50ms and 5s.
	RetryMin, RetryMax time.Duration
	// FallbackDir receives what a failing sink has not taken when Close's
	// deadline passes. Default os.TempDir().
	FallbackDir string
	// Stderr is the last resort for such records. Default os.Stderr.
	Stderr io.Writer
	Logger *slog.Logger
}

// Defaults are the values zero options take for the settings the
// configuration has too (access_log: in defaults.yaml, checked against
// them).
var Defaults = Options{FlushInterval: 100 * time.Millisecond, BufferBytes: 8 << 20, MaxWait: time.Second}

func (o *Options) setDefaults() {
	if o.FlushInterval <= 0 {
		o.FlushInterval = Defaults.FlushInterval
	}
	if o.BufferBytes <= 0 {
		o.BufferBytes = Defaults.BufferBytes
	}
	if o.MaxWait <= 0 {
		o.MaxWait = Defaults.MaxWait
	}
	if o.Shards <= 0 {
		o.Shards = 4 * runtime.GOMAXPROCS(0)
	}
	n := 1
	for n < o.Shards {
		n <<= 1
	}
	o.Shards = n
	if o.RetryMin <= 0 {
		o.RetryMin = 50 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(5*time.Second, o.RetryMin)
	}
	if o.FallbackDir == "" {
		o.FallbackDir = os.TempDir()
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Sink receives batches of whole lines from the writer goroutine; it is never
// called concurrently.
//
// Lines are filed by their time. A sink whose destination covers a time
// range (a file named after it) reports the range's end as Boundary: the
// writer then writes every line stamped before it, calls Tick with it, and
// only then writes the lines stamped at or after it. Tick(t) always means
// that every line stamped before t has been written and that lines written
// from now on are stamped at t or later.
type Sink interface {
	// Write writes all of p or, on error, none of it (it undoes a partial
	// write), so a retried batch is never duplicated or split.
	Write(p []byte) error
	// Sync makes what was written durable.
	Sync() error
	// Boundary is when the current destination's time range ends; zero if
	// it has none.
	Boundary() time.Time
	// Tick advances the sink's clock to t (see above): it closes a
	// destination whose range ends at or before t.
	Tick(t time.Time) error
	// Reopen reopens the destination (after an external rotation).
	Reopen() error
	// Recover is called before retrying a failed write: reopen whatever may
	// be broken.
	Recover() error
	// Close flushes and closes the sink.
	Close(ctx context.Context) error
}

// Stats is a snapshot of a Logger's counters.
type Stats struct {
	Appended    uint64        // records accepted from requests
	Written     uint64        // records the sink accepted
	Bytes       uint64        // bytes the sink accepted
	Flushes     uint64        // batches written
	WriteErrors uint64        // failed attempts to write a batch (each retried)
	Waits       uint64        // appends that waited for buffer room or file space (backpressure)
	WaitTime    time.Duration // total time appends waited
	Overflows   uint64        // appends that used the reserve after MaxWait
	Buffered    int           // bytes in memory, not yet written
	Failing     bool          // the last attempt to write failed
	LastError   string        // the last write error, "" if none yet
}

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("access log is closed")

const cacheLine = 128

type shard struct {
	mu       sync.Mutex
	buf      []byte
	records  int    // records in buf
	appended uint64 // records ever appended here
	epoch    uint64 // the flush that will commit what buf holds now
	closed   bool
	// floor is the time of the last flush that took buf (unix ns): records
	// appended since are stamped no earlier, so that flush could file
	// every record before it. lo and hi bound the stamps in buf.
	floor, lo, hi int64
	tc            timeCache
	_             [cacheLine]byte
}

// Logger is an access log. Append is safe for concurrent use.
type Logger struct {
	opt        Options
	sink       Sink
	shards     []shard
	mask       uint64
	shardLimit int

	kick    chan struct{}
	control chan func()
	closing chan struct{} // closed by Close: the writer stops after its current batch
	abort   chan struct{} // closed when Close's deadline passes: stop retrying
	done    chan struct{} // closed when the writer has stopped

	mu        sync.Mutex // guards notify
	notify    chan struct{}
	committed atomic.Uint64 // last flush written (and fsynced with Sync)

	// Owned by the writer goroutine (and by Close after it stopped).
	free     [][]byte
	leftover [][]byte // a batch the writer gave up on when Close's deadline passed
	mark     int64    // the last flush's time (unix ns): Tick's argument, never decreasing

	fallback fallbackFile // where records go that the sink did not take by Close's deadline
	// direct, if set, is the mapped writer (mapped.go): records go straight
	// into the file; the buffers, the writer goroutine and the sink are unused.
	direct   *mapped
	finished chan struct{} // closed when Close has put every record somewhere

	written, bytes, flushes, writeErrors atomic.Uint64
	waits, waitNanos, overflows          atomic.Uint64
	failing                              atomic.Bool
	lastErr                              atomic.Pointer[string]
}

// New starts a Logger writing to sink.
func New(sink Sink, opt Options) *Logger {
	opt.setDefaults()
	l := &Logger{
		opt:        opt,
		sink:       sink,
		shards:     make([]shard, opt.Shards),
		mask:       uint64(opt.Shards - 1),
		shardLimit: max(opt.BufferBytes/opt.Shards, 4<<10),
		kick:       make(chan struct{}, 1),
		control:    make(chan func()),
		closing:    make(chan struct{}),
		abort:      make(chan struct{}),
		done:       make(chan struct{}),
		notify:     make(chan struct{}),
		finished:   make(chan struct{}),
	}
	l.fallback.dir, l.fallback.stderr, l.fallback.log = opt.FallbackDir, opt.Stderr, opt.Logger
	for i := range l.shards {
		l.shards[i].epoch = 1
		l.shards[i].buf = l.newBuffer()
	}
	go l.run()
	return l
}

func (l *Logger) newBuffer() []byte {
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b
	}
	return make([]byte, 0, min(l.shardLimit, 64<<10))
}

// Append formats r into a buffer. hint spreads concurrent callers over the
// buffers (a connection id is a good hint). It waits only when the buffers
// are full (see the package comment) or, with Sync, for the group commit.
// Its only error is ErrClosed: the record was not taken (see Late).
//
// The record is stamped r.Time (now, if zero), or the time of the last
// flush if that is later: a record whose caller was held up between taking
// its time and appending (microseconds, unless the scheduler stalls it)
// must not be older than records the writer has already filed.
func (l *Logger) Append(r *Record, hint uint64) error {
	if l.direct != nil {
		return l.direct.append(r, hint)
	}
	s := &l.shards[hint&l.mask]
	s.mu.Lock()
	if len(s.buf) >= l.shardLimit && !s.closed {
		s.mu.Unlock()
		if err := l.waitRoom(s); err != nil {
			return err
		}
		s.mu.Lock()
	}
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	ns := t.UnixNano()
	if ns < s.floor {
		ns, t = s.floor, time.Unix(0, s.floor)
	}
	s.buf = appendRecord(s.buf, l.opt.Format, r, t, &s.tc)
	if s.records == 0 {
		s.lo, s.hi = ns, ns
	} else {
		s.lo, s.hi = min(s.lo, ns), max(s.hi, ns)
	}
	s.records++
	s.appended++
	epoch, half := s.epoch, len(s.buf) >= l.shardLimit/2
	s.mu.Unlock()

	if half || l.opt.Sync {
		l.wake()
	}
	if l.opt.Sync {
		return l.waitCommit(epoch)
	}
	return nil
}

func (l *Logger) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// waitRoom waits until s has room or MaxWait passes; after that the caller
// may use the reserve (up to twice the limit), and past the reserve it waits
// for the writer without a bound.
func (l *Logger) waitRoom(s *shard) error {
	start := time.Now()
	l.waits.Add(1)
	defer func() { l.waitNanos.Add(uint64(time.Since(start))) }()
	timer := time.NewTimer(l.opt.MaxWait)
	defer timer.Stop()
	limit := l.shardLimit
	for {
		next := l.flushed()
		s.mu.Lock()
		n, closed := len(s.buf), s.closed
		s.mu.Unlock()
		if n < limit || closed {
			return nil // Append re-checks closed under the lock
		}
		l.wake()
		select {
		case <-next:
		case <-timer.C:
			l.overflows.Add(1)
			limit = 2 * l.shardLimit
		case <-l.done:
			return ErrClosed
		}
	}
}

// flushed returns a channel that is closed after the next flush.
func (l *Logger) flushed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.notify
}

func (l *Logger) waitCommit(epoch uint64) error {
	for {
		next := l.flushed()
		if l.committed.Load() >= epoch {
			return nil
		}
		select {
		case <-next:
		case <-l.done:
			if l.committed.Load() >= epoch {
				return nil
			}
			// Close is putting what the sink did not take, this record
			// among it, in the fallback file: accounted for, so the
			// response may be served.
			<-l.finished
			return nil
		}
	}
}

func (l *Logger) run() {
	defer close(l.done)
	ticker := time.NewTicker(l.opt.FlushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
		case <-l.kick:
		case fn := <-l.control:
			fn()
			continue
		case <-l.closing:
			return
		}
		if rest := l.flush(); rest != nil {
			l.leftover = rest
			return
		}
	}
}

// flush takes every buffer and writes it, filing lines by their time (see
// Sink), then advances the sink's clock to the time of the take. It
// returns what is left unwritten when Close's deadline stops the retries,
// else nil.
func (l *Logger) flush() [][]byte {
	epoch := l.committed.Load() + 1
	// Every shard is held while the time of the take is read and the
	// buffers are swapped: each record taken was stamped before the take
	// (a stamp is read before its Append), and each record appended after
	// it is stamped no earlier (the floor). Taken shard by shard instead, a
	// record stamped after the take could join the batch and make it cross
	// a boundary that later records, clamped only to the take, are still
	// before: they would land in a file whose range does not hold them.
	for i := range l.shards {
		l.shards[i].mu.Lock()
	}
	take := max(time.Now().UnixNano(), l.mark)
	var batch []part
	records := 0
	for i := range l.shards {
		s := &l.shards[i]
		if len(s.buf) > 0 {
			batch = append(batch, part{buf: s.buf, lo: s.lo, hi: s.hi})
			records += s.records
			s.buf, s.records = l.newBuffer(), 0
		}
		s.floor = max(s.floor, take)
		s.epoch = epoch + 1
	}
	for i := range l.shards {
		l.shards[i].mu.Unlock()
	}
	if rest := l.writeFiled(batch, take); rest != nil {
		return rest
	}
	l.mark = take
	if len(batch) > 0 {
		l.written.Add(uint64(records))
		l.flushes.Add(1)
	}
	l.committed.Store(epoch)
	for _, p := range batch {
		if len(l.free) < len(l.shards) && cap(p.buf) <= l.shardLimit*2 {
			l.free = append(l.free, p.buf[:0])
		}
	}
	l.mu.Lock()
	close(l.notify)
	l.notify = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// part is a buffer of lines and the bounds of their stamps (unix ns).
type part struct {
	buf    []byte
	lo, hi int64
}

// writeFiled writes a batch taken at take, split at each of the sink's
// boundaries it spans: the lines before a boundary, Tick(boundary), the
// lines after. It returns what is left unwritten when Close's deadline
// stops the retries.
func (l *Logger) writeFiled(batch []part, take int64) [][]byte {
	hi := take
	for _, p := range batch {
		hi = max(hi, p.hi)
	}
	for {
		b := l.sink.Boundary()
		if b.IsZero() || b.UnixNano() > hi {
			break
		}
		before, after := partitionAt(batch, b.UnixNano())
		if rest := l.write(buffers(before)); rest != nil {
			return append(rest, buffers(after)...)
		}
		batch = after
		if err := l.sink.Tick(b); err != nil {
			l.noteError(fmt.Errorf("rotation: %w", err))
			break // the lines go on to the current destination; the next flush tries again
		}
		if !l.sink.Boundary().After(b) {
			break
		}
	}
	if rest := l.write(buffers(batch)); rest != nil {
		return rest
	}
	if err := l.sink.Tick(time.Unix(0, take)); err != nil {
		l.noteError(fmt.Errorf("rotation: %w", err))
	}
	return nil
}

func buffers(parts []part) [][]byte {
	out := make([][]byte, 0, len(parts))
	for _, p := range parts {
		out = append(out, p.buf)
	}
	return out
}

// partitionAt splits parts into the lines stamped before b and the rest.
// Only a buffer holding both is read line by line (once per boundary).
func partitionAt(parts []part, b int64) (before, after []part) {
	for _, p := range parts {
		switch {
		case p.hi < b:
			before = append(before, p)
		case p.lo >= b:
			after = append(after, p)
		default:
			x, y := part{lo: math.MaxInt64, hi: math.MinInt64}, part{lo: math.MaxInt64, hi: math.MinInt64}
			for rest := p.buf; len(rest) > 0; {
				line := rest
				if i := bytes.IndexByte(rest, '\n'); i >= 0 {
					line = rest[:i+1]
				}
				rest = rest[len(line):]
				ns := p.lo // a line without a readable time stays with the earliest
				if t, ok := lineTime(line); ok {
					ns = t.UnixNano()
				}
				dst := &x
				if ns >= b {
					dst = &y
				}
				dst.buf = append(dst.buf, line...)
				dst.lo, dst.hi = min(dst.lo, ns), max(dst.hi, ns)
			}
			if len(x.buf) > 0 {
				before = append(before, x)
			}
			if len(y.buf) > 0 {
				after = append(after, y)
			}
		}
	}
	return before, after
}

// write hands each buffer to the sink, retrying with backoff until it is
// accepted. It returns the buffers not written if abort closes first.
func (l *Logger) write(batch [][]byte) [][]byte {
	backoff := l.opt.RetryMin
	retry := func(err error) bool {
		l.noteError(err)
		select {
		case <-time.After(backoff):
		case <-l.abort:
			return false
		}
		backoff = min(2*backoff, l.opt.RetryMax)
		if err := l.sink.Recover(); err != nil {
			l.noteError(fmt.Errorf("recover: %w", err))
		}
		return true
	}
	for i := 0; i < len(batch); {
		if err := l.sink.Write(batch[i]); err != nil {
			l.writeErrors.Add(1)
			if !retry(err) {
				return batch[i:]
			}
			continue
		}
		l.bytes.Add(uint64(len(batch[i])))
		i++
	}
	if l.opt.Sync && len(batch) > 0 {
		for {
			err := l.sink.Sync()
			if err == nil {
				break
			}
			l.writeErrors.Add(1)
			if !retry(fmt.Errorf("sync: %w", err)) {
				return nil // written but maybe not durable; nothing to re-write
			}
		}
	}
	if l.failing.Swap(false) {
		l.opt.Logger.Info("access log writes recovered")
	}
	return nil
}

func (l *Logger) noteError(err error) {
	msg := err.Error()
	l.lastErr.Store(&msg)
	if !l.failing.Swap(true) {
		l.opt.Logger.Error("access log write failed; records are kept in memory and retried", "err", err)
	}
}

// Reopen flushes, then reopens the sink's destination (for external
// rotation such as logrotate: move the file, then Reopen).
func (l *Logger) Reopen(ctx context.Context) error {
	if l.direct != nil {
		return l.direct.reopen()
	}
	res := make(chan error, 1)
	fn := func() {
		if rest := l.flush(); rest != nil {
			l.leftover = rest
		}
		res <- l.sink.Reopen()
	}
	select {
	case l.control <- fn:
	case <-l.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-res
}

// WriteBack writes what the active file holds to disk now, so that a Close
// soon after (a restart's) has little left to write: the fsync of a busy
// log's last seconds takes tens of milliseconds, during which a handover
// accepts no connection. Only the mapped writer (durability: process or
// sync) does anything. Safe for concurrent use; a failure is left to the
// writes and the Close that follow.
func (l *Logger) WriteBack() {
	if l.direct != nil {
		l.direct.writeBack()
	}
}

// Close stops taking records, writes everything buffered and closes the
// sink. While the sink fails it keeps retrying until ctx ends; what is still
// unwritten then is saved by Options.Fallback (or standard error), never
// dropped, and Close reports it.
func (l *Logger) Close(ctx context.Context) error {
	if l.direct != nil {
		return l.direct.close(ctx)
	}
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
	}
	l.mu.Lock()
	select {
	case <-l.closing:
		l.mu.Unlock()
		return ErrClosed
	default:
		close(l.closing)
	}
	l.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { close(l.abort) })
	defer stop()
	<-l.done

	rest := l.leftover
	if rest == nil {
		rest = l.flush()
	} else {
		rest = append(rest, l.collectAll()...)
	}
	var errs []error
	if rest != nil {
		errs = append(errs, l.saveUnwritten(rest))
	}
	close(l.finished)
	if err := l.sink.Close(context.WithoutCancel(ctx)); err != nil {
		errs = append(errs, err)
	}
	l.mu.Lock()
	close(l.notify) // release Sync waiters; they see done and the commit state
	l.notify = make(chan struct{})
	l.mu.Unlock()
	return errors.Join(errs...)
}

// Late records a response whose Append came after Close (ErrClosed): a
// request that outlived the shutdown deadline, typically held by a failing
// disk. It goes to the fallback file (see Options.FallbackDir) beside what
// the sink did not take, or to standard error if that cannot be written,
// so every response is accounted for. It is slow (a write and an fsync
// per record) and meant for that rare path only.
func (l *Logger) Late(r *Record) {
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	var tc timeCache
	l.fallback.save([][]byte{appendRecord(nil, l.opt.Format, r, t, &tc)})
}

// collectAll takes every buffer without writing it.
func (l *Logger) collectAll() [][]byte {
	var out [][]byte
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		if len(s.buf) > 0 {
			out = append(out, s.buf)
			s.buf = nil
		}
		s.mu.Unlock()
	}
	return out
}

// Stats returns a snapshot of the counters.
func (l *Logger) Stats() Stats {
	if l.direct != nil {
		return l.direct.stats()
	}
	st := Stats{
		Written:     l.written.Load(),
		Bytes:       l.bytes.Load(),
		Flushes:     l.flushes.Load(),
		WriteErrors: l.writeErrors.Load(),
		Waits:       l.waits.Load(),
		WaitTime:    time.Duration(l.waitNanos.Load()),
		Overflows:   l.overflows.Load(),
		Failing:     l.failing.Load(),
	}
	if e := l.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		st.Appended += s.appended
		st.Buffered += len(s.buf)
		s.mu.Unlock()
	}
	return st
}

// Healthy returns an error while writes to the sink are failing.
func (l *Logger) Healthy() error {
	failing, lastErr := &l.failing, &l.lastErr
	if l.direct != nil {
		failing, lastErr = &l.direct.failing, &l.direct.lastErr
	}
	if failing.Load() {
		msg := "unknown error"
		if e := lastErr.Load(); e != nil {
			msg = *e
		}
		return fmt.Errorf("access log cannot write: %s", msg)
	}
	return nil
}

// saveUnwritten keeps records the sink would not take by Close's deadline:
// in the fallback file or, failing that, on standard error. It returns an
// error that says where they went.
func (l *Logger) saveUnwritten(batch [][]byte) error {
	n := 0
	for _, b := range batch {
		n += bytes.Count(b, []byte{'\n'})
	}
	where, err := l.fallback.save(batch)
	if err == nil {
		l.opt.Logger.Error("access log: records the sink did not take were saved elsewhere", "records", n, "file", where)
		return fmt.Errorf("access log: %d record(s) could not be written to the log and were saved to %s", n, where)
	}
	return fmt.Errorf("access log: %d record(s) could not be written to the log nor to %s (%v); they were written to standard error", n, where, err)
}

// fallbackFile holds the records a closing Logger could not give its sink
// and the records appended after Close (Logger.Late): one file per Logger,
// tsubame-access-unwritten-<time>-<pid>.log in the fallback directory,
// created at the first need, each write fsynced. If it cannot be written,
// the records go to standard error.
type fallbackFile struct {
	mu     sync.Mutex
	dir    string
	stderr io.Writer
	log    *slog.Logger
	f      *os.File
	name   string
	err    error // the file failed: standard error from now on
}

// save writes batch and returns the file's name, or the error that sent
// the batch to standard error instead.
func (fb *fallbackFile) save(batch [][]byte) (string, error) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if fb.f == nil && fb.err == nil {
		fb.name = filepath.Join(fb.dir, fmt.Sprintf("tsubame-access-unwritten-%s-%d.log",
			time.Now().UTC().Format("20060102T150405Z"), os.Getpid()))
		if fb.err = os.MkdirAll(fb.dir, 0o750); fb.err == nil {
			fb.f, fb.err = os.OpenFile(fb.name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
		}
		if fb.err == nil {
			fb.log.Error("access log: writing the records the log did not take to a fallback file", "file", fb.name)
		}
	}
	if fb.err == nil {
		for _, b := range batch {
			if _, fb.err = fb.f.Write(b); fb.err != nil {
				break
			}
		}
		if fb.err == nil {
			fb.err = fb.f.Sync()
		}
		if fb.err == nil {
			return fb.name, nil
		}
		_ = fb.f.Close()
		fb.log.Error("access log: the fallback file failed; records go to standard error", "file", fb.name, "err", fb.err)
		// What this batch had written is in the file already; writing the
		// whole batch again below may repeat some lines, never lose one.
	}
	for _, b := range batch {
		_, _ = fb.stderr.Write(b)
	}
	return fb.name, fb.err
}
