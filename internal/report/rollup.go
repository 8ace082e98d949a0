package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"tsubame/internal/accesslog"
)

// FileName is the reports database's name in the data directory.
const FileName = "reports.db"

// Options configure a Roller.
type Options struct {
	// Dir and Name are the access log's directory and active file name.
	Dir, Name string
	// Path is the database file (reports.db in the data directory), when
	// the rollups are kept on this node.
	Path string
	// Node names this server in the rows (the node dimension) and, in a
	// shared store, its read positions: stable across restarts. Default
	// the host name.
	Node string
	// Minutes is how long rows are kept per minute before they are folded
	// into quarter-hours. Default 48h.
	Minutes time.Duration
	// Interval is how often the files are read for new lines. Default 1s.
	Interval time.Duration
	// CommitEvery is how long counts read wait in memory before they are
	// committed with their position: a commit merges each row once for
	// all the lines since the last (at a high rate most of a commit's
	// cost), and reading still spreads over every Interval. A crash loses
	// nothing: the uncommitted lines are read again. Default 10s.
	CommitEvery time.Duration
	// Burst bounds how long the background loop (Start) reads at a
	// stretch: once a pass has worked Burst since its last pause, it
	// pauses as long as it worked, twice Burst at most. A second's lines
	// at a high rate, or a backlog after a restart, then take at most
	// about half a core, a little at a time, instead of a whole core for
	// tens of milliseconds beside the requests, which is their slowest
	// percentile on a machine of few cores. The time worked is the wall
	// clock's from the pass's start, its last pause or its last commit (a
	// commit's I/O is not work): on a busy machine, where the pass also
	// waits for a core, it pauses longer. Passes run by Pass, CatchUp and
	// Rebuild are not paced, and one of them (or Verify, or Close) waiting
	// for a paced pass ends its pauses. 0: no pauses.
	Burst time.Duration
	// Logger receives the roller's problems. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the compaction. Default time.Now.
	Now func() time.Time

	// Shared, if set, keeps the rollups in Redis with every other node's
	// (Path is then unused): a report over all nodes is one query.
	Shared *Shared

	backend backend // where the rollups are kept; nil: Shared's, else a bbolt file at Path
	// The clock and the pause of a paced pass (Burst); nil: time.Now and
	// a timer that Close cuts short.
	clock func() time.Time
	sleep func(time.Duration)
}

// paceLines is how many lines a paced pass counts between two looks at
// the clock: a few hundred microseconds' work at most.
const paceLines = 256

// chunkSize is how much of a file one transaction reads at most.
const chunkSize = 4 << 20

// Roller adds the access log's lines to the rollups. It is safe for
// concurrent use.
type Roller struct {
	opt Options
	be  backend

	mu        sync.Mutex         // serialises passes (the loop's, CatchUp's, Rebuild's)
	keys      accesslog.FileKeys // a closed file's name → its key (a file keeps its key)
	stop      chan struct{}
	done      chan struct{}
	loop      atomic.Bool // Start was called
	closed    atomic.Bool
	compacted int64 // the compaction point, as last written (under mu)
	filesMu   sync.RWMutex
	files     map[string]*fileState // as committed, by key (under filesMu; entries are not changed, replaced)
	gone      map[string]bool       // this node's tombstones, as committed (under filesMu): only this node writes them
	buf       []byte                // a chunk of a file (under mu)
	pending   map[string]*batch     // counted and not committed, by file key (under mu)

	paced    bool          // the pass under way pauses (Options.Burst; under mu)
	workFrom time.Time     // when it last began to work (under mu)
	unpaced  int           // lines counted since the clock was last read (under mu)
	waiting  atomic.Int32  // callers waiting for mu (lock): a paced pass stops pausing
	wake     chan struct{} // ends a pause under way when one comes (lock)

	lines, events, errs atomic.Int64
	paused              atomic.Int64 // nanoseconds
	lastErr             atomic.Pointer[string]
}

