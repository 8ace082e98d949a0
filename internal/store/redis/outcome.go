package redis

import (
	"context"
	"hash/fnv"
	"strconv"
	"time"

	"tsubame"
)

var _ tsubame.Outcomes = (*Store)(nil)

// recordOutcome is Record. KEYS[1] is the bid's record, a hash with a field
// per kind recorded (its number); KEYS[2] the holder's queue, a list of
// stored outcomes (tsubame.AppendOutcome). ARGV: the kind, the ttl in
// milliseconds, the outcome's stored form after its kind and what came
// before ("due|price|line item|bid"). It returns -1 for a repeat, else the
// kinds recorded before (a bit per kind). The record lives ttl from its
// latest kind; the queue lives tsubame.MaxOutcomeTTL from its latest
// outcome, so that a holder that died does not keep it for good.
var recordOutcome = newWriteScript(`
local kind = ARGV[1]
if redis.call('HEXISTS', KEYS[1], kind) == 1 then return -1 end
local before = 0
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  before = bit.bor(before, bit.lshift(1, tonumber(f)))
end
redis.call('HSET', KEYS[1], kind, '1')
if before == 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
end
redis.call('RPUSH', KEYS[2], kind .. '|' .. before .. '|' .. ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return before`)

// outcomeTag is the hash tag of holder's keys: its queue and its bids'
// records live in one slot, so that one script records and queues. A
// hash of the holder, since a holder may hold braces.
func (s *Store) outcomeTag(holder string) string {
	h := fnv.New64a()
	h.Write([]byte(holder))
	return s.opt.KeyPrefix + "out:{" + strconv.FormatUint(h.Sum64(), 36) + "}:"
}

// Record records o for holder once per kind of bid within ttl
// (tsubame.Outcomes), with one script on the bid's record and the
// holder's queue: <prefix>out:{<hash of holder>}:b:<bid> and
// <prefix>out:{<hash of holder>}:q. Redis runs a script without any other
// command between its own, so of concurrent records of one kind of one bid
// exactly one is queued, and it names what was recorded before it.
//
// The script is not retried: a reply lost after it ran yields an error,
// and the outcome stays recorded (and queued). Like a lease, a record (and
// an ack) counts once a replica has it, where replicas must acknowledge
// budget writes (Options.WaitReplicas): a failover must not forget a bill,
// nor bring back outcomes a holder has applied.
func (s *Store) Record(ctx context.Context, holder string, o *tsubame.Outcome, ttl time.Duration) (bool, error) {
	if err := tsubame.ValidateOutcome(holder, o, ttl); err != nil {
		return false, err
	}
	if err := s.check(); err != nil {
		return false, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	tag := s.outcomeTag(holder)
	rest := *o
	stored := tsubame.AppendOutcome(nil, &rest) // "kind|0|due|price|li|bid": after the second bar is the rest
	i := 0
	for n := 0; n < 2; i++ {
		if stored[i] == '|' {
			n++
		}
	}
	msg, err := s.moneyWrite(ctx, recordOutcome, []string{tag + "b:" + o.Bid, tag + "q"}, []string{
		strconv.Itoa(int(o.Kind)), strconv.FormatInt(tsubame.LeaseMillis(ttl), 10), string(stored[i:]),
		strconv.FormatInt(tsubame.LeaseMillis(tsubame.MaxOutcomeTTL), 10)})
	if err != nil {
		return false, unavailable(err)
	}
	before, err := msg.AsInt64()
	if err != nil {
		return false, unavailable(err)
	}
	if before < 0 {
		return false, nil
	}
	o.Before = tsubame.OutcomeKinds(before)
	return true, nil
}

// Collect reads up to max of holder's queue (LRANGE), oldest first
// (tsubame.Outcomes).
func (s *Store) Collect(ctx context.Context, holder string, max int) ([]tsubame.Outcome, error) {
	if err := tsubame.ValidateCollect(holder, max); err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	items, err := s.c.Do(ctx, s.c.B().Lrange().Key(s.outcomeTag(holder)+"q").Start(0).Stop(int64(max-1)).Build()).AsStrSlice()
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]tsubame.Outcome, 0, len(items))
	for _, it := range items {
		o, err := tsubame.ParseOutcome(it)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// Ack removes the first n of holder's outcomes (LTRIM) (tsubame.Outcomes).
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
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err := s.moneyWrite(ctx, ackOutcomes, []string{s.outcomeTag(holder) + "q"}, []string{strconv.Itoa(n)})
	return unavailable(err)
}

// ackOutcomes is Ack: LTRIM of the queue KEYS[1] from ARGV[1]. A script,
// so that it takes the WAIT of a budget write (moneyWrite).
var ackOutcomes = newWriteScript(`redis.call('LTRIM', KEYS[1], ARGV[1], -1)
return 0`)
