package admin

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// auditFiles are the audit log's files: the active file at path and the
// closed ones beside it, named by the time range of their lines
// (audit.20261124T000000Z-20261124T235959Z.log). Every writer (the server
// and the CLI, each in its own process) holds an exclusive flock on
// <path>.lock from reading the last line to writing its own, so the chain
// has one order and a rotation is never seen half done. The lock file is
// never renamed, unlike the log.
//
// The active file is closed when the next line would take it past maxSize
// or when that line falls into a new multiple of rotateEvery (aligned to
// the clock, like the access log's rotate_every); the next line written
// does it, so a quiet log is not rotated into empty files. Each new file
// starts with a checkpoint: a chained line naming the file it continues,
// whose link is the hash of that file's last line, so a file read alone
// shows where it starts and a missing file breaks the chain.
type auditFiles struct {
	path        string
	maxSize     int64
	rotateEvery time.Duration
	keepFiles   int

	lock  *os.File
	f     *os.File
	ino   uint64
	first time.Time // the active file's first line's time; zero while empty
}

// checkpointAction is the action of the first line of every file but the
// first.
const checkpointAction = "audit.checkpoint"

const auditTimeLayout = "20060102T150405Z"

func openAuditFiles(path string, maxSize int64, rotateEvery time.Duration, keepFiles int) (*auditFiles, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	w := &auditFiles{path: path, maxSize: maxSize, rotateEvery: rotateEvery, keepFiles: keepFiles, lock: lock}
	if err := w.withLock(func() error { return w.current() }); err != nil {
		lock.Close()
		return nil, err
	}
	return w, nil
}

func (w *auditFiles) withLock(fn func() error) error {
	fd := int(w.lock.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		return err
	}
	defer func() { _ = syscall.Flock(fd, syscall.LOCK_UN) }()
	return fn()
}

// current (re)opens the active file when another process rotated it since
// this one last wrote. Lock held.
func (w *auditFiles) current() error {
	st, err := os.Stat(w.path)
	if err == nil && w.f != nil && inode(st) == w.ino {
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if st, err = f.Stat(); err != nil {
		f.Close()
		return err
	}
	if w.f != nil {
		w.f.Close()
	}
	w.f, w.ino = f, inode(st)
	w.first = time.Time{}
	if first, err := firstLine(f); err == nil && first != nil {
		w.first = lineTime(first)
	}
	return nil
}

func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

// append writes rec after the log's last line, rotating first when due,
// and returns the lines written (a checkpoint, then rec's line).
func (w *auditFiles) append(rec AuditRecord) ([][]byte, error) {
	var written [][]byte
	err := w.withLock(func() error {
		if err := w.current(); err != nil {
			return err
		}
		st, err := w.f.Stat()
		if err != nil {
			return err
		}
		size := st.Size()
		prev, err := lastLine(w.f)
		if err != nil {
			return err
		}
		line, err := chained(rec, prev)
		if err != nil {
			return err
		}
		if size > 0 && w.due(size, len(line), rec.Time) {
			if err := w.rotate(prev); err != nil {
				return err
			}
			size, prev = 0, nil
		}
		if size == 0 {
			// A new file: it starts with a checkpoint linked to the last
			// line of the file before it (after a rotation, or when a
			// rotation was cut off after the rename).
			last, name, err := w.lastClosed()
			if err != nil {
				return err
			}
			if last != nil {
				cp, err := chained(AuditRecord{Time: rec.Time, Action: checkpointAction, Target: name, Result: "ok",
					Detail: "this file continues " + name}, last)
				if err != nil {
					return err
				}
				if err := w.write(cp); err != nil {
					return err
				}
				written = append(written, cp)
				prev = cp
			}
			if line, err = chained(rec, prev); err != nil {
				return err
			}
		}
		if err := w.write(line); err != nil {
			return err
		}
		written = append(written, line)
		return nil
	})
	return written, err
}

// chained is rec's line (without newline) linked to prev.
func chained(rec AuditRecord, prev []byte) ([]byte, error) {
	rec.Seq, rec.Prev = chainAfter(prev)
	return json.Marshal(rec)
}

func (w *auditFiles) write(line []byte) error {
	if w.first.IsZero() {
		w.first = lineTime(line)
	}
	_, err := w.f.Write(append(line, '\n'))
	return err
}

func (w *auditFiles) due(size int64, n int, at time.Time) bool {
	if w.maxSize > 0 && size+int64(n)+1 > w.maxSize {
		return true
	}
	return w.rotateEvery > 0 && !w.first.IsZero() && !at.Truncate(w.rotateEvery).Equal(w.first.Truncate(w.rotateEvery))
}

// rotate gives the active file its closed name (the time range of its
// lines; last is its last line), opens a new active file and applies
// keepFiles. Lock held.
func (w *auditFiles) rotate(last []byte) error {
	dir, base := filepath.Split(w.path)
	stem := strings.TrimSuffix(base, filepath.Ext(base))
	from, to := w.first, lineTime(last)
	if from.IsZero() {
		from = to
	}
	name := fmt.Sprintf("%s.%s-%s", stem, from.UTC().Format(auditTimeLayout), to.UTC().Format(auditTimeLayout))
	closed := filepath.Join(dir, name+".log")
	for i := 1; ; i++ {
		if _, err := os.Lstat(closed); errors.Is(err, os.ErrNotExist) {
			break
		}
		closed = filepath.Join(dir, fmt.Sprintf("%s.%d.log", name, i))
	}
	if err := w.f.Sync(); err != nil {
		return err
	}
	if err := os.Rename(w.path, closed); err != nil {
		return err
	}
	if err := w.current(); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename and the new file survive a crash
		d.Close()
	}
	if w.keepFiles > 0 {
		files, err := AuditFiles(w.path)
		if err != nil {
			return err
		}
		closedFiles := files[:len(files)-1]
		for len(closedFiles) > w.keepFiles {
			if err := os.Remove(closedFiles[0]); err != nil {
				return err
			}
			closedFiles = closedFiles[1:]
		}
	}
	return nil
}

