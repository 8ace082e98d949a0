package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
)

var _ tsubame.Deduper = (*Store)(nil)

// bucketSeen holds the event ids of FirstSeen: id -> when it expires, in
// Unix nanoseconds, 8 bytes big-endian.
var bucketSeen = []byte("event_ids")

// sweepPerWrite is how many ids of the bucket each write visits, in key order from where the last visit stopped, deleting the
// expired ones. A full pass over n ids takes at most n/4 writes, so the
// bucket holds at most about 4/3 of the ids live within their ttl. Deleted
// ids' pages go back to bbolt's freelist, so the file stops growing at
// about that size.
const sweepPerWrite = 4

// maxSeenCommit is how many FirstSeen writes one commit takes.
const maxSeenCommit = maxCommit

// seenCommits gathers the writes of FirstSeen into shared transactions
// (groupCommit).
type seenCommits struct {
	groupCommit
	// from is the id the next sweep starts at (nil: the first). It is
	// touched only in a job of the group commit, in its write transaction.
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
	var first bool
	err = s.seen.do(s.db, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSeen)
		if b == nil {
			return tsubame.Errorf(tsubame.EINTERNAL, "store has no %s bucket", bucketSeen)
		}
		now := s.now().UnixNano()
		// Another call of this commit may have written the same id.
		if v := b.Get(key); len(v) != 8 || now >= int64(binary.BigEndian.Uint64(v)) {
			exp := now + int64(ttl)
			if exp < now {
				exp = math.MaxInt64
			}
			if err := b.Put(key, binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(exp))); err != nil {
				return err
			}
			first = true
		}
		return s.seen.sweep(b, now, sweepPerWrite)
	})
	if err != nil {
		return false, wrap(err)
	}
	return first, nil
}

// sweep visits the next limit ids and deletes those expired at now.
func (g *seenCommits) sweep(b *bolt.Bucket, now int64, limit int) error {
	for _, k := range sweepDue(b, &g.from, now, limit) {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// sweepDue visits the next limit keys of b, from *from (nil: the first),
// whose values are times (Unix nanoseconds, 8 bytes big-endian), and
// returns copies of those due at now (or not a time), to delete after the
// walk: deleting under a cursor can make it skip the next key. It moves
// *from on, to nil at the end, where the next pass starts over.
func sweepDue(b *bolt.Bucket, from *[]byte, now int64, limit int) [][]byte {
	c := b.Cursor()
	k, v := c.First()
	if *from != nil {
		k, v = c.Seek(*from)
	}
	var due [][]byte
	for n := 0; k != nil && n < limit; k, v = c.Next() {
		n++
		if len(v) != 8 || int64(binary.BigEndian.Uint64(v)) <= now {
			due = append(due, bytes.Clone(k)) // the copy outlives the page
		}
	}
	*from = bytes.Clone(k)
	return due
}

// Seen reads whether each id is recorded and within its window, in one
// read transaction.
func (s *Store) Seen(ctx context.Context, ids []string) ([]bool, error) {
	if err := tsubame.ValidateSeen(ids); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	out := make([]bool, len(ids))
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSeen)
		if b == nil {
			return nil
		}
		now := s.now().UnixNano()
		for i, id := range ids {
			v := b.Get([]byte(id))
			out[i] = len(v) == 8 && now < int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	return out, nil
}
