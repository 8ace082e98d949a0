package accesslog

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FileOptions configure a FileSink.
type FileOptions struct {
	// Dir holds the active file and the closed ones. Created if missing.
	Dir string
	// Name is the active file's name. Default "access.log". Closed files are
	// named after it with their time range: access.20261122T000000Z-20261122T000500Z.log.
	Name string
	// RotateEvery closes the active file at each multiple of this duration
	// (aligned to the wall clock: 5m rotates at :00, :05, ...). 0 disables.
	RotateEvery time.Duration
	// MaxSize closes the active file before it would grow past this many bytes. 0 disables.
	MaxSize int64
	// Gzip compresses closed files (to .log.gz) before they get their final name.
	Gzip bool
	// OnClose is a command (and arguments) run for each closed file, with the
	// file's path appended as the last argument; not through a shell.
	OnClose []string
	// HookTimeout bounds one OnClose run. Default 5m.
	HookTimeout time.Duration
	// KeepFiles deletes the oldest closed files beyond this count. 0 keeps all.
	KeepFiles int
	// KeepFor deletes closed files older than this. 0 keeps all.
	KeepFor time.Duration
	// Hold, if set, is asked before retention deletes a closed file (by
	// its name in Dir): true keeps it (a shipper has not shipped it yet).
	Hold   func(name string) bool
	Logger *slog.Logger
}

const timeLayout = "20060102T150405Z"

// FileSink writes to an active file in a directory and rotates it. Closed
// files are fsynced and renamed atomically to their final name, so a shipper
// that picks up files matching <prefix>.*<ext>[.gz] only ever sees complete
// files. Files whose name starts with "." are work in progress.
type FileSink struct {
	opt        FileOptions
	prefix     string // "access"
	ext        string // ".log"
	active     string // full path of the active file
	f          *os.File
	size       int64
	start      time.Time // start of the active file's time range
	nextRotate time.Time // end of the active file's time range, if time rotation is on
	// mark is the writer's clock (Tick): every line written from now on is
	// stamped at mark or later, so a file opened now may start there.
	mark time.Time

	jobs      chan closedFile
	closerWG  sync.WaitGroup
	rotations atomic.Uint64
	hookFails atomic.Uint64
	now       func() time.Time
	exists    func(path string) bool // whether a name is taken (a test sets the closer's steps)
}

type closedFile struct {
	path  string // where the closed file is now (final name, or staging name when gzip is on)
	final string // its final name
}

// OpenFile opens (creating) the active file in opt.Dir. A non-empty active
// file left by an earlier run is closed out first, and closed files left half
// processed (by a crash during gzip) are finished.
func OpenFile(opt FileOptions) (*FileSink, error) {
	s, err := openDir(opt)
	if err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		close(s.jobs)
		return nil, err
	}
	return s, nil
}

