package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tsubame/internal/store/redis/redistest"
)

// Restarts under keep-alive load from clients that never retry: each
// connection sends its next request as soon as it has read an answer, as wrk
// and ad SDKs do, and any connect, read or write error is an error (Go's
// http.Transport would hide one by resending). Five handovers, at 100 and
// at 1,000 connections, on the embedded store and on Redis: no error, no
// answer but a 200, and every answer in the access log once.
func TestHandoverWithoutClientError(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary; skipped in -short mode")
	}
	for _, store := range []string{"embedded", "redis"} {
		for _, conns := range []int{100, 1000} {
			t.Run(fmt.Sprintf("%s/c%d", store, conns), func(t *testing.T) {
				var env []string
				if store == "redis" {
					redistest.Require(t)
					env = []string{"TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS=" + redistest.Start(t).Addr}
				}
				handovers(t, conns, 5, env...)
			})
		}
	}
}

func handovers(t *testing.T, conns, n int, env ...string) {
	p := startBinary(t, env...)
	pidFile := filepath.Join(p.dataDir, PIDFile)
	pid := waitPID(t, pidFile)
	var pids []int
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	path := "/api/sample4.js?id=7&callback=Example.process"
	addr := strings.TrimPrefix(p.base, "http://")
	// One client sits idle on its connection through every handover and
	// then sends a request: it is answered, with nothing unasked before.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idleR := bufio.NewReader(idle)
	idleGet := func() {
		t.Helper()
		_ = idle.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(idle, "GET "+path+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
			t.Fatalf("idle client: %v", err)
		}
		resp, err := http.ReadResponse(idleR, nil)
		if err != nil {
			t.Fatalf("idle client: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "Example.process(") {
			t.Fatalf("idle client: %s %q", resp.Status, body)
		}
	}
	idleGet()
	run := rawLoad(addr, path, conns)
	cli := append([]string{"TSUBAME_DATA_DIR=" + p.dataDir}, env...)
	for i := range n {
		run.waitServed(t, 200*(i+1)) // each process serves some load
		if code, _, stderr := runCmd(t, cli, "", "restart", "-timeout", "60s"); code != 0 {
			run.stop()
			t.Fatalf("restart %d: %d %s\n%s", i+1, code, stderr, p.logs)
		}
		next, err := readPID(pidFile)
		if err != nil || next == pid {
			run.stop()
			t.Fatalf("restart %d: pid %d (%v) after %d", i+1, next, err, pid)
		}
		pid = next
		pids = append(pids, pid)
	}
	run.waitServed(t, int(run.ok.Load())+200)
	run.stop()
	idleGet()
	run.ok.Add(2) // the idle client's two answers, for the log count
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil { // returns once every process has closed its stderr
		t.Fatalf("first process: %v\n%s", err, p.logs)
	}
	t.Logf("%d answers over %d handovers at c=%d: %d connect, %d write, %d read errors, %d not 200; %d connections closed by the server; longest answer %v",
		run.ok.Load(), n, conns, run.connectErrs.Load(), run.writeErrs.Load(), run.readErrs.Load(), run.bad.Load(), run.reconnects.Load(),
		time.Duration(run.slowest.Load()))
	if run.connectErrs.Load()+run.writeErrs.Load()+run.readErrs.Load()+run.bad.Load() != 0 {
		t.Fatalf("client errors across the handovers (first: %v)\n%s", run.firstErr(), p.logs)
	}
	if got := strings.Count(p.logs.String(), "took over from the previous process"); got != n {
		t.Fatalf("%d takeovers logged, want %d\n%s", got, n, p.logs)
	}
	lines, files := countFileLines(t, p.logDir)
	if int64(lines) != run.ok.Load() {
		t.Fatalf("%d access-log lines in %d files for %d answers", lines, files, run.ok.Load())
	}
}

// rawRun is a keep-alive load on raw sockets that never retries.
type rawRun struct {
	ok, bad                          atomic.Int64
	connectErrs, writeErrs, readErrs atomic.Int64
	reconnects                       atomic.Int64 // answers with Connection: close
	slowest                          atomic.Int64 // nanoseconds
	done                             chan struct{}
	wg                               sync.WaitGroup
	errMu                            sync.Mutex
	err                              error
}

func rawLoad(addr, path string, conns int) *rawRun {
	r := &rawRun{done: make(chan struct{})}
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
	for range conns {
		r.wg.Go(func() { r.client(addr, req) })
	}
	return r
}

func (r *rawRun) fail(n *atomic.Int64, err error) {
	n.Add(1)
	r.errMu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.errMu.Unlock()
}

func (r *rawRun) firstErr() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

func (r *rawRun) stopped() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// client runs one connection after another until stopped; each stays open
// until the server says Connection: close (or an error).
func (r *rawRun) client(addr string, req []byte) {
	for n := 0; n < 1_000_000 && !r.stopped(); {
		c, err := net.DialTimeout("tcp", addr, time.Minute)
		if err != nil {
			r.fail(&r.connectErrs, err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		br := bufio.NewReader(c)
		for ; n < 1_000_000 && !r.stopped(); n++ {
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			start := time.Now()
			if _, err := c.Write(req); err != nil {
				r.fail(&r.writeErrs, err)
				break
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				r.fail(&r.readErrs, err)
				break
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				r.fail(&r.readErrs, err)
				break
			}
			if d := int64(time.Since(start)); d > r.slowest.Load() {
				r.slowest.Store(d) // racy max, good enough for a report
			}
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "Example.process(") {
				r.fail(&r.bad, fmt.Errorf("%s: %q", resp.Status, body))
			} else {
				r.ok.Add(1)
			}
			if resp.Close {
				r.reconnects.Add(1)
				n++
				break
			}
		}
		c.Close()
	}
}

// waitServed waits until at least n answers were served.
func (r *rawRun) waitServed(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for r.ok.Load() < int64(n) {
		if time.Now().After(deadline) {
			r.stop()
			t.Fatalf("only %d answers of %d within two minutes (errors: %v)", r.ok.Load(), n, r.firstErr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *rawRun) stop() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	r.wg.Wait()
}

// After a restart that failed (the new process refused its configuration),
// SIGTERM stops an idle server within its shutdown timeout: starting the
// successor had put the shared listening socket in blocking mode, and the
// old process's accept then held its listener open until a connection came.
func TestStopAfterFailedRestart(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "tsubame.yaml")
	if err := os.WriteFile(cfgFile, []byte("server:\n  shutdown_timeout: 3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "TSUBAME_CONFIG="+cfgFile)
	pid := waitPID(t, filepath.Join(p.dataDir, PIDFile))
	if err := os.WriteFile(cfgFile, []byte("server:\n  shutdown_timeout: -1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// tsubame restart says so as soon as the old process knows, with the
	// reason (it used to wait out its -timeout).
	code, _, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir}, "", "restart")
	if code != exitFailed || !strings.Contains(stderr, fmt.Sprintf("the new process failed; process %d keeps serving: ", pid)) ||
		!strings.Contains(stderr, "exited before taking over") {
		t.Fatalf("restart: %d %s", code, stderr)
	}
	waitLog(t, p, "restart failed; this process keeps serving")
	if resp, err := http.Get(p.base + "/json"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the failed restart: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Idle now: nothing connects until the process has exited.
	http.DefaultClient.CloseIdleConnections()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.logs)
	}
	if !strings.Contains(p.logs.String(), "stopped") {
		t.Fatalf("no clean stop:\n%s", p.logs)
	}
}

// waitLog waits until the process has logged want.
func waitLog(t *testing.T, p *proc, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(p.logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %q:\n%s", want, p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
