package openrtb

import (
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"tsubame"
)

// scanner reads JSON text in place: a value is taken as it is read, and one
// the decoder does not want is checked and skipped, never built. Strings
// without escapes are returned as views of the text; the others are
// unescaped into esc, made once per text when its first escaped string is
// read. Every string it returns shares memory with the text or esc, which
// it never writes again: they live as long as their strings.
type scanner struct {
	b   []byte
	i   int
	esc []byte
	// depth counts the arrays and objects open around the value read.
	depth int
	err   error
}

// maxDepth bounds the nesting of arrays and objects, as encoding/json's.
const maxDepth = 10000

var (
	errSyntax   = tsubame.Errorf(tsubame.EINVALID, "bid request: not OpenRTB JSON: a syntax error")
	errDepth    = tsubame.Errorf(tsubame.EINVALID, "bid request: not OpenRTB JSON: nested too deep")
	errType     = tsubame.Errorf(tsubame.EINVALID, "bid request: not OpenRTB JSON: a value of the wrong type")
	errTrailing = tsubame.Errorf(tsubame.EINVALID, "bid request: not OpenRTB JSON: text after the object")
)

func (s *scanner) reset(b []byte) {
	*s = scanner{b: b}
}

// fail records err, the first error, and returns false.
func (s *scanner) fail(err error) bool {
	if s.err == nil {
		s.err = err
	}
	s.i = len(s.b)
	return false
}

// ws skips white space and returns the next byte, 0 at the end.
func (s *scanner) ws() byte {
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c > ' ' || c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c
		}
		s.i++
		// Indentation: eight spaces at a time.
		for s.i+8 <= len(s.b) && binary.LittleEndian.Uint64(s.b[s.i:]) == spaces8 {
			s.i += 8
		}
	}
	return 0
}

// end checks that nothing but white space follows the value read.
func (s *scanner) end() {
	if s.err == nil && s.ws() != 0 {
		s.fail(errTrailing)
	}
}

// null reads a null if one is next.
func (s *scanner) null() bool {
	if s.ws() != 'n' {
		return false
	}
	return s.literal("null")
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.fail(errSyntax)
	}
	s.i += len(lit)
	return true
}

// open reads c, which begins an array or an object, and reports whether it
// was next; anything else is a type error (a syntax error at the end).
func (s *scanner) open(c byte) bool {
	switch s.ws() {
	case c:
		s.depth++
		if s.depth > maxDepth {
			return s.fail(errDepth)
		}
		s.i++
		return true
	case 0:
		return s.fail(errSyntax)
	}
	return s.fail(errType)
}

// more reports whether the array or object being read, closed by c, has
// another element: it reads the comma before every element but the first
// (n counts them) and the closing c.
func (s *scanner) more(c byte, n *int) bool {
	if s.err != nil {
		return false
	}
	next := s.ws()
	if next == c {
		s.i++
		s.depth--
		return false
	}
	if *n > 0 {
		if next != ',' {
			return s.fail(errSyntax)
		}
		s.i++
		s.ws()
	}
	*n++
	return true
}

// key reads an object member's name and its colon. It returns the name
// lower-cased when it is short, as encoding/json matches names regardless
// of case, into buf.
func (s *scanner) key(buf *[32]byte) []byte {
	raw, esc, ok := s.quoted()
	if !ok {
		return nil
	}
	if s.ws() != ':' {
		s.fail(errSyntax)
		return nil
	}
	s.i++
	if esc {
		raw = unescape(buf[:0], raw)
		if len(raw) > len(buf) {
			return nil // longer than any name read: no match
		}
	} else if len(raw) > len(buf) {
		return nil
	}
	k := buf[:len(raw)]
	for i, c := range raw {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		k[i] = c
	}
	return k
}

