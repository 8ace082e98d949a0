package accesslog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// faulty wraps a real sink and refuses writes while fail is set, as a full
// or broken disk would; everything else is the real sink's behaviour.
type faulty struct {
	Sink
	fail   atomic.Bool
	delay  atomic.Int64 // nanoseconds per write: a slow disk
	writes atomic.Int64
	syncs  atomic.Int64
}

func (f *faulty) Write(p []byte) error {
	if d := f.delay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if f.fail.Load() {
		return errors.New("no space left on device")
	}
	f.writes.Add(1)
	return f.Sink.Write(p)
}

func (f *faulty) Sync() error {
	f.syncs.Add(1)
	return f.Sink.Sync()
}

func openSink(t *testing.T, opt FileOptions) *FileSink {
	t.Helper()
	if opt.Dir == "" {
		opt.Dir = t.TempDir()
	}
	opt.Logger = quiet
	s, err := OpenFile(opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// countLines counts the records in every file of dir (gzipped or not) and
// checks that each line is whole and, in a closed file, lies in the time
// range the file is named after.
func countLines(t *testing.T, dir string) (int, map[string]int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	total, per := 0, map[string]int{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = f
		if strings.HasSuffix(e.Name(), ".gz") {
			zr, err := gzip.NewReader(f)
			if err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
			r = zr
		}
		from, to, ranged := fileRange(e.Name())
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if !bytes.HasPrefix(sc.Bytes(), []byte("time:")) || !bytes.HasSuffix(sc.Bytes(), []byte("reqid:-")) {
				t.Fatalf("%s: broken line %q", e.Name(), sc.Text())
			}
			if at, ok := lineTime(sc.Bytes()); !ok {
				t.Fatalf("%s: no time in %q", e.Name(), sc.Text())
			} else if ranged && (at.Before(from) || !at.Before(to)) {
				t.Errorf("%s: a line stamped %s lies outside the file's range", e.Name(), at.Format(stampLayout))
			}
			total++
			per[e.Name()]++
		}
		f.Close()
	}
	return total, per
}

var rangeInName = regexp.MustCompile(`^access\.(\d{8}T\d{6}Z)-(\d{8}T\d{6}Z)[.]`)

// fileRange reads the [from, to) range a closed file is named after.
func fileRange(name string) (from, to time.Time, ok bool) {
	m := rangeInName.FindStringSubmatch(name)
	if m == nil {
		return from, to, false
	}
	from, err1 := time.Parse(timeLayout, m[1])
	to, err2 := time.Parse(timeLayout, m[2])
	return from, to, err1 == nil && err2 == nil
}

func rec(i int) *Record {
	return &Record{Time: time.Now(), Method: []byte("GET"), Path: []byte("/api/sample4.js"), Endpoint: "sample4",
		ID: fmt.Appendf(nil, "%d", i), Callback: []byte("cb"), Status: 200, Size: 92}
}

// appendMany appends n records from w goroutines and returns how many were taken.
func appendMany(t *testing.T, l *Logger, w, n int) int64 {
	t.Helper()
	var taken atomic.Int64
	var wg sync.WaitGroup
	for g := range w {
		wg.Go(func() {
			for i := range n {
				if err := l.Append(rec(i), uint64(g)); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				taken.Add(1)
			}
		})
	}
	wg.Wait()
	return taken.Load()
}

func TestEveryRecordWrittenAfterClose(t *testing.T) {
	dir := t.TempDir()
	l := New(openSink(t, FileOptions{Dir: dir}), Options{Logger: quiet, BufferBytes: 64 << 10})
	taken := appendMany(t, l, 8, 5000)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, files := countLines(t, dir)
	if int64(got) != taken {
		t.Fatalf("%d lines for %d records", got, taken)
	}
	if len(files) != 1 {
		t.Fatalf("Close should close out one file, got %v", files)
	}
	st := l.Stats()
	if st.Appended != uint64(taken) || st.Written != uint64(taken) || st.Buffered != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := l.Append(rec(0), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
}

// Records reach the file within the flush interval, without Close: what a
// hard kill can lose is bounded by it.
func TestFlushInterval(t *testing.T) {
	dir := t.TempDir()
	l := New(openSink(t, FileOptions{Dir: dir}), Options{Logger: quiet, FlushInterval: 20 * time.Millisecond})
	defer l.Close(context.Background())
	for i := range 10 {
		if err := l.Append(rec(i), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if n, _ := countLines(t, dir); n == 10 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("records not on disk 2s after append with a 20ms flush interval")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A slow disk makes requests wait for room, counted, and loses nothing.
func TestBackpressureWaitsAndCounts(t *testing.T) {
	dir := t.TempDir()
	sink := &faulty{Sink: openSink(t, FileOptions{Dir: dir})}
	sink.delay.Store(int64(20 * time.Millisecond))
	l := New(sink, Options{Logger: quiet, BufferBytes: 16 << 10, Shards: 4, MaxWait: 50 * time.Millisecond})
	taken := appendMany(t, l, 4, 400)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := countLines(t, dir)
	st := l.Stats()
	if int64(got) != taken || st.Waits == 0 || st.WaitTime == 0 {
		t.Fatalf("%d lines for %d records; stats %+v", got, taken, st)
	}
	t.Logf("waits %d (%v in all), reserve used %d times", st.Waits, st.WaitTime, st.Overflows)
}

// A failing disk is retried, reported, and nothing is lost once it recovers.
func TestWriteErrorsRetriedUntilRecovery(t *testing.T) {
	dir := t.TempDir()
	sink := &faulty{Sink: openSink(t, FileOptions{Dir: dir})}
	l := New(sink, Options{Logger: quiet, FlushInterval: 10 * time.Millisecond, RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	appendMany(t, l, 2, 100)
	sink.fail.Store(true)
	taken := 200 + appendMany(t, l, 2, 100)
	waitHealth(t, l, false)
	if st := l.Stats(); st.WriteErrors == 0 || !st.Failing || !strings.Contains(st.LastError, "no space") {
		t.Fatalf("stats during failure: %+v", st)
	}
	sink.fail.Store(false)
	waitHealth(t, l, true)
	closeAndCount(t, l, dir, taken)
}

// If the disk is still failing at Close's deadline, the records go to the
// fallback directory (created if missing): nothing is silently lost.
func TestCloseDeadlineSavesToFallback(t *testing.T) {
	dir, fallback := t.TempDir(), filepath.Join(t.TempDir(), "fallback")
	sink := &faulty{Sink: openSink(t, FileOptions{Dir: dir})}
	l := New(sink, Options{Logger: quiet, FallbackDir: fallback, RetryMin: 5 * time.Millisecond})
	appendMany(t, l, 1, 50)
	time.Sleep(250 * time.Millisecond) // let a flush write them
	sink.fail.Store(true)
	appendMany(t, l, 3, 50)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := l.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "150 record(s)") {
		t.Fatalf("Close = %v, want a report of 150 unwritten records", err)
	}
	inLog, _ := countLines(t, dir)
	saved, _ := countLines(t, fallback)
	if inLog != 50 || saved != 150 {
		t.Fatalf("%d in the log and %d saved, want 50 and 150", inLog, saved)
	}
}

// A record appended after Close (a request that outlived the shutdown
// deadline) is refused, and Late puts it in the same fallback file as the
// records the failing sink did not take.
func TestLateRecordsJoinTheFallback(t *testing.T) {
	dir, fallback := t.TempDir(), t.TempDir()
	sink := &faulty{Sink: openSink(t, FileOptions{Dir: dir})}
	sink.fail.Store(true)
	l := New(sink, Options{Logger: quiet, FallbackDir: fallback, RetryMin: 5 * time.Millisecond})
	appendMany(t, l, 2, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); err == nil {
		t.Fatal("Close reported nothing though the sink took nothing")
	}
	late := rec(99)
	late.Status = 503
	if err := l.Append(late, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	l.Late(late)
	l.Late(late)
	n, per := countLines(t, fallback)
	if n != 22 || len(per) != 1 {
		t.Fatalf("%d records in %v, want 22 in one fallback file", n, per)
	}
	for name := range per {
		b, _ := os.ReadFile(filepath.Join(fallback, name))
		if got := strings.Count(string(b), "\tstatus:503\t"); got != 2 {
			t.Fatalf("%d late 503s in the fallback file", got)
		}
	}
}

// With Sync and a sink still failing at Close's deadline, a waiting Append
// returns once its record is in the fallback file: the response it stands
// for is accounted for and may be served.
func TestSyncAppendAccountedInFallback(t *testing.T) {
	fallback := t.TempDir()
	sink := &faulty{Sink: openSink(t, FileOptions{Dir: t.TempDir()})}
	sink.fail.Store(true)
	l := New(sink, Options{Logger: quiet, Sync: true, FallbackDir: fallback, RetryMin: 5 * time.Millisecond})
	errs := make(chan error, 4)
	for g := range 4 {
		go func() { errs <- l.Append(rec(g), uint64(g)) }()
	}
	waitFor(t, func() bool { return l.Stats().Appended == 4 && sink.fail.Load() && l.Stats().WriteErrors > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = l.Close(ctx)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("a synchronous Append whose record went to the fallback file: %v", err)
		}
	}
	if n, _ := countLines(t, fallback); n != 4 {
		t.Fatalf("%d records in the fallback file, want 4", n)
	}
}

// With Sync, a record is on disk (written and fsynced) when Append returns.
func TestSyncDurability(t *testing.T) {
	dir := t.TempDir()
	sink := &faulty{Sink: openSink(t, FileOptions{Dir: dir})}
	l := New(sink, Options{Logger: quiet, Sync: true, FlushInterval: time.Hour})
	defer l.Close(context.Background())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if err := l.Append(rec(i), uint64(g)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if n, _ := countLines(t, dir); n != 200 {
		t.Fatalf("%d lines on disk after 200 synchronous appends returned", n)
	}
	if s := sink.syncs.Load(); s == 0 || s > 200 {
		t.Fatalf("%d fsyncs for 200 records", s)
	}
	t.Logf("200 synchronous records in %d group commits", sink.syncs.Load())
}

func TestReopenAfterExternalRotation(t *testing.T) {
	dir := t.TempDir()
	l := New(openSink(t, FileOptions{Dir: dir}), Options{Logger: quiet})
	appendMany(t, l, 1, 10)
	time.Sleep(250 * time.Millisecond)
	// logrotate: move the file, then tell the server.
	if err := os.Rename(filepath.Join(dir, "access.log"), filepath.Join(dir, "rotated.1")); err != nil {
		t.Fatal(err)
	}
	appendMany(t, l, 1, 5) // still go to the moved file until Reopen
	if err := l.Reopen(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendMany(t, l, 1, 7)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	total, per := countLines(t, dir)
	if total != 22 || per["rotated.1"] != 15 {
		t.Fatalf("lines per file %v", per)
	}
}

// waitHealth waits until l reports healthy, or failing.
func waitHealth(t *testing.T, l *Logger, healthy bool) {
	t.Helper()
	waitFor(t, func() bool { return (l.Healthy() == nil) == healthy })
}

// waitFor polls cond, failing the test after a generous deadline.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closeAndCount closes l and checks that dir holds exactly taken records.
func closeAndCount(t *testing.T, l *Logger, dir string, taken int64) {
	t.Helper()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := countLines(t, dir); int64(got) != taken {
		t.Fatalf("%d lines for %d records", got, taken)
	}
}
