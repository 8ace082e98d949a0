package budget

import "sync"

// hold is an open reservation: what a decision took, until when, and the
// event (event+id, "imp:<decision>") whose sighting settles it.
type hold struct {
	id    string
	event string
	until int64 // Unix nanoseconds
	r     reservation
}

// holdShards spreads the reservations over locks: decisions on every core
// add to them at once.
const holdShards = 8

// holdQueue keeps the open reservations, each shard in the order they were
// made: with one reservation window that is the order of their deadlines,
// and a window changed by a reload leaves a few out of order, settled a
// round late.
type holdQueue struct {
	shards [holdShards]holdShard
}

type holdShard struct {
	mu   sync.Mutex
	q    []hold // q[head:] are open
	head int
	_    [32]byte // keeps neighbouring shards' locks off one cache line
}

func shardOf(id string) int {
	if n := len(id); n > 0 {
		return int(id[n-1] % holdShards) // the last character of an id is random
	}
	return 0
}

func (q *holdQueue) push(h hold) {
	sh := &q.shards[shardOf(h.id)]
	sh.mu.Lock()
	if sh.head > 0 && sh.head >= len(sh.q)/2 && len(sh.q) == cap(sh.q) {
		// Move the open ones down rather than grow: popped ones are dead.
		n := copy(sh.q, sh.q[sh.head:])
		clear(sh.q[n:])
		sh.q, sh.head = sh.q[:n], 0
	}
	sh.q = append(sh.q, h)
	sh.mu.Unlock()
}

// popDue removes and returns the reservations, from the front of each
// shard, whose deadline is at or before cutoff.
func (q *holdQueue) popDue(cutoff int64) []hold {
	var out []hold
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		n := sh.head
		for n < len(sh.q) && sh.q[n].until <= cutoff {
			n++
		}
		out = append(out, sh.q[sh.head:n]...)
		clear(sh.q[sh.head:n])
		sh.head = n
		if sh.head == len(sh.q) {
			sh.q, sh.head = sh.q[:0], 0
			if cap(sh.q) > 4096 {
				sh.q = nil // give a burst's memory back
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// pushFront puts back reservations popDue returned and that could not be
// settled, ahead of the rest.
func (q *holdQueue) pushFront(hs []hold) {
	var by [holdShards][]hold
	for _, h := range hs {
		i := shardOf(h.id)
		by[i] = append(by[i], h)
	}
	for i, mine := range by {
		if len(mine) == 0 {
			continue
		}
		sh := &q.shards[i]
		sh.mu.Lock()
		sh.q = append(mine, sh.q[sh.head:]...)
		sh.head = 0
		sh.mu.Unlock()
	}
}

// len is the number of open reservations.
func (q *holdQueue) len() int {
	n := 0
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		n += len(sh.q) - sh.head
		sh.mu.Unlock()
	}
	return n
}
