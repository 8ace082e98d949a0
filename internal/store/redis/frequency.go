package redis

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"tsubame"
)

var _ tsubame.FrequencyCounter = (*Store)(nil)

// takeFrequency is Take on one sorted set, KEYS[1], of the key's times:
// each member is one impression, its score the time in Unix microseconds
// (exact in a double until the year 2255). It drops the members at or
// before ARGV[3] (now less the longest window); then, for each cap, pairs
// from ARGV[5] of impressions and the exclusive start of its window
// ("(" and now less the window), refuses with 0 when the set holds as
// many members after the start; else it adds ARGV[2] at score ARGV[1],
// sets the key to expire ARGV[4] milliseconds (the longest window) later,
// and returns 1. Times are passed as strings and never computed in Lua,
// whose numbers print with 14 digits.
var takeFrequency = rueidis.NewLuaScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
for i = 5, #ARGV, 2 do
  if redis.call('ZCOUNT', KEYS[1], ARGV[i + 1], '+inf') >= tonumber(ARGV[i]) then return 0 end
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1`)

// Take records an impression for key at now if its caps allow one more
// (tsubame.FrequencyCounter), with one script on <prefix>freq:<key>: Redis
// runs a script without any other command between its own, so calls from
// any number of nodes never pass a cap together, and a key is one slot,
// so a cluster spreads the keys over its masters. The member of each
// impression is its time and a random 64-bit number, so that two at the
// same microsecond both count. The key expires the longest window after
// its last impression, by the server's clock.
//
// The script is not retried (rueidis retries only read-only commands): a
// reply lost after the server ran it yields an error, and the impression
// stays recorded.
func (s *Store) Take(ctx context.Context, key string, caps []tsubame.FrequencyCap, now time.Time) (bool, error) {
	if err := tsubame.ValidateTake(key, caps); err != nil {
		return false, err
	}
	if err := s.check(); err != nil {
		return false, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	at := now.UnixMicro()
	longest := tsubame.LongestFrequencyWindow(caps)
	args := make([]string, 4, 4+2*len(caps))
	args[0] = strconv.FormatInt(at, 10)
	args[1] = args[0] + "-" + strconv.FormatUint(rand.Uint64(), 36)
	args[2] = strconv.FormatInt(at-longest, 10)
	args[3] = strconv.FormatInt((longest+999)/1000, 10)
	for _, c := range caps {
		args = append(args, strconv.FormatInt(c.Impressions, 10), "("+strconv.FormatInt(at-tsubame.FrequencyMicros(c.Per), 10))
	}
	n, err := takeFrequency.Exec(ctx, s.c, []string{s.opt.KeyPrefix + "freq:" + key}, args).AsInt64()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}
