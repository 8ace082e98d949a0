//go:build linux

package accesslog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The mapped writer: records go straight into the active file through a
// shared memory mapping, so a record is in the kernel's page cache — and
// survives the process dying in any way — before the request that made it
// is answered. No syscall is made per record.
//
// The active file is a segment: a file mapped whole up to its size bound,
// whose blocks are allocated (fallocate) a chunk ahead of the records by a
// background goroutine, so a full disk is an allocation error seen and
// handled here (requests wait, the failure is reported) and never a SIGBUS.
// A request formats its record, reserves its bytes with one atomic
// compare-and-swap on the segment's length, and copies the record in.
//
// A segment ends at its time boundary (rotate_every), when full (max_size),
// on reopen and on close. The next segment is created under a hidden name
// (.seg-access.log.<n>) and made current at once, so requests never wait
// for a rotation; the finisher then waits until every copy into the old
// segment is done, cuts its unused tail, fsyncs and closes it out (renamed
// to its range, then gzip, on_close and retention as for any file), and
// gives the new segment the active name. After a crash, the active file
// and any segments left are cleaned of torn records and closed out in
// order (file.go).

// mappedChunk is the least file space allocated ahead of the records: a
// segment starts with it, and the space ahead grows with the rate the
// records are written at (mapped.ahead).
const mappedChunk = 8 << 20

// aheadTicks is how many intervals of records (at the last interval's rate)
// a growth allocates: the records keep space for two of the background
// goroutine's intervals after it found less than half of that left, so a
// tick delayed by a busy machine does not leave requests to grow the file
// themselves.
const aheadTicks = 4

// maxAhead bounds the space a growth allocates: the background goroutine
// holds the writer's lock while it faults the pages in, and a rotation
// waits for that lock.
const maxAhead = 64 << 20

// mappedMax bounds a segment's mapping when max_size does not.
const mappedMax = 4 << 30

// errTooLarge refuses a record larger than a whole file may be.
var errTooLarge = errors.New("access log record larger than access_log.max_size")

type mapped struct {
	fs     *FileSink
	format Format
	sync   bool
	limit  int64 // a segment's size bound
	log    *slog.Logger

	cur    atomic.Pointer[segment]
	ahead  atomic.Int64  // how much a growth allocates (mappedChunk at least), by the write rate
	mu     sync.Mutex    // guards rotation, growth, seq and changed
	change chan struct{} // closed and replaced when cur changes or space was added
	seq    uint64
	closed atomic.Bool

	finish   chan finishJob // segments to end and successors to promote, in order
	finished chan struct{}
	stop     chan struct{}

	counts                   [16]paddedCount // records appended, by hint
	bytes, waits, waitNanos  atomic.Uint64
	allocErrors, rotateError atomic.Uint64
	failing                  atomic.Bool
	lastErr                  atomic.Pointer[string]
	fallback                 *fallbackFile
}

type paddedCount struct {
	n atomic.Uint64
	_ [56]byte
}

type segment struct {
	f     *os.File
	mem   []byte
	path  string // where it is now: its hidden name, then the active name
	limit int64
	used  atomic.Int64 // bytes reserved
	alloc atomic.Int64 // bytes allocated in the file
	// writers counts requests between their check of closed and the end
	// of their copy, spread over cache lines by hint.
	writers    [16]paddedInt
	closed     atomic.Bool
	start, end int64 // the range's bounds (unix ns); end 0: no time bound
	moved      bool  // reopen found it moved away: finish it where it is
	syncMu     sync.Mutex
	memMu      sync.Mutex // held by writeOut while it uses mem, and by end to unmap it
	tickets    atomic.Uint64
	synced     uint64
}

type paddedInt struct {
	n atomic.Int64
	_ [56]byte
}

var scratchPool = sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 1024)} }}

type scratch struct {
	buf []byte
	tc  timeCache
}

