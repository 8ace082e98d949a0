package memory

import (
	"context"
	"sync"
	"time"

	"tsubame"
)

var _ tsubame.Outcomes = (*Store)(nil)

// outcomes holds what Record was told (tsubame.Outcomes), in this process
// only: this backend keeps one node's bids. Its memory is proportional to
// the bids with an outcome within their ttl (their ids, about 100 bytes
// each, swept as the event ids are) and to the outcomes not yet acked.
type outcomes struct {
	mu      sync.Mutex
	bids    map[string]*outcomeBid // bid id -> what was recorded of it
	queues  map[string][]tsubame.Outcome
	inserts int // since the last sweep
	sweepAt int
}

// outcomeBid is what was recorded of one bid: when each kind's record
// expires, in clock nanoseconds (0: none).
type outcomeBid struct {
	expires [4]int64
}

// Record records o for holder once per kind of bid within ttl (tsubame.Outcomes).
func (s *Store) Record(ctx context.Context, holder string, o *tsubame.Outcome, ttl time.Duration) (bool, error) {
	if err := tsubame.ValidateOutcome(holder, o, ttl); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	q := &s.out
	q.mu.Lock()
	defer q.mu.Unlock()
	if s.seen.closed.Load() {
		return false, errClosed
	}
	now := s.seen.clock()
	b := q.bids[o.Bid]
	var before tsubame.OutcomeKinds
	if b != nil {
		if b.expires[o.Kind] > now {
			return false, nil
		}
		for k := tsubame.OutcomeWin; k <= tsubame.OutcomeBill; k++ {
			if b.expires[k] > now {
				before = before.With(k)
			}
		}
	} else {
		if q.bids == nil {
			q.bids, q.queues, q.sweepAt = map[string]*outcomeBid{}, map[string][]tsubame.Outcome{}, sweepMin
		}
		q.sweep(now)
		b = &outcomeBid{}
		q.bids[o.Bid] = b
	}
	b.expires[o.Kind] = now + int64(ttl)
	o.Before = before
	q.queues[holder] = append(q.queues[holder], *o)
	return true, nil
}

// sweep drops the bids whose every record has expired, once enough bids
// were added since the last sweep (as seen's shards do).
func (q *outcomes) sweep(now int64) {
	if q.inserts++; q.inserts < q.sweepAt {
		return
	}
	for id, b := range q.bids {
		if max(b.expires[1], b.expires[2], b.expires[3]) <= now {
			delete(q.bids, id)
		}
	}
	q.inserts, q.sweepAt = 0, max(len(q.bids), sweepMin)
}

// Collect returns up to max of holder's outcomes, oldest first (tsubame.Outcomes).
func (s *Store) Collect(ctx context.Context, holder string, max int) ([]tsubame.Outcome, error) {
	if err := tsubame.ValidateCollect(holder, max); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	q := &s.out
	q.mu.Lock()
	defer q.mu.Unlock()
	if s.seen.closed.Load() {
		return nil, errClosed
	}
	queue := q.queues[holder]
	return append([]tsubame.Outcome(nil), queue[:min(len(queue), max)]...), nil
}

// Ack removes the first n of holder's outcomes (tsubame.Outcomes).
func (s *Store) Ack(ctx context.Context, holder string, n int) error {
	if err := tsubame.ValidateHolder(holder); err != nil {
		return err
	}
	if n < 0 {
		return tsubame.Errorf(tsubame.EINVALID, "ack of %d outcomes", n)
	}
	if err := ctx.Err(); err != nil {
		return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	q := &s.out
	q.mu.Lock()
	defer q.mu.Unlock()
	if s.seen.closed.Load() {
		return errClosed
	}
	queue := q.queues[holder]
	if n >= len(queue) {
		delete(q.queues, holder)
		return nil
	}
	q.queues[holder] = append(queue[:0:0], queue[n:]...)
	return nil
}
