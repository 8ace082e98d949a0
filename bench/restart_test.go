package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The access log's directory as a handover leaves it: closed files, the
// active file with its preallocated tail of zeros, a segment under its
// hidden name. Every line counts once; only closed files are removed.
func TestCountLines(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"access.20261125T130000Z-20261125T130003Z.log": "time:1\nid:1\n",
		"access.log":        "time:3\n" + string(make([]byte, 4096)),
		".seg-access.log.2": "time:4\ntime:5\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := countLines(dir); err != nil || n != 5 {
		t.Fatalf("countLines = %d, %v; want 5", n, err)
	}
	if err := removeClosed(dir); err != nil {
		t.Fatal(err)
	}
	if n, err := countLines(dir); err != nil || n != 3 {
		t.Fatalf("after removeClosed: countLines = %d, %v; want 3 (the active file and the segment stay)", n, err)
	}
}

// Restarts are spread over the run, one after the other; one whose turn
// comes after the run is not made.
func TestSpaced(t *testing.T) {
	start := time.Now()
	var at []time.Duration
	took, err := spaced(context.Background(), start, 300*time.Millisecond, 5, func(context.Context) (time.Duration, error) {
		at = append(at, time.Since(start))
		return 10 * time.Millisecond, nil
	})
	if err != nil || len(took) != 5 || len(at) != 5 {
		t.Fatalf("spaced made %d restarts (%v), err %v; want 5", len(took), at, err)
	}
	for i, a := range at {
		// Never early; how late depends on the box's load.
		if want := time.Duration(i+1) * 50 * time.Millisecond; a < want {
			t.Errorf("restart %d at %v, before its turn at %v", i+1, a, want)
		}
	}
	// Each restart outlasts the run: the second's turn comes after it.
	took, err = spaced(context.Background(), time.Now(), 100*time.Millisecond, 5, func(context.Context) (time.Duration, error) {
		time.Sleep(100 * time.Millisecond)
		return 100 * time.Millisecond, nil
	})
	if err != nil || len(took) != 1 {
		t.Fatalf("slow restarts: spaced made %d, err %v; want 1", len(took), err)
	}
}
