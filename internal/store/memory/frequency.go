package memory

import (
	"context"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"

	"tsubame"
)

var _ tsubame.FrequencyCounter = (*Store)(nil)

// freqShards is how many locks the visitors are spread over, by a hash of
// the visitor: concurrent decisions for different visitors rarely wait for
// each other, and never for the store's other locks.
const freqShards = 64

var freqSeed = maphash.MakeSeed()

// frequencies holds the visitors' records. Like seen (dedupe.go), a shard
// is swept of its expired visitors after as many inserts as it kept at its
// last sweep (sweepMin at least), and its map rebuilt when a sweep leaves
// fewer than a quarter of its peak: its memory is proportional to the
// visitors with an entry that still matters (an impression within its
// line item's longest window, a hold open), about 100 bytes a visitor plus
// 40 a line item and 32 an entry. The zero value is ready for use.
type frequencies struct {
	closed atomic.Bool
	shards [freqShards]freqShard
}

type freqShard struct {
	mu      sync.Mutex
	visits  map[string]*freqVisitor
	inserts int // since the last sweep
	sweepAt int // inserts that trigger the next sweep
	peak    int // the most visitors held since the map was made
	_       [64]byte
}

// freqVisitor is a visitor's record, and when the last of its entries
// stops mattering (Unix microseconds).
type freqVisitor struct {
	lines   []tsubame.FrequencyLine
	expires int64
}

// Read copies visitor's record into rec (tsubame.FrequencyCounter). The
// records live in this process only: this backend caps for one node.
func (s *Store) Read(ctx context.Context, visitor string, rec *tsubame.FrequencyRecord) error {
	if err := tsubame.ValidateVisitor(visitor); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	return s.freq.read(visitor, rec)
}

// Update applies u to its visitor's record (tsubame.FrequencyCounter),
// under the lock of the visitor's shard.
func (s *Store) Update(ctx context.Context, u *tsubame.FrequencyUpdate, rec *tsubame.FrequencyRecord) (bool, error) {
	if err := tsubame.ValidateFrequencyUpdate(u); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	return s.freq.update(u, rec)
}

func (f *frequencies) shard(visitor string) *freqShard {
	return &f.shards[maphash.String(freqSeed, visitor)%freqShards]
}

func (f *frequencies) read(visitor string, rec *tsubame.FrequencyRecord) error {
	sh := f.shard(visitor)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f.closed.Load() {
		return errClosed
	}
	fill(rec, sh.visits[visitor])
	return nil
}

// fill copies v's lines into rec (none when v is nil).
func fill(rec *tsubame.FrequencyRecord, v *freqVisitor) {
	rec.Reset()
	rec.Read = true
	if v == nil {
		return
	}
	for _, l := range v.lines {
		r := rec.AddLine(l.LineItem)
		r.Entries = append(r.Entries, l.Entries...)
	}
}

func (f *frequencies) update(u *tsubame.FrequencyUpdate, rec *tsubame.FrequencyRecord) (bool, error) {
	sh := f.shard(u.Visitor)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Checked under the shard's lock: close sets the flag before it takes
	// the locks to drop the maps, so no call revives one.
	if f.closed.Load() {
		return false, errClosed
	}
	v, found := sh.visits[u.Visitor]
	if !found {
		v = &freqVisitor{}
	}
	i := 0
	for i < len(v.lines) && v.lines[i].LineItem != u.LineItem {
		i++
	}
	if i == len(v.lines) {
		v.lines = append(v.lines, tsubame.FrequencyLine{LineItem: strings.Clone(u.LineItem)}) // its own, as the visitor
	}
	var ok bool
	v.lines[i].Entries, ok = tsubame.ApplyFrequency(v.lines[i].Entries, u)
	if es := v.lines[i].Entries; ok && u.Bid != "" && len(es) > 0 && es[len(es)-1].ID == u.Bid {
		es[len(es)-1].ID = strings.Clone(u.Bid) // the entry appended keeps its own bid id
	}
	if len(v.lines[i].Entries) == 0 {
		v.lines = append(v.lines[:i], v.lines[i+1:]...)
	}
	if ok && u.Adds() {
		v.expires = max(v.expires, u.Expires())
	}
	now := u.Now.UnixMicro()
	switch {
	case len(v.lines) == 0:
		if found {
			delete(sh.visits, u.Visitor)
		}
	case !found:
		if sh.visits == nil {
			sh.visits = make(map[string]*freqVisitor)
			sh.sweepAt = sweepMin
		}
		// Its own copy: the caller's may be a view of a buffer it reuses
		// (the bidder's decoded request), and a map key kept with changed
		// bytes would be lost, and keep the whole buffer alive.
		sh.visits[strings.Clone(u.Visitor)] = v
		sh.peak = max(sh.peak, len(sh.visits))
		if sh.inserts++; sh.inserts >= sh.sweepAt {
			sh.sweep(now)
		}
	}
	if rec != nil {
		fill(rec, v)
	}
	return ok, nil
}

// sweep drops the visitors whose entries have all stopped mattering; the
// caller holds the lock.
func (sh *freqShard) sweep(now int64) {
	sh.visits, sh.peak = sweepExpired(sh.visits, sh.peak, func(v *freqVisitor) bool { return v.expires <= now })
	sh.inserts = 0
	sh.sweepAt = max(sweepMin, len(sh.visits))
}

// close makes later calls fail and drops every record.
func (f *frequencies) close() {
	f.closed.Store(true)
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		sh.visits = nil
		sh.mu.Unlock()
	}
}