// OpenMapped opens the access-log directory for the mapped writer and
// returns a Logger that appends through it, and the FileSink that names,
// compresses and hooks its closed files.
func OpenMapped(fo FileOptions, opt Options) (*Logger, *FileSink, error) {
	opt.setDefaults()
	fs, err := openDir(fo)
	if err != nil {
		return nil, nil, err
	}
	m := &mapped{fs: fs, format: opt.Format, sync: opt.Sync, limit: mappedMax, log: opt.Logger,
		change: make(chan struct{}), finish: make(chan finishJob, 64), finished: make(chan struct{}),
		stop: make(chan struct{})}
	m.ahead.Store(mappedChunk)
	if fo.MaxSize > 0 {
		m.limit = min(fo.MaxSize, mappedMax)
	}
	end := int64(0)
	if !fs.nextRotate.IsZero() {
		end = fs.nextRotate.UnixNano()
	}
	seg, err := m.newSegment(fs.start.UnixNano(), end)
	if err != nil {
		close(fs.jobs)
		return nil, nil, err
	}
	if err := os.Rename(seg.path, fs.active); err != nil {
		seg.unmap()
		close(fs.jobs)
		return nil, nil, fmt.Errorf("cannot open access log: %w", err)
	}
	seg.path = fs.active
	m.cur.Store(seg)
	go m.finisher()
	go m.run(opt.FlushInterval)
	l := &Logger{opt: opt, direct: m}
	l.fallback.dir, l.fallback.stderr, l.fallback.log = opt.FallbackDir, opt.Stderr, opt.Logger
	m.fallback = &l.fallback
	return l, fs, nil
}

// newSegment creates, sizes and maps the next segment under its hidden name.
func (m *mapped) newSegment(start, end int64) (*segment, error) {
	m.seq++
	path := filepath.Join(m.fs.opt.Dir, fmt.Sprintf("%s%s.%d", segmentPrefix, m.fs.opt.Name, m.seq))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, fmt.Errorf("cannot create access log: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(m.limit), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("cannot map access log: %w", err)
	}
	seg := &segment{f: f, mem: mem, path: path, limit: m.limit, start: start, end: end}
	if err := seg.begin(mappedChunk); err != nil {
		// A full disk: the segment starts without space, and requests
		// wait for it as they would for any growth (reported there).
		m.allocErrors.Add(1)
		m.noteError(err)
	}
	return seg, nil
}

// allocate takes up to n more bytes of file space after what the segment
// has (bounded by the limit), or, when the disk has less room than n, what
// there is down to minGrow. It returns where they start and how many it
// took.
func (s *segment) allocate(n int64) (from, got int64, err error) {
	from = s.alloc.Load()
	for n = min(n, s.limit-from); n > 0; n /= 2 {
		err := unix.Fallocate(int(s.f.Fd()), 0, from, n)
		if err == nil {
			return from, n, nil
		}
		if n <= minGrow || (!errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EFBIG)) {
			return from, 0, fmt.Errorf("cannot allocate access log space: %w", err)
		}
	}
	return from, 0, nil
}

// grow allocates up to n more bytes of file space and faults their pages in
// for writing before the records may have them: the background goroutine's
// growth, off the requests' path.
func (s *segment) grow(n int64) error {
	from, n, err := s.allocate(n)
	if n > 0 {
		_ = unix.Madvise(s.mem[from:from+n], unix.MADV_POPULATE_WRITE) // best effort (Linux 5.14+)
		s.alloc.Store(from + n)
	}
	return err
}

// begin allocates a new segment's first n bytes and gives them to the
// records at once, their pages faulted in by a goroutine of its own
// (prefault). A segment is made on the requests' path: the log's opening
// (which a restart's successor does while neither process accepts) and a
// rotation (which the records stamped after it wait for). Faulting its
// first 8 MiB in takes several milliseconds there; a record that reaches a
// page before the goroutine faults it itself.
func (s *segment) begin(n int64) error {
	from, n, err := s.allocate(n)
	if n > 0 {
		s.alloc.Store(from + n)
		go s.prefault(from, from+n)
	}
	return err
}

