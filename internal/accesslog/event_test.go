package accesslog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var (
	keyExchange = MustKey("exchange")
	keyBidPrice = MustKey("bid_price")
	keyTest     = MustKey("test")
	keyServer   = MustKey("server_addr")
)

// sampleEvent is an impression of sampleRecord's request, with an extra
// field of each type.
func sampleEvent() *Record {
	r := sampleRecord()
	e := &Event{Kind: EventImp, ID: String("ev-1"), Decision: String("d-42"), LineItem: String("li-7"),
		Campaign: String("c-3"), Creative: String("cr-9"), Placement: Bytes([]byte("1")), UID: Bytes([]byte("u-abc")),
		Price: 2_500_000, Currency: String("USD"), Valid: true}
	e.AddText(keyExchange, String("adx"))
	e.AddInt(keyBidPrice, -1234567)
	e.AddBool(keyTest, false)
	e.AddAddr(keyServer, netip.MustParseAddr("2001:db8::1"))
	r.Event = e
	return r
}

// eventLabels are the labels of an event line, in order, as
// docs/access-log.md lists them (client address: host in LTSV, remote in JSON).
var eventLabels = []string{"time", "event", "event_id", "decision", "line_item", "campaign", "creative",
	"placement", "uid", "price", "currency", "valid", "host", "reqid"}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s\n got %q\nwant %q", name, got, want)
	}
}

func TestEventLineGolden(t *testing.T) {
	r := sampleEvent()
	for _, c := range []struct {
		f    Format
		file string
	}{{LTSV, "event.ltsv"}, {JSON, "event.jsonl"}} {
		var tc timeCache
		golden(t, c.file, appendRecord(nil, c.f, r, r.Time, &tc))
	}
}

// The request's own line does not change when it carries an event: the
// event is a line in addition, from the same record with Event set.
func TestRequestLineUnchangedBesideEvent(t *testing.T) {
	for _, f := range []Format{LTSV, JSON} {
		var tc timeCache
		plain := sampleRecord()
		want := appendRecord(nil, f, plain, plain.Time, &tc)
		r := sampleEvent()
		ev := r.Event
		r.Event = nil
		if got := appendRecord(nil, f, r, r.Time, &tc); !bytes.Equal(got, want) {
			t.Fatalf("format %d: %q, want %q", f, got, want)
		}
		r.Event = ev
		if got := appendRecord(nil, f, r, r.Time, &tc); bytes.Equal(got, want) {
			t.Fatalf("format %d: the event line is the request line", f)
		}
	}
}

// kv is one field of a line, unescaped.
type kv struct{ label, value string }

// parseLTSV splits a line into its fields and undoes the writer's
// escaping; "-" reads as empty.
func parseLTSV(t *testing.T, line []byte) []kv {
	t.Helper()
	if len(line) == 0 || line[len(line)-1] != '\n' || bytes.IndexByte(line, '\n') != len(line)-1 {
		t.Fatalf("not one line: %q", line)
	}
	var out []kv
	for _, f := range strings.Split(string(line[:len(line)-1]), "\t") {
		label, v, ok := strings.Cut(f, ":")
		if !ok {
			t.Fatalf("field without a label %q in %q", f, line)
		}
		if v == "-" {
			v = ""
		}
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			if v[i] != '\\' {
				b.WriteByte(v[i])
				continue
			}
			if i+1 >= len(v) {
				t.Fatalf("dangling escape in %q", f)
			}
			i++
			switch v[i] {
			case 't':
				b.WriteByte('\t')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case '\\':
				b.WriteByte('\\')
			case 'x':
				n, err := strconv.ParseUint(v[i+1:i+3], 16, 8)
				if err != nil {
					t.Fatalf("bad escape in %q", f)
				}
				b.WriteByte(byte(n))
				i += 2
			default:
				t.Fatalf("unknown escape \\%c in %q", v[i], f)
			}
		}
		out = append(out, kv{label, b.String()})
	}
	return out
}

