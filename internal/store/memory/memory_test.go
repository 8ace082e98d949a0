package memory_test

import (
	"testing"

	"tsubame"
	"tsubame/internal/store/memory"
	"tsubame/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) tsubame.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestLogConformance(t *testing.T) {
	storetest.RunLog(t, func(t *testing.T) storetest.LogStore {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestResultConformance(t *testing.T) {
	storetest.RunResults(t, func(t *testing.T) storetest.ResultStore {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestCampaignConformance(t *testing.T) {
	storetest.RunCampaigns(t, func(t *testing.T) tsubame.CampaignStore {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestDedupeConformance(t *testing.T) {
	storetest.RunDedupe(t, func(t *testing.T) (a, b tsubame.Deduper) {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s, s
	})
}

func BenchmarkFirstSeen(b *testing.B) {
	s := memory.New()
	defer s.Close()
	storetest.BenchFirstSeen(b, s, 1)
}
