//go:build linux

package accesslog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func openMapped(t *testing.T, fo FileOptions, opt Options) (*Logger, *FileSink) {
	t.Helper()
	if fo.Dir == "" {
		fo.Dir = t.TempDir()
	}
	fo.Logger, opt.Logger = quiet, quiet
	l, fs, err := OpenMapped(fo, opt)
	if err != nil {
		t.Fatal(err)
	}
	return l, fs
}

// The mapped writer under load with a rotation every second and appenders
// held up across boundaries: every record in exactly one file, each line in
// its file's range, no torn line, no zero byte.
func TestMappedRotationUnderLoad(t *testing.T) {
	dir := t.TempDir()
	l, fs := openMapped(t, FileOptions{Dir: dir, RotateEvery: time.Second}, Options{})
	var taken atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(3500 * time.Millisecond)
	for g := range 6 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				r := rec(i)
				if g >= 4 {
					time.Sleep(15 * time.Millisecond) // held between its time and its append
				}
				if err := l.Append(r, uint64(g)); err != nil {
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
	wg.Wait()
	if got := l.Stats().Appended; got != uint64(taken.Load()) {
		t.Fatalf("Stats().Appended = %d, want %d", got, taken.Load())
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, per := countLines(t, dir)
	if int64(got) != taken.Load() {
		t.Fatalf("%d lines in %d files for %d records: %v", got, len(per), taken.Load(), per)
	}
	if len(per) < 3 || fs.Rotations() < 3 {
		t.Fatalf("want >= 3 files from 1s rotation over 3.5s, got %v", per)
	}
	for name := range per {
		if !closedName.MatchString(name) {
			t.Errorf("unexpected file %q", name)
		}
	}
	t.Logf("%d records in %d files", got, len(per))
}

// Size rotation: no closed file over max_size, nothing lost.
func TestMappedSizeRotation(t *testing.T) {
	dir := t.TempDir()
	l, _ := openMapped(t, FileOptions{Dir: dir, MaxSize: 64 << 10}, Options{})
	taken := appendMany(t, l, 4, 2000)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, per := countLines(t, dir)
	if int64(got) != taken || len(per) < 5 {
		t.Fatalf("%d lines in %v for %d records", got, per, taken)
	}
	for name := range per {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() > 64<<10 {
			t.Errorf("%s: %v bytes (max 64 KiB)", name, st.Size())
		}
	}
}

// A reopen that finds the file where it was keeps it; after the file was
// moved away, records go to a new file under the active name.
func TestMappedReopen(t *testing.T) {
	dir, away := t.TempDir(), t.TempDir()
	l, _ := openMapped(t, FileOptions{Dir: dir}, Options{})
	appendMany(t, l, 1, 10)
	if err := l.Reopen(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendMany(t, l, 1, 10)
	if err := os.Rename(filepath.Join(dir, "access.log"), filepath.Join(away, "moved.log")); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendMany(t, l, 1, 5)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if moved, _ := countLines(t, away); moved != 20 {
		t.Fatalf("%d lines in the moved file, want 20", moved)
	}
	if n, per := countLines(t, dir); n != 5 || len(per) != 1 {
		t.Fatalf("%d lines in %v after the move, want 5 in one file", n, per)
	}
}

// With Sync, appends are group-committed and all land.
func TestMappedSync(t *testing.T) {
	dir := t.TempDir()
	l, _ := openMapped(t, FileOptions{Dir: dir}, Options{Sync: true})
	taken := appendMany(t, l, 8, 50)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := countLines(t, dir); int64(n) != taken {
		t.Fatalf("%d lines for %d records", n, taken)
	}
}

// What a process killed mid-copy leaves (zeros of reserved space, a record
// cut short, the tail of one whose start is missing, an unpromoted segment)
// is cleaned and closed out in order at the next start: whole records only.
func TestMappedLeftoversCleaned(t *testing.T) {
	dir := t.TempDir()
	line := func(at, id string) string {
		return "time:" + at + "\thost:-\tvhost:-\tmethod:GET\turi:/\tendpoint:x\tid:" + id + "\tcallback:-\tstatus:200\tsize:1\treqtime_microsec:1\tua:-\treferer:-\treqid:-\n"
	}
	a, b, c := line("2026-11-21T23:59:58.500001Z", "1"), line("2026-11-21T23:59:58.600000Z", "2"), line("2026-11-21T23:59:59.000000Z", "3")
	zeros := string(make([]byte, 300))
	active := a + b[:40] + zeros + c[len(c)-30:] + zeros + c + zeros + zeros
	if err := os.WriteFile(filepath.Join(dir, "access.log"), []byte(active), 0o640); err != nil {
		t.Fatal(err)
	}
	seg := line("2026-11-22T00:00:01.000000Z", "4") + line("2026-11-22T00:00:01.100000Z", "5")[:50]
	if err := os.WriteFile(filepath.Join(dir, ".seg-access.log.7"), []byte(seg+zeros), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".seg-access.log.9"), []byte(zeros), 0o640); err != nil {
		t.Fatal(err)
	}
	l, _ := openMapped(t, FileOptions{Dir: dir}, Options{})
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, per := countLines(t, dir)
	if n != 3 || len(per) != 2 {
		t.Fatalf("%d lines in %v, want ids 1, 3 and 4 in two files", n, per)
	}
	all := ""
	for name := range per {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		all += string(b)
	}
	for _, want := range []string{"\tid:1\t", "\tid:3\t", "\tid:4\t"} {
		if strings.Count(all, want) != 1 {
			t.Errorf("%s: %d times", want, strings.Count(all, want))
		}
	}
}

// Closed mapped files go through the same gzip, on_close hook and
// retention as any closed file.
func TestMappedGzipHookAndRetention(t *testing.T) {
	dir := t.TempDir()
	hookOut := filepath.Join(t.TempDir(), "hook.txt")
	hook := filepath.Join(t.TempDir(), "hook.sh")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho \"$1\" >> "+hookOut+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, fs := openMapped(t, FileOptions{Dir: dir, MaxSize: 16 << 10, Gzip: true, OnClose: []string{hook}, KeepFiles: 3}, Options{})
	appendMany(t, l, 2, 300)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Fatalf("keep_files 3 left %d files", len(entries))
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log.gz") || !closedName.MatchString(e.Name()) {
			t.Errorf("unexpected file %q", e.Name())
		}
	}
	countLines(t, dir) // whole lines, in range
	hooked, err := os.ReadFile(hookOut)
	if err != nil {
		t.Fatal(err)
	}
	if calls := strings.Count(string(hooked), "\n"); uint64(calls) != fs.Rotations() || calls < 4 {
		t.Fatalf("hook ran %d times for %d closed files", calls, fs.Rotations())
	}
}

