package budget

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"tsubame/internal/decision"
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
	// pool is what the bucket's bids hold together of each account of r:
	// each added its r.held; a loss or a deadline takes a bid's r.held
	// back out, and a bill its cost (more than its own hold when its hold
	// is a share: the bids that will not be billed stand for it). What
	// is left when the bucket empties is given back.
	pool [maxSlots]int64
	// added counts the bids the bucket ever held, billed those billed:
	// r.rate's measure when it ends.
	added, billed int64
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
	var b *bucket
	for _, x := range sh.m[k] {
		if x.r == *r {
			b = x
			break
		}
	}
	if b == nil {
		if sh.m == nil {
			sh.m = map[bucketKey][]*bucket{}
		}
		b = &bucket{r: *r, winBy: winBy, billBy: billBy, made: now}
		sh.m[k] = append(sh.m[k], b)
	}
	b.open++
	b.added++
	b.winBy, b.billBy = max(b.winBy, winBy), max(b.billBy, billBy)
	for i := range r.n {
		b.pool[i] += r.held(i)
	}
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

// drawn is what one bid's outcome took out of its bucket: the bid's
// reservation, and of each of its accounts what it took of the bucket's
// pool (got) and, when the bucket emptied, the rest of the pool (rest).
type drawn struct {
	r         reservation
	got, rest [maxSlots]int64
}

// draw removes one bid from k's buckets — an open one, or with won a won
// one (an open one if none) — with what it takes of the pool: its own
// hold for a loss (bill false; nothing where the hold is a share), and
// for a bill at price (a CPM, as take's) its cost where that is more than
// its hold; false when no bucket
// of k holds one (its deadline passed, or the node restarted).
func (t *holdTable) draw(k bucketKey, won, bill bool, price int64) (drawn, bool) {
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
			d := drawn{r: b.r}
			if bill {
				b.billed++
			}
			for j := range b.r.n {
				want := b.r.held(j)
				switch {
				case bill:
					want = max(want, b.r.cost(j, price))
				case b.r.share > 0:
					// A loss leaves its share in the pool, until the
					// bucket ends: the bids still open are those no loss
					// notice came for, more likely won than the rate
					// says, and the share of every bid the bucket made
					// pays its bills.
					want = 0
				}
				d.got[j] = min(want, b.pool[j])
				b.pool[j] -= d.got[j]
			}
			if b.open == 0 && b.won == 0 && b.r.share == 0 {
				d.rest = b.pool
				sh.drop(k, i)
			}
			return d, true
		}
	}
	return drawn{}, false
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

// drop removes the i-th bucket of k, which ended, counting its bids in
// its rate. The caller holds sh.mu.
func (sh *holdShard) drop(k bucketKey, i int) {
	bs := sh.m[k]
	if b := bs[i]; b.r.rate != nil {
		b.r.rate.add(b.added, b.billed)
	}
	if len(bs) == 1 {
		delete(sh.m, k)
		return
	}
	sh.m[k] = append(bs[:i:i], bs[i+1:]...)
}

// expired is what a deadline gave back: n bids of r, which took units
// of the pool of each of its accounts; and what it spent: kept bids of
// k that won and were not billed (reservation.keepWon), which used units.
type expired struct {
	r           reservation
	k           bucketKey
	n, kept     int64
	units, used [maxSlots]int64
}

// release takes n bids' holds out of b's pool, and the whole pool when b
// holds no bid after them, into e.
func (b *bucket) release(n int64, e *expired) {
	e.r = b.r
	e.n += n
	for j := range b.r.n {
		u := min(n*b.r.held(j), b.pool[j])
		if b.open == 0 && b.won == 0 {
			u = b.pool[j]
		}
		e.units[j] += u
		b.pool[j] -= u
	}
}

// keep spends n won bids of b at their price, out of its pool, into e;
// the rest of the pool when b holds no bid after them.
func (b *bucket) keep(n int64, e *expired) {
	e.r = b.r
	e.kept += n
	for j := range b.r.n {
		u := min(n*b.r.slots[j].units, b.pool[j])
		e.used[j] += u
		b.pool[j] -= u
		if b.open == 0 && b.won == 0 {
			e.units[j] += b.pool[j]
			b.pool[j] = 0
		}
	}
}

