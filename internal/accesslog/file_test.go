package accesslog

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var closedName = regexp.MustCompile(`^access\.\d{8}T\d{6}Z-\d{8}T\d{6}Z(\.\d+)?\.log(\.gz)?$`)

// Under continuous load with a rotation every second, every record is in
// exactly one closed file, and each file is complete and well named.
func TestRotationUnderLoadLosesNothing(t *testing.T) {
	dir := t.TempDir()
	sink := openSink(t, FileOptions{Dir: dir, RotateEvery: time.Second})
	l := New(sink, Options{Logger: quiet, FlushInterval: 20 * time.Millisecond})
	var taken atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(3500 * time.Millisecond)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				if err := l.Append(rec(i), uint64(g)); err != nil {
					t.Error(err)
					return
				}
				taken.Add(1)
				if i%64 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	// Appenders held up between taking their time and appending (as a
	// preempted request would be): their lines must still land in a file
	// whose range holds them, stamped no earlier than lines already filed.
	for g := range 2 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				r := rec(i)
				time.Sleep(15 * time.Millisecond)
				if err := l.Append(r, uint64(4+g)); err != nil {
					t.Error(err)
					return
				}
				taken.Add(1)
			}
		})
	}
	wg.Wait()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, per := countLines(t, dir) // checks each line against its file's range
	if int64(got) != taken.Load() {
		t.Fatalf("%d lines in %d files for %d records", got, len(per), taken.Load())
	}
	if len(per) < 3 || sink.Rotations() < 3 {
		t.Fatalf("expected >= 3 files from 1s rotation over 3.5s, got %d (%v)", len(per), per)
	}
	for name := range per {
		if !closedName.MatchString(name) {
			t.Errorf("unexpected file %q", name)
		}
	}
	t.Logf("%d records in %d files", got, len(per))
}

func TestBoundaryAlignment(t *testing.T) {
	s := &FileSink{opt: FileOptions{RotateEvery: 5 * time.Minute}}
	at := time.Date(2026, 11, 22, 10, 7, 31, 0, time.UTC)
	if got := s.boundaryAfter(at); !got.Equal(time.Date(2026, 11, 22, 10, 10, 0, 0, time.UTC)) {
		t.Fatalf("next boundary after %v = %v", at, got)
	}
}

func TestSizeRotationGzipHookAndRetention(t *testing.T) {
	dir := t.TempDir()
	hookOut := filepath.Join(t.TempDir(), "hook.txt")
	hook := filepath.Join(t.TempDir(), "hook.sh")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho \"$1\" >> "+hookOut+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sink := openSink(t, FileOptions{Dir: dir, MaxSize: 8 << 10, Gzip: true, OnClose: []string{hook}, KeepFiles: 3})
	l := New(sink, Options{Logger: quiet, FlushInterval: 5 * time.Millisecond, BufferBytes: 4 << 10, Shards: 1})
	for i := range 400 {
		if err := l.Append(rec(i), 0); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if !strings.HasSuffix(e.Name(), ".log.gz") || !closedName.MatchString(e.Name()) {
			t.Errorf("unexpected file %q (all should be final and gzipped)", e.Name())
		}
	}
	if len(names) != 3 {
		t.Fatalf("KeepFiles 3 left %v", names)
	}
	hooked, err := os.ReadFile(hookOut)
	if err != nil {
		t.Fatal(err)
	}
	calls := strings.Split(strings.TrimSpace(string(hooked)), "\n")
	if int(sink.Rotations())+1 != len(calls) || !strings.HasSuffix(calls[0], ".log.gz") {
		t.Fatalf("hook ran %d times for %d closed files: %v", len(calls), sink.Rotations()+1, calls[:1])
	}
	if sink.HookFailures() != 0 {
		t.Fatal("hook failures counted")
	}
}

// Two files of one time range: while the first is compressed, the
// second must not be given its name, however the closer's steps (the
// staging name, then the .gz beside it, then the .gz alone) fall between
// finalName's looks. Every order of the steps and the looks is tried.
func TestFinalNameSeesAFileBeingCompressed(t *testing.T) {
	s := openSink(t, FileOptions{Dir: t.TempDir(), Gzip: true})
	start := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	end := start.Add(time.Second)
	first := filepath.Join(s.opt.Dir, fmt.Sprintf("%s.%s-%s%s", s.prefix,
		start.Format(timeLayout), end.Format(timeLayout), s.ext))
	steps := [][]string{ // the first file's names after each of the closer's steps
		{"." + filepath.Base(first)},
		{"." + filepath.Base(first), "." + filepath.Base(first) + ".gz.tmp"},
		{"." + filepath.Base(first), filepath.Base(first) + ".gz"},
		{filepath.Base(first) + ".gz"},
	}
	// Each schedule is the step the closer has reached at each of the
	// looks at the first name (three looks, the steps never going back).
	var schedules [][]int
	for a := range steps {
		for b := a; b < len(steps); b++ {
			for c := b; c < len(steps); c++ {
				schedules = append(schedules, []int{a, b, c})
			}
		}
	}
	for _, sched := range schedules {
		looks := 0
		s.exists = func(p string) bool {
			if !strings.Contains(filepath.Base(p), filepath.Base(first)) {
				return false // a name with a counter is free
			}
			if looks >= len(sched) {
				t.Fatalf("schedule %v: more than %d looks at one name", sched, len(sched))
			}
			step := sched[looks]
			looks++
			return slices.Contains(steps[step], filepath.Base(p))
		}
		if got := s.finalName(start, end); got == first {
			t.Errorf("schedule %v: the second file is named %s, over the first", sched, filepath.Base(got))
		}
	}
}