// prefaultStep is how much prefault faults in at a time, holding memMu.
const prefaultStep = 1 << 20

// prefault faults in the pages of [from, to) the records have not reached,
// a step at a time under memMu: end unmaps the segment only between steps.
// It stops early when the segment has ended (a rotation soon after it
// began): its space left is cut off, not written.
func (s *segment) prefault(from, to int64) {
	for from < to {
		s.memMu.Lock()
		if s.mem == nil || s.closed.Load() {
			s.memMu.Unlock()
			return
		}
		from = max(from, s.used.Load()&^int64(pageSize-1)) // the records' pages are in
		next := min(to, from+prefaultStep)
		if from < next {
			_ = unix.Madvise(s.mem[from:next], unix.MADV_POPULATE_WRITE)
		}
		s.memMu.Unlock()
		from = next
	}
}

func (s *segment) unmap() {
	s.memMu.Lock()
	if s.mem != nil {
		_ = unix.Munmap(s.mem)
		s.mem = nil
	}
	s.memMu.Unlock()
	_ = s.f.Close()
}

// minGrow is the least space a growth takes before it reports a full disk.
const minGrow = 64 << 10

// reserve takes n bytes of the segment if they are allocated.
func (s *segment) reserve(n int64) (int64, bool) {
	for {
		u := s.used.Load()
		if u+n > s.alloc.Load() {
			return 0, false
		}
		if s.used.CompareAndSwap(u, u+n) {
			return u, true
		}
	}
}

func (m *mapped) append(r *Record, hint uint64) error {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	w := hint & 15
	for {
		seg := m.cur.Load()
		if seg == nil {
			return ErrClosed
		}
		seg.writers[w].n.Add(1)
		if seg.closed.Load() {
			seg.writers[w].n.Add(-1)
			if err := m.waitChange(seg); err != nil {
				return err
			}
			continue
		}
		ts := t
		if ns := ts.UnixNano(); ns < seg.start {
			ts = time.Unix(0, seg.start)
		} else if seg.end != 0 && ns >= seg.end {
			seg.writers[w].n.Add(-1)
			if err := m.rotateFrom(seg, ns); err != nil {
				return err
			}
			continue
		}
		sc.buf = appendRecord(sc.buf[:0], m.format, r, ts, &sc.tc)
		n := int64(len(sc.buf))
		off, ok := seg.reserve(n)
		if !ok {
			seg.writers[w].n.Add(-1)
			if err := m.makeRoom(seg, n); err != nil {
				return err
			}
			continue
		}
		copy(seg.mem[off:off+n], sc.buf)
		m.counts[w].n.Add(1)
		if m.sync {
			m.syncTo(seg)
		}
		seg.writers[w].n.Add(-1)
		return nil
	}
}

