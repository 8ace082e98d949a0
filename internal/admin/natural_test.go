package admin

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestNaturalCompare(t *testing.T) {
	want := []string{"1", "2", "9", "10", "11", "100", "101", "1000", "a", "a01", "a1", "a2", "a10", "b", "p", "p02",
		"p2", "p9", "p10", "p10x", "p10y", "p100", "x-1", "x-2", "x-10"}
	got := slices.Clone(want)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		r.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
		slices.SortFunc(got, NaturalCompare)
		if !slices.Equal(got, want) {
			t.Fatalf("sorted: %s\nwant:   %s", strings.Join(got, " "), strings.Join(want, " "))
		}
	}
	for _, id := range want {
		if NaturalCompare(id, id) != 0 {
			t.Fatalf("%s != itself", id)
		}
	}
	if afterIndex(want, "10") != 4 || afterIndex(want, "12") != 5 || afterIndex(want, "") != 0 || afterIndex(want, "zzz") != len(want) {
		t.Fatal("afterIndex")
	}
}
