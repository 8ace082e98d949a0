package decision

import "maps"

// dict is a map an Index shares with the indexes patched from it (Patch).
// base is written by Compile only, and never once the Index is in use;
// mid and top hold what the patches since added or replaced, newest in
// top. A patch writes to a copy of top; once top holds topMax entries, it
// is merged into a new mid instead, so that a patch copies at most
// topMax entries, and the mid's copy comes once per topMax. While
// compiling, top is the map being built, and freeze makes it the base.
type dict[K comparable, V any] struct {
	base, mid, top map[K]V
}

// topMax bounds a dict's top: what each patch copies.
const topMax = 1024

func newDict[K comparable, V any]() dict[K, V] { return dict[K, V]{top: map[K]V{}} }

// get returns k's value, the patches' before the compile's.
func (m *dict[K, V]) get(k K) (V, bool) {
	if len(m.top) > 0 {
		if v, ok := m.top[k]; ok {
			return v, true
		}
	}
	if len(m.mid) > 0 {
		if v, ok := m.mid[k]; ok {
			return v, true
		}
	}
	v, ok := m.base[k]
	return v, ok
}

// put sets k's value in top (Compile's map, or a patch's copy).
func (m *dict[K, V]) put(k K, v V) { m.top[k] = v }

// freeze ends a compile: what it put becomes the base the patches share.
func (m *dict[K, V]) freeze() { m.base, m.top = m.top, nil }

// fork returns the dict a patch writes to: the base shared, top copied
// (or merged into a new mid when full).
func (m *dict[K, V]) fork() dict[K, V] {
	if len(m.top) >= topMax {
		mid := make(map[K]V, len(m.mid)+len(m.top))
		maps.Copy(mid, m.mid)
		maps.Copy(mid, m.top)
		return dict[K, V]{base: m.base, mid: mid, top: map[K]V{}}
	}
	top := make(map[K]V, len(m.top)+8)
	maps.Copy(top, m.top)
	return dict[K, V]{base: m.base, mid: m.mid, top: top}
}

// ids interns values: each a number from 1, never reused (0 is no value,
// what a request's value no line item names resolves to).
type ids[K comparable] struct {
	dict[K, uint32]
	n uint32 // the last number given
}

func newIDs[K comparable]() ids[K] { return ids[K]{dict: newDict[K, uint32]()} }

// intern returns k's number, giving it the next one if it has none.
func (m *ids[K]) intern(k K) uint32 {
	if id, ok := m.get(k); ok {
		return id
	}
	m.n++
	m.put(k, m.n)
	return m.n
}

// id returns k's number, 0 when it has none.
func (m *ids[K]) id(k K) uint32 {
	id, _ := m.get(k)
	return id
}

func (m *ids[K]) fork() ids[K] { return ids[K]{dict: m.dict.fork(), n: m.n} }
