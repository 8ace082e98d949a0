package streams

import (
	"maps"
	"math/rand/v2"
	"testing"
)

func collect[T any](t *Table[T]) map[uint32]*T { return maps.Collect(t.All()) }

func TestTableAgainstMap(t *testing.T) {
	// Random adds (in id order, some gaps) and deletes (in any order),
	// checked step by step against a map.
	rng := rand.New(rand.NewPCG(1, 2))
	var tab Table[int]
	want := map[uint32]*int{}
	id := uint32(1)
	for step := range 200000 {
		if rng.IntN(100) < 52 || len(want) == 0 {
			if rng.IntN(50) == 0 {
				id += 2 * uint32(rng.IntN(10)) // a gap
			}
			v := step
			if !tab.Add(id, &v) {
				t.Fatalf("step %d: Add(%d) refused", step, id)
			}
			want[id] = &v
			id += 2
		} else {
			// Mostly old streams first, like answers, but not strictly.
			var victim uint32
			for k := range want {
				victim = k
				break
			}
			if rng.IntN(3) == 0 {
				victim, _ = tab.Oldest()
			}
			if got := tab.Delete(victim); got != want[victim] {
				t.Fatalf("step %d: Delete(%d) = %v, want %v", step, victim, got, want[victim])
			}
			delete(want, victim)
			if tab.Delete(victim) != nil {
				t.Fatalf("step %d: deleted %d twice", step, victim)
			}
		}
		if tab.Len() != len(want) {
			t.Fatalf("step %d: Len %d, want %d", step, tab.Len(), len(want))
		}
		if step%5000 == 0 {
			got := collect(&tab)
			if !maps.Equal(got, want) {
				t.Fatalf("step %d: All differs: %d values, want %d", step, len(got), len(want))
			}
			for k, v := range want {
				if tab.Get(k) != v {
					t.Fatalf("step %d: Get(%d) wrong", step, k)
				}
			}
			if len(want) > 0 {
				oldest := ^uint32(0)
				for k := range want {
					oldest = min(oldest, k)
				}
				if o, v := tab.Oldest(); o != oldest || v != want[oldest] {
					t.Fatalf("step %d: Oldest = %d, want %d", step, o, oldest)
				}
			}
		}
	}
	// The slice stays near the window: at most twice it, plus the slack
	// kept before compacting.
	if o, _ := tab.Oldest(); len(tab.slots) > 2*int((id-o)/2)+2048 {
		t.Errorf("slice of %d slots for a window of %d ids", len(tab.slots), (id-o)/2)
	}
}

func TestTableRefusals(t *testing.T) {
	var tab Table[string]
	a, b := "a", "b"
	if tab.Get(1) != nil || tab.Delete(1) != nil {
		t.Fatal("empty table returned a value")
	}
	if _, v := tab.Oldest(); v != nil {
		t.Fatal("empty table has an oldest stream")
	}
	if tab.Add(3, nil) {
		t.Error("nil value added")
	}
	if !tab.Add(3, &a) {
		t.Fatal("first Add refused")
	}
	for _, id := range []uint32{1, 3, 4, 6} {
		if tab.Add(id, &b) {
			t.Errorf("Add(%d) after 3 accepted (not increasing, or other parity)", id)
		}
	}
	if tab.Add(5+2*(maxGap+1), &b) {
		t.Error("a gap past maxGap was accepted")
	}
	if !tab.Add(5+2*maxGap, &b) {
		t.Error("a gap of maxGap was refused")
	}
	for _, id := range []uint32{0, 2, 4, 5, 7, 9 + 2*maxGap} {
		if tab.Get(id) != nil {
			t.Errorf("Get(%d) found a value", id)
		}
	}
	if tab.Get(3) != &a || tab.Get(5+2*maxGap) != &b || tab.Len() != 2 {
		t.Fatal("values lost")
	}
	// Emptied, the table still refuses ids it has passed.
	tab.Delete(3)
	tab.Delete(5 + 2*maxGap)
	if tab.Len() != 0 || tab.Add(7, &a) {
		t.Error("an old id was accepted after the table emptied")
	}
	if !tab.Add(7+2*maxGap, &a) || tab.Get(7+2*maxGap) != &a {
		t.Error("a new id after emptying failed")
	}
	c := "c"
	if tab.Set(5, &c) || tab.Set(7+2*maxGap, nil) {
		t.Error("Set of an id not held, or of nil, succeeded")
	}
	if !tab.Set(7+2*maxGap, &c) || tab.Get(7+2*maxGap) != &c || tab.Len() != 1 {
		t.Error("Set did not replace the value")
	}
	tab.Reset()
	if tab.Len() != 0 || !tab.Add(1, &a) {
		t.Error("Reset did not empty the table")
	}
}

func BenchmarkTableSlidingWindow(b *testing.B) {
	// 100,000 streams open, answered in shuffled order, as with a slow API.
	const window = 100000
	var tab Table[int]
	v := 1
	id := uint32(1)
	for range window {
		tab.Add(id, &v)
		id += 2
	}
	rng := rand.New(rand.NewPCG(3, 4))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		o, _ := tab.Oldest()
		if tab.Delete(o+2*uint32(rng.IntN(window/20))) == nil {
			tab.Delete(o)
		}
		tab.Add(id, &v)
		id += 2
	}
}
