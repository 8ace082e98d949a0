package forecast

import (
	"cmp"
	"slices"
)

// booking is a booked line item's demand on the supply: what it wants of
// the range, and the cells its targeting admits.
type booking struct {
	id       string
	priority int
	want     float64
	cells    []int
	got      []float64 // per cells[i]: what it was allotted there
}

// allocate shares supply (per cell) among the bookings as a guaranteed
// delivery server does (the "high water mark" plan: Chen et al., "Ad
// Serving Using a Compact Allocation Plan", EC 2012): bookings in order
// of priority, and within a priority those with the least supply first;
// each takes the same fraction of every cell it may serve, up to what the
// cell has left, the smallest fraction that meets its want (all of its
// cells' rest when they cannot). It returns what each cell has left.
func allocate(supply []float64, bs []*booking) []float64 {
	rest := slices.Clone(supply)
	avail := func(b *booking) float64 {
		var s float64
		for _, c := range b.cells {
			s += supply[c]
		}
		return s
	}
	slices.SortStableFunc(bs, func(x, y *booking) int {
		return cmp.Or(cmp.Compare(x.priority, y.priority), cmp.Compare(avail(x), avail(y)), cmp.Compare(x.id, y.id))
	})
	for _, b := range bs {
		b.got = make([]float64, len(b.cells))
		take := func(f float64) float64 {
			var t float64
			for _, c := range b.cells {
				t += min(rest[c], f*supply[c])
			}
			return t
		}
		f := 1.0
		if take(1) > b.want {
			lo, hi := 0.0, 1.0
			for range 60 {
				mid := (lo + hi) / 2
				if take(mid) < b.want {
					lo = mid
				} else {
					hi = mid
				}
			}
			f = hi
		}
		for i, c := range b.cells {
			g := min(rest[c], f*supply[c])
			b.got[i] = g
			rest[c] -= g
		}
	}
	return rest
}
