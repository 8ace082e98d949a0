package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if built.Load() {
		if bin, err := buildOnce(); err == nil {
			_ = os.RemoveAll(filepath.Dir(bin))
		}
	}
	os.Exit(code)
}

var built atomic.Bool

// buildOnce builds the binary for this test run, once.
var buildOnce = sync.OnceValues(func() (string, error) {
	built.Store(true)
	dir, err := os.MkdirTemp("", "tsubame-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "tsubame")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

type proc struct {
	cmd     *exec.Cmd
	base    string
	logs    *lockedBuffer
	dataDir string
	logDir  string
	done    chan error
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) Bytes() []byte { return []byte(l.String()) }

// startBinary runs the real server as a user would, on a random loopback
// port, with extra environment, and waits until it answers.
func startBinary(t *testing.T, env ...string) *proc {
	t.Helper()
	return startWrapped(t, nil, env...)
}

// startWrapped is startBinary with the binary run under a wrapper command
// (such as prlimit).
func startWrapped(t *testing.T, wrapper []string, env ...string) *proc {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the real binary; skipped in -short mode")
	}
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{base: "http://127.0.0.1:" + freePort(t), logs: &lockedBuffer{}, dataDir: t.TempDir(), logDir: t.TempDir(), done: make(chan error, 1)}
	args := append(append([]string(nil), wrapper...), bin, "serve", "-demo")
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(os.Environ(), "TSUBAME_LISTEN="+strings.TrimPrefix(p.base, "http://"), "TSUBAME_ADMIN_LISTEN=",
		"TSUBAME_DATA_DIR="+p.dataDir, "TSUBAME_ACCESS_LOG_DIR="+p.logDir)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	deadline := time.Now().Add(30 * time.Second) // generous: a busy machine starts slowly
	for {
		if resp, err := http.Get(p.base + "/json"); err == nil {
			resp.Body.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up:\n%s", p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not exit:\n%s", p.logs)
		return nil
	}
}

// loadRun is a running load: Wait returns once every client has stopped.
type loadRun struct {
	counts map[string]*atomic.Int64
	bad    atomic.Int64 // complete responses that were wrong
	errs   atomic.Int64 // requests that got no response (the client then stops)
	wg     sync.WaitGroup
}

func (l *loadRun) Wait() { l.wg.Wait() }

// load runs clients against each URL until stop is closed, the server goes
// away, or a bound on requests is reached, and counts the complete, correct
// responses per URL.
func load(paths []string, clients int, stop <-chan struct{}) *loadRun {
	run := &loadRun{counts: map[string]*atomic.Int64{}}
	counts := run.counts
	for _, p := range paths {
		counts[p] = new(atomic.Int64)
	}
	for i := range clients {
		path := paths[i%len(paths)]
		run.wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for n := 0; n < 200000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(path)
				if err != nil {
					run.errs.Add(1)
					return // the server is going away
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
				case resp.StatusCode == 200 && strings.HasPrefix(string(body), "Example.process("):
					counts[path].Add(1)
				default:
					run.bad.Add(1)
				}
			}
		})
	}
	return run
}

// closedRange reads the [from, to) range in a closed access-log file's name.
var closedRange = regexp.MustCompile(`^access\.(\d{8}T\d{6}Z)-(\d{8}T\d{6}Z)[.]`)

// countFileLines counts the records in every file of dir (gzipped or not)
// and checks that each line of a closed file lies in the range its name
// gives.
func countFileLines(t *testing.T, dir string) (int, int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines, files := 0, 0
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = f
		if strings.HasSuffix(e.Name(), ".gz") {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatal(err)
			}
		}
		var from, to time.Time
		if m := closedRange.FindStringSubmatch(e.Name()); m != nil {
			from, _ = time.Parse("20060102T150405Z", m[1])
			to, _ = time.Parse("20060102T150405Z", m[2])
		}
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if !strings.HasPrefix(sc.Text(), "time:") || !strings.Contains(sc.Text(), "\tendpoint:sample4\t") {
				t.Fatalf("%s: unexpected line %q", e.Name(), sc.Text())
			}
			if at, err := time.Parse("2006-01-02T15:04:05.000000Z", sc.Text()[5:32]); err != nil {
				t.Fatalf("%s: no time in %q", e.Name(), sc.Text())
			} else if !from.IsZero() && (at.Before(from) || !at.Before(to)) {
				t.Errorf("%s: a line stamped %s lies outside the file's range", e.Name(), sc.Text()[5:32])
			}
			lines++
		}
		f.Close()
		files++
	}
	return lines, files
}

