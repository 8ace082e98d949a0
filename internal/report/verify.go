package report

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"tsubame/internal/accesslog"
)

// Mismatch is a row whose stored count differs from the files' recount.
type Mismatch struct {
	Time      time.Time // the quarter-hour's start
	Dims      Dims
	Counter   Counter
	Stored    int64
	Recounted int64
}

// Verification is what Verify found.
type Verification struct {
	// From and To are the times compared: the query's, narrowed to what
	// the files that are left cover.
	From, To time.Time
	// Narrowed says why From is later than asked, when it is.
	Narrowed string
	// Files, Lines and Events are what was recounted.
	Files         int
	Lines, Events int64
	Mismatches    []Mismatch
}

// OK reports whether the rollups equal the recount.
func (v *Verification) OK() bool { return len(v.Mismatches) == 0 }

// VerificationReport is a Verification as the admin API and `tsubame
// report verify -format json` write it, and as the command reads it back
// from a running server.
type VerificationReport struct {
	OK         bool             `json:"ok"`
	From       *time.Time       `json:"from"`
	To         *time.Time       `json:"to"`
	Narrowed   string           `json:"narrowed"`
	Files      int              `json:"files"`
	Lines      int64            `json:"lines"`
	Events     int64            `json:"events"`
	Mismatches []MismatchReport `json:"mismatches"`
}

// MismatchReport is a Mismatch with its dimensions by name (the empty
// ones left out) and its counter's name.
type MismatchReport struct {
	Time      time.Time         `json:"time"`
	Dims      map[string]string `json:"dims"`
	Counter   string            `json:"counter"`
	Stored    int64             `json:"stored"`
	Recounted int64             `json:"recounted"`
}

// Report is v in its written form.
func (v *Verification) Report() VerificationReport {
	rep := VerificationReport{OK: v.OK(), Narrowed: v.Narrowed, Files: v.Files, Lines: v.Lines, Events: v.Events,
		Mismatches: make([]MismatchReport, 0, len(v.Mismatches))}
	if !v.From.IsZero() {
		rep.From = &v.From
	}
	if !v.To.IsZero() {
		rep.To = &v.To
	}
	for _, m := range v.Mismatches {
		d := map[string]string{}
		for i, name := range dimNames {
			if m.Dims[i] != "" {
				d[name] = m.Dims[i]
			}
		}
		rep.Mismatches = append(rep.Mismatches, MismatchReport{Time: m.Time, Dims: d, Counter: m.Counter.String(),
			Stored: m.Stored, Recounted: m.Recounted})
	}
	return rep
}

