package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"tsubame"
)

var _ tsubame.Quotas = (*Store)(nil)

// quotaSettle begins every quota script. KEYS[1] is the key's hash: field
// settled holds its settled units, o:<holder> a holder's outstanding lease
// and e:<holder> when it expires, in milliseconds of the server's clock
// (TIME), so that every node measures leases by one clock; r:<holder> the
// ids of its last applied releases (each a byte of its length and the id,
// oldest first), q:<holder> the number of its last release (rseq counts
// them), by which the ids of the holders without a lease are pruned; w the
// number of Release calls (releaseQuota). It reads the
// hash (a key has a few holders), settles the leases expired at now, and
// leaves settled, out (the outstanding units), o (holder -> units) and now
// for the operation that follows. Numbers are written with %d: Lua's
// numbers are doubles, exact to 2^53 (tsubame.MaxQuotaUnits), but print
// with 14 digits.
const quotaSettle = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HGETALL', KEYS[1])
local settled, out, expired = 0, 0, false
local o, e = {}, {}
for i = 1, #h, 2 do
  local f, v = h[i], tonumber(h[i + 1])
  local p = string.sub(f, 1, 2)
  if f == 'settled' then settled = v
  elseif p == 'o:' then o[string.sub(f, 3)] = v
  elseif p == 'e:' then e[string.sub(f, 3)] = v end
end
for holder, units in pairs(o) do
  if (e[holder] or 0) <= now then
    settled = settled + units
    o[holder] = nil
    redis.call('HDEL', KEYS[1], 'o:' .. holder, 'e:' .. holder)
    expired = true
  else
    out = out + units
  end
end
if expired then redis.call('HSET', KEYS[1], 'settled', string.format('%d', settled)) end
`

// leaseQuota is Lease: ARGV holder, limit, want, ttl in milliseconds; it
// returns {units granted, the holder's lease after}.
var leaseQuota = newWriteScript(quotaSettle + `
local holder, limit, want = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local grant = 0
if limit > settled + out then grant = math.min(want, limit - settled - out) end
local cur = o[holder]
if grant > 0 or cur then
  redis.call('HSET', KEYS[1], 'o:' .. holder, string.format('%d', (cur or 0) + grant),
    'e:' .. holder, string.format('%d', now + tonumber(ARGV[4])))