// The space a growth allocates is four intervals of the last one's
// records, in whole MiB, from mappedChunk to maxAhead, and falls by a
// quarter an interval at most.
func TestNextAhead(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct{ prev, written, want int64 }{
		{mappedChunk, 0, mappedChunk},
		{mappedChunk, -5, mappedChunk}, // a new segment's first interval is not measured, but never less
		{mappedChunk, mib, mappedChunk},
		{mappedChunk, 2 * mib, mappedChunk},
		{mappedChunk, 2*mib + 1, 9 * mib},
		{mappedChunk, 5*mib + mib/2, 22 * mib},
		{64 * mib, 0, 48 * mib},
		{10 * mib, 0, mappedChunk},
		{48 * mib, 12 * mib, 48 * mib},
		{48 * mib, 12*mib + 1, 49 * mib},
		{48 * mib, 20 * mib, maxAhead},
		{maxAhead, 1 << 30, maxAhead},
	} {
		if got := nextAhead(c.prev, c.written); got != c.want {
			t.Errorf("nextAhead(%d, %d) = %d, want %d", c.prev, c.written, got, c.want)
		}
	}
}

// Records that outrun the background growth: the requests that find no
// space grow the file themselves and count as waits, and nothing is lost;
// the next interval then allocates ahead for the rate it saw.
func TestMappedGrowsAheadWithTheRate(t *testing.T) {
	dir := t.TempDir()
	l, _ := openMapped(t, FileOptions{Dir: dir}, Options{FlushInterval: time.Hour}) // no interval of its own
	m := l.direct
	var mark rateMark
	if !m.tick(&mark) {
		t.Fatal("tick: closed")
	}
	seg := m.cur.Load()
	long := []byte(strings.Repeat("a", 2000))
	var taken atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2500 {
				r := rec(i)
				r.Path = long
				if err := l.Append(r, uint64(g)); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				taken.Add(1)
			}
		})
	}
	wg.Wait()
	written := seg.used.Load() - mark.used
	if written <= mappedChunk {
		t.Fatalf("%d bytes written: not past the first chunk", written)
	}
	if st := l.Stats(); st.Waits == 0 {
		t.Errorf("%d bytes past the %d allocated ahead with no interval, and Stats().Waits = 0", written, mappedChunk)
	}
	alloc, used := seg.alloc.Load(), seg.used.Load()
	if !m.tick(&mark) {
		t.Fatal("tick: closed")
	}
	want := nextAhead(mappedChunk, written)
	if got := m.ahead.Load(); got != want || want <= mappedChunk {
		t.Fatalf("after %d bytes in an interval, ahead = %d, want %d", written, got, want)
	}
	if alloc-used >= want/2 {
		t.Fatalf("%d bytes were left of the requests' own growths, over half of %d", alloc-used, want)
	}
	if got := seg.alloc.Load(); got != alloc+want {
		t.Errorf("%d bytes were left: allocated %d, want %d more", alloc-used, got-alloc, want)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, per := countLines(t, dir); int64(got) != taken.Load() {
		t.Fatalf("%d lines in %v for %d records", got, per, taken.Load())
	}
}

