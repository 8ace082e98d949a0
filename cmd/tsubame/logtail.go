package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
)

// tsubame log tail: the access log's last lines, and with -f the lines as
// they come. The live file is written through a memory mapping, its space
// allocated ahead of the records (zero bytes, internal/accesslog's mapped
// writer), so grep calls it binary and tail prints the zeros; this reads
// only its whole lines (accesslog.WholeLines), and follows the file
// through its rotations: when the active name is a new file, the rest of
// the old one (closed out: its unused space cut) is printed first.

// tailPoll is how often -f looks for new lines and a rotation.
const tailPoll = 200 * time.Millisecond

func runLogTail(ctx context.Context, e *env, file string, n int, follow bool) error {
	if n < 0 {
		return usagef("log tail: -n %d: want 0 or more lines", n)
	}
	if file == "" {
		cfg, err := e.load()
		if err != nil {
			return err
		}
		if cfg.AccessLog.Dir == "" || cfg.AccessLog.FileName == "" {
			return usagef("log tail: no access log file (access_log.dir and access_log.file_name); name a FILE")
		}
		file = filepath.Join(cfg.AccessLog.Dir, cfg.AccessLog.FileName)
	}
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return tsubame.Errorf(tsubame.ENOTFOUND, "log tail: %s does not exist (is access_log set to a file, and has the server started?)", file)
		}
		return err
	}
	t := &tailer{out: e.stdout, path: file, f: f}
	defer func() { t.f.Close() }()
	if err := t.last(n); err != nil {
		return err
	}
	if !follow {
		return nil
	}
	tick := time.NewTicker(tailPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := t.more(); err != nil {
			return err
		}
	}
}

// tailer follows one access log file name.
type tailer struct {
	out  io.Writer
	path string
	f    *os.File
	off  int64 // where the next whole line starts
}

// last prints the file's last n whole lines and sets off after them.
func (t *tailer) last(n int) error {
	fi, err := t.f.Stat()
	if err != nil {
		return err
	}
	end, err := writtenEnd(t.f, fi.Size())
	if err != nil {
		return err
	}
	// Read back from the written end, a window at a time, until it holds n
	// whole lines or the file's start.
	for window := int64(64 << 10); ; window *= 2 {
		start := max(end-window, 0)
		buf := make([]byte, end-start)
		if _, err := t.f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		whole := accesslog.WholeLines(buf)
		lines := whole
		if start > 0 { // the window's first line may be cut: drop it
			i := bytes.IndexByte(lines, '\n')
			lines = lines[i+1:]
		}
		if bytes.Count(lines, []byte{'\n'}) >= n || start == 0 {
			for range bytes.Count(lines, []byte{'\n'}) - n {
				lines = lines[bytes.IndexByte(lines, '\n')+1:]
			}
			t.off = start + int64(len(whole))
			_, err := t.out.Write(lines)
			return err
		}
	}
}

// writtenEnd is where the records of a file of size bytes end: past its
// last non-zero byte (the space allocated ahead is zeros).
func writtenEnd(f *os.File, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != 0 {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}

// more prints the whole lines written since off; once the name is another
// file (a rotation), the rest of this one, then the new one's from its start.
func (t *tailer) more() error {
	if err := t.copyWhole(); err != nil {
		return err
	}
	cur, err := t.f.Stat()
	if err != nil {
		return err
	}
	next, err := os.Stat(t.path)
	if err != nil || os.SameFile(cur, next) {
		return nil // not there between a rotation's steps: looked for again
	}
	// Rotated: the old file is closed out (its unused space cut), so what
	// is left of it is whole lines; then the new file from its start.
	if err := t.copyWhole(); err != nil {
		return err
	}
	f, err := os.Open(t.path)
	if err != nil {
		return nil
	}
	t.f.Close()
	t.f, t.off = f, 0
	return t.copyWhole()
}

// copyWhole prints the whole lines from off on.
func (t *tailer) copyWhole() error {
	buf := make([]byte, 1<<20)
	for {
		k, err := t.f.ReadAt(buf, t.off)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		whole := accesslog.WholeLines(buf[:k])
		if len(whole) == 0 {
			if k == len(buf) && bytes.IndexByte(buf, 0) < 0 {
				return fmt.Errorf("log tail: %s: a line longer than %d bytes", t.path, len(buf))
			}
			return nil
		}
		if _, err := t.out.Write(whole); err != nil {
			return err
		}
		t.off += int64(len(whole))
		if k < len(buf) {
			return nil
		}
	}
}
