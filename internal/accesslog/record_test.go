package accesslog

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func sampleRecord() *Record {
	return &Record{
		Time:      time.Date(2026, 11, 22, 0, 5, 7, 123456789, time.UTC),
		Duration:  1234567 * time.Nanosecond,
		Remote:    netip.MustParseAddr("::ffff:192.0.2.7"),
		Host:      []byte("ads.example.com"),
		Method:    []byte("GET"),
		Path:      []byte("/api/sample4.js"),
		Endpoint:  "sample4",
		ID:        []byte("1"),
		Callback:  []byte("Example.process"),
		Status:    200,
		Size:      92,
		UserAgent: []byte("Mozilla/5.0 (日本語)"),
		RequestID: []byte("abc-1"),
	}
}

func TestLTSV(t *testing.T) {
	var tc timeCache
	got := string(appendRecord(nil, LTSV, sampleRecord(), sampleRecord().Time, &tc))
	want := "time:2026-11-22T00:05:07.123456Z\thost:192.0.2.7\tvhost:ads.example.com\tmethod:GET\turi:/api/sample4.js" +
		"\tendpoint:sample4\tid:1\tcallback:Example.process\tstatus:200\tsize:92\treqtime_microsec:1234" +
		"\tua:Mozilla/5.0 (日本語)\treferer:-\treqid:abc-1\n"
	if got != want {
		t.Fatalf("LTSV\n got %q\nwant %q", got, want)
	}
}

func TestJSON(t *testing.T) {
	var tc timeCache
	line := appendRecord(nil, JSON, sampleRecord(), sampleRecord().Time, &tc)
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, line)
	}
	if m["time"] != "2026-11-22T00:05:07.123456Z" || m["remote"] != "192.0.2.7" || m["status"] != 200.0 ||
		m["reqtime_microsec"] != 1234.0 || m["ua"] != "Mozilla/5.0 (日本語)" || m["referer"] != "" || m["endpoint"] != "sample4" {
		t.Fatalf("fields: %v", m)
	}
}

// A hostile request cannot forge a second line, a field, or a terminal escape.
func TestEscaping(t *testing.T) {
	r := sampleRecord()
	r.UserAgent = []byte("evil\n" + "time:2026-01-01T00:00:00.000000Z\tstatus:200\x1b[31m\\\xff\xfe\u2028")
	r.Referer = []byte("a\tb\rc\x00d\x7f")
	r.Path = []byte("/api/x\ny")
	for _, f := range []Format{LTSV, JSON} {
		var tc timeCache
		line := appendRecord(nil, f, r, r.Time, &tc)
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("format %d: record is not one line: %q", f, line)
		}
		for _, c := range line[:len(line)-1] {
			if c < 0x20 && !(f == LTSV && c == '\t') || c == 0x7f {
				t.Fatalf("format %d: raw control byte %#x in %q", f, c, line)
			}
		}
		if bytes.Contains(line, []byte("\u2028")) {
			t.Fatalf("format %d: raw U+2028", f)
		}
		if f == LTSV {
			fields := strings.Split(strings.TrimSuffix(string(line), "\n"), "\t")
			if len(fields) != 14 {
				t.Fatalf("LTSV has %d fields, want 14: %q", len(fields), line)
			}
			if !strings.Contains(string(line), `ua:evil\ntime:2026-01-01T00:00:00.000000Z\tstatus:200\x1b[31m\\\xff\xfe\xe2\x80\xa8`) {
				t.Fatalf("LTSV escaping changed: %q", line)
			}
		} else if !json.Valid(line) {
			t.Fatalf("JSON invalid: %q", line)
		}
	}
}

func FuzzRecord(f *testing.F) {
	f.Add([]byte("Mozilla/5.0"), []byte("http://example.com/"), []byte("/api/x.js"))
	f.Add([]byte("a\nb"), []byte("\t\x00\xff"), []byte("\\"))
	f.Fuzz(func(t *testing.T, ua, ref, path []byte) {
		r := sampleRecord()
		r.UserAgent, r.Referer, r.Path = ua, ref, path
		for _, format := range []Format{LTSV, JSON} {
			var tc timeCache
			line := appendRecord(nil, format, r, r.Time, &tc)
			if bytes.IndexByte(line, '\n') != len(line)-1 {
				t.Fatalf("not one line: %q", line)
			}
			if format == LTSV && bytes.Count(line, []byte("\t")) != 13 {
				t.Fatalf("LTSV field count broken: %q", line)
			}
			if format == JSON && !json.Valid(line) {
				t.Fatalf("invalid JSON: %q", line)
			}
		}
	})
}

func TestTimeCacheAcrossSeconds(t *testing.T) {
	var tc timeCache
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, want := range []string{"2026-01-02T03:04:05.000000Z", "2026-01-02T03:04:05.999999Z", "2026-01-02T03:04:06.000001Z"} {
		d := []time.Duration{0, 999999 * time.Microsecond, time.Second + time.Microsecond}[i]
		if got := string(tc.append(nil, base.Add(d))); got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	// A non-UTC time is written in UTC.
	jst := time.FixedZone("JST", 9*3600)
	if got := string(tc.append(nil, base.In(jst))); got != "2026-01-02T03:04:05.000000Z" {
		t.Errorf("zoned time: %s", got)
	}
}

func BenchmarkAppendLTSV(b *testing.B) {
	r := sampleRecord()
	var tc timeCache
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRecord(buf[:0], LTSV, r, r.Time, &tc)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkAppendJSON(b *testing.B) {
	r := sampleRecord()
	var tc timeCache
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRecord(buf[:0], JSON, r, r.Time, &tc)
	}
	b.SetBytes(int64(len(buf)))
}
