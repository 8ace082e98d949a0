package admin

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
)

// The admin listener answers only requests whose Host names it: a page
// on another site cannot reach it through DNS rebinding (its name made to
// resolve to 127.0.0.1), which would otherwise let that page read the
// routes that need no user (/healthz, /readyz, /api/v1/setup, the login).
// Accepted are localhost, any loopback address, the address the listener
// is bound to (unless that is 0.0.0.0 or ::) and the names in Options.Hosts
// (admin.hosts); the port is not compared. Anything else is a 421.

// hostAllow is the set of accepted Host names, lower case, without port
// or trailing dot. It is safe for concurrent use: Serve adds the
// listener's address while requests may be checked.
type hostAllow struct {
	mu    sync.RWMutex
	names map[string]bool
}

func newHostAllow(configured []string) *hostAllow {
	h := &hostAllow{names: map[string]bool{"localhost": true}}
	for _, n := range configured {
		h.names[normalHost(n)] = true
	}
	return h
}

// listening accepts the address the listener is bound to.
func (s *Server) listening(a net.Addr) {
	ta, ok := a.(*net.TCPAddr)
	if !ok || ta.IP.IsUnspecified() {
		return
	}
	s.hosts.mu.Lock()
	s.hosts.names[normalHost(ta.IP.String())] = true
	s.hosts.mu.Unlock()
}

// allowed reports whether a Host header names this listener.
func (h *hostAllow) allowed(host string) bool {
	if hp, _, err := net.SplitHostPort(host); err == nil {
		host = hp
	}
	host = normalHost(host)
	if a, err := netip.ParseAddr(host); err == nil && a.Unmap().IsLoopback() {
		return true
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.names[host]
}

// normalHost lower-cases a name, drops an IPv6 literal's brackets and one
// trailing dot, and writes an IPv6 address canonically.
func normalHost(n string) string {
	n = strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(n, "["), "]"), "."))
	if a, err := netip.ParseAddr(n); err == nil {
		return a.Unmap().String()
	}
	return n
}

// checkHost answers 421 to a request whose Host is not accepted, and 400
// to one with two Authorization fields (authenticate reads the first; a
// proxy in front may have checked or stripped the other).
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts.allowed(r.Host) {
			w.Header().Set("Connection", "close")
			text(w, http.StatusMisdirectedRequest, "unknown host: this listener answers localhost, loopback addresses, its own address and admin.hosts")
			return
		}
		if len(r.Header.Values("Authorization")) > 1 {
			s.audit(r, "", "auth", r.URL.Path, "denied", "more than one Authorization header")
			writeError(w, http.StatusBadRequest, "more than one Authorization header")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ValidHostName reports whether n may be listed in admin.hosts: a DNS name
// or an IP address, without port, userinfo or wildcard.
func ValidHostName(n string) bool {
	if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(n, "["), "]")); err == nil {
		return true
	}
	n = strings.TrimSuffix(n, ".")
	if n == "" || len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
