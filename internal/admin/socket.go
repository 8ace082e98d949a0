package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The control socket: the admin API on a Unix-domain socket, for the
// tsubame commands run on the server's machine (placements, campaigns)
// while the server holds the embedded store. As with docker.sock, the
// filesystem and the peer's credentials are the authentication: the
// socket file is 0600 in a directory no other user may write, and each
// accepted connection's peer (SO_PEERCRED) must be the server's own user
// or root, who is then an admin, with no password, token, session or CSRF
// token. Any other peer's connection is closed and audited. Past the
// authentication everything is the admin listener's own code: the same
// routes, validation, roles and audit (as local:<user>(uid N), from
// "local").

// SocketName is the control socket's file name in the admin directory.
const SocketName = "admin.sock"

// MaxSocketPath is the longest path a Unix-domain socket may have: Linux's
// sun_path holds 108 bytes, the terminating NUL included.
const MaxSocketPath = 107

// ErrSocketInUse is the cause of ListenSocket's error when a process
// answers on the socket's path.
var ErrSocketInUse = errors.New("served by another process")

// localRemote is the audit's client address of a control socket request.
const localRemote = "local"

// Peer is the process at the other end of a Unix-domain connection, as the
// kernel gives it (SO_PEERCRED): its credentials when it connected.
type Peer struct {
	UID, PID int
}

// socketListener is the control socket's listener. Close removes the
// socket file, unless another process has put its own in its place.
type socketListener struct {
	*net.UnixListener
	path      string
	info      os.FileInfo // the file this listener made
	closeOnce sync.Once
	closeErr  error
}

// ListenSocket makes the control socket at path: its directory (created
// 0700 if missing) must belong to this user or root and not be writable by
// others; a socket file left by a process that died is replaced, after
// checking that nothing answers on it. The socket file is 0600.
func ListenSocket(path string) (net.Listener, error) {
	if len(path) > MaxSocketPath {
		return nil, fmt.Errorf("control socket %q: the path is %d bytes, and a Unix socket's may have at most %d (admin.socket)",
			path, len(path), MaxSocketPath)
	}
	if err := checkSocketDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("cannot make the control socket %q: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // Close removes it only if it is still ours
	// Until the chmod the file has the umask's mode; a peer that connects
	// meanwhile is still checked by its uid.
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("control socket %q: %w", path, err)
	}
	info, err := os.Lstat(path)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("control socket %q: %w", path, err)
	}
	return &socketListener{UnixListener: ln, path: path, info: info}, nil
}

// checkSocketDir makes dir if missing and checks that no user but this one
// and root may put a file in it.
func checkSocketDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("control socket directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("control socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("control socket directory %q is not a directory", dir)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("control socket directory %q is writable by every user (mode %v): anyone could put their own socket in its place; "+
			"set admin.socket to a path in a directory of this user's", dir, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() && st.Uid != 0 {
		return fmt.Errorf("control socket directory %q belongs to uid %d, not to this user (uid %d) or root", dir, st.Uid, os.Getuid())
	}
	return nil
}

// removeStaleSocket removes a socket file at path that no process answers
// on: what a server that died leaves behind. A socket that answers, or a
// file that is not a socket, is left alone and reported.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket %q: %w", path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("control socket %q: a file that is not a socket is in the way: remove it, or set admin.socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("control socket %q is %w (a tsubame server on the same admin.dir?): "+
			"stop it, or give this server an admin.socket of its own", path, ErrSocketInUse)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("control socket %q: cannot tell whether a process serves it: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("control socket %q: cannot remove the stale socket: %w", path, err)
	}
	return nil
}

// Close stops listening and removes the socket file if it is the one this
// listener made. It may be called more than once.
func (l *socketListener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.UnixListener.Close()
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.info) {
			if err := os.Remove(l.path); err != nil && l.closeErr == nil {
				l.closeErr = err
			}
		}
	})
	return l.closeErr
}

// socketAuth decides who may use the control socket: the server's own uid
// and root. The actors' names are looked up once, not per connection.
type socketAuth struct {
	own    int
	actors map[int]string // by uid: the allowed peers' audit names
}

func newSocketAuth(own int) *socketAuth {
	a := &socketAuth{own: own, actors: map[int]string{}}
	for _, uid := range []int{own, 0} {
		name := "?"
		if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			name = u.Username
		}
		a.actors[uid] = localActor(name, uid)
	}
	return a
}

func localActor(name string, uid int) string {
	return "local:" + name + "(uid " + strconv.Itoa(uid) + ")"
}

// check returns the identity of a peer allowed on the socket: an admin
// named by its user and uid.
func (a *socketAuth) check(p Peer) (*identity, error) {
	if p.UID != a.own && p.UID != 0 {
		return nil, fmt.Errorf("peer uid %d (pid %d) is neither this server's (uid %d) nor root", p.UID, p.PID, a.own)
	}
	actor := a.actors[p.UID]
	return &identity{user: actor, actor: actor, role: RoleAdmin}, nil
}

// peerListener authenticates each connection by its peer before net/http
// sees it: a peer not allowed is audited and closed.
type peerListener struct {
	net.Listener
	s    *Server
	auth *socketAuth
}

// peerConn is an accepted control socket connection and its identity,
// which ConnContext puts into each of its requests' contexts.
type peerConn struct {
	net.Conn
	id *identity
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		actor := "" // unknown
		p, err := PeerOf(c)
		var id *identity
		if err == nil {
			actor = localActor("?", p.UID)
			id, err = l.auth.check(p)
		}
		if err == nil {
			return &peerConn{Conn: &strictConn{Conn: c, log: l.s.log}, id: id}, nil
		}
		l.s.auditLog.Record(AuditRecord{Actor: actor, Remote: localRemote, Action: "auth", Target: "control socket",
			Result: "denied", Detail: err.Error()})
		c.Close()
	}
}

// connContext gives the requests of a control socket connection its
// peer's identity; those of the TCP listener get nothing.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.id)
	}
	return ctx
}

type peerKey struct{}

// socketIdentity returns the identity of a request that came over the
// control socket, or nil.
func socketIdentity(r *http.Request) *identity {
	id, _ := r.Context().Value(peerKey{}).(*identity)
	if id == nil {
		return nil
	}
	c := *id
	return &c
}

// ServeSocket serves the admin API on ln, a listener ListenSocket made,
// until Shutdown (which also closes ln, removing the socket file); it
// returns nil after Shutdown. Only peers of this process's uid and root
// are served.
func (s *Server) ServeSocket(ln net.Listener) error {
	err := s.http.Serve(&peerListener{Listener: ln, s: s, auth: newSocketAuth(os.Getuid())})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