// Open opens (creating) the database and returns a Roller over it; Start
// runs it in the background, CatchUp reads what the files hold now.
func Open(opt Options) (*Roller, error) {
	if opt.Dir == "" || opt.Name == "" || opt.Path == "" && opt.backend == nil && opt.Shared == nil {
		return nil, errors.New("report: Dir, Name and Path are required")
	}
	if opt.Node == "" {
		opt.Node, _ = os.Hostname()
	}
	if opt.Minutes <= 0 {
		opt.Minutes = 48 * time.Hour
	}
	if opt.Interval <= 0 {
		opt.Interval = time.Second
	}
	if opt.CommitEvery <= 0 {
		opt.CommitEvery = 10 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.clock == nil {
		opt.clock = time.Now
	}
	be := opt.backend
	if be == nil && opt.Shared != nil {
		be = newRedisBackend(opt.Shared, opt.Node)
	}
	if be == nil {
		db, err := openDB(opt.Path, false)
		if err != nil {
			return nil, err
		}
		be = boltBackend{db}
	}
	r := &Roller{opt: opt, be: be, stop: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1), pending: map[string]*batch{}}
	var err error
	if r.files, r.compacted, err = be.load(); err == nil {
		r.gone, err = be.tombstones()
	}
	if err != nil {
		be.close()
		return nil, fmt.Errorf("reports: %w", err)
	}
	return r, nil
}

// Start reads the files every Interval until Close.
func (r *Roller) Start() {
	r.loop.Store(true)
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.opt.Interval)
		defer t.Stop()
		for {
			if _, err := r.pass(true); err != nil && !errors.Is(err, ErrClosed) {
				r.noteError(err)
			}
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
		}
	}()
}

func (r *Roller) noteError(err error) {
	r.errs.Add(1)
	msg := err.Error()
	if old := r.lastErr.Swap(&msg); old == nil || *old != msg {
		r.opt.Logger.Error("reports: rolling up the access log", "err", err)
	}
}

// Close stops the loop (after the transaction under way) and closes the
// database. What was read is committed; the rest is read at the next start.
func (r *Roller) Close() error {
	_, err := r.close(true)
	return err
}

// Leave is Close without the commit: what was counted since the last
// commit (up to CommitEvery of lines) is dropped, and the next roller over
// these files counts it again from the committed positions, as after a
// crash. A restart's predecessor leaves: its successor waits for the
// database, and serves nothing until it has it, so the last count and
// commit are better done by the successor, paced, once it serves. It
// returns how many lines it counted and left uncommitted.
func (r *Roller) Leave() (int64, error) { return r.close(false) }

func (r *Roller) close(commit bool) (left int64, err error) {
	if r.closed.Swap(true) {
		return 0, nil
	}
	close(r.stop)
	if r.loop.Load() {
		<-r.done
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if commit {
		err = r.flushDue(true) // what was counted is committed, not read again
	} else {
		left = r.uncommitted()
	}
	return left, errors.Join(err, r.be.close())
}

// uncommitted is how many lines the pending batches counted and have not
// committed. Under mu.
func (r *Roller) uncommitted() int64 {
	var n int64
	for _, bt := range r.pending {
		n += bt.next.Lines - bt.committed.Lines
	}
	return n
}

// CatchUp reads the files until nothing is left to read.
func (r *Roller) CatchUp(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := r.Pass()
		if err != nil {
			return err
		}
		if n == 0 {
			r.lock()
			defer r.mu.Unlock()
			return r.flushDue(true)
		}
	}
}

// Stats are the roller's counts since it started.
type Stats struct {
	Lines  int64         // lines read
	Events int64         // of which counted
	Errors int64         // passes that failed
	Paused time.Duration // the background loop's pauses (Options.Burst)
}

// Stats returns the roller's counts.
func (r *Roller) Stats() Stats {
	return Stats{Lines: r.lines.Load(), Events: r.events.Load(), Errors: r.errs.Load(), Paused: time.Duration(r.paused.Load())}
}

// pace pauses a paced pass that has worked Options.Burst since it began,
// last paused or last committed, as long as it worked (twice Burst at
// most); never once Close has begun or while another caller waits for mu.
// Under mu.
func (r *Roller) pace() {
	worked := r.opt.clock().Sub(r.workFrom)
	if worked < r.opt.Burst || r.stopping() || r.waiting.Load() > 0 {
		return
	}
	d := min(worked, 2*r.opt.Burst)
	if r.opt.sleep != nil {
		r.opt.sleep(d)
	} else {
		start := time.Now()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.stop:
		case <-r.wake:
		}
		t.Stop()
		d = time.Since(start)
	}
	r.paused.Add(int64(d))
	r.workFrom = r.opt.clock()
}

