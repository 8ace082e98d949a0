package redis

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"tsubame"
)

var _ tsubame.Deduper = (*Store)(nil)

// FirstSeen records id with SET <prefix>seen:<id> 1 NX PX <ttl>: Redis runs
// commands one at a time, so of any number of callers on any number of
// nodes exactly one creates the key and is answered OK; the others, until
// the key expires, get nil. Each id is a key of its own, so in a cluster the
// ids spread over the slots. ttl is rounded up to a millisecond and measured
// by the server's clock; Redis deletes the key when it expires.
//
// The command is not retried (rueidis retries only read-only commands): a
// reply lost after the server ran it yields an error, and the id stays
// recorded.
func (s *Store) FirstSeen(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if err := tsubame.ValidateFirstSeen(id, ttl); err != nil {
		return false, err
	}
	if err := s.check(); err != nil {
		return false, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	err := s.c.Do(ctx, s.c.B().Set().Key(s.opt.KeyPrefix+"seen:"+id).Value("1").Nx().PxMilliseconds(int64(ms)).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, unavailable(err)
	}
	return true, nil
}

// Seen asks EXISTS of each id's key, pipelined in one round trip (in a
// cluster, one per server holding some of them). A key is there exactly
// while its window lasts: Redis expires it.
func (s *Store) Seen(ctx context.Context, ids []string) ([]bool, error) {
	if err := tsubame.ValidateSeen(ids); err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return []bool{}, nil
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	cmds := make(rueidis.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = s.c.B().Exists().Key(s.opt.KeyPrefix + "seen:" + id).Build()
	}
	out := make([]bool, len(ids))
	for i, r := range s.c.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, unavailable(err)
		}
		out[i] = n == 1
	}
	return out, nil
}
