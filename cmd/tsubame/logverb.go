package main

import (
	"fmt"
	"path/filepath"
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
	pid, err := serverPID(pidFile)
	if err != nil {
		return fmt.Errorf("no running server found (%v)", err)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("cannot signal server process %d: %w", pid, err)
	}
	fmt.Fprintf(stderr, "asked server process %d to reopen its access log\n", pid)
	return nil
}