// quoted reads a string and returns its text between the quotes, as
// written, and whether it has escapes.
func (s *scanner) quoted() (raw []byte, esc bool, ok bool) {
	if s.ws() != '"' {
		if s.i == len(s.b) {
			return nil, false, s.fail(errSyntax)
		}
		if c := s.b[s.i]; c == '}' || c == ']' || c == ',' || c == ':' {
			return nil, false, s.fail(errSyntax)
		}
		return nil, false, s.fail(errType)
	}
	start := s.i + 1
	for i := start; i < len(s.b); i++ {
		if plain[s.b[i]] {
			continue
		}
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return s.b[start:i], esc, true
		case c == '\\':
			esc = true
			i++
			if i == len(s.b) {
				return nil, false, s.fail(errSyntax)
			}
			switch s.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s.b) || !isHex4(s.b[i+1:i+5]) {
					return nil, false, s.fail(errSyntax)
				}
				i += 4
			default:
				return nil, false, s.fail(errSyntax)
			}
		case c < 0x20:
			return nil, false, s.fail(errSyntax)
		}
	}
	return nil, false, s.fail(errSyntax)
}

const spaces8 = 0x2020202020202020

// plain marks the bytes a string's text needs no look at: all but the
// quote, the backslash and the control characters.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// text returns the string raw, from quoted, as encoding/json reads it
// into a string.
func (s *scanner) text(raw []byte, esc bool) string {
	if !esc && utf8.Valid(raw) {
		return asString(raw)
	}
	return s.unescaped(raw)
}

// textAsWritten returns the string raw, from quoted, as String's and
// Text's UnmarshalJSON read it: without escapes, its bytes as they are.
func (s *scanner) textAsWritten(raw []byte, esc bool) string {
	if !esc {
		return asString(raw)
	}
	return s.unescaped(raw)
}

// asString is b as a string, without a copy.
func asString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// unescaped returns raw, from quoted, unescaped into s.esc.
func (s *scanner) unescaped(raw []byte) string {
	if cap(s.esc) == 0 {
		s.esc = make([]byte, 0, max(len(s.b), 3*len(raw))) // invalid UTF-8 grows: a byte is U+FFFD's three
	}
	from := len(s.esc)
	if cap(s.esc)-from < 3*len(raw) { // never move the strings returned
		s.esc = make([]byte, 0, max(2*cap(s.esc), 3*len(raw)))
		from = 0
	}
	s.esc = unescape(s.esc, raw)
	if from == len(s.esc) {
		return ""
	}
	return unsafe.String(&s.esc[from], len(s.esc)-from)
}

// unescape appends raw, a JSON string's text checked by quoted, to dst as
// encoding/json decodes it: escapes read, lone surrogates and invalid
// UTF-8 made U+FFFD.
func unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			i++
			switch raw[i] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i+1:])
				i += 4
				if utf16.IsSurrogate(r) {
					if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
						if r2 := utf16.DecodeRune(r, hex4(raw[i+3:])); r2 != utf8.RuneError {
							r = r2
							i += 6
						} else {
							r = utf8.RuneError
						}
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
			default: // " \ /
				dst = append(dst, raw[i])
			}
			i++
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				dst = utf8.AppendRune(dst, r)
			} else {
				dst = append(dst, raw[i:i+n]...)
			}
			i += n
		}
	}
	return dst
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// value reads any value, checking it, and returns its text as written.
func (s *scanner) value() []byte {
	s.ws()
	start := s.i
	if !s.skip() {
		return nil
	}
	return s.b[start:s.i]
}

// skip reads any value, checking its syntax.
func (s *scanner) skip() bool {
	switch c := s.ws(); {
	case c == '"':
		_, _, ok := s.quoted()
		return ok
	case c == '{':
		s.open('{')
		n := 0
		for s.more('}', &n) {
			if _, _, ok := s.quoted(); !ok {
				return false
			}
			if s.ws() != ':' {
				return s.fail(errSyntax)
			}
			s.i++
			if !s.skip() {
				return false
			}
		}
		return s.err == nil
	case c == '[':
		s.open('[')
		n := 0
		for s.more(']', &n) {
			if !s.skip() {
				return false
			}
		}
		return s.err == nil
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return s.fail(errSyntax)
}

// number reads a number as JSON writes it.
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return s.fail(errSyntax)
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return s.fail(errSyntax)
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return s.fail(errSyntax)
		}
	}
	s.i = i
	return true
}