// WriteText writes rep for people: what was recounted, why the period was
// narrowed, each difference, and whether the rollups equal the files.
func (rep VerificationReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "recounted %d files, %d lines, %d counted\n", rep.Files, rep.Lines, rep.Events)
	if rep.Narrowed != "" {
		fmt.Fprintln(&b, rep.Narrowed)
	}
	for _, m := range rep.Mismatches {
		var dims []string
		for _, name := range dimNames {
			if v, ok := m.Dims[name]; ok {
				dims = append(dims, name+"="+v)
			}
		}
		fmt.Fprintf(&b, "differs: %s %s %s: rollups %d, files %d\n", m.Time.UTC().Format("2006-01-02T15:04Z07:00"),
			strings.Join(dims, " "), m.Counter, m.Stored, m.Recounted)
	}
	if rep.OK {
		fmt.Fprintln(&b, "the rollups equal the files")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// maxMismatches bounds what a verification lists.
const maxMismatches = 100

// Verify recounts the access log's files up to where the rollups have
// read them (one snapshot of positions and rows, so a roller at work does
// not disturb it) and compares the two per quarter-hour and row, over
// [q.From, q.To). Times before the first line of the oldest file left
// cannot be recounted once retention removed a file: the comparison then
// starts at the first whole quarter-hour after it (Narrowed says so).
func (r *Roller) Verify(q Query) (*Verification, error) {
	r.lock() // this node's positions and rows stay as they are meanwhile
	defer r.mu.Unlock()
	return verify(r.be, r.opt.Dir, r.opt.Name, r.keyOf, q)
}

func verify(be backend, dir, name string, keyOf func(string) (string, error), q Query) (*Verification, error) {
	var (
		stored    map[string]*Counts
		sk        []byte
		files     map[string]*fileState
		forgotten int
		err       error
	)
	for range 10 {
		stored = map[string]*Counts{}
		files, forgotten, err = be.snapshot(func(t int64, d *Dims, c *Counts) error {
			d[DimNode] = "" // compared without: a renamed host's rows are still this file's
			sk = rowKey(sk[:0], floorDiv(t, int64(quarter/time.Second)), d)
			addTo(stored, sk, c)
			return nil
		})
		if !errors.Is(err, errCompactedMeanwhile) {
			break
		}
	}
	if err != nil {
		return nil, err
	}

	// Where each file read so far is now.
	where := map[string]string{}
	names, err := accesslog.ClosedFiles(dir, name, true)
	if err != nil {
		return nil, err
	}
	for _, n := range append(names, name) {
		if k, err := keyOf(n); err == nil && k != "" {
			if _, ok := files[k]; ok {
				where[k] = n
			}
		}
	}
	v := &Verification{From: q.From, To: q.To}
	var oldest time.Time
	missing := forgotten
	for k, f := range files {
		if _, ok := where[k]; !ok {
			missing++
			continue
		}
		if !f.First.IsZero() && (oldest.IsZero() || f.First.Before(oldest)) {
			oldest = f.First
		}
	}
	if missing > 0 {
		start := time.Unix(floorDiv(oldest.Add(time.Minute+quarter).Unix(), int64(quarter/time.Second)), 0).UTC()
		if oldest.IsZero() {
			start = time.Now().UTC() // no file is left: nothing can be recounted
		}
		if v.From.Before(start) {
			v.From = start
			v.Narrowed = fmt.Sprintf("%d files rolled up are no longer kept (retention); the files left cover the times from %s on",
				missing, start.Format(time.RFC3339))
		}
	}

	recount := map[string]*Counts{}
	var (
		l    accesslog.Line
		dims Dims
		c    Counts
		kb   []byte
	)
	for k, n := range where {
		f := files[k]
		lines, events, err := recountFile(filepath.Join(dir, n), n == name, f.Offset, func(line []byte) bool {
			if ok, err := classify(line, &l, &dims, &c); err != nil || !ok {
				return false // as the roller: a line it cannot read counts nowhere
			}
			kb = rowKey(kb[:0], floorDiv(l.Time.Unix(), int64(quarter/time.Second)), &dims)
			dims = Dims{} // views of line, whose buffer the next read overwrites
			addTo(recount, kb, &c)
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		v.Files++
		v.Lines += lines
		v.Events += events
		if lines != f.Lines || events != f.Events {
			return nil, changedFile(filepath.Join(dir, n), f, lines, events)
		}
	}

	inRange := func(kb string) bool {
		t := int64(beUint64(kb))
		return (v.From.IsZero() || t >= v.From.Unix()) && (v.To.IsZero() || t < v.To.Unix())
	}
	keys := map[string]bool{}
	for k := range stored {
		keys[k] = true
	}
	for k := range recount {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		if inRange(k) {
			sorted = append(sorted, k)
		}
	}
	slices.Sort(sorted)
	var zero Counts
	for _, k := range sorted {
		s, rc := stored[k], recount[k]
		if s == nil {
			s = &zero
		}
		if rc == nil {
			rc = &zero
		}
		if *s == *rc {
			continue
		}
		var d Dims
		t, _ := parseRowKey([]byte(k), &d)
		for i := range numCounters {
			if s[i] != rc[i] && len(v.Mismatches) < maxMismatches {
				v.Mismatches = append(v.Mismatches, Mismatch{Time: time.Unix(t, 0).UTC(), Dims: d, Counter: i, Stored: s[i], Recounted: rc[i]})
			}
		}
	}
	return v, nil
}

func beUint64(s string) uint64 {
	var n uint64
	for i := range 8 {
		n = n<<8 | uint64(s[i])
	}
	return n
}

func addTo(m map[string]*Counts, k []byte, c *Counts) {
	if cur := m[string(k)]; cur != nil {
		cur.Add(c)
		return
	}
	cc := *c
	m[string(k)] = &cc
}

// recountFile calls fn for each line in the first upto bytes of a file
// (the active one read in place) and returns how many lines it read and
// how many fn counted.
func recountFile(path string, active bool, upto int64, fn func([]byte) bool) (lines, events int64, err error) {
	var rd io.Reader
	if active {
		fh, err := os.Open(path)
		if err != nil {
			return 0, 0, err
		}
		defer fh.Close()
		rd = io.NewSectionReader(fh, 0, upto)
	} else {
		rc, err := accesslog.OpenLines(path)
		if err != nil {
			return 0, 0, err
		}
		defer rc.Close()
		rd = io.LimitReader(truncated{rc}, upto)
	}
	buf := make([]byte, chunkSize)
	carry := 0
	for {
		k, err := io.ReadFull(rd, buf[carry:])
		data := buf[:carry+k]
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			return lines, events, err
		}
		i := bytes.LastIndexByte(data, '\n')
		whole := data[:i+1]
		for rest := whole; len(rest) > 0; {
			j := bytes.IndexByte(rest, '\n')
			lines++
			if fn(rest[:j+1]) {
				events++
			}
			rest = rest[j+1:]
		}
		if eof {
			return lines, events, nil
		}
		if i < 0 {
			return lines, events, fmt.Errorf("a line longer than %d bytes", len(buf))
		}
		carry = copy(buf, data[i+1:])
	}
}

// changedFile is the error for a file whose counted part no longer holds
// what was counted: edited, cut or replaced by another copy.
func changedFile(path string, f *fileState, lines, events int64) error {
	msg := fmt.Sprintf("%s changed after it was counted: the rollups read %d lines (%d counted) in its first %d bytes, "+
		"which now hold %d lines (%d counted)", filepath.Base(path), f.Lines, f.Events, f.Offset, lines, events)
	if fi, err := os.Stat(path); err == nil && !strings.HasSuffix(path, ".gz") && fi.Size() < f.Offset {
		msg += fmt.Sprintf("; the file is now %d bytes, shorter than that", fi.Size())
	}
	return errors.New(msg)
}
