package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tsubame restart under continuous load: a new process takes over the
// listening socket, the old one drains and exits 0, no request fails, and
// every response is in exactly one access-log file.
func TestRestartUnderLoad(t *testing.T) {
	p := startBinary(t)
	pidFile := filepath.Join(p.dataDir, PIDFile)
	oldPID := waitPID(t, pidFile)
	if oldPID != p.cmd.Process.Pid {
		t.Fatalf("pid file: %d, want %d", oldPID, p.cmd.Process.Pid)
	}
	var newPID int
	t.Cleanup(func() {
		if newPID > 0 {
			_ = syscall.Kill(newPID, syscall.SIGKILL)
		}
	})
	s4 := p.base + "/api/sample4.js?id=3&callback=Example.process"
	stop := make(chan struct{})
	run := load([]string{s4}, 4, stop)
	time.Sleep(500 * time.Millisecond)

	env := []string{"TSUBAME_DATA_DIR=" + p.dataDir}
	code, _, stderr := runCmd(t, env, "", "restart", "-timeout", "30s")
	if code != 0 {
		t.Fatalf("restart: %d %s\n%s", code, stderr, p.logs)
	}
	var err error
	if newPID, err = readPID(pidFile); err != nil || newPID == oldPID {
		t.Fatalf("new pid %d (%v), old %d", newPID, err, oldPID)
	}
	// It names both processes' versions and the binary started, which
	// is the one at the path the old process was started as.
	bin, _ := buildOnce()
	if want := fmt.Sprintf("restarted: process %d (tsubame %s, %s) replaced process %d (tsubame ", newPID, "dev", bin, oldPID); !strings.Contains(stderr, want) {
		t.Errorf("restart said %q, want %q", stderr, want)
	}
	time.Sleep(500 * time.Millisecond) // load on the new process
	close(stop)
	run.Wait()
	served := run.counts[s4].Load()

	if err := syscall.Kill(newPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil { // the old process; returns once both have closed its log pipe
		t.Fatalf("old process: %v\n%s", err, p.logs)
	}
	deadline := time.Now().Add(20 * time.Second)
	for syscall.Kill(newPID, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("new process did not stop")
		}
		time.Sleep(20 * time.Millisecond)
	}
	logs := p.logs.String()
	t.Logf("%d responses across the restart, %d errors, %d bad", served, run.errs.Load(), run.bad.Load())
	if run.errs.Load() != 0 || run.bad.Load() != 0 || served == 0 {
		t.Fatalf("%d failed and %d bad requests across the restart\n%s", run.errs.Load(), run.bad.Load(), logs)
	}
	for _, want := range []string{"handed over", "took over from the previous process"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("log lacks %q:\n%s", want, logs)
		}
	}
	lines, files := countFileLines(t, p.logDir)
	if int64(lines) != served || files < 2 {
		t.Fatalf("%d lines in %d files for %d responses", lines, files, served)
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Fatalf("pid file left: %v", err)
	}
}

// waitPID waits until the server has written its pid file (just after it
// starts serving) and returns the pid.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pid, err := readPID(path)
		if err == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid file: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