// openDir prepares opt.Dir for a new active file: it starts the closer,
// finishes what a crash left (staging files, the active file and mapped
// segments not yet promoted, see mapped.go) and sets the first range. The
// caller opens the active file.
func openDir(opt FileOptions) (*FileSink, error) {
	if opt.Name == "" {
		opt.Name = "access.log"
	}
	if opt.HookTimeout <= 0 {
		opt.HookTimeout = 5 * time.Minute
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if strings.ContainsRune(opt.Name, '/') || strings.HasPrefix(opt.Name, ".") {
		return nil, fmt.Errorf("access log file name %q must be a plain name", opt.Name)
	}
	ext := filepath.Ext(opt.Name)
	s := &FileSink{
		opt:    opt,
		prefix: strings.TrimSuffix(opt.Name, ext),
		ext:    ext,
		active: filepath.Join(opt.Dir, opt.Name),
		jobs:   make(chan closedFile, 64),
		now:    time.Now,
		exists: exists,
	}
	if err := os.MkdirAll(opt.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("cannot create access log directory: %w", err)
	}
	s.closerWG.Add(1)
	go s.closer()
	s.resumeStaging()
	if err := s.closeOutLeftovers(); err != nil {
		close(s.jobs)
		return nil, fmt.Errorf("cannot close out the access log left by an earlier run: %w", err)
	}
	s.mark = s.now()
	s.start = s.mark
	if s.opt.RotateEvery > 0 {
		s.start = s.mark.Truncate(s.opt.RotateEvery)
	}
	s.nextRotate = s.boundaryAfter(s.mark)
	return s, nil
}

// closeOutLeftovers closes out the active file an earlier run left, and
// the mapped segments it had not promoted to the active name yet (oldest
// first, after the active file they followed). Each is first cleaned of
// what a death mid-copy leaves in a mapped file (see clean); an empty one
// is removed.
func (s *FileSink) closeOutLeftovers() error {
	leftovers := []string{s.active}
	entries, _ := os.ReadDir(s.opt.Dir)
	var segs []string
	for _, e := range entries {
		switch {
		case strings.HasPrefix(e.Name(), segmentPrefix+s.opt.Name+"."):
			segs = append(segs, filepath.Join(s.opt.Dir, e.Name()))
		case strings.HasPrefix(e.Name(), cleanPrefix):
			_ = os.Remove(filepath.Join(s.opt.Dir, e.Name())) // a half-made copy; its source is still here
		}
	}
	slices.SortFunc(segs, func(a, b string) int { return cmpSeq(a, b) })
	leftovers = append(leftovers, segs...)
	for _, path := range leftovers {
		st, err := os.Lstat(path)
		if err != nil || !st.Mode().IsRegular() {
			continue // none, or not ours (a link the operator made): left alone
		}
		kept, err := clean(path)
		if err != nil {
			return err
		}
		if kept == 0 {
			_ = os.Remove(path)
			continue
		}
		if path != s.active {
			if err := os.Rename(path, s.active); err != nil {
				return err
			}
		}
		first, last := lineTimes(s.active, st.ModTime())
		if err := s.closeOut(first, rangeEnd(last)); err != nil {
			return err
		}
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// rangeEnd is the end of a file's named range whose last line is stamped
// t: file names have whole seconds, and a range excludes its end.
func rangeEnd(t time.Time) time.Time {
	return t.Truncate(time.Second).Add(time.Second)
}

// endNow is the end of the active file's range if it is closed now: every
// line in it is stamped before now (the writer stamps no line later than
// its clock), and before the time boundary if there is one.
func (s *FileSink) endNow() time.Time {
	end := rangeEnd(later(s.now(), s.mark))
	if !s.nextRotate.IsZero() && s.nextRotate.Before(end) {
		end = s.nextRotate
	}
	return end
}

func (s *FileSink) boundaryAfter(t time.Time) time.Time {
	if s.opt.RotateEvery <= 0 {
		return time.Time{}
	}
	return t.Truncate(s.opt.RotateEvery).Add(s.opt.RotateEvery)
}

func (s *FileSink) open() error {
	if err := os.MkdirAll(s.opt.Dir, 0o750); err != nil {
		return fmt.Errorf("cannot create access log directory: %w", err)
	}
	f, err := os.OpenFile(s.active, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("cannot open access log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("cannot stat access log: %w", err)
	}
	s.f, s.size = f, st.Size()
	return nil
}

// Write appends p, rotating first when MaxSize would be passed. A partial
// write is truncated away, so a retry neither splits nor repeats a line.
func (s *FileSink) Write(p []byte) error {
	if s.opt.MaxSize > 0 && s.size > 0 && s.size+int64(len(p)) > s.opt.MaxSize {
		// The lines still to come in this batch may be stamped as early as
		// the writer's clock: the next file's range starts there.
		if err := s.rotate(s.endNow(), s.mark); err != nil {
			return err
		}
	}
	if s.f == nil {
		if err := s.open(); err != nil {
			return err
		}
	}
	n, err := s.f.Write(p)
	if err != nil {
		if n > 0 {
			if terr := s.f.Truncate(s.size); terr != nil {
				err = fmt.Errorf("%w (and the partial line could not be removed: %v)", err, terr)
			}
		}
		return err
	}
	s.size += int64(n)
	return nil
}

// Sync fsyncs the active file.
func (s *FileSink) Sync() error {
	if s.f == nil {
		return errors.New("access log is not open")
	}
	return s.f.Sync()
}

// Boundary is the end of the active file's time range (zero without
// rotate_every): the writer writes every line stamped before it, then
// calls Tick with it.
func (s *FileSink) Boundary() time.Time { return s.nextRotate }

// Tick advances the sink's clock: every line stamped before t has been
// written. At or past the time boundary the active file is closed out,
// named [start, boundary), and the next one starts at the boundary (or at
// the latest boundary before t, after a quiet spell). An empty file is
// kept, not shipped.
func (s *FileSink) Tick(t time.Time) error {
	s.mark = later(s.mark, t)
	if s.nextRotate.IsZero() || t.Before(s.nextRotate) {
		return nil
	}
	next := t.Truncate(s.opt.RotateEvery)
	if s.size == 0 {
		s.start, s.nextRotate = next, s.boundaryAfter(t)
		return nil
	}
	return s.rotate(s.nextRotate, next)
}

// rotate closes the active file out as [s.start, end) and opens a new
// one whose range starts at next.
func (s *FileSink) rotate(end, next time.Time) error {
	if s.f == nil {
		if err := s.open(); err != nil {
			return err
		}
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("cannot sync access log before rotation: %w", err)
	}
	if err := s.closeOut(s.start, end); err != nil {
		return err
	}
	old := s.f
	s.f = nil
	if err := old.Close(); err != nil {
		s.opt.Logger.Warn("closing rotated access log", "err", err)
	}
	s.start, s.size = next, 0
	s.nextRotate = s.boundaryAfter(later(next, s.mark))
	s.rotations.Add(1)
	return s.open()
}

// closeOut renames the active file to its final (or, with gzip, staging)
// name and queues it for the closer.
func (s *FileSink) closeOut(start, end time.Time) error {
	final := s.finalName(start, end)
	target := final
	if s.opt.Gzip {
		target = filepath.Join(s.opt.Dir, "."+filepath.Base(final))
	}
	if err := os.Rename(s.active, target); err != nil {
		return fmt.Errorf("cannot rename access log: %w", err)
	}
	if err := syncDir(s.opt.Dir); err != nil {
		s.opt.Logger.Warn("cannot sync access log directory", "err", err)
	}
	s.jobs <- closedFile{path: target, final: final}
	return nil
}

// finalName is the closed file's name; a counter is added when two files
// would share a time range (size rotations within one second).
//
// The closer moves a compressed file on while this looks: from its staging
// name (.access.<range>.log) to that name beside the .gz, then to the .gz
// alone. The names are looked at in that order, so a file that moves on
// between two looks is seen under the name it moved to. Looked at the
// other way round, a file could be missed by both looks, and the next
// file of that range would be compressed over it.
func (s *FileSink) finalName(start, end time.Time) string {
	base := fmt.Sprintf("%s.%s-%s", s.prefix, start.UTC().Format(timeLayout), end.UTC().Format(timeLayout))
	for i := 0; ; i++ {
		name := base + s.ext
		if i > 0 {
			name = fmt.Sprintf("%s.%d%s", base, i, s.ext)
		}
		p := filepath.Join(s.opt.Dir, name)
		if !s.exists(filepath.Join(s.opt.Dir, "."+name)) && !s.exists(p+".gz") && !s.exists(p) {
			return p
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// Reopen closes the active file and opens the same path again. If the
// file was moved away (external rotation), the new one's range starts at
// the writer's clock; if it was not, the file and its range go on.
func (s *FileSink) Reopen() error {
	var before os.FileInfo
	if s.f != nil {
		before, _ = s.f.Stat()
		_ = s.f.Sync()
		_ = s.f.Close()
		s.f = nil
	}
	if err := s.open(); err != nil {
		return err
	}
	if after, err := s.f.Stat(); err == nil && before != nil && os.SameFile(before, after) {
		return nil
	}
	s.start = s.mark
	return nil
}

// Recover reopens the active file after a failed write.
func (s *FileSink) Recover() error {
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	return s.open()
}

// Close fsyncs the active file, closes it out if it holds anything (an
// empty one is removed), and waits (until ctx ends) for closed files to be compressed and hooked.
func (s *FileSink) Close(ctx context.Context) error {
	var errs []error
	if s.f != nil {
		if err := s.f.Sync(); err != nil {
			errs = append(errs, err)
		}
		if err := s.f.Close(); err != nil {
			errs = append(errs, err)
		}
		s.f = nil
		switch {
		case len(errs) > 0:
		case s.size > 0:
			if err := s.closeOut(s.start, s.endNow()); err != nil {
				errs = append(errs, err)
			}
		default:
			_ = os.Remove(s.active) // nothing to ship
		}
	}
	close(s.jobs)
	done := make(chan struct{})
	go func() { s.closerWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("access log: closed files still being processed: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// Rotations counts the files closed out so far.
func (s *FileSink) Rotations() uint64 { return s.rotations.Load() }

// HookFailures counts OnClose runs that failed.
func (s *FileSink) HookFailures() uint64 { return s.hookFails.Load() }

// closer compresses, hooks and prunes closed files, in order, off the writer's path.
func (s *FileSink) closer() {
	defer s.closerWG.Done()
	for job := range s.jobs {
		path := job.final
		if s.opt.Gzip {
			var err error
			if path, err = compress(job.path, job.final+".gz"); err != nil {
				s.opt.Logger.Error("cannot compress closed access log; it is kept as is", "file", job.path, "err", err)
				continue
			}
		}
		if len(s.opt.OnClose) > 0 {
			s.runHook(path)
		}
		s.prune()
	}
}

// compress writes src gzipped to dst (via a hidden temporary name), fsyncs
// it, renames it into place and removes src.
func compress(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp")
	err = replaceFile(tmp, dst, func(w io.Writer) error {
		zw := gzip.NewWriter(w)
		if _, err := io.Copy(zw, in); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return "", err
	}
	_ = syncDir(filepath.Dir(dst))
	return dst, os.Remove(src)
}

func (s *FileSink) runHook(path string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.HookTimeout)
	defer cancel()
	args := append(slices.Clone(s.opt.OnClose[1:]), path)
	cmd := exec.CommandContext(ctx, s.opt.OnClose[0], args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.hookFails.Add(1)
		s.opt.Logger.Error("access log on_close hook failed", "file", path, "err", err,
			"output", string(out[:min(len(out), 2048)]))
	}
}

// closedFiles lists the final closed files, oldest first.
func (s *FileSink) closedFiles() []string {
	files, _ := ClosedFiles(s.opt.Dir, s.opt.Name, false)
	return files
}

// ClosedFiles lists the names of the closed files of the access log whose
// active file is dir/name, oldest first: access.<range>.log and
// access.<range>.log.gz and, with staging, the closed files still under
// their hidden staging name while they are compressed (.access.<range>.log),
// which hold the same lines as the .gz they become.
func ClosedFiles(dir, name string, staging bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	ext := filepath.Ext(name)
	prefix := strings.TrimSuffix(name, ext) + "."
	var out []string
	for _, e := range entries {
		n := e.Name()
		base := n
		if staging {
			base = strings.TrimPrefix(n, ".")
		}
		if e.Type().IsRegular() && n != name && strings.HasPrefix(base, prefix) &&
			(strings.HasSuffix(base, ext) || strings.HasSuffix(base, ext+".gz")) {
			out = append(out, n)
		}
	}
	// Names start with the range's start time.
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Or(strings.Compare(strings.TrimPrefix(a, "."), strings.TrimPrefix(b, ".")), strings.Compare(a, b))
	})
	return out, nil
}

func (s *FileSink) prune() {
	if s.opt.KeepFiles <= 0 && s.opt.KeepFor <= 0 {
		return
	}
	files := s.closedFiles()
	for i, n := range files {
		p := filepath.Join(s.opt.Dir, n)
		drop := s.opt.KeepFiles > 0 && i < len(files)-s.opt.KeepFiles
		if !drop && s.opt.KeepFor > 0 {
			if st, err := os.Stat(p); err == nil && s.now().Sub(st.ModTime()) > s.opt.KeepFor {
				drop = true
			}
		}
		if drop && s.opt.Hold != nil && s.opt.Hold(n) {
			continue // not shipped yet: kept past retention
		}
		if drop {
			if err := os.Remove(p); err != nil {
				s.opt.Logger.Warn("cannot remove old access log", "file", p, "err", err)
			}
		}
	}
}

// resumeStaging queues closed files that a crash left under their hidden
// staging name, so they are compressed and given their final name.
func (s *FileSink) resumeStaging() {
	entries, _ := os.ReadDir(s.opt.Dir)
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, "."+s.prefix+".") {
			continue
		}
		p := filepath.Join(s.opt.Dir, n)
		if strings.HasSuffix(n, ".tmp") {
			_ = os.Remove(p) // a half-written compressed copy; its source is still here
			continue
		}
		final := filepath.Join(s.opt.Dir, strings.TrimPrefix(n, "."))
		if s.opt.Gzip {
			s.jobs <- closedFile{path: p, final: final}
		} else if err := os.Rename(p, final); err == nil {
			s.jobs <- closedFile{path: final, final: final}
		}
	}
}

// lineTimes reads the earliest and the latest time of the records in a
// file left by an earlier run (lines of one batch are not in time order,
// so every line is read). Without a readable line both are def.
func lineTimes(path string, def time.Time) (first, last time.Time) {
	_, _, _ = scanRecords(path, func(rec []byte) error {
		if t, ok := lineTime(rec); ok {
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
		return nil
	})
	if first.IsZero() {
		return def, def
	}
	return first, last
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// segmentPrefix starts the name of a mapped segment not yet promoted to
// the active name: .seg-access.log.<seq> (mapped.go).
const segmentPrefix = ".seg-"

// cmpSeq orders segment paths by their sequence number.
func cmpSeq(a, b string) int {
	seq := func(p string) uint64 {
		n, _ := strconv.ParseUint(p[strings.LastIndexByte(p, '.')+1:], 10, 64)
		return n
	}
	return cmp.Compare(seq(a), seq(b))
}

// clean makes a file left by a dead process safe to ship: only whole
// records stay. A mapped file can hold, past its last record, the zeros of
// space reserved ahead; and where the process died mid-copy, a record cut
// short, or bytes of one whose start is missing, each next to zeros. A
// record stays only if it is a whole line that starts with a time and holds
// no zero byte (no valid record does). A clean file is left as it is;
// otherwise the records are copied to a new file that replaces it. It
// returns the bytes kept.
func clean(path string) (int64, error) {
	kept, dirty, err := scanRecords(path, nil)
	if err != nil || !dirty {
		return kept, err
	}
	tmp := filepath.Join(filepath.Dir(path), cleanPrefix+filepath.Base(path))
	err = replaceFile(tmp, path, func(out io.Writer) error {
		w := bufio.NewWriterSize(out, 256<<10)
		var err error
		if kept, _, err = scanRecords(path, func(rec []byte) error { _, err := w.Write(rec); return err }); err != nil {
			return err
		}
		return w.Flush()
	})
	if err != nil {
		return 0, err
	}
	return kept, syncDir(filepath.Dir(path))
}

// cleanPrefix names clean's work file; a crash can leave one behind.
const cleanPrefix = ".clean-"

// replaceFile writes a file through fill under the temporary name tmp,
// fsyncs it and renames it to dst, so dst is either as it was or complete;
// on error tmp is removed. The caller syncs the directory.
func replaceFile(tmp, dst string, fill func(io.Writer) error) error {
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	err = fill(out)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// scanRecords reads the whole records of a file (see clean), handing each
// to fn if it is not nil, and reports whether anything else was there.
func scanRecords(path string, fn func(rec []byte) error) (kept int64, dirty bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 256<<10)
	for {
		line, rerr := r.ReadSlice('\n')
		if errors.Is(rerr, bufio.ErrBufferFull) {
			dirty = true // longer than any record: skip to the next line
			for errors.Is(rerr, bufio.ErrBufferFull) {
				_, rerr = r.ReadSlice('\n')
			}
			continue
		}
		if len(line) > 0 {
			// Zeros split the line; only what follows the last run of
			// them can be a record (the line's end is there).
			if i := bytes.LastIndexByte(line, 0); i >= 0 {
				dirty = true
				line = line[i+1:]
			}
			if rerr == nil && validRecord(line) {
				if fn != nil {
					if err := fn(line); err != nil {
						return kept, dirty, err
					}
				}
				kept += int64(len(line))
			} else if len(line) > 0 {
				dirty = true
			}
		}
		if rerr == io.EOF {
			return kept, dirty, nil
		}
		if rerr != nil {
			return kept, dirty, rerr
		}
	}
}

// validRecord reports whether line (with its newline) is a whole record:
// it ends in a newline and starts with a time stamp shaped as the writer
// writes them. The shape is checked, not the calendar (time.Parse would
// cost the shipper a third of its time per line), so the crash-clean and
// the shipper agree on what a record is at a few nanoseconds a line.
func validRecord(line []byte) bool {
	if len(line) == 0 || line[len(line)-1] != '\n' {
		return false
	}
	for _, p := range []string{ltsvTimePrefix, jsonTimePrefix} {
		if len(line) >= len(p)+len(stampLayout) && string(line[:len(p)]) == p {
			return stampShaped(line[len(p) : len(p)+len(stampLayout)])
		}
	}
	return false
}

// stampShaped reports whether b has the shape of stampLayout: digits
// where it has digits, its separators elsewhere.
func stampShaped(b []byte) bool {
	for i := range len(stampLayout) {
		c, want := b[i], stampLayout[i]
		if want >= '0' && want <= '9' {
			if c < '0' || c > '9' {
				return false
			}
		} else if c != want {
			return false
		}
	}
	return true
}
