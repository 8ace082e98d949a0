package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tsubame/internal/config"
	"tsubame/internal/server"
)

// Zero-downtime restart. On SIGUSR2 (or `tsubame restart`) the running
// process starts its successor, the same binary path (so a new build
// installed there takes over), handing it the listening sockets as
// inherited file descriptors (os/exec ExtraFiles, net.FileListener). The
// listening sockets stay open the whole time, so no connection is refused:
// ones that arrive while neither process accepts wait in the kernel's
// backlog.
//
//  1. The successor loads and validates its configuration, takes over the
//     sockets, reads and compiles the campaign set the predecessor serves
//     (catalog.go) and writes "ready" on a pipe. If it fails first, it exits, the
//     pipe closes, and the running process simply keeps serving.
//  2. The predecessor stops accepting, finishes its in-flight requests,
//     drains its webhook queue, writes every access-log line and closes out
//     its log file, closes the store (releasing the embedded store's file
//     lock), writes "release" on a second pipe and exits.
//  3. The successor opens the store, opens a fresh access-log file (so no
//     file is ever written by both) and starts accepting.

// handover is the successor's side: the inherited sockets and the pipes.
type handover struct {
	public, admin, tls *os.File
	readyW             *os.File // successor -> predecessor
	releaseR           *os.File // predecessor -> successor
	// conns is the socket on which the predecessor hands over its idle
	// connections (server.Adopt); nil from a predecessor without it.
	conns *os.File
	// catalog is the pipe on which the predecessor writes the campaign set
	// it serves (catalog.go); nil when it hands none.
	catalog *os.File
}

// inherited parses TSUBAME_INHERIT ("public=3,admin=4,tls=5,conns=6,catalog=7,ready=8,release=9").
func inherited(environ []string) (*handover, error) {
	v := lookupEnv(environ, config.EnvInherit)
	if v == "" {
		return nil, nil
	}
	h := &handover{}
	for _, kv := range strings.Split(v, ",") {
		name, fdText, _ := strings.Cut(kv, "=")
		fd, err := strconv.Atoi(fdText)
		if err != nil || fd < 3 {
			return nil, fmt.Errorf("malformed %s=%q", config.EnvInherit, v)
		}
		if name == "catalog" {
			// Non-blocking, so that os.NewFile makes it pollable and its
			// read can have a deadline (catalogTimeout).
			_ = syscall.SetNonblock(fd, true)
		}
		f := os.NewFile(uintptr(fd), name)
		switch name {
		case "public":
			h.public = f
		case "admin":
			h.admin = f
		case "tls":
			h.tls = f
		case "ready":
			h.readyW = f
		case "release":
			h.releaseR = f
		case "conns":
			h.conns = f
		case "catalog":
			h.catalog = f
		default:
			// A later build may hand over more: what this one does not
			// know stays unused, and the handover goes on without it.
			f.Close()
		}
	}
	if h.public == nil || h.readyW == nil || h.releaseR == nil {
		return nil, fmt.Errorf("incomplete %s=%q", config.EnvInherit, v)
	}
	return h, nil
}

// listeners takes over the inherited sockets; admin and tls are nil when
// the predecessor had none.
func (h *handover) listeners() (public, admin, tls net.Listener, err error) {
	take := func(f *os.File, name string) (net.Listener, error) {
		if f == nil {
			return nil, nil
		}
		defer f.Close() // FileListener holds a duplicate
		ln, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("cannot take over the %s listener: %w", name, err)
		}
		return ln, nil
	}
	if public, err = take(h.public, "public"); err == nil {
		if admin, err = take(h.admin, "admin"); err == nil {
			if tls, err = take(h.tls, "tls"); err == nil {
				return public, admin, tls, nil
			}
		}
	}
	for _, ln := range []net.Listener{public, admin, tls} {
		if ln != nil {
			ln.Close()
		}
	}
	return nil, nil, nil, err
}

func (h *handover) ready(log *slog.Logger) {
	if _, err := io.WriteString(h.readyW, "ready\n"); err != nil {
		log.Warn("cannot tell the previous process we are ready", "err", err)
	}
	h.readyW.Close()
}

// waitRelease blocks until the predecessor has let go of the store and the
// access log. If it died instead, its pipe closes and we go on all the same.
func (h *handover) waitRelease(log *slog.Logger) {
	line, err := bufio.NewReader(h.releaseR).ReadString('\n')
	h.releaseR.Close()
	if strings.TrimSpace(line) != "release" {
		log.Warn("the previous process ended without handing over; taking over anyway", "err", err)
	}
}

// successor is the predecessor's side of a started successor.
type successor struct {
	cmd      *exec.Cmd
	releaseW *os.File
	conns    *os.File // our end of the connection handover
}

