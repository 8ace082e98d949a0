package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
)

var _ tsubame.Deduper = (*Store)(nil)

// bucketSeen holds the event ids of FirstSeen: id -> when it expires, in
// Unix nanoseconds, 8 bytes big-endian.
var bucketSeen = []byte("event_ids")

// Every sweepEvery-th FirstSeen that writes also visits the next sweepKeys
// ids of the bucket, in key order from where the last visit stopped, and
// deletes the expired ones. That is four ids visited per id written: a full
// pass over n ids takes at most n/4 writes, so the bucket holds at most
// about 4/3 of the ids live within their ttl. Deleted ids' pages go back to
// bbolt's freelist, so the file stops growing at about that size.
const (
	sweepEvery = 64
	sweepKeys  = 256
)

// sweeper is where the sweep of expired event ids goes on.
type sweeper struct {
	calls atomic.Uint64
	// from is the id the next visit starts at (nil: the first). It is read
	// and written only inside write transactions, which bbolt runs one at a
	// time.
	from []byte
}

// FirstSeen records id and reports whether it is new within ttl, in one
// transaction shared with the concurrent calls (bbolt's Batch: one fsync
// for them all, after up to DB.MaxBatchDelay, 10 ms, for others to join).
// An expired id is treated as absent and overwritten. Expiry is kept in the
// file as wall-clock time, so a repeat is recognised after a restart; a
// step of the machine's clock lengthens or shortens the windows open at
// that moment. A read-only store refuses with EINVALID.
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
	key := []byte(id) // bbolt keeps it until the commit: never reused
	// A repeat within its window is answered by a read, without a write
	// transaction and its fsync: only the call that wrote the id, in a
	// transaction committed before this read began, can have answered
	// true, and the id can only change once it has expired.
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
	sweep := s.seen.calls.Add(1)%sweepEvery == 0
	var first bool
	err = s.db.Batch(func(tx *bolt.Tx) error {
		// Batch may run this more than once (when another call of the
		// batch fails, the rest run again in a new transaction): every
		// run decides afresh.
		first = false
		b := tx.Bucket(bucketSeen)
		if b == nil {
			return tsubame.Errorf(tsubame.EINTERNAL, "store has no %s bucket", bucketSeen)
		}
		now := s.now().UnixNano()
		if v := b.Get(key); len(v) != 8 || int64(binary.BigEndian.Uint64(v)) <= now {
			exp := now + int64(ttl)
			if exp < now {
				exp = math.MaxInt64
			}
			v := binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(exp))
			if err := b.Put(key, v); err != nil {
				return err
			}
			first = true
		}
		if sweep {
			return s.seen.sweep(b, now)
		}
		return nil
	})
	if err != nil {
		return false, wrap(err)
	}
	return first, nil
}

// sweep visits the next sweepKeys ids and deletes those expired at now.
func (w *sweeper) sweep(b *bolt.Bucket, now int64) error {
	c := b.Cursor()
	k, v := c.First()
	if w.from != nil {
		k, v = c.Seek(w.from)
	}
	var expired [][]byte
	for n := 0; k != nil && n < sweepKeys; k, v = c.Next() {
		n++
		if len(v) != 8 || int64(binary.BigEndian.Uint64(v)) <= now {
			// Deleting under a cursor can make it skip the next key:
			// delete after the walk. The copy outlives the page.
			expired = append(expired, bytes.Clone(k))
		}
	}
	w.from = bytes.Clone(k) // nil at the end: the next pass starts over
	for _, k := range expired {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