// lock takes mu for a caller other than the background loop, ending the
// pauses of a paced pass under way (pace) rather than waiting them out.
func (r *Roller) lock() {
	r.waiting.Add(1)
	select {
	case r.wake <- struct{}{}:
	default: // one is pending already
	}
	r.mu.Lock()
	r.waiting.Add(-1)
}

// Hold reports whether a closed file (by name in Dir) must be kept because
// it is not rolled up to its end: the access log's retention asks it.
func (r *Roller) Hold(name string) bool {
	key, err := r.keyOf(name)
	if err != nil || key == "" {
		return true
	}
	// Not under mu: retention asks from the log writer's rotation, which
	// must not wait for a pass.
	r.filesMu.RLock()
	f := r.files[key]
	r.filesMu.RUnlock()
	if f != nil {
		return !f.Done
	}
	return !r.forgotten(key)
}

// fileStates returns a copy of the committed file states.
func (r *Roller) fileStates() map[string]*fileState {
	r.filesMu.RLock()
	defer r.filesMu.RUnlock()
	return maps.Clone(r.files)
}

func (r *Roller) setFile(key string, f *fileState) {
	r.filesMu.Lock()
	defer r.filesMu.Unlock()
	if f == nil {
		delete(r.files, key)
	} else {
		r.files[key] = f
	}
}

// forgotten reports whether key is a file read whole and gone long enough
// for its state to be dropped (a tombstone is kept: a file put back is not
// counted twice). It asks no store: this node's tombstones are its own,
// held in memory, so that Hold never waits on one (retention asks it from
// the log writer's rotation).
func (r *Roller) forgotten(key string) bool {
	r.filesMu.RLock()
	defer r.filesMu.RUnlock()
	return r.gone[key]
}

// keyOf returns the key of a closed file, "" if it has no whole line yet.
func (r *Roller) keyOf(name string) (string, error) {
	return r.keys.Key(r.opt.Dir, name)
}

// knowsNoFile says whether no file was ever read: a directory missing then
// is one not made yet. Once files were read, it is an error (a volume not
// mounted), not an empty log.
func (r *Roller) knowsNoFile() bool {
	r.filesMu.RLock()
	defer r.filesMu.RUnlock()
	return len(r.files) == 0
}

// Pass reads what the files hold beyond what was read: the closed files
// oldest first, then the active one, each in transactions of up to
// chunkSize. It returns how many lines it read.
func (r *Roller) Pass() (int64, error) { return r.pass(false) }

// pass is Pass, paced by Options.Burst when paced.
func (r *Roller) pass(paced bool) (int64, error) {
	if paced {
		r.mu.Lock()
	} else {
		r.lock()
	}
	defer r.mu.Unlock()
	if r.stopping() {
		return 0, ErrClosed
	}
	r.paced = paced && r.opt.Burst > 0
	if r.paced {
		select {
		case <-r.wake: // left by a caller that has had mu since
		default:
		}
		r.workFrom, r.unpaced = r.opt.clock(), 0
	}
	names, err := accesslog.ClosedFiles(r.opt.Dir, r.opt.Name, true)
	if errors.Is(err, fs.ErrNotExist) && r.knowsNoFile() {
		return 0, nil // no access log yet: nothing to count
	}
	if err != nil {
		return 0, fmt.Errorf("listing the access log directory: %w", err)
	}
	listed := make(map[string]bool, len(names))
	for _, name := range names {
		listed[name] = true
	}
	r.keys.Retain(func(name, _ string) bool { return listed[name] })
	var total int64
	live := map[string]bool{}
	for _, name := range names {
		if r.stopping() {
			return total, nil
		}
		key, err := r.keyOf(name)
		if errors.Is(err, os.ErrNotExist) {
			continue // compressed and renamed meanwhile: read under its next name
		}
		if err != nil {
			return total, err
		}
		if key == "" || live[key] {
			continue // none yet, or read this pass under another name (a file and its gzip copy)
		}
		live[key] = true
		r.filesMu.RLock()
		f := r.files[key] // as committed now, not when the pass began
		r.filesMu.RUnlock()
		if f != nil && f.Done || f == nil && r.forgotten(key) {
			continue
		}
		n, err := r.readClosed(name, key, f)
		total += n
		if errors.Is(err, errStale) {
			return 0, nil // nothing was added; the next pass reads on from the stored positions
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return total, err
		}
	}
	n, key, err := r.readActive(r.fileStates())
	total += n
	if key != "" {
		live[key] = true
	}
	if errors.Is(err, errStale) {
		return 0, nil
	}
	if err != nil || r.stopping() {
		// Stopping: Close commits what is due anyway, and Leave nothing;
		// not committing here only spares Leave the wait.
		return total, err
	}
	if err := r.flushDue(false); err != nil {
		return total, err
	}
	return total, r.maintain(r.fileStates(), live)
}

