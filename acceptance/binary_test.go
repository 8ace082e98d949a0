package acceptance

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// built is set once buildOnce has run.
var built atomic.Bool

// buildOnce builds the binary for this test run, once.
var buildOnce = sync.OnceValues(func() (string, error) {
	built.Store(true)
	dir, err := os.MkdirTemp("", "tsubame-acceptance-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "tsubame")
	out, err := exec.Command("go", "build", "-o", bin, "tsubame/cmd/tsubame").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if built.Load() {
		if bin, err := buildOnce(); err == nil {
			_ = os.RemoveAll(filepath.Dir(bin))
		}
	}
	os.Exit(code)
}

// proc is one server the test started.
type proc struct {
	base    string // its public URL
	dataDir string
	logs    *logBuffer
}

// pidFile is where the server writes its pid (cmd/tsubame's PIDFile).
func (p *proc) pidFile() string { return filepath.Join(p.dataDir, "tsubame.pid") }

// logBuffer collects a server's output while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serve starts `tsubame serve` on a random loopback port with env, and
// waits until it answers. It and every successor a restart made are
// killed when the test ends.
func serve(t *testing.T, env ...string) *proc {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the real binary; skipped in -short mode")
	}
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &proc{base: "http://" + addr, dataDir: t.TempDir(), logs: &logBuffer{}}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "TSUBAME_LISTEN="+addr, "TSUBAME_ADMIN_LISTEN=", "TSUBAME_DATA_DIR="+p.dataDir,
		"TSUBAME_ACCESS_LOG_DIR="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	for _, kv := range env { // the last setting wins, as in exec's environment
		if d, ok := strings.CutPrefix(kv, "TSUBAME_DATA_DIR="); ok {
			p.dataDir = d
		}
	}
	cmd.Stderr = p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if pid, err := readPID(p.pidFile()); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// A server that exits while starting fails the test at once, with
	// what it said.
	up := func(what string, cond func() bool) {
		t.Helper()
		waitUntil(t, what, func() bool {
			select {
			case <-exited:
				t.Fatalf("the server exited while waiting for %s:\n%s", what, p.logs)
			default:
			}
			return cond()
		})
	}
	up("the server to answer", func() bool {
		resp, err := http.Get(p.base + "/json")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	// The server listens before it writes its pid file (cmd/tsubame's
	// serve): a test that signals it by the file waits for its own pid
	// there, not a file a killed predecessor left behind.
	up("the server's pid file", func() bool {
		pid, err := readPID(p.pidFile())
		return err == nil && pid == cmd.Process.Pid
	})
	return p
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s does not hold a process id", path)
	}
	return pid, nil
}

// waitUntil waits for cond, generously: a busy machine is slow.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
