package accesslog

import (
	"bytes"
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"

	"tsubame/internal/render"
)

// Record is one served request, or one money event of a request (Event
// set). Byte-slice fields may point into request buffers: Append copies
// what it needs before it returns.
type Record struct {
	Time      time.Time     // when the response was produced (the request arrived Duration earlier)
	Duration  time.Duration // time to produce the response
	Remote    netip.Addr    // client address
	Peer      netip.Addr    // the connection's peer (a proxy), if not Remote; logged when valid
	Host      []byte        // Host header
	Method    []byte
	Path      []byte
	Endpoint  string
	ID        []byte // placement id
	Callback  []byte
	Status    int
	Size      int // response body bytes
	UserAgent []byte
	Referer   []byte
	RequestID []byte
	// Event, if set, makes the record an event line (event.go) instead of
	// the request's line: of the request fields only Time, Remote and
	// RequestID are written with it, which tie it to the request's line.
	Event *Event
}

// Format is the line format of an access log.
type Format uint8

// Line formats. LTSV (labelled tab-separated values) is read natively by
// Fluentd and Fluent Bit; JSON lines by nearly everything else.
const (
	LTSV Format = iota
	JSON
)

// ParseFormat maps "ltsv" and "json" to their Format.
func ParseFormat(s string) (Format, bool) {
	switch s {
	case "ltsv":
		return LTSV, true
	case "json":
		return JSON, true
	}
	return 0, false
}

// timeCache remembers the formatted second of the last record, so most
// records format their time with one copy and six digits.
type timeCache struct {
	sec    int64
	prefix []byte // "2006-01-02T15:04:05."
}

func (c *timeCache) append(dst []byte, t time.Time) []byte {
	t = t.UTC()
	if s := t.Unix(); s != c.sec || c.prefix == nil {
		c.sec = s
		c.prefix = t.AppendFormat(c.prefix[:0], "2006-01-02T15:04:05.")
	}
	dst = append(dst, c.prefix...)
	us := t.Nanosecond() / 1000
	var d [6]byte
	for i := 5; i >= 0; i-- {
		d[i] = byte('0' + us%10)
		us /= 10
	}
	dst = append(dst, d[:]...)
	return append(dst, 'Z')
}

// appendRecord appends r as one line in format f, stamped t (r.Time, or
// later: see Logger.Append).
func appendRecord(dst []byte, f Format, r *Record, t time.Time, tc *timeCache) []byte {
	if r.Event != nil {
		if f == JSON {
			return appendEventJSON(dst, r, t, tc)
		}
		return appendEventLTSV(dst, r, t, tc)
	}
	if f == JSON {
		return appendJSON(dst, r, t, tc)
	}
	return appendLTSV(dst, r, t, tc)
}

// The prefixes that start a line, before its time (see lineTime).
const (
	ltsvTimePrefix = "time:"
	jsonTimePrefix = `{"time":"`
	stampLayout    = "2006-01-02T15:04:05.000000Z"
)

// lineTime reads the time a line starts with, in either format.
func lineTime(line []byte) (time.Time, bool) {
	for _, p := range []string{ltsvTimePrefix, jsonTimePrefix} {
		if len(line) >= len(p)+len(stampLayout) && string(line[:len(p)]) == p {
			stamp := line[len(p) : len(p)+len(stampLayout)]
			if t, ok := parseStamp(stamp); ok {
				return t, true
			}
			// What the fast path leaves (the 29th to 31st of a month, or
			// no stamp at all) time.Parse decides, as it did every line.
			t, err := time.Parse(stampLayout, string(stamp))
			return t, err == nil
		}
	}
	return time.Time{}, false
}

// parseStamp reads a stamp of stampLayout (2006-01-02T15:04:05.000000Z)
// without time.Parse's general layout walk: every line the reports read
// starts with one. It takes what time.Parse accepts (a day within its
// month, the 29th of February in leap years only) and reads it the same;
// ok false for anything else, which lineTime leaves to time.Parse.
func parseStamp(b []byte) (time.Time, bool) {
	if len(b) != len(stampLayout) || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' ||
		b[19] != '.' || b[26] != 'Z' {
		return time.Time{}, false
	}
	num := func(b []byte) (int, bool) {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(b[0:4])
	month, ok2 := num(b[5:7])
	day, ok3 := num(b[8:10])
	hour, ok4 := num(b[11:13])
	minute, ok5 := num(b[14:16])
	sec, ok6 := num(b[17:19])
	micro, ok7 := num(b[20:26])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, micro*1000, time.UTC), true
}

// daysIn is the number of days of month (1 to 12) in year, as time.Parse
// bounds a stamp's day.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// LineTime reads the time a log line starts with, in either format.
func LineTime(line []byte) (time.Time, bool) { return lineTime(line) }

// ValidLine reports whether line (with its newline) is a whole record as
// the writer writes them: what a crash-clean keeps.
func ValidLine(line []byte) bool { return len(line) > 0 && validRecord(line) }

// LinePlacement returns the placement id of a log line in either format,
// as written (escaped; "-" or "" when it had none): a request line's id
// field, an event line's placement field; nil when the line has neither.
// The format is told by the line's start, so a value of one format cannot
// pass for a field of the other.
func LinePlacement(line []byte) []byte {
	if bytes.HasPrefix(line, []byte(jsonTimePrefix)) {
		if v := jsonValue(line, `,"id":`); v != nil {
			return v
		}
		return jsonValue(line, `,"placement":`)
	}
	if v := ltsvValue(line, "\tid:"); v != nil {
		return v
	}
	return ltsvValue(line, "\tplacement:")
}

