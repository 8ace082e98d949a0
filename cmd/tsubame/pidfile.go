package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PIDFile is the name of the file in the data directory that holds the
// running server's process id, for tsubame log reopen.
const PIDFile = "tsubame.pid"

func writePIDFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// removePIDFile removes the file if it still names this process.
func removePIDFile(path string) {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		_ = os.Remove(path)
	}
}