// A file left by a crashed run is closed out before the new active file
// opens, named by its earliest and latest lines (a batch's lines are not in
// time order), so the range holds them all.
func TestLeftoverActiveFileIsClosedOut(t *testing.T) {
	dir := t.TempDir()
	line := func(at string) string {
		return "time:" + at + "\thost:-\tvhost:-\tmethod:GET\turi:/\tendpoint:x\tid:1\tcallback:-\tstatus:200\tsize:1\treqtime_microsec:1\tua:-\treferer:-\treqid:-\n"
	}
	lines := line("2026-11-21T23:59:58.500001Z") + line("2026-11-21T23:59:57.900000Z") + line("2026-11-22T00:00:01.000000Z") +
		line("2026-11-21T23:59:59.999999Z") + "time:2026-11-22T00:00:0" // cut short by the crash
	if err := os.WriteFile(filepath.Join(dir, "access.log"), []byte(lines), 0o640); err != nil {
		t.Fatal(err)
	}
	s := openSink(t, FileOptions{Dir: dir})
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "access.20261121T235957Z-20261122T000002Z.log" {
		t.Fatalf("files %v", entries)
	}
}

// A reopen that does not move the file (a SIGHUP for a configuration
// reload) keeps the file's range; one after the file was moved starts a new
// range.
func TestReopenKeepsRangeUnlessMoved(t *testing.T) {
	dir := t.TempDir()
	opened := time.Now()
	l := New(openSink(t, FileOptions{Dir: dir}), Options{Logger: quiet, FlushInterval: 10 * time.Millisecond})
	appendMany(t, l, 1, 5)
	// Into another second, so a restarted range would show in the name.
	for time.Now().Truncate(time.Second).Equal(opened.Truncate(time.Second)) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := l.Reopen(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendMany(t, l, 1, 5)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, per := countLines(t, dir)
	if n != 10 || len(per) != 1 {
		t.Fatalf("%d lines in %v", n, per)
	}
	for name := range per {
		from, _, _ := fileRange(name)
		if from.After(opened) {
			t.Fatalf("%s: the range restarted at the reopen (opened at %s)", name, opened.UTC().Format(timeLayout))
		}
	}

	// Moved away, then reopened: the new file starts its own range.
	dir = t.TempDir()
	l = New(openSink(t, FileOptions{Dir: dir}), Options{Logger: quiet, FlushInterval: 10 * time.Millisecond})
	appendMany(t, l, 1, 5)
	if err := l.Reopen(context.Background()); err != nil { // flushes the five lines
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "access.log"), filepath.Join(t.TempDir(), "moved.log")); err != nil {
		t.Fatal(err)
	}
	for time.Now().Truncate(time.Second).Equal(opened.Truncate(time.Second)) {
		time.Sleep(50 * time.Millisecond)
	}
	moved := time.Now()
	if err := l.Reopen(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendMany(t, l, 1, 5)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, per = countLines(t, dir)
	for name := range per {
		if from, _, _ := fileRange(name); from.Before(moved.Truncate(time.Second)) {
			t.Fatalf("%s: the file made after the move kept the old range", name)
		}
	}
}

// The disk refuses writes (the active file becomes /dev/full: every write
// fails with ENOSPC); requests keep being served from memory, the failure is
// reported, and once the disk is back every record is in the log.
func TestDiskFullThenRecovery(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system: cannot make a real write fail")
	}
	dir := t.TempDir()
	l := New(openSink(t, FileOptions{Dir: dir}), Options{Logger: quiet, FlushInterval: 10 * time.Millisecond,
		RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	appendMany(t, l, 2, 50)
	time.Sleep(100 * time.Millisecond)
	active := filepath.Join(dir, "access.log")
	if err := os.Rename(active, filepath.Join(dir, "before.log")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/full", active); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(context.Background()); err != nil {
		t.Fatal(err)
	}
	taken := 100 + appendMany(t, l, 2, 100)
	waitHealth(t, l, false)
	taken += appendMany(t, l, 2, 25) // still accepted while failing
	if err := os.Remove(active); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, l, true)
	closeAndCount(t, l, dir, taken)
}

func TestHookFailureCounted(t *testing.T) {
	if _, err := exec.LookPath("false"); err != nil {
		t.Skip("no false(1) on this system")
	}
	dir := t.TempDir()
	s := openSink(t, FileOptions{Dir: dir, OnClose: []string{"false"}})
	if err := s.Write([]byte("time:x\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.HookFailures() != 1 {
		t.Fatalf("hook failures = %d", s.HookFailures())
	}
}

// The log directory and file become read-only: reopening for write fails, so
// every write fails; once access is back, everything is written. Root is
// not stopped by permissions, so this runs as an ordinary user only;
// TestDiskFullThenRecovery drives the same path with ENOSPC for root.
func TestReadOnlyDirThenRecovery(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root, whom file permissions do not stop; TestDiskFullThenRecovery covers this path with a real ENOSPC")
	}
	dir := t.TempDir()
	l := New(openSink(t, FileOptions{Dir: dir}), Options{Logger: quiet, FlushInterval: 10 * time.Millisecond,
		RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	taken := appendMany(t, l, 2, 50)
	time.Sleep(100 * time.Millisecond)
	active := filepath.Join(dir, "access.log")
	if err := os.Chmod(active, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if err := l.Reopen(context.Background()); err == nil {
		t.Fatal("reopening a read-only file for write succeeded")
	}
	taken += appendMany(t, l, 2, 100)
	waitHealth(t, l, false)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(active, 0o644); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, l, true)
	closeAndCount(t, l, dir, taken)
}
