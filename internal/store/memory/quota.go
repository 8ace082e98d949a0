package memory

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"tsubame"
)

var _ tsubame.Quotas = (*Store)(nil)

// quotaShards is how many locks the quota keys are spread over, by a hash
// of the key: leases of different line items never wait for each other,
// nor for the store's other locks.
const quotaShards = 64

var quotaSeed = maphash.MakeSeed()

// quotaBase is the origin of the quotas' clock: expiries are monotonic
// nanoseconds since, so a step of the wall clock neither lengthens nor
// shortens a lease.
var quotaBase = time.Now()

// quotas holds the keys of Quotas. A key is kept once leased (it holds
// settled spend) until Expire's time for it; its memory is about 100 bytes plus 40 a holder, and the ids of each
// holder's last tsubame.QuotaReleaseIDs releases (up to about 5 KB).
// The zero value is ready for use.
type quotas struct {
	// clock returns the time leases expire by, in nanoseconds; nil is
	// monotonic time since quotaBase (tests set their own).
	clock  func() int64
	shards [quotaShards]quotaShard
}

type quotaShard struct {
	mu   sync.Mutex
	keys map[string]*tsubame.QuotaState
	// drops are the keys Expire named, and when (Unix nanoseconds of the
	// wall clock) each is dropped; next is the earliest of them.
	drops map[string]int64
	next  int64
	_     [64]byte // keeps neighbouring shards' locks off one cache line
}

// drop deletes the keys whose time to be dropped has come at now.
func (sh *quotaShard) drop(now int64) {
	if len(sh.drops) == 0 || now < sh.next {
		return
	}
	sh.next = 1<<63 - 1
	for k, at := range sh.drops {
		if at <= now {
			delete(sh.keys, k)
			delete(sh.drops, k)
		} else {
			sh.next = min(sh.next, at)
		}
	}
}

func (q *quotas) now() int64 {
	if q.clock != nil {
		return q.clock()
	}
	return int64(time.Since(quotaBase))
}

// quotaShard returns key's shard locked, or errClosed. The store's Close sets
// the frequency counters' closed flag before it returns; the quotas follow
// it rather than keep a flag of their own, and keep their keys (nothing
// reads them after Close).
func (s *Store) quotaShard(ctx context.Context, key string) (*quotaShard, error) {
	if err := ctx.Err(); err != nil {
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	sh := &s.quota.shards[maphash.String(quotaSeed, key)%quotaShards]
	sh.mu.Lock()
	if s.freq.closed.Load() {
		sh.mu.Unlock()
		return nil, errClosed
	}
	sh.drop(time.Now().UnixNano())
	return sh, nil
}

// Lease grants holder up to want units of key within limit
// (tsubame.Quotas). The counts live in this process only: this backend
// holds limits for one node.
func (s *Store) Lease(ctx context.Context, key, holder string, limit, want int64, ttl time.Duration) (granted, held int64, err error) {
	if err := tsubame.ValidateLease(key, holder, limit, want, ttl); err != nil {
		return 0, 0, err
	}
	sh, err := s.quotaShard(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	defer sh.mu.Unlock()
	q := sh.keys[key]
	if q == nil {
		if want == 0 {
			return 0, 0, nil
		}
		if sh.keys == nil {
			sh.keys = make(map[string]*tsubame.QuotaState)
		}
		q = &tsubame.QuotaState{}
		sh.keys[key] = q
	}
	now := s.quota.now()
	granted = q.Lease(holder, limit, want, now, now+int64(ttl))
	return granted, q.Held(holder), nil
}

// Release ends part of holder's lease of key (tsubame.Quotas).
func (s *Store) Release(ctx context.Context, key, holder, id string, used, unused int64) error {
	if err := tsubame.ValidateRelease(key, holder, id, used, unused); err != nil {
		return err
	}
	sh, err := s.quotaShard(ctx, key)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	q := sh.keys[key]
	if q == nil {
		q = &tsubame.QuotaState{} // no lease: an error, or a no-op
	}
	return q.Release(holder, id, used, unused, s.quota.now())
}

// Debit settles units of key past its leases (tsubame.Quotas).
func (s *Store) Debit(ctx context.Context, key, holder, id string, units int64) error {
	if err := tsubame.ValidateDebit(key, holder, id, units); err != nil {
		return err
	}
	sh, err := s.quotaShard(ctx, key)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	q := sh.keys[key]
	if q == nil {
		if sh.keys == nil {
			sh.keys = make(map[string]*tsubame.QuotaState)
		}
		q = &tsubame.QuotaState{}
		sh.keys[key] = q
	}
	q.Debit(holder, id, units, s.quota.now())
	return nil
}

// Committed reports key's settled units and outstanding leases
// (tsubame.Quotas), settling the expired ones first.
func (s *Store) Committed(ctx context.Context, key string) (settled, outstanding int64, err error) {
	if err := tsubame.ValidateQuotaKey(key); err != nil {
		return 0, 0, err
	}
	sh, err := s.quotaShard(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	defer sh.mu.Unlock()
	q := sh.keys[key]
	if q == nil {
		return 0, 0, nil
	}
	q.Expire(s.quota.now())
	return q.Settled, q.Outstanding(), nil
}

// Expire drops key once the wall clock is past at (tsubame.Quotas).
func (s *Store) Expire(ctx context.Context, key string, at time.Time) error {
	if err := tsubame.ValidateQuotaKey(key); err != nil {
		return err
	}
	sh, err := s.quotaShard(ctx, key)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if sh.keys[key] == nil {
		return nil
	}
	if sh.drops == nil {
		sh.drops = make(map[string]int64)
	}
	if len(sh.drops) == 0 {
		sh.next = 1<<63 - 1
	}
	sh.drops[key] = at.UnixNano()
	sh.next = min(sh.next, at.UnixNano())
	sh.drop(time.Now().UnixNano())
	return nil
}
