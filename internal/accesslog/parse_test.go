package accesslog

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"
)

// readers are Line's two ways of reading a line: what one reads, the other
// reads the same.
var readers = []struct {
	name string
	read func(*Line, []byte) error
}{{"parse", (*Line).Parse}, {"view", (*Line).View}}

// Every field of a request line and of an event line reads back with the
// value it was written with, in both formats, parsed or viewed.
func TestLineParsesBack(t *testing.T) {
	for _, rd := range readers {
		t.Run(rd.name, func(t *testing.T) { testLineParsesBack(t, rd.read) })
	}
}

func testLineParsesBack(t *testing.T, read func(*Line, []byte) error) {
	for _, f := range []Format{LTSV, JSON} {
		var tc timeCache
		r := sampleEvent()
		r.Event.AddOrigin("adv-1", "news.example.com", "JP", "mobile")
		var l Line
		line := appendRecord(nil, f, r, r.Time, &tc)
		if !IsEventLine(line) {
			t.Fatalf("format %d: an event line not told as one: %q", f, line)
		}
		if err := read(&l, line); err != nil {
			t.Fatalf("format %d: %v: %q", f, err, line)
		}
		if !l.Time.Equal(r.Time.Truncate(time.Microsecond)) {
			t.Errorf("format %d: time %v, want %v", f, l.Time, r.Time)
		}
		for label, want := range map[string]string{"event": "imp", "event_id": "ev-1", "decision": "d-42",
			"line_item": "li-7", "campaign": "c-3", "creative": "cr-9", "placement": "1", "uid": "u-abc",
			"price": "2500000", "currency": "USD", "valid": "true", "reqid": "abc-1", "exchange": "adx",
			"bid_price": "-1234567", "test": "false", "server_addr": "2001:db8::1", "advertiser": "adv-1",
			"site": "news.example.com", "country": "JP", "device": "mobile"} {
			if got, ok := l.Get(label); !ok || string(got) != want {
				t.Errorf("format %d: %s = %q (present %v), want %q", f, label, got, ok, want)
			}
		}
		if l.Int("price") != 2_500_000 || !l.Bool("valid") || l.Bool("test") {
			t.Errorf("format %d: typed reads: price %d valid %v test %v", f, l.Int("price"), l.Bool("valid"), l.Bool("test"))
		}
		if _, ok := l.Get("nope"); ok {
			t.Errorf("format %d: a label the line lacks was found", f)
		}

		req := sampleRecord()
		line = appendRecord(nil, f, req, req.Time, &tc)
		if IsEventLine(line) {
			t.Fatalf("format %d: a request line told as an event: %q", f, line)
		}
		if err := read(&l, line); err != nil {
			t.Fatal(err)
		}
		if l.String("endpoint") != "sample4" || l.Int("status") != 200 || l.String("ua") != "Mozilla/5.0 (日本語)" {
			t.Errorf("format %d: request line read as endpoint %q status %d ua %q", f, l.String("endpoint"), l.Int("status"), l.String("ua"))
		}
		if v, ok := l.Get("referer"); !ok || len(v) != 0 {
			t.Errorf("format %d: an empty referer read as %q (present %v)", f, v, ok)
		}
	}
}

// A hostile value reads back as it was given (LTSV keeps every byte; JSON
// every valid UTF-8 string), and cannot add a field, parsed or viewed.
func TestLineParsesHostile(t *testing.T) {
	for _, rd := range readers {
		for _, f := range []Format{LTSV, JSON} {
			testLineParsesHostile(t, rd.read, f)
		}
	}
}