// parseJSON reads a JSON line's fields in order; numbers and booleans are
// kept as written.
func parseJSON(t *testing.T, line []byte) []kv {
	t.Helper()
	if bytes.IndexByte(line, '\n') != len(line)-1 || !json.Valid(line) {
		t.Fatalf("not one JSON line: %q", line)
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %q", line)
	}
	var out []kv
	for d.More() {
		k, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		v, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case json.Number:
			s = v.String()
		case bool:
			s = strconv.FormatBool(v)
		default:
			t.Fatalf("%s: unexpected %T in %q", k, v, line)
		}
		out = append(out, kv{k.(string), s})
	}
	return out
}

// wantFields is what an event line of r holds, in order, unescaped; JSON
// replaces each byte that is not UTF-8 by U+FFFD.
func wantFields(r *Record, f Format) []kv {
	e := r.Event
	text := func(s string) string {
		if f == JSON {
			return string([]rune(s))
		}
		if s == "-" {
			return "" // as an empty value is written
		}
		return s
	}
	bytesText := func(b []byte) string { return text(string(b)) }
	host, addr := "host", func(a netip.Addr) string {
		if !a.IsValid() {
			return ""
		}
		return a.Unmap().String()
	}
	if f == JSON {
		host = "remote"
		addr = func(a netip.Addr) string {
			if !a.IsValid() {
				return "-"
			}
			return a.Unmap().String()
		}
	}
	out := []kv{
		{"time", r.Time.UTC().Format(stampLayout)},
		{"event", e.Kind.String()},
		{"event_id", text(e.ID.String())},
		{"decision", text(e.Decision.String())},
		{"line_item", text(e.LineItem.String())},
		{"campaign", text(e.Campaign.String())},
		{"creative", text(e.Creative.String())},
		{"placement", text(e.Placement.String())},
		{"uid", text(e.UID.String())},
		{"price", strconv.FormatInt(e.Price, 10)},
		{"currency", text(e.Currency.String())},
		{"valid", strconv.FormatBool(e.Valid)},
		{host, addr(r.Remote)},
		{"reqid", bytesText(r.RequestID)},
	}
	for i := range e.nextra {
		x := &e.extra[i]
		var v string
		switch x.typ {
		case textValue:
			v = text(x.s)
		case intValue:
			v = strconv.FormatInt(x.n, 10)
		case boolValue:
			v = strconv.FormatBool(x.n != 0)
		case addrValue:
			v = addr(x.addr)
		}
		out = append(out, kv{x.key, v})
	}
	return out
}

func parseLine(t *testing.T, f Format, line []byte) []kv {
	if f == JSON {
		return parseJSON(t, line)
	}
	return parseLTSV(t, line)
}

// Every event line splits back into the documented fields, in order, with
// the values it was given.
func TestEventLineParsesBack(t *testing.T) {
	r := sampleEvent()
	empty := &Record{Time: r.Time, Event: &Event{Kind: EventClick}} // every value empty or zero
	for _, rr := range []*Record{r, empty} {
		for _, f := range []Format{LTSV, JSON} {
			var tc timeCache
			got := parseLine(t, f, appendRecord(nil, f, rr, rr.Time, &tc))
			if want := wantFields(rr, f); !slices.Equal(got, want) {
				t.Errorf("format %d:\n got %q\nwant %q", f, got, want)
			}
			for i, label := range eventLabels {
				if f == JSON && label == "host" {
					label = "remote"
				}
				if got[i].label != label {
					t.Errorf("format %d: field %d is %q, want %q", f, i, got[i].label, label)
				}
			}
		}
	}
}

// hostile is what a client may put in any value it controls: tabs,
// newlines, quotes, backslashes, control bytes, DEL, C1 controls, U+2028,
// bytes that are not UTF-8, and a forged field and line.
const hostile = "a\tb\nc\rd\"e\\f\x00g\x1b[31mh\x7fi\u0085j\u2028k\xff\xfel<m>&n\tevent:click\nid:1\",\"id\":\"x\"}\n{\"time\":\"2026-01-01T00:00:00.000000Z"

