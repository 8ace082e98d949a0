package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runLog implements "tsubame log reopen": signal the server named by the pid
// file in the data directory to reopen its access log.
func runLog(ctx context.Context, args []string, stdout, stderr io.Writer, environ []string) error {
	if len(args) > 0 && args[0] == "export" {
		return runLogExport(ctx, args[1:], stdout, stderr, environ)
	}
	if len(args) > 0 && args[0] == "ship" {
		return runLogShip(ctx, args[1:], stdout, stderr, environ)
	}
	if len(args) == 0 || args[0] != "reopen" {
		return usagef("usage: tsubame log reopen [-config FILE] | tsubame log export [-config FILE] [FILE|-] | tsubame log ship [-config FILE] -from FILE [FILE...]")
	}
	fs, path := newFlagSet("log reopen", stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	cfg, err := loadConfig(*path, environ, stderr)
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
