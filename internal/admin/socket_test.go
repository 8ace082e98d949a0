package admin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shortDir is a fresh directory with a short path: a Unix socket's path
// may have at most MaxSocketPath bytes, and t.TempDir's can run longer.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serveSocket makes the harness's server serve a control socket in a
// fresh directory and returns its path; ServeSocket's result goes to done.
func (h *harness) serveSocket() (path string, done chan error) {
	h.t.Helper()
	path = filepath.Join(shortDir(h.t), SocketName)
	ln, err := ListenSocket(path)
	if err != nil {
		h.t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- h.s.ServeSocket(ln) }()
	return path, done
}

// socketDo sends a request over the control socket, with no credential.
func socketDo(t *testing.T, path, method, target, body string) response {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	defer client.CloseIdleConnections()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://localhost"+target, rd)
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// ownActor is the audit actor of this process's user on the socket.
func ownActor(t *testing.T) string {
	t.Helper()
	uid := os.Getuid()
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		t.Fatalf("this process's user: %v", err)
	}
	return "local:" + u.Username + "(uid " + strconv.Itoa(uid) + ")"
}

// On the control socket this process's user is an admin without any
// credential: the API's own validation and audit apply, the actor named
// by the peer's uid. The TCP listener still wants a user.
func TestControlSocket(t *testing.T) {
	h := newHarness(t, false, nil)
	path, done := h.serveSocket()
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file: %v %v, want a socket of mode 0600", fi.Mode(), err)
	}

	if r := socketDo(t, path, "PUT", "/api/v1/placements/p1", `{"urls":["https://ad.example.com/1.js"]}`); r.status != 200 {
		t.Fatalf("put over the socket: %d %s", r.status, r.body)
	}
	if r := socketDo(t, path, "PUT", "/api/v1/placements/p2", `{"urls":["javascript:alert(1)"]}`); r.status != 400 {
		t.Errorf("an invalid placement over the socket: %d %s", r.status, r.body)
	}
	if r := socketDo(t, path, "POST", "/api/v1/import?format=jsonl", `{"id":"p3","urls":["https://ad.example.com/3.js"]}`+"\n"); r.status != 200 {
		t.Errorf("import over the socket: %d %s", r.status, r.body)
	}
	r := socketDo(t, path, "GET", "/api/v1/export", "")
	if want := "\"id\":\"p3\""; r.status != 200 || strings.Count(string(r.body), "\n") != 2 || !strings.Contains(string(r.body), want) {
		t.Errorf("export over the socket: %d %s", r.status, r.body)
	}
	if r := socketDo(t, path, "GET", "/api/v1/users", ""); r.status != 200 {
		t.Errorf("an admin route over the socket: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/api/v1/placements/p1", nil); r.status != 401 {
		t.Errorf("the TCP listener without credentials: %d, want 401", r.status)
	}

	actor := ownActor(t)
	var put, invalid bool
	for _, rec := range h.auditLines() {
		if rec.Action == "placement.put" && rec.Target == "p1" {
			put = rec.Actor == actor && rec.Remote == "local" && rec.Result == "ok"
		}
		if rec.Action == "placement.put" && rec.Target == "p2" {
			invalid = rec.Actor == actor && rec.Result == "invalid"
		}
	}
	if !put || !invalid {
		t.Errorf("audit: the put by %s (%v) and the refused one (%v) not as they should be:\n%+v", actor, put, invalid, h.auditLines())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("ServeSocket after Shutdown: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket file outlives Shutdown: %v", err)
	}
}

// Only the server's own uid and root pass, as admins.
func TestSocketPeerCheck(t *testing.T) {
	a := &socketAuth{own: 1000, actors: map[int]string{1000: localActor("ads", 1000), 0: localActor("root", 0)}}
	for _, tc := range []struct {
		peer  Peer
		actor string
	}{
		{Peer{UID: 1000, PID: 42}, "local:ads(uid 1000)"},
		{Peer{UID: 0, PID: 1}, "local:root(uid 0)"},
		{Peer{UID: 1001, PID: 43}, ""},
		{Peer{UID: 65534, PID: 44}, ""},
	} {
		id, err := a.check(tc.peer)
		switch {
		case tc.actor == "" && (err == nil || !strings.Contains(err.Error(), "uid "+strconv.Itoa(tc.peer.UID))):
			t.Errorf("%+v: %v, want a refusal naming its uid", tc.peer, err)
		case tc.actor != "" && (err != nil || id.actor != tc.actor || id.role != RoleAdmin):
			t.Errorf("%+v: %+v %v, want admin %s", tc.peer, id, err, tc.actor)
		}
	}
}

// Another user's connection, where the file's mode would let them in, is
// closed unanswered and audited. Connecting as another user needs root.
func TestSocketRefusesOtherUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("connecting as another uid needs root; TestSocketPeerCheck covers the check")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl (its --unix-socket) is not installed")
	}
	h := newHarness(t, false, nil)
	path, _ := h.serveSocket()
	// Let uid 65534 reach the socket: only the peer check stands.
	if err := os.Chmod(filepath.Dir(path), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(curl, "-sS", "--max-time", "10", "--unix-socket", path, "http://localhost/api/v1/users")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "users") {
		t.Fatalf("uid 65534 was answered: %v %s", err, out)
	}
	var denied bool
	for _, rec := range h.auditLines() {
		denied = denied || rec.Action == "auth" && rec.Result == "denied" && rec.Actor == "local:?(uid 65534)" &&
			strings.Contains(rec.Detail, "peer uid 65534")
	}
	if !denied {
		t.Errorf("no denied auth line for uid 65534: %+v", h.auditLines())
	}
}

// A socket file left by a process that died is replaced; one that answers,
// or a file that is not a socket, is not. Close removes only its own file.
func TestListenSocketStaleAndClose(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, SocketName)
	dead, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	dead.SetUnlinkOnClose(false) // as a killed process leaves it
	dead.Close()
	ln, err := ListenSocket(path)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	if _, err := ListenSocket(path); !errors.Is(err, ErrSocketInUse) {
		t.Errorf("a socket that answers: %v", err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket file outlives Close: %v", err)
	}

	// Another process's socket put in its place stays.
	ln, err = ListenSocket(path)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	other, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ln.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("Close removed a socket that was not its own: %v", err)
	}

	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenSocket(plain); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a regular file in the way: %v", err)
	}
	if b, err := os.ReadFile(plain); err != nil || string(b) != "x" {
		t.Errorf("the regular file was touched: %q %v", b, err)
	}
}

func TestListenSocketRefuses(t *testing.T) {
	open := shortDir(t)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenSocket(filepath.Join(open, SocketName)); err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Errorf("a world-writable directory: %v", err)
	}
	long := filepath.Join(shortDir(t), strings.Repeat("d", 100), SocketName)
	if _, err := ListenSocket(long); err == nil || !strings.Contains(err.Error(), "at most 107") {
		t.Errorf("a path of %d bytes: %v", len(long), err)
	}
	// A missing directory is made, owner-only.
	dir := filepath.Join(shortDir(t), "run")
	ln, err := ListenSocket(filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("made directory: %v %v", fi.Mode(), err)
	}
}
