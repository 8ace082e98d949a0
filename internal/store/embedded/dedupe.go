package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
)

var _ tsubame.Deduper = (*Store)(nil)

// bucketSeen holds the event ids of FirstSeen: id -> when it expires, in
// Unix nanoseconds, 8 bytes big-endian.
var bucketSeen = []byte("event_ids")

// sweepPerWrite is how many ids of the bucket a commit visits per id it
// writes, in key order from where the last visit stopped, deleting the
// expired ones. A full pass over n ids takes at most n/4 writes, so the
// bucket holds at most about 4/3 of the ids live within their ttl. Deleted
// ids' pages go back to bbolt's freelist, so the file stops growing at
// about that size.
const sweepPerWrite = 4

// maxSeenCommit bounds the writes one commit takes (as bbolt's
// DefaultMaxBatchSize does), so that a commit, and the wait of the calls
// behind it, stays short.
const maxSeenCommit = 1000

// seenWrite is one FirstSeen waiting for a commit.
type seenWrite struct {
	key   []byte // bbolt keeps it until the commit: never reused
	ttl   time.Duration
	first bool
	err   error
	// wake gets one message: false once the write is answered by another
	// call's commit, true when this call is to lead the next commit.
	wake chan bool
}

// seenCommits gathers the writes of FirstSeen into shared transactions (a
// group commit). A call that finds no commit under way commits at once; the
// calls that arrive meanwhile queue, and when it is done the first of them
// commits them all in one transaction and one fsync. So a lone call waits
// for no one, and under load the commits grow with the calls arriving
// during each. (bbolt's Batch also shares commits, but every call waits for
// a timer, 10 ms by default, for others to join: 6.4 ms per new id from two
// goroutines, and a lone new id waits the whole delay.) A leader commits
// once and hands over, so a caller waits for the commit under way, those of
// the calls queued before it (a commit takes up to maxSeenCommit) and its
// own, never for calls that came after it.
type seenCommits struct {
	mu    sync.Mutex
	queue []*seenWrite
	busy  bool // a call is leading a commit
	// from is the id the next sweep starts at (nil: the first). It is
	// touched only by the leader, in its write transaction.
	from []byte
}

// FirstSeen records id and reports whether it is new within ttl. A repeat
// within its window is answered by a read; a new or expired id is written
// in a transaction shared with the concurrent calls (seenCommits). An
// expired id is treated as absent and overwritten. Expiry is kept in the
// file as wall-clock time, so a repeat is recognised after a restart; a
// step of the machine's clock lengthens or shortens the windows open at
// that moment. A read-only store refuses with EINVALID. Once a write is
// queued, ctx no longer stops it.
func (s *Store) FirstSeen(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if err := tsubame.ValidateFirstSeen(id, ttl); err != nil {
		return false, err
	}
	if s.db.IsReadOnly() {
		return false, wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return false, unavailable(err)
	}
	key := []byte(id)
	// Without a write transaction and its fsync: only the call that wrote
	// the id, in a transaction committed before this read began, can have
	// answered true, and the id changes only once it has expired.
	var repeat bool
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketSeen); b != nil {
			v := b.Get(key)
			repeat = len(v) == 8 && s.now().UnixNano() < int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil || repeat {
		return false, wrap(err)
	}
	w := &seenWrite{key: key, ttl: ttl, wake: make(chan bool, 1)}
	s.commitSeen(w)
	if w.err != nil {
		return false, wrap(w.err)
	}
	return w.first, nil
}

// commitSeen returns once w is committed (or has failed).
func (s *Store) commitSeen(w *seenWrite) {
	g := &s.seen
	g.mu.Lock()
	g.queue = append(g.queue, w)
	lead := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !lead && !<-w.wake {
		return
	}
	// w is first in the queue: the queue was empty when this call found no
	// commit under way, and a leader hands over to the first one waiting.
	g.mu.Lock()
	n := min(len(g.queue), maxSeenCommit)
	batch := g.queue[:n:n]
	g.queue = append([]*seenWrite(nil), g.queue[n:]...)
	g.mu.Unlock()

	// Deferred, so that a panic in the commit still answers the batch and
	// hands over: the calls queued behind would otherwise wait for ever.
	err := errCommitPanicked
	defer func() { g.finish(w, batch, err) }()
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSeen)
		if b == nil {
			return tsubame.Errorf(tsubame.EINTERNAL, "store has no %s bucket", bucketSeen)
		}
		now := s.now().UnixNano()
		for _, x := range batch {
			// Another call of this commit may have written the same id.
			if v := b.Get(x.key); len(v) == 8 && now < int64(binary.BigEndian.Uint64(v)) {
				continue
			}
			exp := now + int64(x.ttl)
			if exp < now {
				exp = math.MaxInt64
			}
			if err := b.Put(x.key, binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(exp))); err != nil {
				return err
			}
			x.first = true
		}
		return g.sweep(b, now, sweepPerWrite*len(batch))
	})
}

var errCommitPanicked = errors.New("commit of event ids panicked")

// finish answers the calls of the batch that the leader w committed, with
// err, and hands the lead to the first call waiting.
func (g *seenCommits) finish(w *seenWrite, batch []*seenWrite, err error) {
	for _, x := range batch {
		if err != nil {
			x.first, x.err = false, err
		}
		if x != w {
			x.wake <- false
		}
	}
	g.mu.Lock()
	var next *seenWrite
	if len(g.queue) > 0 {
		next = g.queue[0]
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	if next != nil {
		next.wake <- true
	}
}

// sweep visits the next limit ids and deletes those expired at now.
func (g *seenCommits) sweep(b *bolt.Bucket, now int64, limit int) error {
	c := b.Cursor()
	k, v := c.First()
	if g.from != nil {
		k, v = c.Seek(g.from)
	}
	var expired [][]byte
	for n := 0; k != nil && n < limit; k, v = c.Next() {
		n++
		if len(v) != 8 || int64(binary.BigEndian.Uint64(v)) <= now {
			// Deleting under a cursor can make it skip the next key:
			// delete after the walk. The copy outlives the page.
			expired = append(expired, bytes.Clone(k))
		}
	}
	g.from = bytes.Clone(k) // nil at the end: the next pass starts over
	for _, k := range expired {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
