package memory_test

import (
	"testing"

	"tsubame"
	"tsubame/internal/store/memory"
	"tsubame/internal/store/storetest"
)

func TestOutcomesConformance(t *testing.T) {
	storetest.RunOutcomes(t, func(t *testing.T) (a, b tsubame.Outcomes) {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s, s
	})
}

func TestHandoversConformance(t *testing.T) {
	storetest.RunHandovers(t, func(t *testing.T) (a, b tsubame.Handovers) {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s, s
	})
}

func TestAssetsConformance(t *testing.T) {
	storetest.RunAssets(t, func(t *testing.T) (a, b tsubame.Assets) {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s, s
	})
}
