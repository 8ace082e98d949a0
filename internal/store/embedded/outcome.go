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

var _ tsubame.Outcomes = (*Store)(nil)

// bucketOutcomeBids holds what was recorded of each bid: bid id -> for
// each kind (1 to 3), when its record expires, in Unix nanoseconds, 8
// bytes big-endian each (0: none). bucketOutcomeQueues holds a bucket per
// holder: a big-endian sequence number -> a stored outcome
// (tsubame.AppendOutcome), in the order recorded.
var (
	bucketOutcomeBids   = []byte("outcome_bids")
	bucketOutcomeQueues = []byte("outcome_queues")
)

const outcomeRecord = 3 * 8

// outcomeCommits gathers Record's writes into shared transactions, and
// sweeps expired bids as the event ids are swept (dedupe.go).
type outcomeCommits = seenCommits

// Record records o for holder once per kind of bid within ttl
// (tsubame.Outcomes), in a write transaction shared with concurrent
// calls: the bid's record and the holder's queue change together. A
// read-only store refuses with EINVALID. Once queued, ctx no longer stops
// it.
func (s *Store) Record(ctx context.Context, holder string, o *tsubame.Outcome, ttl time.Duration) (bool, error) {
	if err := tsubame.ValidateOutcome(holder, o, ttl); err != nil {
		return false, err
	}
	if s.db.IsReadOnly() {
		return false, wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return false, unavailable(err)
	}
	var first bool
	var before tsubame.OutcomeKinds
	err := s.out.do(s.db, func(tx *bolt.Tx) error {
		bids, err := tx.CreateBucketIfNotExists(bucketOutcomeBids)
		if err != nil {
			return err
		}
		now := s.now().UnixNano()
		rec := make([]byte, outcomeRecord)
		if v := bids.Get([]byte(o.Bid)); len(v) == outcomeRecord {
			copy(rec, v)
		}
		first, before = false, 0
		for k := tsubame.OutcomeWin; k <= tsubame.OutcomeBill; k++ {
			if int64(binary.BigEndian.Uint64(rec[(k-1)*8:])) > now {
				if k == o.Kind {
					return nil // a repeat
				}
				before = before.With(k)
			}
		}
		exp := now + int64(ttl)
		if exp < now {
			exp = math.MaxInt64
		}
		binary.BigEndian.PutUint64(rec[(o.Kind-1)*8:], uint64(exp))
		if err := bids.Put([]byte(o.Bid), rec); err != nil {
			return err
		}
		queues, err := tx.CreateBucketIfNotExists(bucketOutcomeQueues)
		if err != nil {
			return err
		}
		q, err := queues.CreateBucketIfNotExists([]byte(holder))
		if err != nil {
			return err
		}
		seq, err := q.NextSequence()
		if err != nil {
			return err
		}
		stored := *o
		stored.Before = before
		if err := q.Put(binary.BigEndian.AppendUint64(nil, seq), tsubame.AppendOutcome(nil, &stored)); err != nil {
			return err
		}
		first = true
		return s.out.sweepOutcomes(bids, now, sweepPerWrite)
	})
	if err != nil {
		return false, wrap(err)
	}
	if first {
		o.Before = before
	}
	return first, nil
}

// sweepOutcomes visits the next limit bids and deletes those whose every
// record has expired at now.
func (g *outcomeCommits) sweepOutcomes(b *bolt.Bucket, now int64, limit int) error {
	c := b.Cursor()
	k, v := c.First()
	if g.from != nil {
		k, v = c.Seek(g.from)
	}
	var expired [][]byte
	for n := 0; k != nil && n < limit; k, v = c.Next() {
		n++
		live := false
		for i := 0; len(v) == outcomeRecord && i < outcomeRecord; i += 8 {
			live = live || int64(binary.BigEndian.Uint64(v[i:])) > now
		}
		if !live {
			expired = append(expired, bytes.Clone(k))
		}
	}
	g.from = bytes.Clone(k)
	for _, k := range expired {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Collect reads up to max of holder's outcomes, oldest first
// (tsubame.Outcomes), in a read transaction.
func (s *Store) Collect(ctx context.Context, holder string, max int) ([]tsubame.Outcome, error) {
	if err := tsubame.ValidateCollect(holder, max); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	var out []tsubame.Outcome
	err := s.db.View(func(tx *bolt.Tx) error {
		queues := tx.Bucket(bucketOutcomeQueues)
		if queues == nil {
			return nil
		}
		q := queues.Bucket([]byte(holder))
		if q == nil {
			return nil
		}
		c := q.Cursor()
		for k, v := c.First(); k != nil && len(out) < max; k, v = c.Next() {
			o, err := tsubame.ParseOutcome(string(v))
			if err != nil {
				return err
			}
			out = append(out, o)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

// Ack removes the first n of holder's outcomes (tsubame.Outcomes); the
// holder's bucket goes when it is empty.
func (s *Store) Ack(ctx context.Context, holder string, n int) error {
	if err := tsubame.ValidateHolder(holder); err != nil {
		return err
	}
	if n < 0 {
		return tsubame.Errorf(tsubame.EINVALID, "ack of %d outcomes", n)
	}
	if n == 0 {
		return nil
	}
	if s.db.IsReadOnly() {
		return wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.out.do(s.db, func(tx *bolt.Tx) error {
		queues := tx.Bucket(bucketOutcomeQueues)
		if queues == nil || queues.Bucket([]byte(holder)) == nil {
			return nil
		}
		q := queues.Bucket([]byte(holder))
		var keys [][]byte
		c := q.Cursor()
		for k, _ := c.First(); k != nil && len(keys) < n; k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		for _, k := range keys {
			if err := q.Delete(k); err != nil {
				return err
			}
		}
		if k, _ := q.Cursor().First(); k == nil {
			return queues.DeleteBucket([]byte(holder))
		}
		return nil
	}))
}
