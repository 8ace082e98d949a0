package admin

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// PeerOf returns the credentials of the process at the other end of c, a
// Unix-domain connection (SO_PEERCRED).
func PeerOf(c net.Conn) (Peer, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return Peer{}, errors.New("not a Unix-domain connection")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if credErr != nil {
		return Peer{}, fmt.Errorf("cannot read the peer's credentials: %w", credErr)
	}
	return Peer{UID: int(cred.Uid), PID: int(cred.Pid)}, nil
}
