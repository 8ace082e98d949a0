package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// StatusFile is the name of the file in the data directory where the
// running server says what it is (process, version, binary) and whether
// its last restart failed, for tsubame restart. The pid file stays one
// number, for scripts (kill -HUP $(cat tsubame.pid)).
const StatusFile = "tsubame.status.json"

// processStatus is the content of StatusFile.
type processStatus struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	Exe     string `json:"exe"`
	// RestartFailed is why the last restart this process tried failed,
	// at RestartAt; empty when it has not failed.
	RestartFailed string    `json:"restart_failed,omitempty"`
	RestartAt     time.Time `json:"restart_at,omitzero"`
}

// writeStatus replaces the status file (written whole, then renamed).
func writeStatus(path string, st processStatus) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readStatus(path string) (processStatus, error) {
	var st processStatus
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	return st, err
}

// launchPath is the binary the process was started as, absolute: a
// restart starts the binary then at that path (an upgrade installs a new
// one there), not the file this process runs from, which may have been
// moved away since. It is taken only when, at the start, it is the file
// running (argv[0] is the caller's word: a launcher may give another, and
// PATH may find another file first); else, and when it cannot be told,
// it is "" and a restart starts os.Executable().
func launchPath() string {
	p, err := exec.LookPath(os.Args[0])
	if err != nil {
		return ""
	}
	if p, err = filepath.Abs(p); err != nil {
		return ""
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	a, err1 := os.Stat(p)
	b, err2 := os.Stat(self)
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		return ""
	}
	return p
}

// serverPID reads the pid file and checks that the process it names is a
// tsubame server of the pid file's owner (the user the server runs as):
// the file is writable by that user, and a command run as root must not
// signal any process the file names (another daemon, a reused pid).
func serverPID(pidFile string) (int, error) {
	pid, err := readPID(pidFile)
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(pidFile)
	if err != nil {
		return 0, err
	}
	proc, err := os.Stat("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return 0, fmt.Errorf("process %d of %s is gone (a stale pid file?)", pid, pidFile)
	}
	owner, ok1 := fi.Sys().(*syscall.Stat_t)
	runs, ok2 := proc.Sys().(*syscall.Stat_t)
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	args := strings.Split(string(cmdline), "\x00")
	if !ok1 || !ok2 || err != nil || runs.Uid != owner.Uid || len(args) < 2 || args[1] != "serve" {
		return 0, fmt.Errorf("process %d, which %s names, is not a tsubame server of the file's owner: not signalled", pid, pidFile)
	}
	return pid, nil
}