// countStoreLines exports the store's access log with the CLI (the
// batches are compressed by default) and checks that every line is one of
// sample5's, whole.
func countStoreLines(t *testing.T, dataDir string) int {
	t.Helper()
	out := filepath.Join(t.TempDir(), "exported.log")
	code, _, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + dataDir}, "", "log", "export", out)
	if code != 0 {
		t.Fatalf("log export: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "time:") || !strings.Contains(line, "\tendpoint:sample5\t") || !strings.HasSuffix(line, "\n") {
			t.Fatalf("exported line %q", line)
		}
		n++
	}
	if want := fmt.Sprintf("exported %d line(s) to %s", n, out); !strings.Contains(stderr, want) {
		t.Errorf("log export said %q, want %q", stderr, want)
	}
	return n
}

// The benchmark's line-count table, reproduced with equality: requests counted by the client
// against lines in the log, for the file log (sample4, rotated every second)
// and the store log (sample5), with SIGTERM sent while the load runs.
func TestAccessLogLinesEqualResponsesAcrossRotationsAndSIGTERM(t *testing.T) {
	p := startBinary(t, "TSUBAME_ACCESS_LOG_ROTATE_EVERY=1s")
	s4 := p.base + "/api/sample4.js?id=1&callback=Example.process"
	s5 := p.base + "/api/sample5.js?id=2&callback=Example.process"
	stop := make(chan struct{})
	defer close(stop)
	run := load([]string{s4, s5}, 8, stop)
	time.Sleep(3500 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.logs)
	}
	run.Wait()
	lines4, files := countFileLines(t, p.logDir)
	lines5 := countStoreLines(t, p.dataDir)
	req4, req5 := run.counts[s4].Load(), run.counts[s5].Load()
	t.Logf("\n| endpoint | requests (client) | lines in log | files |\n|---|---|---|---|\n| sample4 | %d | %d | %d |\n| sample5 | %d | %d | store |",
		req4, lines4, files, req5, lines5)
	if req4 == 0 || req5 == 0 {
		t.Fatalf("no load got through:\n%s", p.logs)
	}
	if int64(lines4) != req4 || int64(lines5) != req5 {
		t.Fatalf("lines != responses: sample4 %d/%d, sample5 %d/%d", lines4, req4, lines5, req5)
	}
	if files < 3 {
		t.Fatalf("want several rotations in 3.5s with rotate_every 1s, got %d files", files)
	}
}

// The disk is full (the buffered writer's active file is /dev/full, every
// write failing with ENOSPC) and SIGTERM comes while requests wait for
// buffer room: every response a client received is accounted for in the
// fallback file with the status it got — the 200s the log held in memory,
// and the 503s of the requests still waiting when the log closed.
func TestAccessLogFullDiskAccountsForEveryResponse(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system: cannot make a real write fail")
	}
	logDir, fallback := t.TempDir(), t.TempDir()
	if err := os.Symlink("/dev/full", filepath.Join(logDir, "access.log")); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "TSUBAME_ACCESS_LOG_DIR="+logDir, "TSUBAME_ACCESS_LOG_FALLBACK_DIR="+fallback,
		"TSUBAME_ACCESS_LOG_DURABILITY=async",
		"TSUBAME_ACCESS_LOG_BUFFER_BYTES=64KiB", "TSUBAME_ACCESS_LOG_MAX_WAIT=50ms", "TSUBAME_SERVER_SHUTDOWN_TIMEOUT=2s")
	got := holdThenStop(t, p)
	if !strings.Contains(p.logs.String(), "saved to "+fallback) {
		t.Fatalf("want the exit to name the fallback file:\n%s", p.logs)
	}
	records := statusCounts(t, fallback)
	t.Logf("responses by status %v; records in the fallback file %v", got, records)
	for code, n := range got {
		if records[code] != n {
			t.Errorf("status %d: %d responses, %d records", code, n, records[code])
		}
	}
	if n, _ := countFileLines(t, logDir); n != 0 {
		t.Fatalf("%d lines reached the full disk", n)
	}
}

