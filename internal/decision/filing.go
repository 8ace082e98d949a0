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
func (ix *Index) predicates(l *Line, siteNames []string, buf []term, in func([]term), excl []term) []term {
	for d := range numDims {
		if len(l.incl(d)) > 0 {
			buf = buf[:0]
			for _, v := range ix.keyValues(d, l.incl(d), siteNames) {
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

// file builds the posting lists of every line item of ix.
func (ix *Index) file() {
	siteNames := make([]string, len(ix.dicts[dimSite])+1)
	for name, id := range ix.dicts[dimSite] {
		siteNames[id] = name
	}
	sizes := [numAttrs]int{attrKV: len(ix.kvs), attrDeal: len(ix.deals)}
	for d := range numDims {
		sizes[d] = len(ix.dicts[d])
	}
	// How many line items name each value with ∈: how rare a predicate is.
	var named [numAttrs][]int32
	for a := range numAttrs {
		named[a] = make([]int32, sizes[a]+1)
	}
	buf := make([]term, 0, 16)
	var excl []term
	for i := range ix.lines {
		ix.predicates(&ix.lines[i], siteNames, buf, func(ts []term) {
			for _, t := range ts {
				named[t.attr][t.id]++
			}
		}, nil)
	}
	// Each term's entries as priority<<32 | entry: sorted, they are its
	// groups in order, each group's entries ascending.
	var pending [numAttrs][][]uint64
	for a := range numAttrs {
		pending[a] = make([][]uint64, sizes[a]+1)
	}
	var rarest []term
	for i := range ix.lines {
		l := &ix.lines[i]
		cost := int64(math.MaxInt64)
		rarest = rarest[:0]
		excl = ix.predicates(l, siteNames, buf, func(ts []term) {
			var c int64
			for _, t := range ts {
				c += int64(named[t.attr][t.id])
			}
			if c < cost {
				cost = c
				rarest = append(rarest[:0], ts...)
			}
		}, excl[:0])
		key := uint64(l.Priority) << 32
		for _, t := range rarest {
			pending[t.attr][t.id] = append(pending[t.attr][t.id], key|uint64(i)<<1|1)
		}
		if len(rarest) == 0 {
			ix.zero[l.Priority] = append(ix.zero[l.Priority], uint32(i)<<1|1)
			for _, t := range excl {
				pending[t.attr][t.id] = append(pending[t.attr][t.id], key|uint64(i)<<1)
			}
		}
	}
	for a := range numAttrs {
		ix.post[a] = make([]groups, sizes[a]+1)
		for id, es := range pending[a] {
			if len(es) == 0 {
				continue
			}
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
			ix.post[a][id] = slices.Clip(gs)
			pending[a][id] = nil
		}
	}
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