// hostileEvent has hostile in every text field, known and extra, and in
// the request id.
func hostileEvent() *Record {
	r := sampleRecord()
	r.RequestID = []byte(hostile)
	h := Bytes([]byte(hostile))
	e := &Event{Kind: EventDecision, ID: h, Decision: h, LineItem: h, Campaign: h, Creative: h,
		Placement: h, UID: h, Price: -1, Currency: h}
	e.AddText(keyExchange, h)
	e.AddInt(keyBidPrice, 1<<62)
	e.AddBool(keyTest, true)
	e.AddAddr(keyServer, netip.Addr{})
	r.Event = e
	return r
}

// A hostile value in any field cannot forge a line, a field or a terminal
// escape, in either format, and reads back as it was given.
func TestEventEscaping(t *testing.T) {
	r := hostileEvent()
	for _, f := range []Format{LTSV, JSON} {
		var tc timeCache
		line := appendRecord(nil, f, r, r.Time, &tc)
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("format %d: not one line: %q", f, line)
		}
		for _, c := range line[:len(line)-1] {
			if c < 0x20 && !(f == LTSV && c == '\t') || c == 0x7f {
				t.Fatalf("format %d: raw control byte %#x in %q", f, c, line)
			}
		}
		for _, raw := range []string{"\u2028", "\u0085", "\xff"} {
			if bytes.Contains(line, []byte(raw)) {
				t.Fatalf("format %d: raw %q in %q", f, raw, line)
			}
		}
		if f == LTSV && bytes.Count(line, []byte("\t")) != len(eventLabels)-1+r.Event.Extras() {
			t.Fatalf("LTSV has %d tabs: %q", bytes.Count(line, []byte("\t")), line)
		}
		got := parseLine(t, f, line)
		if want := wantFields(r, f); !slices.Equal(got, want) {
			t.Fatalf("format %d:\n got %q\nwant %q", f, got, want)
		}
		if p := string(LinePlacement(line)); f == LTSV && p != string(appendLTSVValue(nil, hostile)) ||
			f == JSON && p != string(jsonString(hostile)) {
			t.Fatalf("format %d: placement read as %q", f, p)
		}
	}
}

func jsonString(s string) []byte {
	var tc timeCache
	line := appendEventJSON(nil, &Record{Event: &Event{ID: String(s)}}, time.Time{}, &tc)
	v := jsonValue(line, `,"event_id":`)
	return v
}

func FuzzEvent(f *testing.F) {
	f.Add([]byte("u-1"), []byte("adx"), int64(1500000))
	f.Add([]byte("a\nb\t\x00\xff\"\\"), []byte("\u2028\x7f"), int64(-1))
	f.Fuzz(func(t *testing.T, uid, extra []byte, price int64) {
		r := sampleEvent()
		r.Event.UID, r.Event.Price = Bytes(uid), price
		r.Event.extra[0].s = string(extra)
		for _, format := range []Format{LTSV, JSON} {
			var tc timeCache
			line := appendRecord(nil, format, r, r.Time, &tc)
			if !ValidLine(line) || bytes.IndexByte(line, '\n') != len(line)-1 || bytes.IndexByte(line, 0) >= 0 {
				t.Fatalf("not one valid line: %q", line)
			}
			if got, want := parseLine(t, format, line), wantFields(r, format); !slices.Equal(got, want) {
				t.Fatalf("got %q\nwant %q", got, want)
			}
		}
	})
}

// LinePlacement, which keys the Kafka records, finds an event line's
// placement in both formats, and still a request line's id.
func TestLinePlacementOfEventLines(t *testing.T) {
	for _, f := range []Format{LTSV, JSON} {
		var tc timeCache
		r := sampleEvent()
		r.Event.UID = String("x\tid:forged")
		r.Event.Placement = String("p-9")
		if got := string(LinePlacement(appendRecord(nil, f, r, r.Time, &tc))); got != "p-9" {
			t.Errorf("format %d: event line placement %q", f, got)
		}
		r.Event.Placement = Text{}
		want := map[Format]string{LTSV: "-", JSON: ""}[f]
		if got := LinePlacement(appendRecord(nil, f, r, r.Time, &tc)); got == nil || string(got) != want {
			t.Errorf("format %d: empty placement read as %q", f, got)
		}
		r.Event = nil
		if got := string(LinePlacement(appendRecord(nil, f, r, r.Time, &tc))); got != "1" {
			t.Errorf("format %d: request line placement %q", f, got)
		}
	}
	// An LTSV value cannot pass for a JSON field, nor the other way round.
	if got := LinePlacement([]byte("time:2026-11-22T00:05:07.123456Z\tevent:imp\tuid:,\"id\":\"x\"\n")); got != nil {
		t.Errorf("LTSV line keyed %q", got)
	}
}

