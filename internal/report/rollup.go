package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	// Logger receives the roller's problems. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the compaction. Default time.Now.
	Now func() time.Time

	// Shared, if set, keeps the rollups in Redis with every other node's
	// (Path is then unused): a report over all nodes is one query.
	Shared *Shared

	backend backend // where the rollups are kept; nil: Shared's, else a bbolt file at Path
}

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
	buf       []byte                // a chunk of a file (under mu)

	lines, events, errs atomic.Int64
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
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
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
	r := &Roller{opt: opt, be: be, stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	if r.files, r.compacted, err = be.load(); err != nil {
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
			if _, err := r.Pass(); err != nil && !errors.Is(err, ErrClosed) {
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
	if r.closed.Swap(true) {
		return nil
	}
	close(r.stop)
	if r.loop.Load() {
		<-r.done
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.be.close()
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
			return nil
		}
	}
}

// Stats are the roller's counts since it started.
type Stats struct {
	Lines  int64 // lines read
	Events int64 // of which counted
	Errors int64 // passes that failed
}

// Stats returns the roller's counts.
func (r *Roller) Stats() Stats {
	return Stats{Lines: r.lines.Load(), Events: r.events.Load(), Errors: r.errs.Load()}
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
// counted twice).
func (r *Roller) forgotten(key string) bool {
	ok, err := r.be.forgotten(key)
	return ok || err != nil // unknown: held, never read twice
}

// keyOf returns the key of a closed file, "" if it has no whole line yet.
func (r *Roller) keyOf(name string) (string, error) {
	return r.keys.Key(r.opt.Dir, name)
}

// Pass reads what the files hold beyond what was read: the closed files
// oldest first, then the active one, each in transactions of up to
// chunkSize. It returns how many lines it read.
func (r *Roller) Pass() (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping() {
		return 0, ErrClosed
	}
	files := r.fileStates()
	names, err := accesslog.ClosedFiles(r.opt.Dir, r.opt.Name, true)
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
		if key == "" {
			continue
		}
		live[key] = true
		f := files[key]
		if f != nil && f.Done || f == nil && r.forgotten(key) {
			continue
		}
		n, err := r.readClosed(name, key, f)
		total += n
		if errors.Is(err, errStale) {
			return total, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return total, err
		}
	}
	n, key, err := r.readActive(files)
	total += n
	if key != "" {
		live[key] = true
	}
	if errors.Is(err, errStale) {
		return total, nil
	}
	if err != nil {
		return total, err
	}
	return total, r.maintain(files, live)
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
	rd, err := accesslog.OpenLines(filepath.Join(r.opt.Dir, name))
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	st := fileState{Name: name}
	if f != nil {
		st = *f
		st.Name = name
	}
	if _, err := io.CopyN(io.Discard, rd, st.Offset); err != nil {
		return 0, fmt.Errorf("%s: shorter than its rolled-up part (%d bytes): %w", name, st.Offset, err)
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
		whole := data
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			whole = data[:i+1]
		} else {
			whole = nil
		}
		if !eof && whole == nil {
			return total, fmt.Errorf("%s: a line longer than %d bytes at offset %d", name, len(buf), st.Offset)
		}
		// A closed file's last line without a newline is torn (a crash
		// before the crash-clean): not a record.
		n, err := r.commit(key, &st, whole, eof)
		total += n
		if err != nil || eof || r.stopping() {
			return total, err
		}
		carry = copy(buf, data[len(whole):])
	}
}

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
	if f := files[key]; f != nil {
		if f.Done {
			return 0, key, nil
		}
		st = *f
	}
	buf := r.chunk()
	var total int64
	for !r.stopping() {
		k, err := fh.ReadAt(buf, st.Offset)
		if err != nil && !errors.Is(err, io.EOF) {
			return total, key, fmt.Errorf("reading %s: %w", path, err)
		}
		whole := accesslog.WholeLines(buf[:k])
		if whole == nil {
			if k == len(buf) && bytes.IndexByte(buf[:k], 0) < 0 {
				return total, key, fmt.Errorf("%s: a line longer than %d bytes at offset %d", path, len(buf), st.Offset)
			}
			return total, key, nil
		}
		n, err := r.commit(key, &st, whole, false)
		total += n
		if err != nil || len(whole) < len(buf)/2 {
			return total, key, err
		}
	}
	return total, key, nil
}

// commit counts data (whole lines of file key, from st's position) and
// writes the counts and the new position in one transaction; eof marks
// the file read to its end.
func (r *Roller) commit(key string, st *fileState, data []byte, eof bool) (int64, error) {
	if len(data) == 0 && !eof {
		return 0, nil
	}
	rows := map[string]*Counts{}
	var (
		l       accesslog.Line
		dims    Dims
		c       Counts
		kb      []byte
		n, evts int64
	)
	for rest := data; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i+1]
		rest = rest[i+1:]
		n++
		if st.First.IsZero() && st.Lines+n == 1 {
			st.First, _ = accesslog.LineTime(line)
		}
		ok, err := classify(line, &l, &dims, &c)
		if err != nil {
			// A line the writer did not write whole: counted nowhere,
			// said once.
			r.noteError(fmt.Errorf("%s line %d: %w", st.Name, st.Lines+n, err))
			continue
		}
		if !ok {
			continue
		}
		evts++
		dims[DimNode] = r.opt.Node
		kb = rowKey(kb[:0], floorDiv(l.Time.Unix(), 60), &dims) // the time classify read
		if cur := rows[string(kb)]; cur != nil {
			cur.Add(&c)
		} else {
			cc := c
			rows[string(kb)] = &cc
		}
	}
	next := *st
	next.Offset += int64(len(data))
	next.Lines += n
	next.Events += evts
	next.Done = eof
	var prev *fileState
	if st.Lines > 0 || st.Offset > 0 || st.Done {
		prev = st
	}
	if err := r.be.commit(key, prev, &next, rows); err != nil {
		if errors.Is(err, errStale) {
			if files, _, lerr := r.be.load(); lerr == nil {
				r.filesMu.Lock()
				r.files = files
				r.filesMu.Unlock()
			}
			return 0, errStale // read on from there at the next pass
		}
		return 0, err
	}
	*st = next
	saved := next
	r.setFile(key, &saved)
	r.lines.Add(n)
	r.events.Add(evts)
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
	r.mu.Lock()
	err := r.be.reset()
	if err == nil {
		r.compacted = 0
		r.filesMu.Lock()
		r.files = map[string]*fileState{}
		r.filesMu.Unlock()
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.CatchUp(ctx)
}