// lastClosed returns the last line of the newest closed file and that
// file's name, or nil when there is none. Lock held.
func (w *auditFiles) lastClosed() ([]byte, string, error) {
	files, err := AuditFiles(w.path)
	if err != nil || len(files) < 2 {
		return nil, "", err
	}
	name := files[len(files)-2]
	f, err := os.Open(name)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	last, err := lastLine(f)
	return last, filepath.Base(name), err
}

func (w *auditFiles) close() error {
	var err error
	if w.f != nil {
		err = errors.Join(w.f.Sync(), w.f.Close())
	}
	return errors.Join(err, w.lock.Close())
}

// AuditFiles lists the files of the audit log whose active file is path:
// the closed files, in the order of their lines (by the sequence number of
// their first line), then path itself.
func AuditFiles(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	stem := strings.TrimSuffix(base, filepath.Ext(base))
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type closed struct {
		name string
		seq  uint64
	}
	var files []closed
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || n == base || !strings.HasPrefix(n, stem+".") || !strings.HasSuffix(n, ".log") ||
			!closedAuditName(strings.TrimSuffix(strings.TrimPrefix(n, stem+"."), ".log")) {
			continue
		}
		full := filepath.Join(dir, n)
		seq, err := firstSeq(full)
		if err != nil {
			return nil, err
		}
		files = append(files, closed{full, seq})
	}
	slices.SortFunc(files, func(a, b closed) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name))
	})
	out := make([]string, 0, len(files)+1)
	for _, f := range files {
		out = append(out, f.name)
	}
	return append(out, filepath.Join(dir, base)), nil
}

// closedAuditName reports whether s is the range part of a closed file's
// name: FROM-TO or FROM-TO.N.
func closedAuditName(s string) bool {
	from, rest, ok := strings.Cut(s, "-")
	if !ok || len(rest) < len(auditTimeLayout) {
		return false
	}
	to, n := rest[:len(auditTimeLayout)], rest[len(auditTimeLayout):]
	if _, err := time.Parse(auditTimeLayout, from); err != nil {
		return false
	}
	if _, err := time.Parse(auditTimeLayout, to); err != nil {
		return false
	}
	if n == "" {
		return true
	}
	n, ok = strings.CutPrefix(n, ".")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// firstSeq is the sequence number of a file's first line (0 when it has
// none).
func firstSeq(name string) (uint64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	line, err := firstLine(f)
	if err != nil || line == nil {
		return 0, err
	}
	var rec struct {
		Seq uint64 `json:"seq"`
	}
	_ = json.Unmarshal(line, &rec)
	return rec.Seq, nil
}

// firstLine is a file's first line, without its newline (nil when empty).
func firstLine(f *os.File) ([]byte, error) {
	line, err := bufio.NewReader(io.NewSectionReader(f, 0, maxAuditLine)).ReadBytes('\n')
	if len(line) == 0 {
		if err == io.EOF {
			return nil, nil
		}
		return nil, err
	}
	return bytes.TrimSuffix(line, []byte("\n")), nil
}

// lineTime is the time of an audit line (zero when it has none).
func lineTime(line []byte) time.Time {
	var rec struct {
		Time time.Time `json:"time"`
	}
	_ = json.Unmarshal(line, &rec)
	return rec.Time
}

// maxHistoryScan bounds the bytes of audit log one search reads, newest
// file first: a search that would read more says it is incomplete.
const maxHistoryScan = 256 << 20

// Find returns the last limit records of the audit log that match, oldest
// first, reading its files from the newest (the active one) back until it
// has them, the files end, or it read maxHistoryScan bytes; complete is
// false when files were left unread. quick, when not empty, is a byte
// string every matching line holds, tested before a line is decoded. A
// line being written (torn) or not JSON is skipped; a file removed meanwhile
// (audit_keep_files) is passed over.
func (a *Audit) Find(quick string, match func(*AuditRecord) bool, limit int) (recs []AuditRecord, complete bool, err error) {
	files, err := AuditFiles(a.files.path)
	if err != nil {
		return nil, false, err
	}
	var read int64
	for i := len(files) - 1; i >= 0 && len(recs) < limit; i-- {
		if read >= maxHistoryScan {
			return recs, false, nil
		}
		found, n, err := findInFile(files[i], []byte(quick), match)
		read += n
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		recs = append(found, recs...)
	}
	if len(recs) > limit {
		recs = recs[len(recs)-limit:]
	}
	return recs, true, nil
}

// findInFile returns the records of the file that match, in its order, and
// the bytes it read.
func findInFile(name string, quick []byte, match func(*AuditRecord) bool) ([]AuditRecord, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var (
		out  []AuditRecord
		read int64
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxAuditLine)
	for sc.Scan() {
		line := sc.Bytes()
		read += int64(len(line)) + 1
		if len(quick) > 0 && !bytes.Contains(line, quick) {
			continue
		}
		var rec AuditRecord
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		if match(&rec) {
			out = append(out, rec)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return nil, read, err
	}
	return out, read, nil
}
