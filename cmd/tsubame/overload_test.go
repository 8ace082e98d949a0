package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func raiseFileLimit(t *testing.T, want uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur < want {
		rl.Cur = min(want, rl.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < want {
			t.Fatalf("cannot raise the open-file limit to %d (hard limit %d): %v", want, rl.Max, err)
		}
	}
}

// peakRSS reads a process's high-water resident set, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// 3000 connections (Zotonic's wrk -c 3000) on sample4 at once: every request
// answered 200, every one in the access log, and the server's memory stays
// under a stated bound.
func TestThreeThousandConnections(t *testing.T) {
	const conns, perConn = 3000, 5
	const memBound = 256 << 20
	raiseFileLimit(t, 3*conns+1000)
	p := startBinary(t)
	addr := strings.TrimPrefix(p.base, "http://")
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range conns {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				bad.Add(perConn)
				t.Errorf("dial %d: %v", i, err)
				return
			}
			defer c.Close()
			<-start
			r := bufio.NewReader(c)
			for range perConn {
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				if _, err := io.WriteString(c, "GET /api/sample4.js?id=9&callback=Example.process HTTP/1.1\r\nHost: t\r\n\r\n"); err != nil {
					bad.Add(1)
					return
				}
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					bad.Add(1)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && strings.HasPrefix(string(b), "Example.process(") {
					ok.Add(1)
				} else {
					bad.Add(1)
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // let every connection open
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	rss := peakRSS(t, p.cmd.Process.Pid)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatal(err)
	}
	lines, _ := countFileLines(t, p.logDir)
	t.Logf("%d connections × %d requests: %d ok, %d failed in %v; peak RSS %d MiB; %d log lines",
		conns, perConn, ok.Load(), bad.Load(), elapsed.Round(time.Millisecond), rss>>20, lines)
	if bad.Load() != 0 || ok.Load() != conns*perConn {
		t.Fatalf("%d failed requests", bad.Load())
	}
	if int64(lines) != ok.Load() {
		t.Fatalf("%d log lines for %d responses", lines, ok.Load())
	}
	if rss > memBound {
		t.Fatalf("peak RSS %d MiB over the %d MiB bound", rss>>20, memBound>>20)
	}
}
