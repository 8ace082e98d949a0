package budget

import (
	"sync"
	"time"
)

// A won bid whose exchange bills later than its reservation
// (decision.Request.KeepWon) is spent when its reservation ends unbilled:
// given back, its money would be sold again, and its bill, when it came,
// debited past the limit. keptTable remembers how many were spent so, by
// line item and span of their ends, so that their late bills are not
// spent again. A bill names its bid's line item and end (tsubame.Outcome),
// not which bid of them was kept: any kept bid of its line item and span
// stands for it.
type keptTable struct {
	mu    sync.Mutex
	m     map[bucketKey]int64
	swept int64 // when sweep last looked, in Unix seconds
}

const (
	// keptSpan is the span of ends kept bids are counted by: their late
	// bills match within it. Coarse, so that a line item billed late keeps
	// a few counts a day, not one a second.
	keptSpan = int64(10 * time.Minute / time.Second)
	// keptFor is how long after its span a kept bid waits for its bill;
	// a bill after that is debited (counted twice: never over).
	keptFor = int64(24 * time.Hour / time.Second)
)

// keptKey is the count k's kept bids go in.
func keptKey(k bucketKey) bucketKey { return bucketKey{k.line, k.due - k.due%keptSpan} }

// add counts n kept bids of k.
func (t *keptTable) add(k bucketKey, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[bucketKey]int64{}
	}
	t.m[keptKey(k)] += n
}

// take counts the bill of a kept bid of k, and reports whether there was
// one.
func (t *keptTable) take(k bucketKey) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	kk := keptKey(k)
	n := t.m[kk]
	switch {
	case n <= 0:
		return false
	case n == 1:
		delete(t.m, kk)
	default:
		t.m[kk] = n - 1
	}
	return true
}

// sweep forgets the kept bids of spans ended keptFor before now (Unix
// nanoseconds), looking once a minute.
func (t *keptTable) sweep(now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := now / int64(time.Second)
	if s-t.swept < 60 {
		return
	}
	t.swept = s
	cutoff := s - keptFor - keptSpan
	for k := range t.m {
		if k.due < cutoff {
			delete(t.m, k)
		}
	}
}

// len is how many counts the table keeps.
func (t *keptTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// snapshot lists the counts, for a handover.
func (t *keptTable) snapshot() []handedKept {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]handedKept, 0, len(t.m))
	for k, n := range t.m {
		out = append(out, handedKept{Line: k.line, Due: k.due, N: n})
	}
	return out
}
