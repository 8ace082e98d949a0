package budget

import (
	"hash/maphash"
	"sync"
	"unsafe"
)

// bucketKey names the bids (or decisions) of one line item whose holds
// end in one bucket of time: due is their deadline in Unix seconds,
// rounded up to the bucket's width.
type bucketKey struct {
	line string
	due  int64
}

// bucket is what the bids of one key took and what became of them. Its
// invariants: every bid counted in open or won holds r's units in the
// accounts (under r's generations), and each leaves them once, by a loss
// or a deadline (given back) or a bill (spent, the difference between
// its price and the bill's given back). A bucket goes when it holds
// nothing. What a node keeps is a bucket per line item and second (or
// coarser), never a record per bid: the bid's own record is its signed
// URLs and, once something happened to it, the store's (tsubame.Outcomes).
type bucket struct {
	r reservation // what each bid took: accounts, units, generations
	// open bids were neither lost, won nor billed; won bids won and were
	// not billed.
	open, won int64
	// winBy is when open bids not won are given back (an exchange that
	// sends win notices has sent them by then); billBy when won ones not
	// billed are; made when the bucket was made. Unix nanoseconds.
	winBy, billBy, made int64
}

// bucketBytes is about what a bucket costs: itself, its pointer and its
// map entry's key.
const bucketBytes = int64(unsafe.Sizeof(bucket{})) + 8 + int64(unsafe.Sizeof(bucketKey{})) + 16

// holdShards spreads the buckets over locks: decisions on every core add
// to them at once.
const holdShards = 16

// holdTable keeps the buckets, by key. A key holds a few buckets at most:
// one per distinct reservation (a line item's accounts changing within a
// second: a new day, a new index, a lost lease's generation).
type holdTable struct {
	seed   maphash.Seed
	shards [holdShards]holdShard
}

type holdShard struct {
	mu sync.Mutex
	m  map[bucketKey][]*bucket
	_  [40]byte // keeps neighbouring shards' locks off one cache line
}

func (t *holdTable) init() { t.seed = maphash.MakeSeed() }

func (t *holdTable) shard(k bucketKey) *holdShard {
	return &t.shards[maphash.Comparable(t.seed, k)%holdShards]
}

// add counts one more open bid of r under k at now, extending the
// bucket's deadlines to winBy and billBy.
func (t *holdTable) add(k bucketKey, r *reservation, now, winBy, billBy int64) {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, b := range sh.m[k] {
		if b.r == *r {
			b.open++
			b.winBy, b.billBy = max(b.winBy, winBy), max(b.billBy, billBy)
			return
		}
	}
	if sh.m == nil {
		sh.m = map[bucketKey][]*bucket{}
	}
	sh.m[k] = append(sh.m[k], &bucket{r: *r, open: 1, winBy: winBy, billBy: billBy, made: now})
}

// put adds bucket b under k as it is (a handed-over one).
func (t *holdTable) put(k bucketKey, b *bucket) {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = map[bucketKey][]*bucket{}
	}
	sh.m[k] = append(sh.m[k], b)
}

// take removes one bid from k's buckets — an open one, or with won a won
// one (an open one if none) — and returns what it held; false when no
// bucket of k holds one (its deadline passed, or the node restarted).
func (t *holdTable) take(k bucketKey, won bool) (reservation, bool) {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	bs := sh.m[k]
	for pass := range 2 {
		for i, b := range bs {
			switch {
			case won && pass == 0 && b.won > 0:
				b.won--
			case (!won || pass == 1) && b.open > 0:
				b.open--
			default:
				continue
			}
			r := b.r
			if b.open == 0 && b.won == 0 {
				sh.drop(k, i)
			}
			return r, true
		}
	}
	return reservation{}, false
}

// win moves one open bid of k to won; false when none is open.
func (t *holdTable) win(k bucketKey) bool {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, b := range sh.m[k] {
		if b.open > 0 {
			b.open--
			b.won++
			return true
		}
	}
	return false
}

// drop removes the i-th bucket of k. The caller holds sh.mu.
func (sh *holdShard) drop(k bucketKey, i int) {
	bs := sh.m[k]
	if len(bs) == 1 {
		delete(sh.m, k)
		return
	}
	sh.m[k] = append(bs[:i:i], bs[i+1:]...)
}

// expired is what a deadline gave back: n bids of r.
type expired struct {
	r reservation
	n int64
}

// expire removes the open bids of buckets whose winBy is at or before
// cutoff, and the won ones of those whose billBy is, and returns them.
func (t *holdTable) expire(cutoff int64, out []expired) []expired {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, bs := range sh.m {
			for j := 0; j < len(bs); {
				b := bs[j]
				if b.open > 0 && b.winBy <= cutoff {
					out = append(out, expired{b.r, b.open})
					b.open = 0
				}
				if b.won > 0 && b.billBy <= cutoff {
					out = append(out, expired{b.r, b.won})
					b.won = 0
				}
				if b.open == 0 && b.won == 0 {
					sh.drop(k, j)
					bs = sh.m[k]
					continue
				}
				j++
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// counts reports the bids held, the buckets holding them, and when the
// oldest was made (0: none).
func (t *holdTable) counts() (bids, buckets, oldest int64) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, bs := range sh.m {
			for _, b := range bs {
				bids += b.open + b.won
				buckets++
				if oldest == 0 || b.made < oldest {
					oldest = b.made
				}
			}
		}
		sh.mu.Unlock()
	}
	return bids, buckets, oldest
}