// The same with the mapped writer (durability: process), the disk filling
// up under it (a file size limit: allocating the next chunk fails): the 200s
// are in the closed log file, the 503s of the requests that waited for
// space are in the fallback file, and no line is torn.
func TestAccessLogMappedFullDiskAccountsForEveryResponse(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("no prlimit (util-linux) on PATH: cannot limit the file size")
	}
	fallback := t.TempDir()
	p := startWrapped(t, []string{prlimit, "--fsize=16777216"}, "TSUBAME_ACCESS_LOG_FALLBACK_DIR="+fallback,
		"TSUBAME_SERVER_SHUTDOWN_TIMEOUT=2s")
	got := holdThenStop(t, p)
	inLog, inFallback := statusCounts(t, p.logDir), statusCounts(t, fallback)
	t.Logf("responses by status %v; in the log %v; in the fallback file %v", got, inLog, inFallback)
	if got[200] != inLog[200] || got[503] != inFallback[503] || len(inLog) != 1 || len(inFallback) != 1 {
		t.Fatalf("responses %v, log %v, fallback %v: want the 200s in the log and the 503s in the fallback file", got, inLog, inFallback)
	}
	countFileLines(t, p.logDir) // every line whole and in its file's range
}

// holdThenStop loads sample4 from 8 clients until the full disk holds all
// of them (no answer for a second), then stops the server with SIGTERM and
// returns the responses the clients got, by status. It wants both 200s
// and 503s.
func holdThenStop(t *testing.T, p *proc) map[int]int {
	t.Helper()
	url := p.base + "/api/sample4.js?id=1&callback=Example.process"
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			client := &http.Client{Timeout: time.Minute}
			for range 100000 {
				resp, err := client.Get(url)
				if err != nil {
					return // the server has gone
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				got[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		return got[200] + got[503]
	}
	deadline := time.Now().Add(2 * time.Minute)
	for last, since := -1, time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if n := total(); n != last {
			last, since = n, time.Now()
		} else if n > 0 && time.Since(since) > time.Second && strings.Contains(p.logs.String(), "access log") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests were never held by the full disk:\n%s", p.logs)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = p.wait(t)
	wg.Wait()
	if got[200] == 0 || got[503] == 0 {
		t.Fatalf("want both served and refused responses, got %v\n%s", got, p.logs)
	}
	return got
}

// statusCounts counts the sample4 records in the files of dir by status.
func statusCounts(t *testing.T, dir string) map[int]int {
	t.Helper()
	out := map[int]int{}
	entries, _ := os.ReadDir(dir)
	status := regexp.MustCompile(`\tstatus:(\d+)\t`)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			m := status.FindStringSubmatch(line)
			if m == nil || !strings.Contains(line, "\tendpoint:sample4\t") || !strings.HasSuffix(line, "\n") {
				t.Fatalf("%s: line %q", e.Name(), line)
			}
			code, _ := strconv.Atoi(m[1])
			out[code]++
		}
	}
	return out
}

// A hard kill loses at most the last flush interval: records of responses
// answered more than a flush interval before the kill are on disk.
func TestAccessLogHardKillLosesAtMostOneFlushInterval(t *testing.T) {
	p := startBinary(t)
	s4 := p.base + "/api/sample4.js?id=3&callback=Example.process"
	stop := make(chan struct{})
	run := load([]string{s4}, 4, stop)
	time.Sleep(time.Second)
	close(stop)
	run.Wait()
	time.Sleep(300 * time.Millisecond) // > flush_interval (100ms)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.wait(t)
	lines, _ := countFileLines(t, p.logDir)
	if req := run.counts[s4].Load(); int64(lines) != req || req == 0 {
		t.Fatalf("after kill -9: %d lines for %d responses", lines, req)
	}
}

// tsubame log reopen (SIGHUP) makes the server reopen its file after an
// external rotation.
func TestLogReopenCommand(t *testing.T) {
	p := startBinary(t)
	url := p.base + "/api/sample4.js?id=1&callback=Example.process"
	get := func(n int) {
		for range n {
			resp, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	get(5)
	time.Sleep(300 * time.Millisecond)
	active := filepath.Join(p.logDir, "access.log")
	if err := os.Rename(active, filepath.Join(p.logDir, "moved.log")); err != nil {
		t.Fatal(err)
	}
	env := []string{"TSUBAME_DATA_DIR=" + p.dataDir}
	if code, _, stderr := runCmd(t, env, "", "log", "reopen"); code != 0 {
		t.Fatalf("log reopen: %d %s", code, stderr)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !exists(active) {
		if time.Now().After(deadline) {
			t.Fatalf("active file not recreated:\n%s", p.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	get(3)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatal(err)
	}
	if lines, _ := countFileLines(t, p.logDir); lines != 8 {
		t.Fatalf("%d lines, want 8", lines)
	}
	if _, err := os.Stat(filepath.Join(p.dataDir, PIDFile)); !os.IsNotExist(err) {
		t.Fatalf("pid file left behind: %v", err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
