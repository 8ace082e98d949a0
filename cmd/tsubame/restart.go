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
//     sockets and writes "ready" on a pipe. If it fails first, it exits, the
//     pipe closes, and the running process simply keeps serving.
//  2. The predecessor stops accepting, finishes its in-flight requests,
//     drains its webhook queue, writes every access-log line and closes out
//     its log file, closes the store (releasing the embedded store's file
//     lock), writes "release" on a second pipe and exits.
//  3. The successor opens the store, opens a fresh access-log file (so no
//     file is ever written by both) and starts accepting.

// handover is the successor's side: the inherited sockets and the pipes.
type handover struct {
	public, admin *os.File
	readyW        *os.File // successor -> predecessor
	releaseR      *os.File // predecessor -> successor
}

// inherited parses TSUBAME_INHERIT ("public=3,admin=4,ready=5,release=6").
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
		f := os.NewFile(uintptr(fd), name)
		switch name {
		case "public":
			h.public = f
		case "admin":
			h.admin = f
		case "ready":
			h.readyW = f
		case "release":
			h.releaseR = f
		default:
			return nil, fmt.Errorf("malformed %s=%q", config.EnvInherit, v)
		}
	}
	if h.public == nil || h.readyW == nil || h.releaseR == nil {
		return nil, fmt.Errorf("incomplete %s=%q", config.EnvInherit, v)
	}
	return h, nil
}

func (h *handover) listeners() (public, admin net.Listener, err error) {
	if public, err = net.FileListener(h.public); err != nil {
		return nil, nil, fmt.Errorf("cannot take over the public listener: %w", err)
	}
	h.public.Close() // FileListener holds a duplicate
	if h.admin != nil {
		if admin, err = net.FileListener(h.admin); err != nil {
			public.Close()
			return nil, nil, fmt.Errorf("cannot take over the admin listener: %w", err)
		}
		h.admin.Close()
	}
	return public, admin, nil
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
}

// startSuccessor starts the successor and waits (bounded) until it has
// taken over the sockets. On any failure the successor is gone and the
// caller keeps serving.
func (m *Main) startSuccessor(args []string, environ []string, stdout, stderr io.Writer) (*successor, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	files := []*os.File{}
	fileOf := func(ln net.Listener) (*os.File, error) {
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			return nil, errors.New("listener is not TCP")
		}
		return tl.File()
	}
	pub, err := fileOf(m.publicLn)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	files = append(files, pub)
	spec := "public=3"
	if m.adminLn != nil {
		adm, err := fileOf(m.adminLn)
		if err != nil {
			return nil, err
		}
		defer adm.Close()
		files = append(files, adm)
		spec += ",admin=4"
	}
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
	spec += fmt.Sprintf(",ready=%d,release=%d", 3+len(files)-2, 3+len(files)-1)

	cmd := exec.Command(exe, args...)
	cmd.Env = append(withoutEnv(environ, config.EnvInherit), config.EnvInherit+"="+spec)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = files
	err = cmd.Start()
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
			return &successor{cmd: cmd, releaseW: releaseW}, nil
		}
		releaseW.Close()
		return nil, errors.New("the new process exited before taking over (see its log lines above)")
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		releaseW.Close()
		return nil, errors.New("the new process did not take over within a minute")
	}
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
func runRestart(args []string, stderr io.Writer, environ []string) error {
	fs, path := newFlagSet("restart", stderr)
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the new process")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path, environ, stderr)
	if err != nil {
		return err
	}
	pidFile := filepath.Join(cfg.DataDir, PIDFile)
	old, err := readPID(pidFile)
	if err != nil {
		return fmt.Errorf("no running server found (%v)", err)
	}
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		return fmt.Errorf("cannot signal server process %d: %w", old, err)
	}
	deadline := time.Now().Add(*timeout)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		pid, err := readPID(pidFile)
		if err == nil && pid != old && syscall.Kill(old, 0) != nil {
			fmt.Fprintf(stderr, "restarted: process %d replaced process %d\n", pid, old)
			return nil
		}
		if syscall.Kill(old, 0) != nil && (err != nil || pid == old) {
			continue // the old one is gone; the new one is still starting
		}
	}
	return fmt.Errorf("no new process took over within %v: see the server's log", *timeout)
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