func TestKeys(t *testing.T) {
	for _, bad := range []string{"", "Exchange", "1x", "a-b", "a:b", "a\tb", "é", strings.Repeat("a", 33),
		"id", "time", "event", "placement", "price", "remote", "host", "reqid"} {
		if _, err := NewKey(bad); err == nil {
			t.Errorf("NewKey(%q) accepted", bad)
		}
	}
	for _, good := range []string{"a", "exchange", "bid_price2", strings.Repeat("a", 32)} {
		if k, err := NewKey(good); err != nil || k.String() != good {
			t.Errorf("NewKey(%q) = %v, %v", good, k, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("MustKey of a reserved label did not panic")
		}
	}()
	MustKey("uid")
}

func TestExtrasBounded(t *testing.T) {
	var e Event
	if e.AddInt(Key{}, 1) {
		t.Fatal("the zero Key was added")
	}
	for i := range MaxExtra {
		if !e.AddInt(MustKey(fmt.Sprintf("k%d", i)), int64(i)) {
			t.Fatalf("extra %d refused", i)
		}
	}
	if e.AddInt(MustKey("more"), 1) || e.Extras() != MaxExtra {
		t.Fatalf("%d extras; the one past MaxExtra was added", e.Extras())
	}
	e.Reset()
	if !e.AddText(keyExchange, String("a")) || e.AddText(keyExchange, String("b")) || e.Extras() != 1 {
		t.Fatal("a repeated key was added")
	}
}

// Extra reads back an extra field of each type, as its line writes it.
func TestEventExtra(t *testing.T) {
	var e Event
	e.AddText(keyExchange, String("ssp"))
	e.AddInt(MustKey("loss"), 102)
	e.AddBool(MustKey("late"), true)
	e.AddAddr(MustKey("peer_addr"), netip.Addr{})
	for name, want := range map[string]string{"exchange": "ssp", "loss": "102", "late": "true", "peer_addr": "-"} {
		if got, ok := e.Extra(name); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", name, got, ok, want)
		}
	}
	if v, ok := e.Extra("reason"); ok || v != "" {
		t.Errorf("a field not added: %q %v", v, ok)
	}
}

func TestEventKinds(t *testing.T) {
	for _, k := range []EventKind{EventDecision, EventImp, EventClick, EventWin, EventBill, EventBid, EventLoss, EventBidImp, EventRequest} {
		if got, ok := ParseEventKind(k.String()); !ok || got != k || k.String() == "" {
			t.Errorf("%d: %q parses to %d, %v", k, k.String(), got, ok)
		}
	}
	// A kind's number is never reused: new kinds go after the others.
	if EventDecision != 1 || EventBidImp != 8 || EventRequest != 9 || EventRequest.String() != "request" {
		t.Errorf("kinds renumbered: decision %d, bid_imp %d, request %d (%q)", EventDecision, EventBidImp, EventRequest, EventRequest)
	}
	if _, ok := ParseEventKind(""); ok {
		t.Error(`"" is a kind`)
	}
	if EventKind(0).String() != "" || EventKind(200).String() != "" {
		t.Error("no kind has a name")
	}
}

// fileLine is a line of a log file and the file it is in.
type fileLine struct {
	file string
	line []byte
}

