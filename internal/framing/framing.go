// Package framing holds the strict HTTP/1.1 request-head rules both
// listeners apply on top of their parsers: the shapes a front proxy might
// frame differently from the server (request smuggling) and the Host values
// RFC 9112 §3.2 makes a 400. The public listener (fasthttp) and the admin
// listener (net/http) each parse requests their own way; these functions
// take a second look at the raw bytes, in one pass and without allocating.
//
// It imports nothing of ours.
package framing

import (
	"bytes"
	"encoding/binary"
)

// Error says why a request head is refused; "" accepts it.
type Error string

// The reasons a head is refused.
const (
	ErrBareLF      Error = "a header line ends in a bare LF"
	ErrBareCR      Error = "a bare CR in the request head"
	ErrCTL         Error = "a control character in a header value"
	ErrObsFold     Error = "obsolete line folding"
	ErrFieldName   Error = "invalid header field name"
	ErrCLAndTE     Error = "both Content-Length and Transfer-Encoding"
	ErrTEValue     Error = "Transfer-Encoding other than chunked"
	ErrTEOnHTTP10  Error = "Transfer-Encoding on an HTTP/1.0 request"
	ErrCLValue     Error = "invalid Content-Length"
	ErrCLTwice     Error = "Content-Length twice"
	ErrVersion     Error = "HTTP version other than 1.0 and 1.1"
	ErrRequestLine Error = "invalid request line"
	ErrUnfinished  Error = "unterminated header block"
	ErrNoHost      Error = "HTTP/1.1 request without Host"
	ErrHostTwice   Error = "Host twice"
	ErrHost        Error = "invalid Host header"
	ErrTarget      Error = "invalid authority in the request target"
	ErrSlashSlash  Error = "request target starting with //"
)

// Head is what Fields learns of a head's framing.
type Head struct {
	ContentLength int64 // -1: none
	Chunked       bool
	Hosts         int // Host field lines seen
}

var (
	nameContentLength    = []byte("content-length")
	nameTransferEncoding = []byte("transfer-encoding")
	nameHost             = []byte("host")
	valChunked           = []byte("chunked")
)

// tchar marks the bytes allowed in a token (RFC 9110 §5.6.2): field names
// and methods.
var tchar = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&'*+-.^_`|~")

// regName marks the bytes of a reg-name or IPv4 address (RFC 3986 §3.2.2:
// unreserved, sub-delims and the % of pct-encoded); ipLiteral those inside
// the brackets of an IPv6 address.
var (
	regName   = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-._~!$&'()*+,;=%")
	ipLiteral = set("0123456789abcdefABCDEF:.")
	hexDigit  = set("0123456789abcdefABCDEF")
)

func set(s string) (t [256]bool) {
	for i := 0; i < len(s); i++ {
		t[s[i]] = true
	}
	return t
}

