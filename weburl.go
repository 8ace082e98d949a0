package tsubame

import (
	"net/netip"
	"strings"
)

// CheckWebURL is the one rule for the URLs a creative sends browsers to
// or loads in them: its click destination (which signing checks again at
// every Sign, internal/track), its image and its media. Import and every
// store write check the model with it, and signing with it alone, so that
// nothing stored is refused when it is signed (a decision that would fail,
// or a bid that would not be made). It admits what a browser and this
// server read one way:
//
//   - 1 to maxLen bytes of printable ASCII, without spaces or backslashes
//     (a browser reads '\' as '/': https://evil.example\@ours.example/);
//     other characters are written percent-encoded, and every '%' starts an
//     escape of two hex digits;
//   - an http or https scheme (in any case) and "//";
//   - no user info: https://ours.example@evil.example/ goes to evil.example;
//   - a host of letters, digits, '-' and '.' (an IDN in its ASCII form,
//     xn--...; no '_'), or an IPv6 address in brackets, then an optional
//     port from 1 to 65535;
//   - then anything from the first '/', '?' or '#'.
//
// It reads the URL by hand rather than through net/url, which allocates
// and cost half of a Sign; everything it admits, net/url parses to the same
// scheme and host. The error is EINVALID, its message phrased to follow the
// name of the field it is about.
func CheckWebURL(s string, maxLen int) error {
	if len(s) > maxLen {
		return Errorf(EINVALID, "longer than %d bytes", maxLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return errURLChars
		}
	}
	rest, ok := cutHTTPScheme(s)
	if !ok {
		return errURLNotAbsolute
	}
	auth, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		auth, tail = rest[:i], rest[i:]
	}
	if strings.IndexByte(auth, '@') >= 0 {
		return errURLUserInfo
	}
	host, port := auth, ""
	if strings.HasPrefix(auth, "[") {
		end := strings.IndexByte(auth, ']')
		if end < 0 {
			return errURLHost
		}
		host, port = auth[:end+1], auth[end+1:]
		if a, err := netip.ParseAddr(host[1:end]); err != nil || !a.Is6() || a.Zone() != "" {
			return errURLHost
		}
	} else {
		if i := strings.IndexByte(auth, ':'); i >= 0 {
			host, port = auth[:i], auth[i:]
		}
		if !regName(host) {
			if host == "" {
				return errURLNotAbsolute
			}
			return errURLHost
		}
	}
	if port != "" && !validPort(port) {
		return errURLPort
	}
	for i := 0; i < len(tail); i++ {
		if tail[i] == '%' && (i+2 >= len(tail) || !isHex(tail[i+1]) || !isHex(tail[i+2])) {
			return errURLEscape
		}
	}
	return nil
}

// CheckClickURL is CheckWebURL for a click destination: at most
// MaxClickLength bytes, since its click tracking URL carries it, signed.
func CheckClickURL(s string) error { return CheckWebURL(s, MaxClickLength) }

var (
	errURLChars = &Error{Code: EINVALID, Message: "must be printable ASCII without spaces or backslashes: " +
		"percent-encode other characters (/%E5%BA%83 for /広) and write an international domain name in its ASCII form (xn--...)"}
	errURLNotAbsolute = &Error{Code: EINVALID, Message: "must be an absolute http or https URL"}
	errURLUserInfo    = &Error{Code: EINVALID, Message: "must not carry user info (a name and '@' before the host): a browser goes to the host after the '@'"}
	errURLHost        = &Error{Code: EINVALID, Message: "host must be letters, digits, '-' and '.' (an international domain name in its xn-- form; no '_'), or an IPv6 address in brackets"}
	errURLPort        = &Error{Code: EINVALID, Message: "port must be a number from 1 to 65535"}
	errURLEscape      = &Error{Code: EINVALID, Message: "has a '%' that does not start an escape of two hex digits (write '%25' for a '%')"}
)

// cutHTTPScheme cuts "http://" or "https://", in any case, off s.
func cutHTTPScheme(s string) (string, bool) {
	for _, p := range [...]string{"https://", "http://"} {
		if len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) {
			return s[len(p):], true
		}
	}
	return "", false
}

// regName reports whether host is a non-empty name of letters, digits,
// '-' and '.' that is not only dots.
func regName(host string) bool {
	alnum := false
	for i := 0; i < len(host); i++ {
		switch c := host[i]; {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
			alnum = true
		case c == '-' || c == '.':
		default:
			return false
		}
	}
	return alnum
}

// validPort reports whether p is ":" and a port from 1 to 65535.
func validPort(p string) bool {
	if len(p) < 2 || len(p) > 6 || p[0] != ':' {
		return false
	}
	n := 0
	for i := 1; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n >= 1 && n <= 65535
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
