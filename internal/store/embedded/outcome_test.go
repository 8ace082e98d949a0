package embedded_test

import (
	"path/filepath"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/embedded"
	"tsubame/internal/store/storetest"
)

func TestOutcomesConformance(t *testing.T) {
	storetest.RunOutcomes(t, func(t *testing.T) (a, b tsubame.Outcomes) {
		s, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, s // one process holds the file
	})
}

// A bid's record and its holder's queue survive a restart: a repeat after
// it is a repeat, and the queue is as it was.
func TestOutcomesSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), embedded.FileName)
	s, err := embedded.Open(path, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := tsubame.Outcome{Kind: tsubame.OutcomeBill, Bid: "b-1", LineItem: "li", Due: 7, Price: 5}
	if first, err := s.Record(t.Context(), "n", &o, time.Hour); err != nil || !first {
		t.Fatal(first, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = embedded.Open(path, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if first, err := s.Record(t.Context(), "n", &o, time.Hour); err != nil || first {
		t.Fatalf("repeat after a restart: first %v, %v", first, err)
	}
	if q, err := s.Collect(t.Context(), "n", 10); err != nil || len(q) != 1 || q[0] != o {
		t.Fatalf("queue after a restart %+v, %v; want %+v", q, err, o)
	}
}

func TestHandoversConformance(t *testing.T) {
	storetest.RunHandovers(t, func(t *testing.T) (a, b tsubame.Handovers) {
		s, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, s
	})
}

func TestAssetsConformance(t *testing.T) {
	storetest.RunAssets(t, func(t *testing.T) (a, b tsubame.Assets) {
		s, err := embedded.Open(filepath.Join(t.TempDir(), embedded.FileName), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, s
	})
}
