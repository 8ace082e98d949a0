// Package render turns placements into response bytes: the response
// formats (format.go: a table of extension, content type, payload encoding
// and framing; one file per format), the payload encodings a cache entry
// keeps (JSON, VAST), and the validation of the request values that end up
// in a response (the JSONP callback). It knows nothing of HTTP servers:
// adapters hand it an io.Writer and take a status from HTTPStatus.
//
// It imports only the domain (the root package); layering checked by arch_test.go.
package render

import (
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"tsubame"
)

// Content types written by the public listener.
const (
	ContentTypeJS   = "application/javascript; charset=utf-8"
	ContentTypeJSON = "application/json; charset=utf-8"
	ContentTypeXML  = "application/xml; charset=utf-8"
	ContentTypeText = "text/plain; charset=utf-8"
)

// MaxCallbackLength bounds the callback parameter, which is echoed into the body.
const MaxCallbackLength = 128

// NotFoundPayload is the payload for an unknown placement: still a valid
// document of the usual shape, so a page's callback sees no ads rather than
// a script error.
var NotFoundPayload = []byte(`{"urls":[],"error":"placement not found"}`)

// ValidCallback reports whether cb is a JavaScript identifier path
// ([A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*) of at most MaxCallbackLength bytes.
// Anything else could inject script, so the server refuses it.
func ValidCallback(cb []byte) bool {
	if len(cb) == 0 || len(cb) > MaxCallbackLength {
		return false
	}
	start := true
	for _, c := range cb {
		switch {
		case c == '.':
			if start {
				return false
			}
			start = true
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '$':
			start = false
		case c >= '0' && c <= '9':
			if start {
				return false
			}
		default:
			return false
		}
	}
	return !start
}

// Write writes payload framed for f: "callback(payload);" for a format
// with a callback (JSONP), the bare payload otherwise. The callback must
// have passed ValidCallback.
func Write(w io.Writer, f Format, callback, payload []byte) {
	if f.Callback() {
		_, _ = w.Write(callback)
		_, _ = w.Write(openParen)
		_, _ = w.Write(payload)
		_, _ = w.Write(closeParen)
		return
	}
	_, _ = w.Write(payload)
}

var (
	openParen  = []byte("(")
	closeParen = []byte(");")
)

const hex = "0123456789abcdef"

// AppendJSONString appends s as a JSON string that is also safe inside an
// HTML <script> element and as JavaScript source: '<', '>' and '&' are
// escaped as \u003c etc., U+2028 and U+2029 (line terminators in older
// JavaScript) as \u2028 and \u2029, control characters as \u00XX, and invalid
// UTF-8 is replaced by U+FFFD. It matches encoding/json's output for s.
// Hand-written because encoding/json cannot append into a caller's buffer, and
// the uncached read path encodes on every request.
func AppendJSONString(dst []byte, s string) []byte {
	return appendJSONString(dst, s, false)
}

// AppendJSONLogString is AppendJSONString for log lines: it also escapes DEL
// and the C1 control characters (U+0080 to U+009F), which JSON allows raw but
// a terminal reading the log may act on.
func AppendJSONLogString(dst []byte, s string) []byte {
	return appendJSONString(dst, s, true)
}

// IsPlainJSON reports whether AppendJSONString writes s as it is, but for
// its '&'s (\u0026): printable ASCII but '"', '\\', '<' and '>'. Such a
// string (a URL of our own making) AppendPlainJSON writes without looking
// at each byte.
func IsPlainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if !jsonSafe[s[i]] && s[i] != '&' {
			return false
		}
	}
	return true
}

// AppendPlainJSON is AppendJSONString of a string IsPlainJSON is true of:
// a copy with its '&'s escaped, found by a vector scan.
func AppendPlainJSON(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for {
		i := strings.IndexByte(s, '&')
		if i < 0 {
			break
		}
		dst = append(append(dst, s[:i]...), `\u0026`...)
		s = s[i+1:]
	}
	return append(append(dst, s...), '"')
}

// jsonSafe marks the bytes written as they are: printable ASCII but '"',
// '\\', '<', '>' and '&'; jsonLogSafe also leaves DEL out. One load per
// byte where the comparisons took six (BenchmarkAppendJSONString).
var jsonSafe, jsonLogSafe = func() (safe, logSafe [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		safe[c] = !strings.ContainsRune(`"\<>&`, rune(c))
		logSafe[c] = safe[c] && c != 0x7f
	}
	return
}()

func appendJSONString(dst []byte, s string, strict bool) []byte {
	safe := &jsonSafe
	if strict {
		safe = &jsonLogSafe
	}
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if safe[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		if strict && r < 0xa0 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// HTTPStatus maps a domain error to its HTTP status. It is the one place where
// that mapping lives; both listeners use it.
func HTTPStatus(err error) int {
	switch tsubame.ErrorCode(err) {
	case "":
		return http.StatusOK
	case tsubame.EINVALID:
		return http.StatusBadRequest
	case tsubame.ENOTFOUND:
		return http.StatusNotFound
	case tsubame.ECONFLICT:
		return http.StatusConflict
	case tsubame.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	case tsubame.EUNAUTHORIZED:
		return http.StatusUnauthorized
	case tsubame.EFORBIDDEN:
		return http.StatusForbidden
	case tsubame.ETOOLARGE:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}