// LineEndpoint returns a request line's endpoint (its route's name) as
// written, or nil, in either format, without reading the rest of the line.
func LineEndpoint(line []byte) []byte {
	if bytes.HasPrefix(line, []byte(jsonTimePrefix)) {
		return jsonValue(line, `,"endpoint":`)
	}
	return ltsvValue(line, "\tendpoint:")
}

// ltsvValue returns the value labelled label ("\tid:") as written, or nil.
// No value holds a raw tab, so label is found only where a field starts.
func ltsvValue(line []byte, label string) []byte {
	i := bytes.Index(line, []byte(label))
	if i < 0 {
		return nil
	}
	v := line[i+len(label):]
	if j := bytes.IndexAny(v, "\t\n"); j >= 0 {
		v = v[:j]
	}
	return v
}

// jsonValue returns the string (without its quotes, still escaped) or the
// null under key (`,"id":`), or nil. No string holds a raw quote, so key
// is found only where a field starts.
func jsonValue(line []byte, key string) []byte {
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return nil
	}
	v := line[i+len(key):]
	if len(v) > 0 && v[0] == '"' {
		for j := 1; j < len(v); j++ {
			switch v[j] {
			case '\\':
				j++
			case '"':
				return v[1:j]
			}
		}
		return nil
	}
	if j := bytes.IndexAny(v, ",}"); j >= 0 {
		return v[:j] // null
	}
	return nil
}

func appendLTSV(dst []byte, r *Record, t time.Time, tc *timeCache) []byte {
	dst = append(dst, ltsvTimePrefix...)
	dst = tc.append(dst, t)
	dst = append(dst, "\thost:"...)
	dst = appendAddr(dst, r.Remote)
	if r.Peer.IsValid() {
		dst = append(dst, "\tpeer:"...)
		dst = appendAddr(dst, r.Peer)
	}
	dst = ltsvField(dst, "\tvhost:", r.Host)
	dst = ltsvField(dst, "\tmethod:", r.Method)
	dst = ltsvField(dst, "\turi:", r.Path)
	dst = append(dst, "\tendpoint:"...)
	dst = appendLTSVValue(dst, r.Endpoint)
	dst = ltsvField(dst, "\tid:", r.ID)
	dst = ltsvField(dst, "\tcallback:", r.Callback)
	dst = append(dst, "\tstatus:"...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(dst, "\tsize:"...)
	dst = strconv.AppendInt(dst, int64(r.Size), 10)
	dst = append(dst, "\treqtime_microsec:"...)
	dst = strconv.AppendInt(dst, r.Duration.Microseconds(), 10)
	dst = ltsvField(dst, "\tua:", r.UserAgent)
	dst = ltsvField(dst, "\treferer:", r.Referer)
	dst = ltsvField(dst, "\treqid:", r.RequestID)
	return append(dst, '\n')
}

func ltsvField(dst []byte, label string, v []byte) []byte {
	dst = append(dst, label...)
	return appendLTSVValue(dst, v)
}

// appendLTSVValue appends v so that it cannot break the line format: tab,
// newline and other control characters, the backslash, and bytes that are
// not UTF-8 are written as \t, \n, \r, \\ or \xHH; an empty value is "-".
func appendLTSVValue[T string | []byte](dst []byte, v T) []byte {
	if len(v) == 0 {
		return append(dst, '-')
	}
	start := 0
	for i := 0; i < len(v); {
		c := v[i]
		if c >= 0x20 && c < 0x7f && c != '\\' {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(string(v[i:min(i+utf8.UTFMax, len(v))]))
			if r != utf8.RuneError && r != '\u2028' && r != '\u2029' && !(r >= 0x80 && r < 0xa0) {
				i += size
				continue
			}
		}
		dst = append(dst, v[start:i]...)
		switch c {
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\\':
			dst = append(dst, '\\', '\\')
		default:
			dst = append(dst, '\\', 'x', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	return append(dst, v[start:]...)
}

const hex = "0123456789abcdef"

func appendAddr(dst []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(dst, '-')
	}
	return a.Unmap().AppendTo(dst)
}

func appendJSON(dst []byte, r *Record, t time.Time, tc *timeCache) []byte {
	dst = append(dst, jsonTimePrefix...)
	dst = tc.append(dst, t)
	dst = append(dst, `","remote":"`...)
	dst = appendAddr(dst, r.Remote)
	if r.Peer.IsValid() {
		dst = append(dst, `","peer":"`...)
		dst = appendAddr(dst, r.Peer)
	}
	dst = append(dst, '"')
	dst = jsonField(dst, `,"host":`, r.Host)
	dst = jsonField(dst, `,"method":`, r.Method)
	dst = jsonField(dst, `,"uri":`, r.Path)
	dst = append(dst, `,"endpoint":`...)
	dst = render.AppendJSONLogString(dst, r.Endpoint)
	dst = jsonField(dst, `,"id":`, r.ID)
	dst = jsonField(dst, `,"callback":`, r.Callback)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(dst, `,"size":`...)
	dst = strconv.AppendInt(dst, int64(r.Size), 10)
	dst = append(dst, `,"reqtime_microsec":`...)
	dst = strconv.AppendInt(dst, r.Duration.Microseconds(), 10)
	dst = jsonField(dst, `,"ua":`, r.UserAgent)
	dst = jsonField(dst, `,"referer":`, r.Referer)
	dst = jsonField(dst, `,"reqid":`, r.RequestID)
	return append(dst, "}\n"...)
}

func jsonField(dst []byte, key string, v []byte) []byte {
	dst = append(dst, key...)
	// The conversion does not allocate: AppendJSONString only reads it.
	return render.AppendJSONLogString(dst, unsafeString(v))
}
