// Package streams keeps the open streams of one side of an HTTP/2
// connection, by stream id.
//
// An endpoint gives its streams increasing ids of one parity (RFC 9113
// §5.1.1), so the open ones live in a window of ids that slides forward:
// a slice indexed by (id − first) / 2 finds a stream with one load, where a
// map hashes and probes, and costs one word per id in the window. With
// tens of thousands of calls waiting on a slow API, each answer comes back
// to a stream that has long left the CPU's caches; this keeps that to one
// miss instead of several.
package streams

import "iter"

// maxGap bounds the ids an Add may skip: a peer's stream id far ahead of
// the last one must not make the table allocate its whole gap.
const maxGap = 1 << 16

// Table maps stream ids to values. The zero value is empty and ready.
type Table[T any] struct {
	slots []*T   // slots[head+i] is the stream with id first+2i, nil once gone
	head  int    // index of the oldest slot still held
	first uint32 // id of slots[head]
	n     int    // values held
	next  uint32 // the lowest id Add takes (0: any)
}

// Len returns how many streams the table holds.
func (t *Table[T]) Len() int { return t.n }

// Add stores v under id. Id must be above every id added before, of the
// same parity, and at most 2×65,536 past the last one; Add returns false
// (and stores nothing) otherwise.
func (t *Table[T]) Add(id uint32, v *T) bool {
	if v == nil || id < t.next || (t.next != 0 && (id-t.next)%2 != 0) {
		return false
	}
	if t.n == 0 {
		// Empty: the window starts over at id.
		clear(t.slots)
		t.slots, t.head, t.first = t.slots[:0], 0, id
	}
	end := t.first + 2*uint32(len(t.slots)-t.head) // the id the next slot stands for
	if (id-end)/2 > maxGap {
		return false
	}
	for range (id - end) / 2 {
		t.slots = append(t.slots, nil)
	}
	t.slots = append(t.slots, v)
	t.n++
	t.next = id + 2
	return true
}

// index returns id's slot index, or -1 when id is outside the window.
func (t *Table[T]) index(id uint32) int {
	if id < t.first || (id-t.first)%2 != 0 {
		return -1
	}
	i := t.head + int((id-t.first)/2)
	if i >= len(t.slots) {
		return -1
	}
	return i
}

// Get returns the value under id, or nil.
func (t *Table[T]) Get(id uint32) *T {
	if i := t.index(id); i >= 0 {
		return t.slots[i]
	}
	return nil
}

// Set replaces the value under id, which the table must hold; it returns
// false (and changes nothing) otherwise.
func (t *Table[T]) Set(id uint32, v *T) bool {
	i := t.index(id)
	if i < 0 || t.slots[i] == nil || v == nil {
		return false
	}
	t.slots[i] = v
	return true
}

// Delete removes id and returns what it held (nil if nothing).
func (t *Table[T]) Delete(id uint32) *T {
	i := t.index(id)
	if i < 0 || t.slots[i] == nil {
		return nil
	}
	v := t.slots[i]
	t.slots[i] = nil
	t.n--
	// Slide the window past the streams that are gone.
	for t.head < len(t.slots) && t.slots[t.head] == nil {
		t.head++
		t.first += 2
	}
	if t.head == len(t.slots) {
		t.slots, t.head = t.slots[:0], 0
	} else if t.head >= 1024 && t.head > len(t.slots)/2 {
		// Give the consumed front back: the slice's length is at most
		// twice the window.
		n := copy(t.slots, t.slots[t.head:])
		clear(t.slots[n:])
		t.slots, t.head = t.slots[:n], 0
	}
	return v
}

// Oldest returns the stream with the lowest id, or nil when empty.
func (t *Table[T]) Oldest() (uint32, *T) {
	if t.n == 0 {
		return 0, nil
	}
	return t.first, t.slots[t.head]
}

// All yields the streams in id order. The table must not change during
// the loop.
func (t *Table[T]) All() iter.Seq2[uint32, *T] {
	return func(yield func(uint32, *T) bool) {
		for i := t.head; i < len(t.slots); i++ {
			if v := t.slots[i]; v != nil && !yield(t.first+2*uint32(i-t.head), v) {
				return
			}
		}
	}
}

// Reset empties the table and lets its slice go.
func (t *Table[T]) Reset() { *t = Table[T]{} }
