package ssp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// journal keeps the win and billing notices not yet called (each a
// partner's invoice line) in a file of the data directory, so that a
// process that dies with notices queued or waiting for a retry (kill -9,
// a crash, the kernel's OOM killer) loses none: the next process that
// finds the file calls them.
//
// Each process writes a file of its own, ssp-notices.<pid>-<start>.journal,
// and holds an exclusive flock on it while it lives: a file nobody holds
// is a dead process's, which any process (the next one started, or a
// peer during a restart's handover) takes over: it queues the file's
// notices again, journaled in its own file first, then removes it. A
// notice is so called at least once; one called just before its process
// died, or taken over, may be called twice (the partners' notices carry
// the auction id, by which they keep one).
//
// The file is a log of lines "+<seq> <url>" (queued) and "-<seq>" (called,
// or given up), written with one write(2) each (no fsync: like the access
// log, it survives the process, not the machine). It is rewritten with the
// pending notices alone when it passes journalCompactAt, and removed when
// its process stops with none pending.
type journal struct {
	dir  string
	path string
	log  *slog.Logger

	mu      sync.Mutex
	f       *os.File
	size    int64
	seq     uint64
	pending map[uint64]string
	failed  bool // a write failed: logged once
	// compactAt is the size past which the file is rewritten.
	compactAt int64
}

const (
	journalPrefix    = "ssp-notices."
	journalSuffix    = ".journal"
	journalCompactAt = 4 << 20
)

// openJournal creates this process's journal in dir.
func openJournal(dir string, log *slog.Logger) (*journal, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	j := &journal{dir: dir, log: log, pending: map[uint64]string{}, compactAt: journalCompactAt,
		path: filepath.Join(dir, fmt.Sprintf("%s%d-%d%s", journalPrefix, os.Getpid(), time.Now().UnixNano(), journalSuffix))}
	f, err := createLocked(j.path)
	if err != nil {
		return nil, err
	}
	j.f = f
	return j, nil
}

// createLocked creates path (it must not exist) and takes its lock.
func createLocked(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	return f, nil
}

// add journals u and returns its sequence number; 0 when it could not be
// (a URL of more than one line, or a write that failed: logged).
func (j *journal) add(u string) uint64 {
	if strings.ContainsAny(u, "\r\n") {
		return 0
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return 0
	}
	j.seq++
	if !j.write("+" + strconv.FormatUint(j.seq, 10) + " " + u + "\n") {
		return 0
	}
	j.pending[j.seq] = u
	return j.seq
}

// done journals that notice seq was called or given up.
func (j *journal) done(seq uint64) {
	if seq == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.pending[seq]; !ok || j.f == nil {
		return
	}
	delete(j.pending, seq)
	j.write("-" + strconv.FormatUint(seq, 10) + "\n")
	if j.size >= j.compactAt {
		j.compact()
	}
}

// write appends line. Lock held.
func (j *journal) write(line string) bool {
	n, err := io.WriteString(j.f, line)
	j.size += int64(n)
	if err != nil {
		if !j.failed && j.log != nil {
			j.log.Error("the notice journal cannot be written: win and billing notices queued now are lost if the process dies", "err", err)
		}
		j.failed = true
		return false
	}
	j.failed = false
	return true
}

// compact rewrites the journal with the pending notices alone: a new
// file, locked before it takes the journal's name, so that no other
// process ever sees it unlocked. Lock held.
func (j *journal) compact() {
	tmp := j.path + ".new"
	f, err := createLocked(tmp)
	if err != nil {
		return // the journal goes on growing; tried again at the next done
	}
	var b strings.Builder
	for _, seq := range slices.Sorted(maps.Keys(j.pending)) {
		b.WriteString("+" + strconv.FormatUint(seq, 10) + " " + j.pending[seq] + "\n")
	}
	if _, err := io.WriteString(f, b.String()); err != nil || os.Rename(tmp, j.path) != nil {
		f.Close()
		_ = os.Remove(tmp)
		return
	}
	j.f.Close()
	j.f, j.size = f, int64(b.Len())
}

// close closes the journal, and removes it when no notice is pending;
// otherwise the next process takes it over.
func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return
	}
	if len(j.pending) == 0 {
		_ = os.Remove(j.path)
	} else if j.log != nil {
		j.log.Warn("win and billing notices left in the journal, for the next start", "notices", len(j.pending))
	}
	j.f.Close()
	j.f = nil
}

// orphans returns the notices of the journals in dir that no live process
// holds, and a function that removes those files (to call once the
// notices are journaled again). A file it cannot read is left alone, and
// logged.
func (j *journal) orphans() (urls []string, remove func()) {
	stale, _ := filepath.Glob(filepath.Join(j.dir, journalPrefix+"*"+journalSuffix+".new"))
	for _, p := range stale { // a compaction cut short: its journal is whole
		if f, err := os.Open(p); err == nil {
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
				_ = os.Remove(p)
			}
			f.Close()
		}
	}
	paths, _ := filepath.Glob(filepath.Join(j.dir, journalPrefix+"*"+journalSuffix))
	var taken []*os.File
	for _, p := range paths {
		if p == j.path {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // its process lives
			continue
		}
		u, err := readJournal(f)
		if err != nil {
			if j.log != nil {
				j.log.Error("a notice journal cannot be read; left in place", "file", filepath.Base(p), "err", err)
			}
			f.Close()
			continue
		}
		urls = append(urls, u...)
		taken = append(taken, f)
	}
	return urls, func() {
		for _, f := range taken {
			_ = os.Remove(f.Name())
			f.Close()
		}
	}
}

var errJournalLine = errors.New("not a journal line")

// readJournal returns the notices queued in a journal and not done, in
// the order they were queued. A last line cut short (the process died in
// its write) is left out.
func readJournal(r io.Reader) ([]string, error) {
	type entry struct {
		seq uint64
		url string
	}
	var order []entry
	done := map[uint64]bool{}
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF {
			break // a line without its newline was cut short
		}
		if err != nil {
			return nil, err
		}
		line = line[:len(line)-1]
		switch {
		case strings.HasPrefix(line, "+"):
			s, u, ok := strings.Cut(line[1:], " ")
			seq, err := strconv.ParseUint(s, 10, 64)
			if !ok || err != nil || u == "" {
				return nil, errJournalLine
			}
			order = append(order, entry{seq, u})
		case strings.HasPrefix(line, "-"):
			seq, err := strconv.ParseUint(line[1:], 10, 64)
			if err != nil {
				return nil, errJournalLine
			}
			done[seq] = true
		default:
			return nil, errJournalLine
		}
	}
	var out []string
	for _, e := range order {
		if !done[e.seq] {
			out = append(out, e.url)
		}
	}
	return out, nil
}
