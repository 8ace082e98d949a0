package admin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var closedAudit = regexp.MustCompile(`^audit\.(\d{8}T\d{6}Z)-(\d{8}T\d{6}Z)(\.\d+)?\.log$`)

// verifyFiles checks the chain over files in order.
func verifyFiles(t *testing.T, files []string) (AuditChain, error) {
	t.Helper()
	var c AuditChain
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Verify(filepath.Base(name), bytes.NewReader(b)); err != nil {
			return c, err
		}
	}
	return c, nil
}

func readRecords(t *testing.T, name string) []AuditRecord {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []AuditRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func openTestAudit(t *testing.T, opt AuditOptions) *Audit {
	t.Helper()
	opt.AlertAt, opt.AlertWindow, opt.Logger = 1000, time.Minute, slog.New(slog.DiscardHandler)
	a, err := OpenAudit(opt)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Size rotation: every file stays under the limit, closed files are named
// by their lines' time range, every file after the first starts with a
// checkpoint naming the file before it, and the chain runs through all of
// them. A missing or edited file is reported at the line that shows it.
func TestAuditRotatesBySizeWithCheckpoints(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	const maxSize = 4096
	a := openTestAudit(t, AuditOptions{Path: path, MaxSize: maxSize})
	for i := range 200 {
		a.Record(AuditRecord{Actor: "alice", Remote: "192.0.2.1", Action: "placement.put", Target: fmt.Sprint(i), Result: "ok"})
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := AuditFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 || files[len(files)-1] != path {
		t.Fatalf("files: %v", files)
	}
	var targets []string
	for i, name := range files {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > maxSize || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %d bytes, mode %v", name, st.Size(), st.Mode().Perm())
		}
		recs := readRecords(t, name)
		if i < len(files)-1 {
			m := closedAudit.FindStringSubmatch(filepath.Base(name))
			if m == nil {
				t.Fatalf("closed file %s", name)
			}
			from, to := recs[0].Time.UTC().Format(auditTimeLayout), recs[len(recs)-1].Time.UTC().Format(auditTimeLayout)
			if m[1] != from || m[2] != to {
				t.Errorf("%s holds lines from %s to %s", name, from, to)
			}
		}
		for j, r := range recs {
			if j == 0 && i > 0 {
				if r.Action != checkpointAction || r.Target != filepath.Base(files[i-1]) {
					t.Errorf("%s starts with %+v, not a checkpoint for %s", name, r, files[i-1])
				}
				continue
			}
			if r.Action == checkpointAction {
				t.Errorf("%s: a checkpoint inside the file", name)
			}
			targets = append(targets, r.Target)
		}
	}
	if len(targets) != 200 || targets[0] != "0" || targets[199] != "199" {
		t.Fatalf("%d records, %v...", len(targets), targets[:min(3, len(targets))])
	}
	c, err := verifyFiles(t, files)
	if err != nil || c.First != 1 || c.Last() != uint64(200+len(files)-1) {
		t.Fatalf("chain over %d files: %v, seq %d..%d", len(files), err, c.First, c.Last())
	}
	// Any file alone verifies from its checkpoint.
	if c, err := verifyFiles(t, files[2:3]); err != nil || c.First == 1 {
		t.Fatalf("one file alone: %v (first seq %d)", err, c.First)
	}
	// A file removed from the middle: the next file's checkpoint shows it.
	var br *ChainBreak
	_, err = verifyFiles(t, append(files[:2:2], files[3:]...))
	if !errors.As(err, &br) || br.File != filepath.Base(files[3]) || br.Line != 1 || !strings.Contains(br.Reason, "missing") {
		t.Fatalf("a file left out: %v", err)
	}
	// A line edited in a closed file.
	b, _ := os.ReadFile(files[1])
	if err := os.WriteFile(files[1], bytes.Replace(b, []byte(`"alice"`), []byte(`"mallory"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err = verifyFiles(t, files); !errors.As(err, &br) || br.File != filepath.Base(files[1]) || br.Line != 3 {
		t.Fatalf("an edited line: %v", err)
	}
}

// Time rotation closes the file at each multiple of rotate_every, when
// the next line comes; keep_files deletes the oldest closed files.
func TestAuditRotatesByTimeAndKeepsFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	a := openTestAudit(t, AuditOptions{Path: path, RotateEvery: 24 * time.Hour, KeepFiles: 2})
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	at := day
	a.now = func() time.Time { return at }
	for d := range 5 {
		for h := range 3 {
			at = day.Add(time.Duration(d)*24*time.Hour + time.Duration(h*8+1)*time.Hour)
			a.Record(AuditRecord{Actor: "bob", Action: "login", Target: fmt.Sprintf("%d/%d", d, h), Result: "ok"})
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := AuditFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"audit.20261122T010000Z-20261122T170000Z.log", "audit.20261123T010000Z-20261123T170000Z.log", "audit.log"}
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", got, want)
	}
	recs := readRecords(t, path)
	if len(recs) != 4 || recs[0].Action != checkpointAction || recs[0].Target != want[1] || recs[1].Target != "4/0" {
		t.Fatalf("the active file: %+v", recs)
	}
	if c, err := verifyFiles(t, files); err != nil || c.Lines != 12 {
		t.Fatalf("chain from the oldest file kept: %v, %d lines", err, c.Lines)
	}
}

// Two writers (the server and the CLI are separate processes) take turns
// through rotations: one chain, nothing lost, nothing repeated.
func TestAuditRotationWithTwoWriters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	opt := AuditOptions{Path: path, MaxSize: 2048}
	writers := []*Audit{openTestAudit(t, opt), openTestAudit(t, opt)}
	var wg sync.WaitGroup
	for w, a := range writers {
		wg.Go(func() {
			for i := range 150 {
				a.Record(AuditRecord{Actor: fmt.Sprint("w", w), Action: "placement.put", Target: fmt.Sprint(i), Result: "ok"})
			}
		})
	}
	wg.Wait()
	for _, a := range writers {
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if st := a.Stats(); st.WriteErrors != 0 {
			t.Fatalf("write errors: %d", st.WriteErrors)
		}
	}
	files, err := AuditFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	checkpoints := 0
	for _, name := range files {
		for _, r := range readRecords(t, name) {
			if r.Action == checkpointAction {
				checkpoints++
				continue
			}
			k := r.Actor + "/" + r.Target
			if seen[k] {
				t.Fatalf("%s written twice", k)
			}
			seen[k] = true
		}
	}
	if len(seen) != 300 || checkpoints != len(files)-1 {
		t.Fatalf("%d records, %d checkpoints in %d files", len(seen), checkpoints, len(files))
	}
	if c, err := verifyFiles(t, files); err != nil || c.Last() != uint64(300+checkpoints) {
		t.Fatalf("chain: %v, last seq %d", err, c.Last())
	}
}

// A rotation cut off after the rename (no new file yet): the next line
// starts the new file with the checkpoint all the same.
func TestAuditCheckpointAfterInterruptedRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	a := openTestAudit(t, AuditOptions{Path: path})
	a.Record(AuditRecord{Actor: "alice", Action: "login", Result: "ok"})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	closed := filepath.Join(dir, "audit.20261124T000000Z-20261124T000001Z.log")
	if err := os.Rename(path, closed); err != nil {
		t.Fatal(err)
	}
	a = openTestAudit(t, AuditOptions{Path: path})
	a.Record(AuditRecord{Actor: "alice", Action: "logout", Result: "ok"})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, path)
	if len(recs) != 2 || recs[0].Action != checkpointAction || recs[0].Target != filepath.Base(closed) || recs[1].Seq != 3 {
		t.Fatalf("new file: %+v", recs)
	}
	if _, err := verifyFiles(t, []string{closed, path}); err != nil {
		t.Fatal(err)
	}
}

// Find reads the files from the newest back, only as far as it needs: the
// last records that match, oldest first, across rotated files; a removed
// file is passed over.
func TestAuditFindAcrossFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a := openTestAudit(t, AuditOptions{Path: path, MaxSize: 4096})
	for i := range 300 {
		a.Record(AuditRecord{Actor: "alice", Action: "line_item.put", Target: fmt.Sprintf("li-%d", i%7), Result: "ok", Detail: fmt.Sprint(i)})
	}
	files, err := AuditFiles(path)
	if err != nil || len(files) < 5 {
		t.Fatalf("files: %v, %v", files, err)
	}
	li3 := func(rec *AuditRecord) bool { return rec.Target == "li-3" }
	var want []string
	for i := 3; i < 300; i += 7 {
		want = append(want, fmt.Sprint(i))
	}
	details := func(recs []AuditRecord) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.Detail)
		}
		return out
	}
	recs, complete, err := a.Find(`"target":"li-3"`, li3, 1000)
	if err != nil || !complete || !slices.Equal(details(recs), want) {
		t.Fatalf("every li-3: %v (complete %v, %v), want %v", details(recs), complete, err, want)
	}
	if recs, _, _ := a.Find("", li3, 5); !slices.Equal(details(recs), want[len(want)-5:]) {
		t.Fatalf("the last 5 without a quick test: %v", details(recs))
	}
	// The oldest file removed (audit_keep_files): what is left is found.
	if err := os.Remove(files[0]); err != nil {
		t.Fatal(err)
	}
	if recs, complete, err := a.Find(`"target":"li-3"`, li3, 1000); err != nil || !complete || len(recs) == 0 || len(recs) >= len(want) ||
		!slices.Equal(details(recs), want[len(want)-len(recs):]) {
		t.Fatalf("after removing %s: %v (%v, %v)", files[0], details(recs), complete, err)
	}
}
