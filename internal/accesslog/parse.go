package accesslog

import (
	"bytes"
	"errors"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// Reading a line back into its fields: what the reports do with every
// event line. Both formats are this package's own, so the reader is
// strict: a line it did not write is an error, never a guess.

// Line is one log line read back: its time and its fields in order, each
// value unescaped (LTSV's "-" reads as empty; JSON numbers, booleans and
// null as written). A Line is reused from one Parse to the next; the
// values it returns are valid until then.
type Line struct {
	Time   time.Time
	fields []lineField
	buf    []byte
}

// lineField is a field's label and value: copies in Line.buf (Parse), or
// views of the line read where it needs no unescaping (View). A slice
// taken of buf stays right when a later append moves buf: the array it
// views keeps what was written in it.
type lineField struct {
	label, value []byte
}

// maxLineFields bounds the fields a line may have: a request's 16, an
// event's 14 fixed ones and MaxExtra more.
const maxLineFields = 14 + MaxExtra + 2

var (
	errLineFormat = errors.New("not an access-log line")
	errLineFields = errors.New("access-log line with too many fields")
)

// IsEventLine reports, from its start, whether line is an event line
// (Record.Event) in either format, without reading it.
func IsEventLine(line []byte) bool {
	const stamp = len(stampLayout)
	if bytes.HasPrefix(line, []byte(ltsvTimePrefix)) {
		return bytes.HasPrefix(line[min(len(line), len(ltsvTimePrefix)+stamp):], []byte("\tevent:"))
	}
	return bytes.HasPrefix(line, []byte(jsonTimePrefix)) &&
		bytes.HasPrefix(line[min(len(line), len(jsonTimePrefix)+stamp):], []byte(`","event":`))
}

// Parse reads line (with or without its newline), in either format.
func (l *Line) Parse(line []byte) error { return l.parse(line, false) }

// View reads line as Parse does, but leaves in line what it can: a label,
// and a value with nothing to unescape, is a view of line's bytes, not a
// copy (a value with an escape is unescaped into l, as Parse does). What
// it returns is valid until the next Parse or View, and only while line's
// bytes do not change: for a reader done with each line before it reads
// the next, such as the reports' count of a file's lines.
func (l *Line) View(line []byte) error { return l.parse(line, true) }

func (l *Line) parse(line []byte, view bool) error {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	t, ok := lineTime(line)
	if !ok {
		return errLineFormat
	}
	l.Time, l.fields, l.buf = t, l.fields[:0], l.buf[:0]
	if line[0] == '{' {
		return l.parseJSON(line, view)
	}
	return l.parseLTSV(line, view)
}

// Get returns the value labelled label, and whether the line has it.
func (l *Line) Get(label string) ([]byte, bool) {
	for _, f := range l.fields {
		if string(f.label) == label {
			return f.value, true
		}
	}
	return nil, false
}

// String is Get's value as a string ("" when absent).
func (l *Line) String(label string) string {
	v, _ := l.Get(label)
	return string(v)
}

// Int is Get's value as an integer (0 when absent or not one).
func (l *Line) Int(label string) int64 {
	v, _ := l.Get(label)
	return Int(v)
}

// Int reads a field's value as Line.Int does: an integer, 0 when it is
// not one (out of range: the nearest).
func Int(v []byte) int64 {
	n, _ := strconv.ParseInt(unsafeString(v), 10, 64)
	return n
}

// Bool is Get's value as a boolean (false when absent or not one).
func (l *Line) Bool(label string) bool {
	v, _ := l.Get(label)
	return string(v) == "true"
}

// Field is the label and value of the i-th field read (0 ≤ i < Len), for
// a reader of many fields: one pass instead of a Get each.
func (l *Line) Field(i int) (label, value []byte) {
	f := &l.fields[i]
	return f.label, f.value
}

// Len is the number of fields read.
func (l *Line) Len() int { return len(l.fields) }

// label is a field's label as the line keeps it: a copy in buf (a label
// copied in costs less than a lookup to intern it), or with view b itself.
func (l *Line) label(b []byte, view bool) []byte {
	if view {
		return b[:len(b):len(b)] // an append to it cannot reach the value
	}
	at := len(l.buf)
	l.buf = append(l.buf, b...)
	return l.buf[at:]
}

// add closes a field whose value is value, or with value nil the bytes
// appended to buf since start.
func (l *Line) add(label, value []byte, start int) error {
	if len(l.fields) == maxLineFields {
		return errLineFields
	}
	if value == nil {
		value = l.buf[start:len(l.buf):len(l.buf)]
	}
	l.fields = append(l.fields, lineField{label: label, value: value})
	return nil
}

func (l *Line) parseLTSV(line []byte, view bool) error {
	for rest := line; len(rest) > 0; {
		f := rest
		if i := bytes.IndexByte(rest, '\t'); i >= 0 {
			f, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		// A label is a few bytes: a loop finds its end for less than a
		// call would.
		c := 0
		for c < len(f) && f[c] != ':' {
			c++
		}
		if c == 0 || c == len(f) {
			return errLineFormat
		}
		label := l.label(f[:c], view)
		start := len(l.buf)
		var value []byte // nil: what is appended to buf from start
		switch v := f[c+1:]; {
		case string(v) == "-":
		case view && bytes.IndexByte(v, '\\') < 0:
			value = v[:len(v):len(v)]
		default:
			var err error
			if l.buf, err = unescapeLTSV(l.buf, v); err != nil {
				return err
			}
		}
		if err := l.add(label, value, start); err != nil {
			return err
		}
	}
	return nil
}

// unescapeLTSV reverses appendLTSVValue. What lies between escapes is
// copied a run at a time: most values have none.
func unescapeLTSV(dst, v []byte) ([]byte, error) {
	for i := 0; i < len(v); i++ {
		j := bytes.IndexByte(v[i:], '\\')
		if j < 0 {
			return append(dst, v[i:]...), nil
		}
		dst = append(dst, v[i:i+j]...)
		i += j // at the escape's backslash
		if i+1 >= len(v) {
			return dst, errLineFormat
		}
		i++
		switch v[i] {
		case 't':
			dst = append(dst, '\t')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case '\\':
			dst = append(dst, '\\')
		case 'x':
			if i+2 >= len(v) {
				return dst, errLineFormat
			}
			h, ok1 := unhex(v[i+1])
			lo, ok2 := unhex(v[i+2])
			if !ok1 || !ok2 {
				return dst, errLineFormat
			}
			dst = append(dst, h<<4|lo)
			i += 2
		default:
			return dst, errLineFormat
		}
	}
	return dst, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseJSON reads the flat object appendJSON and appendEventJSON write:
// string, number, boolean and null values, no nesting.
func (l *Line) parseJSON(line []byte, view bool) error {
	if len(line) < 2 || line[0] != '{' || line[len(line)-1] != '}' {
		return errLineFormat
	}
	rest := line[1 : len(line)-1]
	for len(rest) > 0 {
		if rest[0] != '"' {
			return errLineFormat
		}
		end := bytes.IndexByte(rest[1:], '"') // labels are plain
		if end < 0 || len(rest) < end+3 || rest[end+2] != ':' {
			return errLineFormat
		}
		label := l.label(rest[1:end+1], view)
		rest = rest[end+3:]
		start := len(l.buf)
		var value []byte // nil: what is appended to buf from start
		switch {
		case len(rest) > 0 && rest[0] == '"':
			if view {
				if n := plainJSON(rest); n > 0 { // nothing to unescape
					value, rest = rest[1:n-1:n-1], rest[n:]
					break
				}
			}
			var err error
			var n int
			if l.buf, n, err = unescapeJSON(l.buf, rest); err != nil {
				return err
			}
			rest = rest[n:]
		default:
			i := bytes.IndexByte(rest, ',')
			if i < 0 {
				i = len(rest)
			}
			switch v := rest[:i]; {
			case string(v) == "null":
			case view:
				value = v[:len(v):len(v)]
			default:
				l.buf = append(l.buf, v...)
			}
			rest = rest[i:]
		}
		if err := l.add(label, value, start); err != nil {
			return err
		}
		if len(rest) > 0 {
			if rest[0] != ',' {
				return errLineFormat
			}
			rest = rest[1:]
		}
	}
	return nil
}

// plainJSON is the length of the string s starts with (its opening quote
// at s[0]) with both quotes, when nothing in it is escaped; 0 when
// something is, or it does not end.
func plainJSON(s []byte) int {
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1
		case c == '\\' || c < 0x20:
			return 0
		}
	}
	return 0
}

// unescapeJSON appends the string s starts with (its opening quote at
// s[0]) unescaped, and returns how many bytes of s it took.
func unescapeJSON(dst, s []byte) ([]byte, int, error) {
	// The run up to the first quote, backslash or control character is
	// copied whole: most values have no escape at all.
	i := 1
	for i < len(s) && s[i] != '"' && s[i] != '\\' && s[i] >= 0x20 {
		i++
	}
	dst = append(dst, s[1:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return dst, i + 1, nil
		case c < 0x20:
			return dst, 0, errLineFormat
		case c != '\\':
			dst = append(dst, c)
			continue
		}
		if i+1 >= len(s) {
			return dst, 0, errLineFormat
		}
		i++
		switch s[i] {
		case '"', '\\', '/':
			dst = append(dst, s[i])
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
			r, ok := hex4(s[i+1:])
			if !ok {
				return dst, 0, errLineFormat
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if i+2 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					r2, ok = hex4(s[i+3:])
				}
				if r = utf16.DecodeRune(r, r2); ok && r != utf8.RuneError {
					i += 6
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, 0, errLineFormat
		}
	}
	return dst, 0, errLineFormat
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		h, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	return r, true
}
