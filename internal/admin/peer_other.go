//go:build !linux

package admin

import (
	"errors"
	"fmt"
	"net"
)

// PeerOf returns the credentials of the process at the other end of c. It
// needs Linux (SO_PEERCRED); elsewhere every peer is refused.
func PeerOf(net.Conn) (Peer, error) {
	return Peer{}, fmt.Errorf("cannot read the peer's credentials: %w", errors.ErrUnsupported)
}
