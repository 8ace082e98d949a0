package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// notification is one sd_notify datagram and the process that sent it.
type notification struct {
	pid    int
	fields map[string]string
	raw    string
}

// fakeSystemd is a service manager's notification socket: a unix datagram
// socket that asks the kernel for each sender's credentials, as systemd's
// does, so a test can tell which process said what.
type fakeSystemd struct {
	path string
	got  chan notification
}

func newFakeSystemd(t *testing.T) *fakeSystemd {
	t.Helper()
	f := &fakeSystemd{path: filepath.Join(t.TempDir(), "notify"), got: make(chan notification, 256)}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: f.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	go func() {
		buf := make([]byte, 4096)
		oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
		for {
			n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
			if err != nil {
				close(f.got)
				return
			}
			msg := notification{raw: string(buf[:n]), fields: map[string]string{}}
			if scms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(scms) > 0 {
				if cred, err := unix.ParseUnixCredentials(&scms[0]); err == nil {
					msg.pid = int(cred.Pid)
				}
			}
			for _, line := range strings.Split(msg.raw, "\n") {
				k, v, _ := strings.Cut(line, "=")
				msg.fields[k] = v
			}
			f.got <- msg
		}
	}()
	return f
}

// next returns the next notification that is not a watchdog ping.
func (f *fakeSystemd) next(t *testing.T, what string) notification {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case n, ok := <-f.got:
			if !ok {
				t.Fatalf("notification socket closed waiting for %s", what)
			}
			if n.raw == "WATCHDOG=1" {
				continue
			}
			return n
		case <-deadline:
			t.Fatalf("no notification: waited for %s", what)
		}
	}
}

// The server speaks systemd's notify protocol through start, reload,
// handover and stop, and every state change comes from the process systemd
// considers the main one at that moment (so it works under the default
// NotifyAccess=main). The watchdog is answered.
func TestSystemdNotify(t *testing.T) {
	sd := newFakeSystemd(t)
	p := startBinary(t, "NOTIFY_SOCKET="+sd.path, "WATCHDOG_USEC=200000")
	mainPID := p.cmd.Process.Pid

	expect := func(what string, check func(n notification) bool) notification {
		t.Helper()
		n := sd.next(t, what)
		if n.pid != mainPID {
			t.Fatalf("%s: sent by process %d while the main process is %d: %q\n%s", what, n.pid, mainPID, n.raw, p.logs)
		}
		if !check(n) {
			t.Fatalf("%s: got %q\n%s", what, n.raw, p.logs)
		}
		return n
	}
	isReady := func(n notification) bool {
		return n.fields["READY"] == "1" && n.fields["MAINPID"] == strconv.Itoa(mainPID) && n.fields["STATUS"] != ""
	}
	isReloading := func(n notification) bool {
		us, err := strconv.ParseInt(n.fields["MONOTONIC_USEC"], 10, 64)
		return n.fields["RELOADING"] == "1" && err == nil && us > 0
	}
	expect("READY=1 at start", isReady)

	// The watchdog: pings keep coming at half of WATCHDOG_USEC.
	pings := 0
	deadline := time.After(60 * time.Second)
	for pings < 3 {
		select {
		case n := <-sd.got:
			if n.raw != "WATCHDOG=1" || n.pid != mainPID {
				t.Fatalf("unexpected notification %q from %d", n.raw, n.pid)
			}
			pings++
		case <-deadline:
			t.Fatalf("%d watchdog pings", pings)
		}
	}

	// SIGHUP: RELOADING=1, then READY=1.
	if err := syscall.Kill(mainPID, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	expect("RELOADING=1 on SIGHUP", isReloading)
	expect("READY=1 after the reload", func(n notification) bool {
		return isReady(n) && strings.Contains(n.fields["STATUS"], "reloaded")
	})

	// SIGUSR2: RELOADING=1, MAINPID=<successor> from the old process, then
	// READY=1 from the successor.
	if err := syscall.Kill(mainPID, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	expect("RELOADING=1 on SIGUSR2", isReloading)
	handover := expect("MAINPID=<successor>", func(n notification) bool {
		pid, err := strconv.Atoi(n.fields["MAINPID"])
		return err == nil && pid != mainPID && pid > 0
	})
	oldPID := mainPID
	mainPID, _ = strconv.Atoi(handover.fields["MAINPID"])
	t.Cleanup(func() { _ = syscall.Kill(mainPID, syscall.SIGKILL) })
	expect("READY=1 from the successor", isReady)
	if got := waitPID(t, filepath.Join(p.dataDir, PIDFile)); got != mainPID {
		t.Fatalf("pid file names %d, systemd was told %d", got, mainPID)
	}
	if code, _ := get(t, p.base+"/api/sample4.js?id=1&callback=cb"); code != 200 {
		t.Fatalf("successor answers %d", code)
	}

	// SIGTERM to the successor: STOPPING=1.
	if err := syscall.Kill(mainPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect("STOPPING=1 on SIGTERM", func(n notification) bool { return n.fields["STOPPING"] == "1" })
	// The old process's log pipe closes once both have exited.
	if err := p.wait(t); err != nil {
		t.Fatalf("old process %d: %v\n%s", oldPID, err, p.logs)
	}
	deadline = time.After(30 * time.Second)
	for syscall.Kill(mainPID, 0) == nil {
		select {
		case <-deadline:
			t.Fatalf("successor %d did not stop", mainPID)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A failed handover says READY=1 again from the process that keeps serving.
func TestSystemdNotifyFailedRestart(t *testing.T) {
	sd := newFakeSystemd(t)
	file := filepath.Join(t.TempDir(), "tsubame.yaml")
	if err := os.WriteFile(file, []byte("log:\n  level: info\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, "NOTIFY_SOCKET="+sd.path, "TSUBAME_CONFIG="+file)
	pid := p.cmd.Process.Pid
	if n := sd.next(t, "READY=1"); n.fields["READY"] != "1" || n.pid != pid {
		t.Fatalf("got %q from %d", n.raw, n.pid)
	}
	// The successor reads this file and refuses it; the running process,
	// configured before, keeps serving.
	if err := os.WriteFile(file, []byte("log:\n  level: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	if n := sd.next(t, "RELOADING=1"); n.fields["RELOADING"] != "1" || n.pid != pid {
		t.Fatalf("got %q from %d", n.raw, n.pid)
	}
	n := sd.next(t, "READY=1 after the failed restart")
	if n.fields["READY"] != "1" || n.pid != pid || !strings.Contains(n.fields["STATUS"], "restart failed") {
		t.Fatalf("got %q from %d\n%s", n.raw, n.pid, p.logs)
	}
	if code, _ := get(t, p.base+"/json"); code != 200 {
		t.Fatalf("still serving: %d", code)
	}
}
