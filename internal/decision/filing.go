package decision

import (
	"math"
	"slices"
)

// The targeting index (see the package doc): each line item filed under
// the values of its rarest ∈ predicate, or in its priority's zero list
// and under its excluded values; a request gathers, per priority, what is
// filed under its terms.

// Attributes beyond the targeting dimensions: a key-value pair (each key a
// predicate of its own, the pair the term's value) and a deal.
const (
	attrKV = numDims + iota
	attrDeal
	numAttrs
)

// group is one posting list: the entries of one priority, each a line
// ordinal<<1 | 1 for ∈ and | 0 for ∉, ascending (∉ first).
type group struct {
	prio int32
	ents []uint32
}

// groups are a term's posting lists, by priority.
type groups []group

// term is an (attribute, value id) pair.
type term struct {
	attr int
	id   uint32
}

// predicates calls in for each ∈ predicate of l with the terms of its
// values, and returns l's ∉ terms appended to excl.
func (ix *Index) predicates(l *Line, buf []term, in func([]term), excl []term) []term {
	for d := range numDims {
		if len(l.incl(d)) > 0 {
			buf = buf[:0]
			for _, v := range ix.keyValues(d, l.incl(d)) {
				buf = append(buf, term{d, v})
			}
			in(buf)
		}
		for _, v := range l.excl(d) {
			excl = append(excl, term{d, v})
		}
	}
	for _, vals := range l.kvIncl {
		buf = buf[:0]
		for _, v := range vals {
			buf = append(buf, term{attrKV, v})
		}
		in(buf)
	}
	for _, v := range l.kvExcl {
		excl = append(excl, term{attrKV, v})
	}
	if len(l.deals) > 0 {
		buf = buf[:0]
		for _, v := range l.deals {
			buf = append(buf, term{attrDeal, v})
		}
		in(buf)
	}
	return excl
}

// file builds the posting lists of every line item of ix, and keeps the
// counts that filed them (ix.named).
func (ix *Index) file() {
	sizes := ix.sizes()
	// How many line items name each value with ∈: how rare a predicate is.
	for a := range numAttrs {
		ix.named[a] = make([]int32, sizes[a]+1)
	}
	buf := make([]term, 0, 16)
	for i := range ix.lines {
		ix.predicates(&ix.lines[i], buf, func(ts []term) {
			for _, t := range ts {
				ix.named[t.attr][t.id]++
			}
		}, nil)
	}
	// Each term's entries as priority<<32 | entry: sorted, they are its
	// groups in order, each group's entries ascending.
	var pending [numAttrs][][]uint64
	for a := range numAttrs {
		pending[a] = make([][]uint64, sizes[a]+1)
	}
	var f filing
	for i := range ix.lines {
		l := &ix.lines[i]
		ix.filing(l, &f)
		key := uint64(l.Priority) << 32
		for _, t := range f.terms {
			pending[t.attr][t.id] = append(pending[t.attr][t.id], key|f.entry(t))
		}
		if f.zero {
			ix.zero[l.Priority] = append(ix.zero[l.Priority], uint32(i)<<1|1)
		}
	}
	for a := range numAttrs {
		ix.post[a] = make([]groups, sizes[a]+1)
		for id, es := range pending[a] {
			if len(es) > 0 {
				ix.post[a][id] = makeGroups(es)
				pending[a][id] = nil
			}
		}
	}
}

// sizes returns how many values each attribute has interned.
func (ix *Index) sizes() [numAttrs]int {
	sizes := [numAttrs]int{attrKV: int(ix.kvs.n), attrDeal: int(ix.deals.n)}
	for d := range numDims {
		sizes[d] = int(ix.dicts[d].n)
	}
	return sizes
}

// filing is where a line item is filed: under the terms of its rarest ∈
// predicate, or (zero) in its priority's zero list and, excluded, under
// the terms of its ∉ predicates.
type filing struct {
	ord   uint32
	zero  bool
	terms []term
	buf   []term
	excl  []term
}

// entry is the line item's entry in term t's list.
func (f *filing) entry(term) uint64 {
	if f.zero {
		return uint64(f.ord) << 1
	}
	return uint64(f.ord)<<1 | 1
}

// filing sets f to where l is filed, by the counts of ix's compile (a
// value interned since counts as named by none): the same for l whenever
// it is asked, so that a patch finds the entries of a line item it
// removes.
func (ix *Index) filing(l *Line, f *filing) {
	cost := int64(math.MaxInt64)
	f.ord, f.terms = uint32(l.Ord), f.terms[:0]
	if f.buf == nil {
		f.buf = make([]term, 0, 16)
	}
	f.excl = ix.predicates(l, f.buf[:0], func(ts []term) {
		var c int64
		for _, t := range ts {
			if named := ix.named[t.attr]; int(t.id) < len(named) {
				c += int64(named[t.id])
			}
		}
		if c < cost {
			cost = c
			f.terms = append(f.terms[:0], ts...)
		}
	}, f.excl[:0])
	f.zero = len(f.terms) == 0
	if f.zero {
		f.terms = append(f.terms, f.excl...)
	}
}

// makeGroups makes a term's groups of its entries, each priority<<32 |
// entry, which it sorts.
func makeGroups(es []uint64) groups {
	slices.Sort(es)
	es = slices.Compact(es) // a value listed twice
	var gs groups
	ents := make([]uint32, len(es)) // one array for all the term's groups
	for j, e := range es {
		ents[j] = uint32(e)
		if p := int32(e >> 32); len(gs) == 0 || gs[len(gs)-1].prio != p {
			gs = append(gs, group{prio: p, ents: ents[j:j]})
		}
		g := &gs[len(gs)-1]
		g.ents = g.ents[:len(g.ents)+1]
	}
	return slices.Clip(gs)
}

// addTerm adds the posting lists of the request's term (a, id) to those
// the request reaches.
func (ix *Index) addTerm(s *scratch, a int, id uint32) {
	if id == 0 || int(id) >= len(ix.post[a]) {
		return
	}
	if gs := ix.post[a][id]; len(gs) > 0 {
		s.terms = append(s.terms, gs)
		s.gpos = append(s.gpos, 0)
	}
}

// reach sets s.hits to the ordinals of the line items of priority p that
// the index reaches for the request (resolve): those in one of its lists
// or the zero list with ∈, and in none with ∉, each once. Every line item
// of p that matches the request is among them.
func (ix *Index) reach(p int, s *scratch) {
	s.hits, s.excl = s.hits[:0], s.excl[:0]
	lists := 0
	add := func(ents []uint32) {
		for _, e := range ents {
			if e&1 == 1 {
				s.hits = append(s.hits, int32(e>>1))
			} else {
				s.excl = append(s.excl, int32(e>>1))
			}
		}
		lists++
	}
	for t, gs := range s.terms {
		j := s.gpos[t]
		for j < len(gs) && int(gs[j].prio) < p {
			j++
		}
		s.gpos[t] = j
		if j < len(gs) && int(gs[j].prio) == p {
			add(gs[j].ents)
		}
	}
	add(ix.zero[p])
	// A line item is in one list of the request only, but where the
	// request has two values of one attribute (two deals, a key twice)
	// and it names both.
	if s.multi && lists > 1 {
		slices.Sort(s.hits)
		s.hits = slices.Compact(s.hits)
	}
	if len(s.excl) > 0 {
		slices.Sort(s.excl)
		s.hits = slices.DeleteFunc(s.hits, func(i int32) bool {
			_, ok := slices.BinarySearch(s.excl, i)
			return ok
		})
	}
}