// Fields checks the field lines of a request head, raw (everything after
// the request line, through the blank line that ends the head), and fills
// h. Every line must end in CRLF, no line may be folded, names must be
// tokens, values free of CR and other controls but tab; Content-Length must
// be one plain decimal and never beside Transfer-Encoding, which may only
// say chunked; each Host value must be a valid authority without userinfo.
func Fields(raw []byte, h *Head) Error {
	h.ContentLength, h.Chunked, h.Hosts = -1, false, 0
	var te bool
	for len(raw) > 0 { // fasthttp's raw headers may or may not keep the blank line
		nl := bytes.IndexByte(raw, '\n')
		if nl < 0 {
			return ErrUnfinished
		}
		if nl == 0 || raw[nl-1] != '\r' {
			return ErrBareLF
		}
		line := raw[:nl-1]
		raw = raw[nl+1:]
		if len(line) == 0 {
			break // the blank line that ends the head
		}
		if line[0] == ' ' || line[0] == '\t' {
			return ErrObsFold
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return ErrFieldName
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		for _, c := range name {
			if !tchar[c] {
				return ErrFieldName
			}
		}
		if why := checkValue(value); why != "" {
			return why
		}
		switch len(name) {
		case len(nameContentLength):
			if bytes.EqualFold(name, nameContentLength) {
				if h.ContentLength >= 0 {
					return ErrCLTwice
				}
				if h.ContentLength = parseLength(value); h.ContentLength < 0 {
					return ErrCLValue
				}
			}
		case len(nameTransferEncoding):
			if bytes.EqualFold(name, nameTransferEncoding) {
				if te || !bytes.EqualFold(value, valChunked) {
					return ErrTEValue
				}
				te, h.Chunked = true, true
			}
		case len(nameHost):
			if bytes.EqualFold(name, nameHost) {
				h.Hosts++
				if !ValidHost(value) {
					return ErrHost
				}
			}
		}
	}
	if te && h.ContentLength >= 0 {
		return ErrCLAndTE
	}
	return ""
}

// checkValue refuses a field value with a CR or another control byte but
// tab. Values are mostly printable: eight bytes at a time are checked for
// a byte below 0x20 or a DEL at once (hasless and haszero of Bit Twiddling
// Hacks, exact as a whole), and the bytes from the first eight that may
// hold one on are read one by one, to tell a tab (allowed) from the rest.
func checkValue(v []byte) Error {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(v); i += 8 {
		x := binary.LittleEndian.Uint64(v[i:])
		del := x ^ 0x7f*ones
		if ((x-0x20*ones)&^x|(del-ones)&^del)&highs != 0 {
			break
		}
	}
	for _, c := range v[i:] {
		if c == '\r' {
			return ErrBareCR
		}
		if (c < ' ' && c != '\t') || c == 0x7f {
			return ErrCTL
		}
	}
	return ""
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// parseLength reads a Content-Length: 1 to 18 decimal digits, or -1.
func parseLength(b []byte) int64 {
	if len(b) == 0 || len(b) > 18 {
		return -1
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// ValidHost reports whether v is a valid Host value (RFC 9110 §7.2: uri-host
// [":" port], RFC 3986 §3.2.2): empty, a reg-name or IPv4 address, or an
// IPv6 address in brackets, then an optional port of digits. Userinfo ("@")
// and any byte those cannot hold are refused, and so is a % not followed by
// two hex digits.
func ValidHost(v []byte) bool {
	host := v
	if len(v) > 0 && v[0] == '[' {
		end := bytes.IndexByte(v, ']')
		if end < 2 {
			return false
		}
		for _, c := range v[1:end] {
			if !ipLiteral[c] {
				return false
			}
		}
		host, v = nil, v[end+1:]
		if len(v) > 0 && v[0] != ':' {
			return false
		}
	} else if i := bytes.IndexByte(v, ':'); i >= 0 {
		host, v = v[:i], v[i:]
	} else {
		v = nil
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !regName[c] {
			return false
		}
		if c == '%' && (i+2 >= len(host) || !hexDigit[host[i+1]] || !hexDigit[host[i+2]]) {
			return false
		}
	}
	if len(v) > 0 { // ":" port
		for _, c := range v[1:] {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// Target checks a request target's authority, if it has one in the sense
// the public listener's parser (fasthttp) gives it: "scheme://authority/..."
// (absolute-form), and "//authority/..." too, which RFC 9112 reads as a
// path but fasthttp as an authority — refused, so that no front proxy and
// Tsubame disagree on the host. An authority must be a valid Host value.
func Target(uri []byte) Error {
	n := bytes.Index(uri, slashSlash)
	if n < 0 || bytes.IndexByte(uri[:n], '/') >= 0 {
		return "" // origin-form, authority-form or asterisk-form
	}
	if n == 0 {
		return ErrSlashSlash
	}
	auth := uri[n+2:]
	if end := bytes.IndexAny(auth, "/?#"); end >= 0 {
		auth = auth[:end]
	}
	if !ValidHost(auth) {
		return ErrTarget
	}
	return ""
}

var slashSlash = []byte("//")

// RequestLine checks a request line (without its line ending): a method
// token, one space, a target without spaces or controls, one space, and
// HTTP/1.0 or HTTP/1.1 (ErrVersion for any other HTTP/d.d). It returns the
// target and whether the version is 1.1.
func RequestLine(line []byte) (target []byte, http11 bool, why Error) {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return nil, false, ErrRequestLine
	}
	for _, c := range line[:sp] {
		if !tchar[c] {
			return nil, false, ErrRequestLine
		}
	}
	rest := line[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp <= 0 {
		return nil, false, ErrRequestLine
	}
	target, version := rest[:sp], rest[sp+1:]
	for _, c := range target {
		if c <= ' ' || c == 0x7f {
			return nil, false, ErrRequestLine
		}
	}
	switch string(version) {
	case "HTTP/1.1":
		return target, true, ""
	case "HTTP/1.0":
		return target, false, ""
	}
	if len(version) == 8 && string(version[:5]) == "HTTP/" && version[6] == '.' &&
		version[5] >= '0' && version[5] <= '9' && version[7] >= '0' && version[7] <= '9' {
		return nil, false, ErrVersion
	}
	return nil, false, ErrRequestLine
}

// Request checks a whole request head, from the request line through the
// blank line, for a server whose own parser is lenient (the admin
// listener's net/http): RequestLine, Fields and Target, and Host present
// once on HTTP/1.1, Transfer-Encoding never on HTTP/1.0.
func Request(head []byte, h *Head) Error {
	nl := bytes.IndexByte(head, '\n')
	if nl < 0 {
		return ErrUnfinished
	}
	if nl == 0 || head[nl-1] != '\r' {
		return ErrBareLF
	}
	target, http11, why := RequestLine(head[:nl-1])
	if why != "" {
		return why
	}
	if why := Fields(head[nl+1:], h); why != "" {
		return why
	}
	switch {
	case h.Hosts > 1:
		return ErrHostTwice
	case http11 && h.Hosts == 0:
		return ErrNoHost
	case !http11 && h.Chunked:
		return ErrTEOnHTTP10
	}
	return Target(target)
}

// TokenByte reports whether c may appear in a token (a field name, a method).
func TokenByte(c byte) bool { return tchar[c] }