// syncTo returns once what this request copied into seg is on disk: group
// commit, one fdatasync for every request that copied before it started.
// While the disk refuses it retries; if the log closes first, it gives up:
// the record is in the file (the response goes out with it, as accounted
// there), just not known to be on disk, and the failure is in the log.
func (m *mapped) syncTo(seg *segment) {
	ticket := seg.tickets.Add(1)
	seg.syncMu.Lock()
	defer seg.syncMu.Unlock()
	if seg.synced >= ticket {
		return
	}
	upTo := seg.tickets.Load()
	for {
		err := unix.Fdatasync(int(seg.f.Fd()))
		if err == nil {
			seg.synced = upTo
			return
		}
		m.noteError(fmt.Errorf("sync: %w", err))
		if m.closed.Load() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeBack fdatasyncs the current segment. It may race with the segment's
// end, which closes the file: the sync then fails, and the end syncs.
func (m *mapped) writeBack() {
	if seg := m.cur.Load(); seg != nil {
		_ = unix.Fdatasync(int(seg.f.Fd()))
	}
}

// waitChange waits until the current segment is no longer seg (or space
// was added), or the log closes.
func (m *mapped) waitChange(seg *segment) error {
	m.mu.Lock()
	ch := m.change
	cur := m.cur.Load()
	m.mu.Unlock()
	if cur == nil || m.closed.Load() {
		return ErrClosed
	}
	if cur != seg {
		return nil
	}
	<-ch
	return nil
}

func (m *mapped) changed() { // m.mu held
	close(m.change)
	m.change = make(chan struct{})
}

// rotateFrom ends seg at its time boundary for a record stamped at or after
// it (if no one has yet).
func (m *mapped) rotateFrom(seg *segment, ns int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return ErrClosed
	}
	if m.cur.Load() != seg {
		return nil
	}
	every := m.fs.opt.RotateEvery
	start := time.Unix(0, max(ns, seg.end)).Truncate(every)
	return m.rotateLocked(seg, start.UnixNano(), start.Add(every).UnixNano())
}

// rotateLocked makes a new segment current and queues seg to be finished.
// If the new one cannot be made, seg stays current and the error is
// reported; requests that need the new one wait and retry.
func (m *mapped) rotateLocked(seg *segment, start, end int64) error {
	next, err := m.newSegment(start, end)
	if err != nil {
		m.rotateError.Add(1)
		m.noteError(err)
		m.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		m.mu.Lock()
		return nil
	}
	m.cur.Store(next)
	seg.closed.Store(true)
	m.changed()
	m.finish <- finishJob{end: seg, promote: next}
	return nil
}

// finishJob ends a segment, then gives its successor (if any) the active
// name it has left.
type finishJob struct {
	end, promote *segment
}

// makeRoom adds space to seg, or ends it when it is full. While the disk
// refuses, requests wait (retrying) and the failure is reported.
func (m *mapped) makeRoom(seg *segment, n int64) error {
	start := time.Now()
	waited := false
	defer func() {
		if waited {
			m.waits.Add(1)
			m.waitNanos.Add(uint64(time.Since(start)))
		}
	}()
	backoff := 10 * time.Millisecond
	for {
		m.mu.Lock()
		if m.closed.Load() {
			m.mu.Unlock()
			return ErrClosed
		}
		if m.cur.Load() != seg {
			m.mu.Unlock()
			return nil
		}
		u := seg.used.Load()
		if u+n > seg.limit {
			if u == 0 {
				m.mu.Unlock()
				return errTooLarge
			}
			now := time.Now().UnixNano()
			err := m.rotateLocked(seg, max(now, seg.start), seg.end)
			m.mu.Unlock()
			return err
		}
		// From here the request waits for space (waits_total): for the
		// growth of another request or of the background goroutine, or
		// its own, which any other that ran out then waits for.
		waited = true
		if u+n <= seg.alloc.Load() {
			m.mu.Unlock()
			return nil
		}
		err := seg.grow(max(m.ahead.Load(), n))
		if err == nil && u+n > seg.alloc.Load() {
			err = errors.New("cannot allocate access log space: the disk is full")
		}
		if err == nil {
			m.recovered()
			m.changed()
			m.mu.Unlock()
			return nil
		}
		m.allocErrors.Add(1)
		m.noteError(err)
		m.mu.Unlock()
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// run keeps space allocated ahead of the records and ends segments at
// their time boundary when no record has.
func (m *mapped) run(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var rate rateMark
	var out outMark
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if !m.tick(&rate) {
			return
		}
		m.writeOut(&out)
	}
}

// rateMark is where the last tick found the records: its segment and the
// bytes reserved in it then.
type rateMark struct {
	seg  *segment
	used int64
}

// tick is one of run's intervals: the write rate since the last (at mark)
// sets the space ahead, then the segment ends at its time boundary or
// grows when less than half of that space is left. It reports false once
// the writer is closed.
func (m *mapped) tick(mark *rateMark) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	seg := m.cur.Load()
	if seg == nil || m.closed.Load() {
		return false
	}
	used := seg.used.Load()
	if seg == mark.seg {
		m.ahead.Store(nextAhead(m.ahead.Load(), used-mark.used))
	}
	mark.seg, mark.used = seg, used
	now := time.Now().UnixNano()
	if seg.end != 0 && now >= seg.end {
		every := m.fs.opt.RotateEvery
		start := time.Unix(0, now).Truncate(every)
		_ = m.rotateLocked(seg, start.UnixNano(), start.Add(every).UnixNano()) // an empty one is removed
	} else if ahead := m.ahead.Load(); seg.alloc.Load()-used < ahead/2 && seg.alloc.Load() < seg.limit {
		if err := seg.grow(ahead); err != nil {
			m.allocErrors.Add(1)
			m.noteError(err)
		} else {
			m.recovered()
			m.changed()
		}
	}
	return true
}

// nextAhead is the space a growth allocates after an interval in which
// written bytes were reserved: aheadTicks intervals of them, in whole MiB,
// from mappedChunk to maxAhead, and falling by a quarter an interval at
// most (a lull between bursts keeps most of it).
func nextAhead(prev, written int64) int64 {
	want := (aheadTicks*max(written, 0) + 1<<20 - 1) &^ (1<<20 - 1)
	return min(maxAhead, max(mappedChunk, want, prev-prev/4))
}

// outMark is where writeOut left the current segment: the write-out
// started up to done, and the bytes reserved at the last interval.
type outMark struct {
	seg         *segment
	done, ready int64
}

// writeOut starts the disk writes of the lines reserved before the last
// interval (their copies long done, their pages written for good), in
// whole pages from where it left off, without waiting for them.
//
// Left to itself, the kernel writes a file's dirty pages once the first of
// them is 30 s old (vm.dirty_expire_centisecs), all of them at once: for a
// busy log, hundreds of megabytes during which the requests copying into
// the pages beside them stall on their page faults (at 4,500 bids a
// second, a burst of slow requests every 30 s, the longest over 100 ms).
// Written out as it goes, the kernel has little to write at any time, the
// fsync at the file's end little left, and a machine with a small
// dirty-page limit does not throttle the requests' page faults.
//
// The pages are unmapped first (MADV_DONTNEED keeps a shared mapping's
// data: it is the file's): the kernel writes a mapped page only after
// taking away its write permission, a TLB flush of every CPU the process
// runs on for each page, 2.4 % of the bidder's CPU at 25,000 bids a
// second; one unmapping of the range flushes once. A copy still under way
// into one of them (a request held up since the last interval) maps its
// page again and loses nothing.
//
// With durability sync every request's fdatasync writes already.
func (m *mapped) writeOut(mark *outMark) {
	if m.sync {
		return
	}
	seg := m.cur.Load()
	if seg == nil {
		return
	}
	if seg != mark.seg {
		*mark = outMark{seg: seg}
	}
	to := mark.ready &^ int64(pageSize-1)
	mark.ready = seg.used.Load()
	if to <= mark.done {
		return
	}
	// Not under the writer's lock (the write-out may wait for the disk's
	// queue): the segment may be ending meanwhile, and end unmaps it only
	// after this (memMu). A failure is left to the fsync at its end.
	seg.memMu.Lock()
	defer seg.memMu.Unlock()
	if seg.mem == nil {
		return
	}
	if err := unix.Madvise(seg.mem[mark.done:to], unix.MADV_DONTNEED); err != nil {
		return
	}
	if err := unix.SyncFileRange(int(seg.f.Fd()), mark.done, to-mark.done, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return
	}
	mark.done = to
}

var pageSize = unix.Getpagesize()

// finisher ends segments and promotes their successors, in order.
func (m *mapped) finisher() {
	defer close(m.finished)
	for job := range m.finish {
		if err := m.end(job.end); err != nil {
			m.noteError(fmt.Errorf("rotation: %w", err))
		}
		if next := job.promote; next != nil {
			if err := os.Rename(next.path, m.fs.active); err != nil {
				m.noteError(fmt.Errorf("rotation: %w", err))
				continue
			}
			m.mu.Lock()
			next.path = m.fs.active
			m.mu.Unlock()
		}
	}
}

// end waits for every copy into seg, cuts its unused space, syncs it and
// closes it out.
func (m *mapped) end(seg *segment) error {
	for i := range seg.writers {
		for seg.writers[i].n.Load() != 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	used := seg.used.Load()
	seg.memMu.Lock()
	_ = unix.Munmap(seg.mem)
	seg.mem = nil
	seg.memMu.Unlock()
	err := seg.f.Truncate(used)
	if err == nil {
		err = seg.f.Sync()
	}
	if cerr := seg.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	m.bytes.Add(uint64(used))
	if seg.moved {
		return nil // an external rotation took it; its name is theirs
	}
	if used == 0 {
		return os.Remove(seg.path)
	}
	if seg.path != m.fs.active {
		if err := os.Rename(seg.path, m.fs.active); err != nil {
			return err
		}
	}
	end := rangeEnd(time.Now())
	if seg.end != 0 && seg.end < end.UnixNano() {
		end = time.Unix(0, seg.end)
	}
	if err := m.fs.closeOut(time.Unix(0, seg.start), end); err != nil {
		return err
	}
	m.fs.rotations.Add(1)
	return nil
}

// reopen ends the current segment if its file was moved away (external
// rotation), so that records go to a new file under the active name.
func (m *mapped) reopen() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	seg := m.cur.Load()
	if seg == nil {
		return ErrClosed
	}
	st, err := seg.f.Stat()
	if err != nil {
		return err
	}
	if at, err := os.Stat(seg.path); err == nil && os.SameFile(st, at) {
		return nil // not moved: the file and its range go on
	}
	seg.moved = true
	now := time.Now().UnixNano()
	return m.rotateLocked(seg, now, seg.end)
}

// close ends the last segment and waits (until ctx ends) for the finisher
// and the closer.
func (m *mapped) close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed.Swap(true) {
		m.mu.Unlock()
		return ErrClosed
	}
	seg := m.cur.Swap(nil)
	seg.closed.Store(true)
	m.changed()
	close(m.stop)
	m.finish <- finishJob{end: seg}
	close(m.finish)
	m.mu.Unlock()
	// The last segment's records are in the page cache already; finishing
	// it (the copies in flight, a truncate, an fsync) is short, and the
	// closer must not stop before it, so this wait has no deadline.
	<-m.finished
	var errs []error
	if err := m.fs.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (m *mapped) noteError(err error) {
	msg := err.Error()
	m.lastErr.Store(&msg)
	if !m.failing.Swap(true) {
		m.log.Error("access log cannot write; requests wait and retry", "err", err)
	}
}

func (m *mapped) recovered() {
	if m.failing.Swap(false) {
		m.log.Info("access log writes recovered")
	}
}

func (m *mapped) stats() Stats {
	var n uint64
	for i := range m.counts {
		n += m.counts[i].n.Load()
	}
	st := Stats{Appended: n, Written: n, Bytes: m.bytes.Load(), Flushes: m.fs.rotations.Load(),
		WriteErrors: m.allocErrors.Load() + m.rotateError.Load(), Waits: m.waits.Load(),
		WaitTime: time.Duration(m.waitNanos.Load()), Failing: m.failing.Load()}
	if seg := m.cur.Load(); seg != nil {
		st.Bytes += uint64(seg.used.Load())
	}
	if e := m.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	return st
}