func testLineParsesHostile(t *testing.T, read func(*Line, []byte) error, f Format) {
	{
		var tc timeCache
		r := hostileEvent()
		var l Line
		line := appendRecord(nil, f, r, r.Time, &tc)
		if err := read(&l, line); err != nil {
			t.Fatalf("format %d: %v", f, err)
		}
		want := hostile
		if f == JSON {
			want = validUTF8(hostile)
		}
		for _, label := range []string{"event_id", "decision", "line_item", "exchange", "reqid"} {
			if got := l.String(label); got != want {
				t.Errorf("format %d: %s = %q, want %q", f, label, got, want)
			}
		}
		if l.Len() != 14+r.Event.Extras() {
			t.Errorf("format %d: %d fields, want %d", f, l.Len(), 14+r.Event.Extras())
		}
	}
}

// What is not a line of ours is refused, never read in part, parsed or
// viewed.
func TestLineParseRefuses(t *testing.T) {
	for _, rd := range readers {
		t.Run(rd.name, func(t *testing.T) { testLineParseRefuses(t, rd.read) })
	}
}

func testLineParseRefuses(t *testing.T, read func(*Line, []byte) error) {
	var l Line
	for _, bad := range []string{
		"", "hello", "time:2026-11-22T00:05:07.123456Z\tnolabel", "time:2026-11-22T00:05:07.123456Z\tx:\\q",
		"time:2026-11-22T00:05:07.123456Z\tx:\\x4", `{"time":"2026-11-22T00:05:07.123456Z","a":"b`,
		`{"time":"2026-11-22T00:05:07.123456Z","a":"\u12"}`, `{"time":"2026-11-22T00:05:07.123456Z" "a":1}`,
		`{"time":"2026-11-22T00:05:07.123456Z","a":"x"y}`, `{"time":"2026-11-22T00:05:07.123456Z","a":"` + "\x01" + `"}`,
	} {
		if err := read(&l, []byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	many := "time:2026-11-22T00:05:07.123456Z" + strings.Repeat("\tx:1", maxLineFields)
	if err := read(&l, []byte(many)); err == nil {
		t.Error("a line of too many fields parsed")
	}
}

// FuzzLineParse: any text in an event's fields reads back (LTSV: byte for
// byte; JSON: as valid UTF-8), parsed or viewed, and no input makes Parse
// or View panic or the two disagree.
func FuzzLineParse(f *testing.F) {
	f.Add("li-1", hostile)
	f.Add("", "\\x41")
	f.Fuzz(func(t *testing.T, a, b string) {
		var l, v Line
		for _, in := range []string{a, b} {
			err, verr := l.Parse([]byte(in)), v.View([]byte(in)) // never panic
			if (err == nil) != (verr == nil) || err == nil && !sameFields(&l, &v) {
				t.Fatalf("%q: Parse %v, View %v", in, err, verr)
			}
		}
		for _, format := range []Format{LTSV, JSON} {
			var tc timeCache
			r := sampleEvent()
			r.Event = &Event{Kind: EventBid, LineItem: String(a), Campaign: String(b), Valid: true}
			r.Event.AddText(KeySite, String(b))
			line := appendRecord(nil, format, r, r.Time, &tc)
			if err := l.Parse(line); err != nil {
				t.Fatalf("format %d: %v: %q", format, err, line)
			}
			for label, v := range map[string]string{"line_item": a, "campaign": b, "site": b} {
				want := v
				if format == JSON {
					want = validUTF8(v)
				}
				if format == LTSV && v == "-" {
					want = "" // LTSV writes an empty value as "-"
				}
				if got := l.String(label); got != want {
					t.Fatalf("format %d: %s = %q, want %q", format, label, got, want)
				}
			}
			if err := v.View(line); err != nil || !sameFields(&l, &v) {
				t.Fatalf("format %d: viewed (%v) other than parsed: %q", format, err, line)
			}
		}
	})
}

// sameFields reports whether a and b read the same time and fields.
func sameFields(a, b *Line) bool {
	if !a.Time.Equal(b.Time) || a.Len() != b.Len() {
		return false
	}
	for i := range a.Len() {
		al, av := a.Field(i)
		bl, bv := b.Field(i)
		if string(al) != string(bl) || string(av) != string(bv) {
			return false
		}
	}
	return true
}

// View leaves a value with nothing to unescape in the line it read (the
// reports' count copies nothing out of an event line), and unescapes one
// with an escape into the Line; Parse copies every value: what it read
// stays when the line's bytes are overwritten.
func TestViewLeavesValuesInTheLine(t *testing.T) {
	for _, f := range []Format{LTSV, JSON} {
		var tc timeCache
		r := sampleEvent()
		r.Event.AddText(KeySite, String("a\tb\"c")) // an escape in either format
		line := appendRecord(nil, f, r, r.Time, &tc)
		var p, v Line
		if err := p.Parse(line); err != nil {
			t.Fatal(err)
		}
		if err := v.View(line); err != nil {
			t.Fatal(err)
		}
		if !sameFields(&p, &v) {
			t.Fatalf("format %d: viewed other than parsed: %q", f, line)
		}
		within := func(b []byte) bool {
			at, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(&line[0]))
			return len(b) > 0 && at >= lo && at+uintptr(len(b)) <= lo+uintptr(len(line))
		}
		for i := range v.Len() {
			label, value := v.Field(i)
			if !within(label) {
				t.Errorf("format %d: label %q copied", f, label)
			}
			if plain := string(label) != "site"; within(value) != plain && len(value) > 0 {
				t.Errorf("format %d: %s = %q: in the line %v, want %v", f, label, value, within(value), plain)
			}
		}
		if site, _ := v.Get("site"); string(site) != "a\tb\"c" {
			t.Errorf("format %d: site viewed as %q", f, site)
		}
		want := p.String("line_item")
		for i := range line {
			line[i] = 'x'
		}
		if got := p.String("line_item"); got != want || want == "" {
			t.Errorf("format %d: a parsed value changed with the line: %q, was %q", f, got, want)
		}
	}
}

// validUTF8 is s as a JSON line holds it: each byte that is not UTF-8
// replaced by U+FFFD.
func validUTF8(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// parseStamp, the lines' fast path, reads what time.Parse reads and
// leaves to it what it does not take: it never disagrees.
func TestParseStampAgreesWithTimeParse(t *testing.T) {
	stamps := []string{
		"2026-11-30T18:13:47.331366Z", "1970-01-01T00:00:00.000000Z", "9999-12-28T23:59:59.999999Z",
		"2026-02-28T12:00:00.000001Z", "2028-02-29T12:00:00.000000Z", "2026-02-29T12:00:00.000000Z",
		"2026-04-31T12:00:00.000000Z", "2026-12-31T23:59:59.999999Z", "2026-00-10T12:00:00.000000Z",
		"2026-13-10T12:00:00.000000Z", "2026-11-00T12:00:00.000000Z", "2026-11-30T24:00:00.000000Z",
		"2026-11-30T23:60:00.000000Z", "2026-11-30T23:59:60.000000Z", "2026-11-30T18:13:47.33136xZ",
		"2026-11-30T18:13:47.331366+", "2026-11-30 18:13:47.331366Z", "+026-11-30T18:13:47.331366Z",
		"2026-1a-30T18:13:47.331366Z", "2026-11-30T18:13:47,331366Z", "",
	}
	for _, s := range stamps {
		fast, ok := parseStamp([]byte(s))
		want, err := time.Parse(stampLayout, s)
		if ok && (err != nil || !fast.Equal(want) || fast.Location() != want.Location()) {
			t.Errorf("%q: fast path %v, time.Parse %v, %v", s, fast, want, err)
		}
		got, gotOK := lineTime([]byte(jsonTimePrefix + s + `"}`))
		if gotOK != (err == nil) || gotOK && !got.Equal(want) {
			t.Errorf("%q: lineTime %v %v, time.Parse %v %v", s, got, gotOK, want, err)
		}
	}
	// Every day of a leap and a common year, at a time of day each: the
	// fast path takes each one, and reads it as time.Parse does.
	for d := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() < 2029; d = d.Add(24*time.Hour + 37*time.Minute + 11*time.Second + 123457*time.Microsecond) {
		s := d.Format(stampLayout)
		got, ok := lineTime([]byte(ltsvTimePrefix + s))
		if !ok || !got.Equal(d.Truncate(time.Microsecond)) {
			t.Errorf("%q: %v %v", s, got, ok)
		}
		if fast, ok := parseStamp([]byte(s)); !ok || !fast.Equal(got) {
			t.Errorf("%q: the fast path read %v %v", s, fast, ok)
		}
	}
	// Days 1 to 31 of every month of a common year, a leap year and the
	// century years either side of the leap rule: the fast path accepts
	// exactly the dates time.Parse does.
	for _, year := range []int{2026, 2028, 1900, 2000, 2100} {
		for month := 1; month <= 12; month++ {
			for day := 1; day <= 31; day++ {
				s := fmt.Sprintf("%04d-%02d-%02dT01:02:03.000004Z", year, month, day)
				fast, ok := parseStamp([]byte(s))
				want, err := time.Parse(stampLayout, s)
				if ok != (err == nil) || ok && !fast.Equal(want) {
					t.Errorf("%q: fast path %v %v, time.Parse %v %v", s, fast, ok, want, err)
				}
			}
		}
	}
}

// TestUnescapeLTSV reads back what appendLTSVValue wrote, escapes at the
// start, the end and side by side, every byte value, and refuses escapes
// the writer never writes.
func TestUnescapeLTSV(t *testing.T) {
	var all strings.Builder
	for c := range 256 {
		all.WriteByte(byte(c))
	}
	for _, v := range []string{
		"x", "plain text", "\t", "\\", "a\tb", "\ta", "a\n", "\\\\\t\t\n\r", "tab\there\\and\nthere\r",
		"\x00\x01\x7f", "日本語\tテキスト", "a\xffb", all.String(), strings.Repeat("run ", 100) + "\t" + strings.Repeat("z", 300),
	} {
		enc := appendLTSVValue(nil, v)
		if bytes.ContainsAny(enc, "\t\n") {
			t.Fatalf("%q written as %q", v, enc)
		}
		got, err := unescapeLTSV([]byte("keep:"), enc)
		if err != nil || string(got) != "keep:"+v {
			t.Errorf("%q written as %q reads back %q, %v", v, enc, got, err)
		}
	}
	for _, bad := range []string{`\`, `a\`, `\q`, `a\x4`, `\x4g`, `\xg4`, `ok\x`} {
		if got, err := unescapeLTSV(nil, []byte(bad)); err == nil {
			t.Errorf("%q read as %q, want an error", bad, got)
		}
	}
}

// SkipLines leaves a plain file and a compressed one at the same byte of
// their lines, and refuses an offset past their end alike.
func TestSkipLines(t *testing.T) {
	dir := t.TempDir()
	var content []byte
	for i := range 2000 {
		content = fmt.Appendf(content, "2026-12-01T04:00:00.%06dZ\tline %d\n", i, i)
	}
	plain := filepath.Join(dir, "access.log")
	if err := os.WriteFile(plain, content, 0o600); err != nil {
		t.Fatal(err)
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(content)
	zw.Close()
	gz := filepath.Join(dir, "access.log.gz")
	if err := os.WriteFile(gz, zb.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{plain, gz} {
		for _, off := range []int64{0, 1, 4095, int64(len(content)) / 2, int64(len(content))} {
			r, err := OpenLines(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := SkipLines(r, off); err != nil {
				t.Fatalf("%s at %d: %v", filepath.Base(path), off, err)
			}
			rest, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(rest, content[off:]) {
				t.Fatalf("%s at %d: read %d bytes (%v), want the %d after it", filepath.Base(path), off, len(rest), err, len(content)-int(off))
			}
		}
		r, err := OpenLines(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := SkipLines(r, int64(len(content))+1); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: past its end: %v, want io.ErrUnexpectedEOF", filepath.Base(path), err)
		}
		r.Close()
	}
}