// expire removes the open bids of buckets whose winBy is at or before
// cutoff, and the won ones of those whose billBy is (given back, or
// spent: reservation.keepWon), and returns them.
func (t *holdTable) expire(cutoff int64, out []expired) []expired {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, bs := range sh.m {
			for j := 0; j < len(bs); {
				b := bs[j]
				e := expired{k: k}
				if n := b.open; n > 0 && b.winBy <= cutoff {
					b.open = 0
					b.release(n, &e)
				}
				if n := b.won; n > 0 && b.billBy <= cutoff {
					b.won = 0
					if b.r.keepWon {
						b.keep(n, &e)
					} else {
						b.release(n, &e)
					}
				}
				if b.open == 0 && b.won == 0 && b.r.share > 0 && b.billBy > cutoff {
					// A bucket of shares keeps its pool to its end, for
					// bills that may yet come (draw).
					if e.n > 0 || e.kept > 0 {
						out = append(out, e)
					}
					j++
					continue
				}
				if b.open == 0 && b.won == 0 && e.n == 0 {
					b.release(0, &e) // a bucket of shares whose bids all ended: the rest of its pool
				}
				if e.n > 0 || e.kept > 0 || e.units != [maxSlots]int64{} {
					out = append(out, e)
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

// A bid no notice says lost (its exchange sends no win notices, or its
// win window is off) holds its price until its reservation ends: at a 1 %
// win rate, a hundred held prices for each one billed, and pacing, which
// counts what is held, would stop bidding long before the budget is
// spent. So such a bid may hold a share of its price
// (decision.HoldByWinRate): the bound of its line item's win rate, as
// this node measured it on its own bids. The bids of one bucket hold
// their shares together (bucket.pool), and a bill spends its whole price
// from them: the bids that are never billed stand for those that are.
// What a bill costs past its bucket's pool is spent from the hand, and
// past the leases only where the hand is empty too (Counts.PastHold,
// Counts.Overage).
//
// The pools hold what the bound of the win rate expects the open bids to
// cost, but how many of them win is a draw: at a limit's end, with the
// store granting nothing more, a run of wins past that would be billed
// past the limit. So an account's hand keeps headroom for the draw's
// spread: headroomZ standard deviations of what its open bids held by a
// share will be billed, each a Bernoulli trial of its share (an upper
// bound of its win rate) for its whole price. A take leaves the hand at
// least that (account.headroom), the loop leases it over the hand's
// target, and bills past their pools spend it (account.takeAny).
// Mid-period it costs a few prices' worth of lease; at the end it stops
// the bids whose wins the limit could not pay.

// Of the win rate's bound.
const (
	// winRateZ is how many standard deviations over the measured win
	// rate a share is (the Wilson score interval's upper bound): 3, below
	// the true rate about once in 740 measures of a steady one.
	winRateZ = 3
	// headroomZ is how many standard deviations of their bills the open
	// bids' headroom is: 4, short about once in 30,000 draws.
	headroomZ = 4
	// winRateSample is the fewest bids a share is measured from; before,
	// bids hold their whole price. The bound is wide on a few (with 30
	// bids and no win, 23 %), and narrows as they come.
	winRateSample = 30
	// winRateMemory bounds the bids the measure remembers: past it, the
	// counts are halved, so that the newest weigh most.
	winRateMemory = 20_000
)

// winCount is what became of a line item's bids held by their win rate:
// the bids of its buckets that ended (all their bids lost, billed or
// given back), how many of them were billed, and the share the next
// ones hold (in decision.HoldShares; 0: whole).
type winCount struct {
	mu         sync.Mutex
	bids, wins int64
	share      atomic.Int64
}

// add counts a bucket that ended: bids made, wins billed.
func (w *winCount) add(bids, wins int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bids += bids
	w.wins += min(wins, bids)
	for w.bids > winRateMemory {
		w.bids, w.wins = w.bids/2, w.wins/2
	}
	w.share.Store(shareOf(w.wins, w.bids))
}

// shareOf is the share (in decision.HoldShares, rounded up; 0: whole) a
// bid holds after wins of bids were billed: the Wilson score interval's
// upper bound at winRateZ.
func shareOf(wins, bids int64) int64 {
	if bids < winRateSample || wins >= bids {
		return 0
	}
	// A statistic, not money: the share is a whole number of
	// decision.HoldShares, rounded up.
	n, p, z := float64(bids), float64(wins)/float64(bids), float64(winRateZ)
	bound := (p + z*z/(2*n) + z*math.Sqrt(p*(1-p)/n+z*z/(4*n*n))) / (1 + z*z/n)
	share := int64(math.Ceil(bound * decision.HoldShares))
	if share >= decision.HoldShares {
		return 0
	}
	return max(share, 1)
}

// risk is what the open bids held by a share of one account may yet be
// billed: each a Bernoulli trial of its share (an upper bound of its win
// rate) for its whole units.
type risk struct {
	// held is what the bids hold (their part of account.pooled), whole
	// their whole units: local units.
	held, whole atomic.Int64
	// m2 and m3 are the sums of the second and third central moments of
	// their bills (local units squared and cubed): statistics, not money.
	m2, m3 atomicFloat
}

// moments is a risk as it was read.
type moments struct {
	held, whole int64
	m2, m3      float64
}

func (k *risk) load() moments {
	return moments{k.held.Load(), k.whole.Load(), k.m2.load(), k.m3.load()}
}

// shared reports whether r holds a share of its price (not all of it).
func (r *reservation) shared() bool { return r.share > 0 && r.share < decision.HoldShares }

// add counts n more open bids of r on its i-th account (less than 0: bids
// that ended).
func (k *risk) add(n int64, r *reservation, i int) {
	var d moments
	if !d.add(n, r, i) {
		return
	}
	k.held.Add(d.held)
	k.whole.Add(d.whole)
	k.m2.add(d.m2)
	k.m3.add(d.m3)
}

// add counts n more bids of r on its i-th account in m; false when they
// are not held by a share.
func (m *moments) add(n int64, r *reservation, i int) bool {
	if !r.shared() {
		return false
	}
	m.held += n * r.held(i)
	m.whole += n * r.slots[i].units
	p, u := float64(r.share)/decision.HoldShares, float64(r.slots[i].units)
	m.m2 += float64(n) * u * u * p * (1 - p)
	m.m3 += float64(n) * u * u * u * p * (1 - p) * (1 - 2*p)
	return true
}

// room is the headroom of m where the pools hold pooled local units: the
// headroomZ quantile of what its bids will be billed (their holds, the
// mean of their bills by the bound of their rate, and the normal's
// quantile of the rest corrected for the skew of a few rare wins:
// Cornish–Fisher), at most all of them won, less what the pools hold, in
// local units rounded up. The pools hold more than the open bids' holds
// where bids lost (their shares are kept to their bucket's end:
// account.repay pays from them), less where bills took more than their
// own holds.
func (m moments) room(pooled int64) int64 {
	if m.m2 <= 0 || m.whole <= 0 {
		return 0
	}
	const z = headroomZ
	q := z*math.Sqrt(m.m2) + (z*z-1)/6*max(m.m3, 0)/m.m2
	return max(min(m.held+int64(math.Ceil(q)), m.whole)-pooled, 0)
}

// pool counts n more bids of r held by a share on its i-th account, with
// units more local units in its pools (both less than 0: bids that ended
// and what their pools gave up); bids held whole are in neither. The risk
// comes in before the pools and goes out after them, so that a headroom
// read between the two sees more than it is, never less.
func (a *account) pool(units, n int64, r *reservation, i int) {
	if !r.shared() {
		return
	}
	if units > 0 || n > 0 {
		a.risk.add(n, r, i)
		a.pooled.Add(units)
		return
	}
	a.pooled.Add(units)
	a.risk.add(n, r, i)
}

// headroom is what a's hand keeps for bills past the pools of its open
// bids held by a share (moments.room), where the pools owe what bills
// past them already spent that no hand covered (account.owed). A take
// leaves it in the hand with its own bid counted (account.take).
func (a *account) headroom() int64 {
	return a.risk.load().room(a.pooled.Load() - a.owed.Load())
}

// atomicFloat is a float64 that adds atomically. Its sums are signed (a
// third moment's terms are negative for shares over one half): what is
// added is taken away exactly in reverse, and readers clamp.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) load() float64 { return math.Float64frombits(f.bits.Load()) }

func (f *atomicFloat) add(v float64) {
	if v == 0 {
		return
	}
	for {
		old := f.bits.Load()
		next := math.Float64frombits(old) + v
		if f.bits.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}