// startSuccessor starts the successor and waits (bounded) until it has
// taken over the sockets. On any failure the successor is gone and the
// caller keeps serving.
func (m *Main) startSuccessor(args []string, environ []string, stdout, stderr io.Writer) (*successor, error) {
	exe := m.run.exe
	if _, err := os.Stat(exe); exe == "" || err != nil {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	fileOf := func(ln net.Listener) (*os.File, error) {
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			return nil, errors.New("listener is not TCP")
		}
		return tl.File()
	}
	var files []*os.File
	var spec []string
	for _, l := range []struct {
		name string
		ln   net.Listener
	}{{"public", m.pub.ln}, {"admin", m.adm.ln}, {"tls", m.pub.tlsLn}} {
		if l.ln == nil {
			continue
		}
		f, err := fileOf(l.ln)
		if err != nil {
			return nil, fmt.Errorf("%s listener: %w", l.name, err)
		}
		defer f.Close()
		files = append(files, f)
		spec = append(spec, fmt.Sprintf("%s=%d", l.name, 3+len(files)-1))
	}
	connsKeep, connsGive, err := server.HandoffPair()
	if err != nil {
		return nil, err
	}
	defer connsGive.Close()
	files = append(files, connsGive)
	spec = append(spec, fmt.Sprintf("conns=%d", 3+len(files)-1))
	if catalog := m.handCatalog(); catalog != nil {
		defer catalog.Close() // the successor's copy is its own; closed, the writer ends
		files = append(files, catalog)
		spec = append(spec, fmt.Sprintf("catalog=%d", 3+len(files)-1))
	}
	ok := false
	defer func() {
		if !ok {
			connsKeep.Close()
		}
	}()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	releaseR, releaseW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	files = append(files, readyW, releaseR)
	spec = append(spec, fmt.Sprintf("ready=%d", 3+len(files)-2), fmt.Sprintf("release=%d", 3+len(files)-1))

	cmd := exec.Command(exe, args...)
	// WATCHDOG_PID names this process; without it the successor answers
	// systemd's watchdog once it is the main process.
	env := withoutEnv(withoutEnv(environ, config.EnvInherit), "WATCHDOG_PID")
	cmd.Env = append(env, config.EnvInherit+"="+strings.Join(spec, ","))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = files
	err = cmd.Start()
	// Start put the listening sockets in blocking mode (os.File.Fd does,
	// and the mode belongs to the socket both processes share): a blocked
	// accept would keep this process's listener from ever closing if the
	// successor fails before it sets them back (as net.FileListener does).
	for _, l := range []net.Listener{m.pub.ln, m.adm.ln, m.pub.tlsLn} {
		if err := setNonblock(l); err != nil {
			m.Logger.Warn("cannot set a listening socket back to non-blocking", "err", err)
		}
	}
	readyW.Close()
	releaseR.Close()
	if err != nil {
		releaseW.Close()
		return nil, fmt.Errorf("cannot start the new process: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reap it if it fails; on success it outlives us

	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(readyR).ReadString('\n')
		got <- strings.TrimSpace(line)
	}()
	select {
	case line := <-got:
		if line == "ready" {
			ok = true
			return &successor{cmd: cmd, releaseW: releaseW, conns: connsKeep}, nil
		}
		releaseW.Close()
		return nil, errors.New("the new process exited before taking over (see its log lines above)")
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		releaseW.Close()
		return nil, errors.New("the new process did not take over within a minute")
	}
}

// setNonblock puts a listening socket in non-blocking mode; nil does nothing.
func setNonblock(ln net.Listener) error {
	tl, ok := ln.(*net.TCPListener)
	if !ok || tl == nil {
		return nil
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), true) }); err != nil {
		return err
	}
	return serr
}

// handoff returns the sender of idle connections to the successor, or nil
// (the drain then closes them after its grace).
func (s *successor) handoff(log *slog.Logger) *server.Handoff {
	h, err := server.NewHandoff(s.conns)
	s.conns = nil
	if err != nil {
		log.Warn("idle connections will not be handed over", "err", err)
		return nil
	}
	return h
}

// release lets the successor open the store and serve.
func (s *successor) release() {
	_, _ = io.WriteString(s.releaseW, "release\n")
	s.releaseW.Close()
}

func withoutEnv(environ []string, name string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// runRestart implements "tsubame restart": signal the server named by the
// pid file, then wait until its successor has written its own pid there.
func runRestart(e *env, timeout time.Duration) error {
	stderr := e.stderr
	cfg, err := e.load()
	if err != nil {
		return err
	}
	pidFile := filepath.Join(cfg.DataDir, PIDFile)
	statusFile := filepath.Join(cfg.DataDir, StatusFile)
	old, err := serverPID(pidFile)
	if err != nil {
		return fmt.Errorf("no running server found (%v)", err)
	}
	before, _ := readStatus(statusFile)
	asked := time.Now()
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		return fmt.Errorf("cannot signal server process %d: %w", old, err)
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		// The old process says at once when its successor failed.
		if st, err := readStatus(statusFile); err == nil && st.PID == old && st.RestartFailed != "" && !st.RestartAt.Before(asked.Add(-time.Second)) {
			return fmt.Errorf("the new process failed; process %d keeps serving: %s; the server's log has the new process's lines", old,
				strings.TrimSuffix(st.RestartFailed, " (see its log lines above)"))
		}
		pid, err := readPID(pidFile)
		if err == nil && pid != old && syscall.Kill(old, 0) != nil {
			fmt.Fprintf(stderr, "restarted: process %d%s replaced process %d%s\n", pid, describeProcess(statusFile, pid), old, describe(before, old))
			return nil
		}
		if syscall.Kill(old, 0) != nil && (err != nil || pid == old) {
			continue // the old one is gone; the new one is still starting
		}
	}
	return fmt.Errorf("no new process took over within %v: see the server's log", timeout)
}

// describeProcess is " (tsubame VERSION, BINARY)" for the process pid
// from the status file, once it has written it (bounded wait), else "".
func describeProcess(statusFile string, pid int) string {
	for range 40 {
		if st, err := readStatus(statusFile); err == nil && st.PID == pid {
			return describe(st, pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ""
}

func describe(st processStatus, pid int) string {
	if st.PID != pid || st.Version == "" {
		return ""
	}
	if st.Exe == "" {
		return " (tsubame " + st.Version + ")"
	}
	return " (tsubame " + st.Version + ", " + st.Exe + ")"
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