func (r *Roller) stopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// readClosed reads a closed file from where it was left to its end.
func (r *Roller) readClosed(name, key string, f *fileState) (int64, error) {
	rc, err := accesslog.OpenLines(filepath.Join(r.opt.Dir, name))
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	rd := truncated{rc}
	st := fileState{Name: name}
	if f != nil {
		st = *f // as stored, to the byte: the Redis commit compares it whole
	}
	bt := r.batchFor(key, st, f != nil)
	bt.next.Name = name
	if err := accesslog.SkipLines(rc, bt.next.Offset); err != nil {
		return 0, fmt.Errorf("%s: shorter than its rolled-up part (%d bytes): %w", name, bt.next.Offset, err)
	}
	buf := r.chunk()
	var carry int
	var total int64
	for {
		k, err := io.ReadFull(rd, buf[carry:])
		data := buf[:carry+k]
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			return total, fmt.Errorf("%s: %w", name, err)
		}
		var whole []byte
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			whole = data[:i+1]
		}
		if !eof && whole == nil {
			return total, fmt.Errorf("%s: a line longer than %d bytes at offset %d", name, len(buf), bt.next.Offset)
		}
		// A closed file's last line without a newline is torn (a crash
		// before the crash-clean): not a record.
		n, used := r.count(bt, whole)
		total += n
		done := eof && used == len(whole)
		if done || bt.size >= maxBatch || r.full(bt) {
			// A closed file read whole is committed at once: retention
			// waits for it.
			if _, err := r.flush(bt, done); err != nil || done {
				return total, err
			}
		}
		if r.stopping() {
			return total, nil
		}
		carry = copy(buf, data[used:])
	}
}

// truncated tells a compressed file cut short (gzip's io.ErrUnexpectedEOF)
// from one read to its end: io.ReadFull reports both alike, and a file
// cut short must not be taken as read whole (and then deleted).
type truncated struct{ r io.Reader }

func (t truncated) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = errTruncated
	}
	return n, err
}

var errTruncated = errors.New("the file ends inside a compressed block (cut short?): kept, not counted past its last whole block")

// readActive reads the whole lines of the active file beyond what was
// read, and returns its key.
func (r *Roller) readActive(files map[string]*fileState) (int64, string, error) {
	path := filepath.Join(r.opt.Dir, r.opt.Name)
	fh, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	defer fh.Close()
	var head [16 << 10]byte
	k, _ := fh.ReadAt(head[:], 0)
	first := accesslog.WholeLines(head[:k])
	if first == nil {
		return 0, "", nil // no whole first line yet
	}
	first = first[:bytes.IndexByte(first, '\n')+1]
	key := accesslog.FileKey(first)
	st := fileState{Name: r.opt.Name}
	f := files[key]
	if f != nil {
		if f.Done {
			return 0, key, nil
		}
		st = *f
	}
	bt := r.batchFor(key, st, f != nil)
	buf := r.chunk()
	var total int64
	for !r.stopping() {
		k, err := fh.ReadAt(buf, bt.next.Offset)
		if err != nil && !errors.Is(err, io.EOF) {
			return total, key, fmt.Errorf("reading %s: %w", path, err)
		}
		whole := accesslog.WholeLines(buf[:k])
		if whole == nil {
			if k == len(buf) && bytes.IndexByte(buf[:k], 0) < 0 {
				return total, key, fmt.Errorf("%s: a line longer than %d bytes at offset %d", path, len(buf), bt.next.Offset)
			}
			break
		}
		n, used := r.count(bt, whole)
		total += n
		if bt.size >= maxBatch || r.full(bt) {
			if _, err := r.flush(bt, false); err != nil {
				return total, key, err
			}
		}
		if used == len(whole) && len(whole) < len(buf)/2 {
			break // caught up with the writer
		}
	}
	return total, key, nil
}

// maxBatch bounds what one transaction commits of a file: what was read
// is committed every CommitEvery (one merge of each row, one fsync), or
// sooner past this many bytes read (about 10 s of a log written at 50 MB/s).
const maxBatch = 512 << 20