end
return {grant, (cur or 0) + grant}`)

// releaseQuota is Release and Debit: ARGV holder, used, unused, id, how
// many ids to keep, how many idle holders' ids to keep, and '1' for a
// debit (used settled with no lease to take it from). It always writes (field w
// counts its calls), even to repeat a release applied already: the WAIT
// after it then covers the write it repeats, which an earlier WAIT may
// not have seen reach a replica. It returns 0 when done or
// when id was applied already, -1 when holder has no lease, -2 when the
// lease is smaller than used+unused (and then changes nothing but the
// expired leases). Besides r:<holder>, q:<holder> numbers its last
// release (from the field rseq), so that the ids of the holders without a
// lease that released longest ago are dropped beyond the last ARGV[6].
var releaseQuota = newWriteScript(quotaSettle + `
redis.call('HINCRBY', KEYS[1], 'w', 1)
local holder, used, unused, id = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local r = redis.call('HGET', KEYS[1], 'r:' .. holder) or ''
local ids, pos = {}, 1
while pos <= #r do
  local n = string.byte(r, pos)
  local x = string.sub(r, pos + 1, pos + n)
  if x == id then return 0 end
  ids[#ids + 1] = x
  pos = pos + 1 + n
end
if used == 0 and unused == 0 then return 0 end
local cur = o[holder]
if ARGV[7] ~= '1' then
  if not cur then return -1 end
  if used > cur or unused > cur - used then return -2 end
  cur = cur - used - unused
  if cur == 0 then
    redis.call('HDEL', KEYS[1], 'o:' .. holder, 'e:' .. holder)
  else
    redis.call('HSET', KEYS[1], 'o:' .. holder, string.format('%d', cur))
  end
end
if used > 0 then redis.call('HSET', KEYS[1], 'settled', string.format('%d', settled + used)) end
ids[#ids + 1] = id
local parts = {}
for i = math.max(1, #ids - tonumber(ARGV[5]) + 1), #ids do
  parts[#parts + 1] = string.char(#ids[i]) .. ids[i]
end
local seq = (tonumber(redis.call('HGET', KEYS[1], 'rseq')) or 0) + 1
redis.call('HSET', KEYS[1], 'r:' .. holder, table.concat(parts), 'q:' .. holder, string.format('%d', seq),
  'rseq', string.format('%d', seq))
local idle = {}
for i = 1, #h, 2 do
  local f = h[i]
  if string.sub(f, 1, 2) == 'q:' then
    local x = string.sub(f, 3)
    if x ~= holder and not o[x] then idle[#idle + 1] = {tonumber(h[i + 1]), x} end
  end
end
if not cur or cur == 0 then idle[#idle + 1] = {seq, holder} end
local keep = tonumber(ARGV[6])
if #idle > keep then
  table.sort(idle, function(a, b) return a[1] < b[1] end)
  for i = 1, #idle - keep do
    redis.call('HDEL', KEYS[1], 'r:' .. idle[i][2], 'q:' .. idle[i][2])
  end
end
return 0`)

// committedQuota is Committed: it returns {settled, outstanding}.
var committedQuota = rueidis.NewLuaScript(quotaSettle + `
return {settled, out}`)

// writeScript is a quota script that writes. When replicas must
// acknowledge its write (Options.WaitReplicas), it runs on a connection of
// its own followed by WAIT, which waits for the writes of its connection.
type writeScript struct {
	*rueidis.Lua
	body, sha1 string
}

func newWriteScript(body string) writeScript {
	sum := sha1.Sum([]byte(body))
	return writeScript{Lua: rueidis.NewLuaScript(body), body: body, sha1: hex.EncodeToString(sum[:])}
}

// waitFor is how many replicas must acknowledge a write of key before it
// counts.
func (s *Store) waitFor(key string) int64 {
	switch n := s.opt.WaitReplicas; {
	case n == WaitOff:
		return 0
	case n > 0:
		return int64(n)
	case s.shards == nil:
		return int64(min(s.replicas.Load(), 1))
	}
	return int64(min(s.shards.replicas[slot(key)].Load(), 1))
}

// quotaWrite runs script on key. When replicas must acknowledge it, a
// write they did not acknowledge within Options.WaitTimeout is an error
// (EUNAVAILABLE): it happened on the master, and a failover to a replica
// that missed it would forget it, so the caller treats it as a write whose
// effect is unknown (a Lease's grant is not spent until a later answer
// confirms it; a Release is retried with its id).
//
// Why: a replica promoted without the last writes forgets leases the
// nodes spend from, and then grants those units again; with WAIT the
// nodes spend only what a replica has too.
func (s *Store) quotaWrite(ctx context.Context, script writeScript, key string, args []string) (rueidis.RedisMessage, error) {
	return s.moneyWrite(ctx, script, []string{key}, args)
}

// moneyWrite runs script on keys (of one slot), followed by WAIT when
// replicas must acknowledge a write of keys[0] (quotaWrite).
func (s *Store) moneyWrite(ctx context.Context, script writeScript, keys, args []string) (rueidis.RedisMessage, error) {
	n := s.waitFor(keys[0])
	if n == 0 {
		return script.Exec(ctx, s.c, keys, args).ToMessage()
	}
	var msg rueidis.RedisMessage
	err := s.c.Dedicated(func(c rueidis.DedicatedClient) error {
		wait := c.B().Wait().Numreplicas(n).Timeout(max(s.opt.WaitTimeout.Milliseconds(), 1)).Build()
		res := c.DoMulti(ctx, c.B().Evalsha().Sha1(script.sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait)
		if e, ok := rueidis.IsRedisErr(res[0].Error()); ok && e.IsNoScript() {
			wait = c.B().Wait().Numreplicas(n).Timeout(max(s.opt.WaitTimeout.Milliseconds(), 1)).Build()
			res = c.DoMulti(ctx, c.B().Eval().Script(script.body).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait)
		}
		var err error
		if msg, err = res[0].ToMessage(); err != nil {
			return err
		}
		acked, err := res[1].AsInt64()
		if err != nil {
			return err
		}
		if acked < n {
			return tsubame.Errorf(tsubame.EUNAVAILABLE, "redis store: %d of %d replicas acknowledged a budget write of %q within %v; a failover could lose it",
				acked, n, keys[0], s.opt.WaitTimeout)
		}
		return nil
	})
	return msg, err
}

// quotaKey is the hash of a quota key. It expires only when Expire says
// so: it holds settled spend, and forgotten, a limit could be spent again.
// The ledger expires a day's keys once the day and a keep window are over.
func (s *Store) quotaKey(key string) string {
	return s.opt.KeyPrefix + "quota:" + key
}

// Lease grants holder up to want units of key within limit
// (tsubame.Quotas), with one script on <prefix>quota:<key>: Redis runs a
// script without any other command between its own, so the leases of any
// number of nodes never exceed the limit together, and a key is one slot,
// so a cluster spreads the keys over its masters. ttl is kept to the
// millisecond, rounded up.
//
// The scripts are not retried (rueidis retries only read-only commands): a
// reply lost after the server ran one yields an error, and its effect
// stays (units granted so are stranded until the lease expires).
func (s *Store) Lease(ctx context.Context, key, holder string, limit, want int64, ttl time.Duration) (granted, held int64, err error) {
	if err := tsubame.ValidateLease(key, holder, limit, want, ttl); err != nil {
		return 0, 0, err
	}
	if err := s.check(); err != nil {
		return 0, 0, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	msg, err := s.quotaWrite(ctx, leaseQuota, s.quotaKey(key), []string{holder,
		strconv.FormatInt(limit, 10), strconv.FormatInt(want, 10), strconv.FormatInt(tsubame.LeaseMillis(ttl), 10)})
	if err != nil {
		return 0, 0, unavailable(err)
	}
	v, err := msg.AsIntSlice()
	if err != nil {
		return 0, 0, unavailable(err)
	}
	if len(v) != 2 {
		return 0, 0, tsubame.Errorf(tsubame.EINTERNAL, "redis store: lease script returned %d numbers, not 2", len(v))
	}
	return v[0], v[1], nil
}

// Release ends part of holder's lease of key (tsubame.Quotas), with one
// script on <prefix>quota:<key>.
func (s *Store) Release(ctx context.Context, key, holder, id string, used, unused int64) error {
	if err := tsubame.ValidateRelease(key, holder, id, used, unused); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	msg, err := s.quotaWrite(ctx, releaseQuota, s.quotaKey(key), []string{holder,
		strconv.FormatInt(used, 10), strconv.FormatInt(unused, 10), id, strconv.Itoa(tsubame.QuotaReleaseIDs),
		strconv.Itoa(tsubame.QuotaIdleHolders), "0"})
	var n int64
	if err == nil {
		n, err = msg.AsInt64()
	}
	switch {
	case err != nil:
		return unavailable(err)
	case n == -1:
		return tsubame.Errorf(tsubame.ECONFLICT, "holder %q has no outstanding lease of %q: it expired and was settled, or was never taken", holder, key)
	case n == -2:
		return tsubame.Errorf(tsubame.EINVALID, "release of %d used and %d unused units of %q is more than the lease of %q", used, unused, key, holder)
	}
	return nil
}

// Debit settles units of key past its leases (tsubame.Quotas), with the
// release script (its ids make a retry a no-op).
func (s *Store) Debit(ctx context.Context, key, holder, id string, units int64) error {
	if err := tsubame.ValidateDebit(key, holder, id, units); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err := s.quotaWrite(ctx, releaseQuota, s.quotaKey(key), []string{holder,
		strconv.FormatInt(units, 10), "0", id, strconv.Itoa(tsubame.QuotaReleaseIDs),
		strconv.Itoa(tsubame.QuotaIdleHolders), "1"})
	return unavailable(err)
}

// Committed reports key's settled units and outstanding leases
// (tsubame.Quotas), settling the expired ones first.
func (s *Store) Committed(ctx context.Context, key string) (settled, outstanding int64, err error) {
	if err := tsubame.ValidateQuotaKey(key); err != nil {
		return 0, 0, err
	}
	if err := s.check(); err != nil {
		return 0, 0, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	v, err := committedQuota.Exec(ctx, s.c, []string{s.quotaKey(key)}, nil).AsIntSlice()
	if err != nil {
		return 0, 0, unavailable(err)
	}
	if len(v) != 2 {
		return 0, 0, tsubame.Errorf(tsubame.EINTERNAL, "redis store: quota script returned %d numbers, not 2", len(v))
	}
	return v[0], v[1], nil
}

// Expire sets key's hash to expire at at (tsubame.Quotas): PEXPIREAT, by
// the Redis server's clock, which does nothing to a key that does not
// exist.
func (s *Store) Expire(ctx context.Context, key string, at time.Time) error {
	if err := tsubame.ValidateQuotaKey(key); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return unavailable(s.c.Do(ctx, s.c.B().Pexpireat().Key(s.quotaKey(key)).MillisecondsTimestamp(at.UnixMilli()).Build()).Error())
}