// readLog reads every line of every file in dir (decompressing .gz) and
// checks that each is a whole record within its file's range.
func readLog(t *testing.T, dir string) []fileLine {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []fileLine
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = f
		if strings.HasSuffix(e.Name(), ".gz") {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatal(err)
			}
		}
		from, to, ranged := fileRange(e.Name())
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				if !ValidLine(line) || bytes.IndexByte(line, 0) >= 0 {
					t.Fatalf("%s: not a whole record: %q", e.Name(), line)
				}
				if at, _ := lineTime(line); ranged && (at.Before(from) || !at.Before(to)) {
					t.Errorf("%s: a line stamped %s lies outside the file's range", e.Name(), at.Format(stampLayout))
				}
				out = append(out, fileLine{e.Name(), line})
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
	}
	return out
}

var eventNumber = regexp.MustCompile(`^n(\d+)$`)

// appendMixed appends n requests, each followed by its decision and
// impression lines (hostile values, a number in event_id), as a server
// appends a request's events after its line; it returns the lines taken.
func appendMixed(t *testing.T, l *Logger, n int) int {
	t.Helper()
	for i := range n {
		r := hostileEvent()
		r.Time = time.Now()
		ev := r.Event
		r.Event = nil
		if err := l.Append(r, uint64(i)); err != nil {
			t.Fatal(err)
		}
		for _, k := range []EventKind{EventDecision, EventImp} {
			ev.Kind, ev.ID, ev.Valid = k, String(fmt.Sprintf("n%d", i)), k == EventImp
			r.Event = ev
			if err := l.Append(r, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return 3 * n
}

// checkMixed checks that the log holds every line appendMixed appended
// once: each request line, and each event line with every field as given.
func checkMixed(t *testing.T, f Format, lines []fileLine, n int) {
	t.Helper()
	if len(lines) != 3*n {
		t.Fatalf("%d lines for %d appended", len(lines), 3*n)
	}
	seen := map[string]int{}
	want := hostileEvent()
	for _, fl := range lines {
		got := parseLine(t, f, fl.line)
		if got[1].label != "event" {
			if got[1].label != map[Format]string{LTSV: "host", JSON: "remote"}[f] {
				t.Fatalf("neither a request nor an event line: %q", fl.line)
			}
			seen["request"]++
			continue
		}
		k, _ := ParseEventKind(got[1].value)
		m := eventNumber.FindStringSubmatch(got[2].value)
		if m == nil || k == 0 {
			t.Fatalf("event line %q", fl.line)
		}
		seen[got[1].value+"/"+m[1]]++
		want.Time, _ = lineTime(fl.line)
		want.Event.Kind, want.Event.ID, want.Event.Valid = k, String(got[2].value), k == EventImp
		if w := wantFields(want, f); !slices.Equal(got, w) {
			t.Fatalf("%s:\n got %q\nwant %q", fl.file, got, w)
		}
	}
	if seen["request"] != n {
		t.Errorf("%d request lines, want %d", seen["request"], n)
	}
	for i := range n {
		for _, k := range []string{"decision", "imp"} {
			if c := seen[fmt.Sprintf("%s/%d", k, i)]; c != 1 {
				t.Errorf("%s %d: %d lines", k, i, c)
			}
		}
	}
}

// Event lines go through the mapped writer and its rotations like request
// lines: every one in exactly one closed file, whole, within the file's
// range, counted, and each reads back as it was given.
func TestEventLinesThroughMappedWriter(t *testing.T) {
	for _, f := range []Format{LTSV, JSON} {
		dir := t.TempDir()
		l, fs, err := OpenMapped(FileOptions{Dir: dir, MaxSize: 32 << 10, Gzip: true, Logger: quiet},
			Options{Format: f, Logger: quiet})
		if err != nil {
			if runtime.GOOS != "linux" {
				t.Skip(err)
			}
			t.Fatal(err)
		}
		taken := appendMixed(t, l, 300)
		if st := l.Stats(); st.Appended != uint64(taken) {
			t.Fatalf("Stats().Appended = %d, want %d", st.Appended, taken)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if fs.Rotations() < 3 {
			t.Fatalf("%d rotations: the lines did not cross files", fs.Rotations())
		}
		checkMixed(t, f, readLog(t, dir), 300)
	}
}

// The same through the buffered writer and a file sink rotating by size.
func TestEventLinesThroughBufferedWriter(t *testing.T) {
	for _, f := range []Format{LTSV, JSON} {
		dir := t.TempDir()
		fs := openSink(t, FileOptions{Dir: dir, MaxSize: 32 << 10})
		l := New(fs, Options{Format: f, Logger: quiet, BufferBytes: 64 << 10})
		taken := appendMixed(t, l, 300)
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := l.Stats(); st.Written != uint64(taken) {
			t.Fatalf("Stats().Written = %d, want %d", st.Written, taken)
		}
		if fs.Rotations() < 3 {
			t.Fatalf("%d rotations: the lines did not cross files", fs.Rotations())
		}
		checkMixed(t, f, readLog(t, dir), 300)
	}
}

// A file a killed process left, event lines among its records, is cleaned
// of what the death tore and closed out with every whole event line.
func TestEventLinesSurviveCrashClean(t *testing.T) {
	for _, f := range []Format{LTSV, JSON} {
		dir := t.TempDir()
		var tc timeCache
		var whole []byte
		var recs []*Record
		for i := range 4 {
			r := hostileEvent()
			r.Time = time.Date(2026, 11, 22, 0, 0, i, 0, time.UTC)
			r.Event.ID = String(fmt.Sprintf("n%d", i))
			if i == 1 {
				r.Event = nil
			}
			recs = append(recs, r)
			whole = appendRecord(whole, f, r, r.Time, &tc)
		}
		torn := appendRecord(nil, f, hostileEvent(), recs[3].Time, &tc)
		zeros := make([]byte, 100)
		left := slices.Concat(whole, torn[:len(torn)/2], zeros)
		if err := os.WriteFile(filepath.Join(dir, "access.log"), left, 0o640); err != nil {
			t.Fatal(err)
		}
		fs := openSink(t, FileOptions{Dir: dir})
		if err := fs.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		lines := readLog(t, dir)
		var got []byte
		for _, fl := range lines {
			got = append(got, fl.line...)
		}
		if len(lines) != 4 || !bytes.Equal(got, whole) {
			t.Fatalf("format %d: kept %d lines:\n%q\nwant\n%q", f, len(lines), got, whole)
		}
	}
}

// Appending an event line allocates nothing, on its own and through the
// mapped writer.
func BenchmarkAppendEvent(b *testing.B) {
	for _, f := range []Format{LTSV, JSON} {
		b.Run([]string{LTSV: "ltsv", JSON: "json"}[f], func(b *testing.B) {
			r := sampleEvent()
			var tc timeCache
			buf := make([]byte, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				buf = appendRecord(buf[:0], f, r, r.Time, &tc)
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}

// A request line and its decision and impression lines through the mapped
// writer, as a decision request will log them.
func BenchmarkMappedAppendRequestAndEvents(b *testing.B) {
	l, _, err := OpenMapped(FileOptions{Dir: b.TempDir(), MaxSize: 64 << 20, KeepFiles: 2, Logger: quiet},
		Options{Logger: quiet})
	if err != nil {
		b.Skip(err)
	}
	defer l.Close(context.Background())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := sampleEvent()
		ev := r.Event
		for pb.Next() {
			r.Time, r.Event = time.Now(), nil
			_ = l.Append(r, 1)
			r.Event = ev
			ev.Kind = EventDecision
			_ = l.Append(r, 1)
			ev.Kind = EventImp
			_ = l.Append(r, 1)
		}
	})
}

// docs/access-log.md lists the event line's fields in the order they are
// written.
func TestEventFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/access-log.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "## Event lines")
	if !ok {
		t.Fatal("no event lines section")
	}
	var documented []string
	for _, row := range strings.Split(table, "\n") {
		if !strings.HasPrefix(row, "| `") {
			continue
		}
		first := strings.Split(row, "|")[1]
		for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(first, -1) {
			documented = append(documented, m[1])
		}
		if strings.Contains(row, "`reqid`") {
			break
		}
	}
	if !slices.Equal(documented, eventLabels) {
		t.Fatalf("documented %q, written %q", documented, eventLabels)
	}
}