// batch is what a pass counted of one file and has not committed yet.
type batch struct {
	key       string
	committed fileState // the position as stored
	stored    bool      // whether there is one stored (a commit checks it)
	next      fileState // the position after the lines counted
	rows      map[string]*Counts
	cells     int       // non-zero counters in rows: what the commit adds
	size      int64     // bytes counted since the last commit
	since     time.Time // when the first of them was counted

	l    accesslog.Line
	dims Dims
	c    Counts
	kb   []byte
	// The rows' memory, rowSlab rows at a time, the first taken of them
	// in use (newRow): kept across commits, as is the map's, so that a
	// busy file's batches count into memory already touched, not into
	// fresh pages each commit faults in again.
	slabs [][]Counts
	taken int
}

// rowSlab is how many rows newRow allocates at a time.
const rowSlab = 256

// newRow is a zero row for the batch: taken from its slabs, not allocated
// one by one (a busy account's batch adds a row for every few lines).
func (bt *batch) newRow() *Counts {
	i, j := bt.taken/rowSlab, bt.taken%rowSlab
	if i == len(bt.slabs) {
		bt.slabs = append(bt.slabs, make([]Counts, rowSlab))
	}
	bt.taken++
	c := &bt.slabs[i][j]
	*c = Counts{}
	return c
}

// reset empties bt's rows once they are committed, keeping their memory
// (the backends keep nothing of them past a commit), unless they took less
// than a quarter of it: the memory of a catch-up's batch is let go rather
// than held, and cleared whole at each commit, while the file is written.
func (bt *batch) reset() {
	if kept := len(bt.slabs) * rowSlab; kept > rowSlab && bt.taken < kept/4 {
		bt.rows, bt.slabs = make(map[string]*Counts, bt.taken), nil
	} else {
		clear(bt.rows)
	}
	bt.taken, bt.size, bt.cells = 0, 0, 0
}

// batchFor returns the pending batch of file key, or a new one from its
// committed position st.
func (r *Roller) batchFor(key string, st fileState, stored bool) *batch {
	if bt := r.pending[key]; bt != nil {
		return bt
	}
	bt := &batch{key: key, committed: st, stored: stored, next: st, rows: map[string]*Counts{}}
	r.pending[key] = bt
	return bt
}

