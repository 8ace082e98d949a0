package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runLogReopen implements "tsubame log reopen": signal the server named by
// the pid file in the data directory to reopen its access log.
func runLogReopen(e *env) error {
	stderr := e.stderr
	cfg, err := e.load()
	if err != nil {
		return err
	}
	pidFile := filepath.Join(cfg.DataDir, PIDFile)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("no running server found (%v)", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("pid file %s does not hold a process id", pidFile)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("cannot signal server process %d: %w", pid, err)
	}
	fmt.Fprintf(stderr, "asked server process %d to reopen its access log\n", pid)
	return nil
}