// A new segment's first chunk is the records' as soon as it is made, and
// its pages are faulted in behind, off the path of the requests that open
// or rotate the log: before any record is written, every page of it is
// soon in memory (mincore).
func TestMappedFaultsANewSegmentInBehind(t *testing.T) {
	l, _ := openMapped(t, FileOptions{}, Options{FlushInterval: time.Hour}) // no interval of its own
	seg := l.direct.cur.Load()
	if got := seg.alloc.Load(); got != mappedChunk {
		t.Fatalf("a new segment has %d bytes allocated, want %d", got, mappedChunk)
	}
	if missing := waitInMemory(t, seg, 0, mappedChunk, 30*time.Second); missing > 0 {
		t.Fatalf("%d of the first chunk's %d pages are still not in memory", missing, mappedChunk/pageSize)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitInMemory waits up to wait for every page of seg's [from, to) to be
// in memory (mincore), and returns how many are not.
func waitInMemory(t *testing.T, seg *segment, from, to int64, wait time.Duration) int {
	t.Helper()
	vec := make([]byte, (to-from)/int64(pageSize))
	for deadline := time.Now().Add(wait); ; {
		seg.memMu.Lock()
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(seg.mem[from:to]))), uintptr(to-from),
			uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
		seg.memMu.Unlock()
		if errno != 0 {
			t.Fatalf("mincore: %v", errno)
		}
		missing := 0
		for _, v := range vec {
			missing += int(v&1 ^ 1)
		}
		if missing == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The lines reserved before the last interval are handed to the disk as
// they go: after two intervals their pages are written (the kernel's own
// page counts, cachestat), while the space allocated ahead, faulted in and
// dirty but not yet written to, is left alone. Without writeOut the kernel
// writes neither before its 30 s expiry, and then both at once.
//
// The kernel also writes dirty pages of its own accord when the machine
// holds many (vm.dirty_background_ratio): the space ahead is then written
// with the lines and a try tells nothing, so it is made again, three times
// at most. Without writeOut every try waits for the kernel's expiry.
func TestMappedWritesOutAsItGoes(t *testing.T) {
	var fsst unix.Statfs_t
	if err := unix.Statfs(t.TempDir(), &fsst); err != nil {
		t.Fatal(err)
	}
	if fsst.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs, whose pages are never written to a disk")
	}
	for try := 1; !writesOutAlone(t, t.TempDir()); try++ {
		if try == 3 {
			t.Fatal("in three tries the space ahead was written with the lines: the kernel's own write of the whole file, not writeOut's")
		}
		t.Log("the space ahead was written with the lines; trying again")
	}
}

// writesOutAlone is a try of TestMappedWritesOutAsItGoes in dir: it fails
// t on what the writer does wrong, and reports whether the space ahead
// stayed dirty while the lines written out reached the disk.
func writesOutAlone(t *testing.T, dir string) bool {
	t.Helper()
	l, _ := openMapped(t, FileOptions{Dir: dir}, Options{FlushInterval: time.Hour}) // no interval of its own
	m := l.direct
	seg := m.cur.Load()
	stat := func(off, n int64) unix.Cachestat_t {
		t.Helper()
		var st unix.Cachestat_t
		err := unix.Cachestat(uint(seg.f.Fd()), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &st, 0)
		if errors.Is(err, unix.ENOSYS) {
			t.Skip("this kernel has no cachestat (Linux 6.5+) to count a file's dirty pages")
		}
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	long := []byte(strings.Repeat("a", 2000))
	appendSome := func(n int) {
		for i := range n {
			r := rec(i)
			r.Path = long
			if err := l.Append(r, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendSome(1000)
	var out outMark
	m.writeOut(&out)
	if out.done != 0 {
		t.Fatalf("the first interval wrote out %d bytes of lines reserved in it", out.done)
	}
	appendSome(10) // reserved in the second interval: not written out at its end
	first := out.ready
	m.writeOut(&out)
	want := first &^ int64(pageSize-1)
	if out.done != want {
		t.Fatalf("wrote out %d bytes, want the %d of whole pages reserved before the last interval", out.done, want)
	}
	// Unmapped before it is written, in one go, not write-protected page
	// by page by the kernel's write.
	if rss := mappingRss(t, seg.mem); rss > seg.alloc.Load()-want {
		t.Errorf("%d bytes of the file mapped after %d were written out, of %d allocated", rss, want, seg.alloc.Load())
	}
	ahead := (seg.used.Load() + int64(pageSize)) &^ int64(pageSize-1)
	if alloc := seg.alloc.Load(); alloc-ahead < 1<<20 {
		t.Fatalf("only %d bytes allocated ahead of the lines", alloc-ahead)
	}
	// The space ahead is faulted in for writing behind the lines (prefault):
	// wait for it, or a busy machine's late goroutine reads as the kernel's
	// write of the whole file.
	if missing := waitInMemory(t, seg, ahead, seg.alloc.Load(), time.Minute); missing > 0 {
		t.Fatalf("%d pages of the space ahead are still not faulted in", missing)
	}
	alone := stat(ahead, seg.alloc.Load()-ahead).Dirty != 0 // faulted in for writing
	deadline := time.Now().Add(time.Minute)
	for {
		st := stat(0, want)
		if st.Dirty == 0 && st.Writeback == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lines written out are still not on disk: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	alone = alone && stat(ahead, seg.alloc.Load()-ahead).Dirty != 0
	// A copy held up past the interval (a request descheduled between
	// its reservation and its copy) into a page written out and unmapped
	// maps it again and reaches the file.
	late := bytes.Index(seg.mem[:want], long)
	if late < 0 {
		t.Fatal("no line in the pages written out")
	}
	copy(seg.mem[late:], strings.Repeat("b", len(long)))
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, per := countLines(t, dir); got != 1010 {
		t.Fatalf("%d lines in %v for 1010 records", got, per)
	}
	var found bool
	for _, fl := range readLog(t, dir) {
		found = found || bytes.Contains(fl.line, []byte(strings.Repeat("b", len(long))))
	}
	if !found {
		t.Error("a copy into a page written out and unmapped did not reach the file")
	}
	return alone
}

// With durability sync every request's fdatasync writes its lines:
// writeOut has nothing to do.
func TestMappedSyncWritesNothingOut(t *testing.T) {
	l, _ := openMapped(t, FileOptions{}, Options{Sync: true, FlushInterval: time.Hour})
	for i := range 100 {
		if err := l.Append(rec(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	var out outMark
	l.direct.writeOut(&out)
	l.direct.writeOut(&out)
	if out.done != 0 || out.seg != nil {
		t.Errorf("wrote out %d bytes with durability sync", out.done)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// mappingRss is how much of mem, a mapping of this process, is in its page
// tables (/proc/self/smaps).
func mappingRss(t *testing.T, mem []byte) int64 {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps to tell which pages are mapped: ", err)
	}
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	in := false
	for line := range strings.Lines(string(smaps)) {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = strings.HasPrefix(line, start)
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			var kb int64
			if _, err := fmt.Sscanf(line, "Rss: %d kB", &kb); err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", start)
	return 0
}