// flushDue commits the pending batches counted CommitEvery ago or more
// (all of them with force).
func (r *Roller) flushDue(force bool) error {
	now := time.Now()
	var errs []error
	for _, bt := range r.pending {
		if bt.size > 0 && (force || now.Sub(bt.since) >= r.opt.CommitEvery) {
			if _, err := r.flush(bt, false); err != nil && !errors.Is(err, errStale) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// count adds data's lines (whole lines of the batch's file, from its next
// position) to the batch, and returns how many it read.
func (r *Roller) count(bt *batch, data []byte) (int64, int) {
	if len(data) > 0 && bt.size == 0 {
		bt.since = time.Now()
	}
	from := bt.next.Lines
	used := 0
	for rest := data; len(rest) > 0; {
		if r.full(bt) {
			break // the rest after a commit
		}
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i+1]
		rest = rest[i+1:]
		used += len(line)
		bt.next.Lines++
		if r.paced {
			if r.unpaced++; r.unpaced == paceLines {
				r.unpaced = 0
				r.pace()
			}
		}
		if bt.next.Lines == 1 {
			bt.next.First, _ = accesslog.LineTime(line)
		}
		ok, err := classify(line, &bt.l, &bt.dims, &bt.c)
		if err != nil {
			// A line the writer did not write whole: counted nowhere,
			// said once.
			r.noteError(fmt.Errorf("%s line %d: %w", bt.next.Name, bt.next.Lines, err))
			continue
		}
		if !ok {
			continue
		}
		bt.next.Events++
		bt.dims[DimNode] = r.opt.Node
		bt.kb = rowKey(bt.kb[:0], floorDiv(bt.l.Time.Unix(), 60), &bt.dims) // the time classify read
		cur := bt.rows[string(bt.kb)]
		if cur == nil {
			cur = bt.newRow()
			bt.rows[string(bt.kb)] = cur
		}
		// A line counts in one or two counters: only theirs are read
		// and written of the row (a row is four cache lines, and a busy
		// account's rows are many more than the caches hold).
		for i, v := range bt.c {
			if v != 0 {
				if cur[i] == 0 {
					bt.cells++
				}
				cur[i] += v
			}
		}
	}
	bt.dims = Dims{} // views of data, which the next read overwrites
	bt.next.Offset += int64(used)
	bt.size += int64(used)
	return bt.next.Lines - from, used
}

// full reports whether bt holds what one commit of the backend takes.
func (r *Roller) full(bt *batch) bool {
	most := r.be.maxCells()
	return most > 0 && bt.cells >= most
}

// flush commits the batch's counts and position in one transaction (eof
// marks the file read to its end) and returns the lines it committed.
func (r *Roller) flush(bt *batch, eof bool) (int64, error) {
	if bt.next.Offset == bt.committed.Offset && !eof {
		return 0, nil
	}
	if r.paced {
		defer func() { r.workFrom, r.unpaced = r.opt.clock(), 0 }() // the commit's I/O is not work
	}
	next := bt.next
	next.Done = eof
	var prev *fileState
	if bt.stored {
		prev = &bt.committed
	}
	if err := r.be.commit(bt.key, prev, &next, bt.rows); err != nil {
		if errors.Is(err, errStale) {
			delete(r.pending, bt.key) // nothing of it was added
			if files, _, lerr := r.be.load(); lerr == nil {
				gone, gerr := r.be.tombstones()
				r.filesMu.Lock()
				r.files = files
				if gerr == nil {
					r.gone = gone
				}
				r.filesMu.Unlock()
			}
			return 0, errStale // read on from there at the next pass
		}
		return 0, err
	}
	n := next.Lines - bt.committed.Lines
	r.lines.Add(n)
	r.events.Add(next.Events - bt.committed.Events)
	bt.committed, bt.stored, bt.next = next, true, next
	bt.reset()
	if eof {
		delete(r.pending, bt.key)
	}
	saved := next
	r.setFile(bt.key, &saved)
	return n, nil
}

// forgetAfter is how long a file read whole is gone from the directory
// before its state becomes a tombstone: gzip renames a file, which can
// miss one listing.
const forgetAfter = 10 * time.Minute

// maintain notes the files read whole that are no longer in the directory
// (retention removed them) and drops their state after forgetAfter, and
// folds the minutes older than the window into quarters.
func (r *Roller) maintain(files map[string]*fileState, live map[string]bool) error {
	now := r.opt.Now()
	until := floorDiv(now.Add(-r.opt.Minutes).Unix(), int64(quarter/time.Second))
	changed, forget := map[string]*fileState{}, map[string]*fileState{}
	for key, f := range files {
		switch {
		case live[key] && !f.GoneAt.IsZero():
			g := *f
			g.GoneAt = time.Time{}
			changed[key] = &g
		case !live[key] && f.Done && f.GoneAt.IsZero():
			g := *f
			g.GoneAt = now.UTC()
			changed[key] = &g
		case !live[key] && f.Done && now.Sub(f.GoneAt) > forgetAfter:
			forget[key] = f
		}
	}
	if len(changed) == 0 && len(forget) == 0 && until <= r.compacted {
		return nil // idle: no transaction, no fsync
	}
	compacted, err := r.be.maintain(changed, forget, until)
	if err != nil {
		return err
	}
	for key, f := range changed {
		r.setFile(key, f)
	}
	for key := range forget {
		r.setFile(key, nil)
		r.filesMu.Lock()
		r.gone[key] = true
		r.filesMu.Unlock()
	}
	r.compacted = compacted
	return nil
}

// chunk is the buffer a pass reads a file into.
func (r *Roller) chunk() []byte {
	if r.buf == nil {
		r.buf = make([]byte, chunkSize)
	}
	return r.buf
}

// ErrClosed is Pass's error once Close has begun.
var ErrClosed = errors.New("report: the roller is closed")

// Rebuild forgets the rollups and counts the files that are kept again,
// from their start. Times whose files retention removed are then missing
// from the reports: the command says so before it runs.
func (r *Roller) Rebuild(ctx context.Context) error {
	r.lock()
	err := r.be.reset()
	if err == nil {
		r.compacted = 0
		r.pending = map[string]*batch{}
		r.filesMu.Lock()
		r.files, r.gone = map[string]*fileState{}, map[string]bool{}
		r.filesMu.Unlock()
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.CatchUp(ctx)
}
