package embedded_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

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

func TestCampaignConformance(t *testing.T) {
	storetest.RunCampaigns(t, func(t *testing.T) tsubame.CampaignStore {
		s, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// Campaigns survive a reopen; a read-only store reads them and refuses
// writes; a file written before campaigns existed reads as an empty set.
func TestCampaignsReopenAndOlderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), embedded.FileName)
	s, err := embedded.Open(path, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := storetest.FullCampaignSet()
	if err := s.ReplaceAll(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := embedded.Open(path, embedded.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	got, v, err := ro.Snapshot(t.Context())
	if err != nil || v != 1 || got.Len() != want.Len() || got.Currency != "JPY" {
		t.Fatalf("after reopen: %d objects, currency %q, version %d, %v", got.Len(), got.Currency, v, err)
	}
	if code := tsubame.ErrorCode(ro.PutObject(t.Context(), want.Advertisers[0])); code != tsubame.EINVALID {
		t.Fatalf("PutObject on a read-only store: code %q, want %q", code, tsubame.EINVALID)
	}
	ro.Close()

	// An older file: the placement buckets only.
	old := filepath.Join(t.TempDir(), embedded.FileName)
	db, err := bolt.Open(old, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range []string{"placements", "accesslog", "webhook_results"} {
			if _, err := tx.CreateBucket([]byte(b)); err != nil {
				return err
			}
		}
		meta, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return meta.Put([]byte("schema"), []byte("1"))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	ro, err = embedded.Open(old, embedded.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if set, v, err := ro.Snapshot(t.Context()); err != nil || set.Len() != 0 || v != 0 {
		t.Fatalf("older file read-only: %v objects, version %d, %v", set, v, err)
	}
	if list, err := ro.ListObjects(t.Context(), tsubame.KindLineItem); err != nil || len(list) != 0 {
		t.Fatalf("older file: ListObjects = %v, %v", list, err)
	}
	ro.Close()
	rw, err := embedded.Open(old, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if err := rw.ReplaceAll(t.Context(), want); err != nil {
		t.Fatalf("older file opened for writing takes campaigns: %v", err)
	}
}

func TestDedupeConformance(t *testing.T) {
	storetest.RunDedupe(t, func(t *testing.T) (a, b tsubame.Deduper) {
		s, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, s // one process holds the file
	})
}

// An id seen before a restart is a repeat after it; a read-only store
// (the CLI's) refuses to record.
func TestDedupeSurvivesReopenAndReadOnlyRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), embedded.FileName)
	s, err := embedded.Open(path, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.FirstSeen(t.Context(), "imp:d-1", time.Hour); err != nil || !ok {
		t.Fatalf("first sighting: %v, %v", ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := embedded.Open(path, embedded.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := ro.FirstSeen(t.Context(), "imp:d-2", time.Hour)
	if ok || tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("FirstSeen on a read-only store = %v, %v; want false and an EINVALID error", ok, err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = embedded.Open(path, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ok, err := s.FirstSeen(t.Context(), "imp:d-1", time.Hour); err != nil || ok {
		t.Fatalf("repeat after reopening: %v, %v; want false", ok, err)
	}
	if ok, err := s.FirstSeen(t.Context(), "imp:d-2", time.Hour); err != nil || !ok {
		t.Fatalf("id refused by the read-only store: %v, %v; want true (nothing was recorded)", ok, err)
	}
}

// A store file from before event ids has no bucket for them; opening it
// for writing adds one.
func TestDedupeOnAnOlderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), embedded.FileName)
	s, err := embedded.Open(path, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("event_ids")) }); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	s, err = embedded.Open(path, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ok, err := s.FirstSeen(t.Context(), "a", time.Hour); err != nil || !ok {
		t.Fatalf("FirstSeen on an older file: %v, %v", ok, err)
	}
}

// BenchmarkFirstSeen at a few concurrencies: the calls that arrive during a
// commit share the next one (one transaction, one fsync), so throughput
// grows with them (a tracking node has hundreds of requests in flight).
func BenchmarkFirstSeen(b *testing.B) {
	for _, p := range []int{1, 32, 512} {
		b.Run(fmt.Sprintf("goroutines=%dxCPU", p), func(b *testing.B) {
			s, err := embedded.Open(filepath.Join(b.TempDir(), embedded.FileName), embedded.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.BenchFirstSeen(b, s, p)
		})
	}
}
