package embedded_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/embedded"
	"tsubame/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) tsubame.Store {
		s, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), embedded.FileName)
	s, err := embedded.Open(path, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), storetest.Placement("9", 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := embedded.Open(path, embedded.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	p, err := ro.Get(t.Context(), "9")
	if err != nil || len(p.URLs) != 2 {
		t.Fatalf("after reopen Get = %+v, %v", p, err)
	}
	if code := tsubame.ErrorCode(ro.Put(t.Context(), storetest.Placement("10", 1))); code != tsubame.EINVALID {
		t.Fatalf("Put on a read-only store: code %q, want %q", code, tsubame.EINVALID)
	}
}

// A second opener must fail fast with a message naming the cause, never hang.
func TestLockedFileFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), embedded.FileName)
	s, err := embedded.Open(path, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, ro := range []bool{false, true} {
		_, err = embedded.Open(path, embedded.Options{ReadOnly: ro, LockTimeout: 50 * time.Millisecond})
		if code := tsubame.ErrorCode(err); code != tsubame.ECONFLICT {
			t.Fatalf("read-only=%v: second Open error %v (code %q), want %q", ro, err, code, tsubame.ECONFLICT)
		}
		if !strings.Contains(err.Error(), "in use by another process") {
			t.Fatalf("message does not say why: %v", err)
		}
	}
}

func TestReadOnlyMissingFile(t *testing.T) {
	_, err := embedded.Open(filepath.Join(t.TempDir(), "none.db"), embedded.Options{ReadOnly: true})
	if err == nil {
		t.Fatal("opening a missing file read-only succeeded")
	}
}

func TestRejectsForeignFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a bolt file", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Open(path, embedded.Options{}); err == nil {
		t.Fatal("opened a file that is not a store")
	}
}

func TestLogConformance(t *testing.T) {
	storetest.RunLog(t, func(t *testing.T) storetest.LogStore {
		s, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestResultConformance(t *testing.T) {
	storetest.RunResults(t, func(t *testing.T) storetest.ResultStore {
		s, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
