package redis

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"tsubame"
)

var _ tsubame.Handovers = (*Store)(nil)

// The handovers live in one slot: <prefix>{handovers}:set, the holders
// with a handover, and <prefix>{handovers}:h:<holder>, each one's data
// (expiring with it).
func (s *Store) handoverKeys(holder string) []string {
	tag := s.opt.KeyPrefix + "{handovers}:"
	return []string{tag + "set", tag + "h:" + holder, tag + "h:"}
}

// putHandover is PutHandover: KEYS set and data; ARGV holder, data, ttl
// in milliseconds.
var putHandover = newWriteScript(`
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('SADD', KEYS[1], ARGV[1])
return 0`)

// claimHandover is ClaimHandover: KEYS set and the data keys' prefix. It
// pops holders until one whose data has not expired, deletes that data,
// and returns {holder, data}, or {} when none is left.
var claimHandover = newWriteScript(`
while true do
  local holder = redis.call('SPOP', KEYS[1])
  if not holder then return {} end
  local key = KEYS[2] .. holder
  local data = redis.call('GET', key)
  if data then
    redis.call('DEL', key)
    return {holder, data}
  end
end`)

// PutHandover keeps data as holder's handover for ttl (tsubame.Handovers),
// as durably as a lease (moneyWrite).
func (s *Store) PutHandover(ctx context.Context, holder string, data []byte, ttl time.Duration) error {
	if err := tsubame.ValidateHandover(holder, data, ttl); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	k := s.handoverKeys(holder)
	_, err := s.moneyWrite(ctx, putHandover, k[:2], []string{holder, string(data), strconv.FormatInt(tsubame.LeaseMillis(ttl), 10)})
	return unavailable(err)
}

// ClaimHandover takes a handover not yet claimed (tsubame.Handovers), with
// one script: of concurrent claims, one pops each holder.
func (s *Store) ClaimHandover(ctx context.Context) (string, []byte, error) {
	if err := s.check(); err != nil {
		return "", nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	k := s.handoverKeys("")
	msg, err := s.moneyWrite(ctx, claimHandover, []string{k[0], k[2]}, nil)
	if err != nil {
		return "", nil, unavailable(err)
	}
	v, err := msg.ToArray()
	if err != nil || len(v) == 0 {
		if rueidis.IsRedisNil(err) {
			err = nil
		}
		return "", nil, unavailable(err)
	}
	holder, err1 := v[0].ToString()
	data, err2 := v[1].AsBytes()
	if err1 != nil || err2 != nil {
		return "", nil, tsubame.Errorf(tsubame.EINTERNAL, "redis store: a handover's claim returned %v", v)
	}
	return holder, data, nil
}
