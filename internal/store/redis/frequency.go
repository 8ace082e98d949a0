package redis

import (
	"context"
	"strconv"

	"github.com/redis/rueidis"

	"tsubame"
)

var _ tsubame.FrequencyCounter = (*Store)(nil)

// updateFrequency is Update on one hash, KEYS[1], the visitor's record:
// a field per line item, its value the entries as
// tsubame.AppendFrequencyEntries writes them. ARGV: 1 the op (t take, h
// hold, c count, r release, x cancel), 2 the line item, 3 now, 4 the
// entry the op adds, 5 the bid ("" for none), 6 the time at or before
// which impressions are dropped (now less the longest window), 7 the
// milliseconds the key must live at least after a change that adds (the
// longest window, or a hold's end), 8 "1" to return the whole record, then
// from 9 pairs of a cap's impressions and its window's exclusive start
// (now less the window). It does what tsubame.ApplyFrequency does — the
// conformance suite holds both to it — and returns {answer} or {answer,
// record}. Times are passed as strings and never computed or printed in
// Lua (its numbers print with 14 digits); compared as doubles they are
// exact until the year 2255.
var updateFrequency = rueidis.NewLuaScript(`
local op, bid = ARGV[1], ARGV[5]
local now, drop = tonumber(ARGV[3]), tonumber(ARGV[6])
local v = redis.call('HGET', KEYS[1], ARGV[2])
local kept, imps, holds = {}, {}, 0
local held, counted = false, false
if v then
  for e in string.gmatch(v, '%S+') do
    local s = string.find(e, '/', 2, true)
    local at = tonumber(string.sub(e, 2, s and s - 1 or -1))
    local id = s and string.sub(e, s + 1) or ''
    local keep = true
    if string.sub(e, 1, 1) == 'h' then
      if at <= now then
        keep = false
      elseif bid ~= '' and id == bid then
        held = true
        if op == 'c' or op == 'r' then keep = false end
      end
      if keep then holds = holds + 1 end
    elseif at <= drop then
      keep = false
    elseif bid ~= '' and id == bid then
      counted = true
      if op == 'x' then keep = false else imps[#imps + 1] = at end
    else
      imps[#imps + 1] = at
    end
    if keep then kept[#kept + 1] = e end
  end
end
local function allows()
  for i = 9, #ARGV, 2 do
    local n, from = holds, tonumber(ARGV[i + 1])
    for _, at in ipairs(imps) do
      if at > from then n = n + 1 end
    end
    if n >= tonumber(ARGV[i]) then return false end
  end
  return true
end
local ok = 0
if op == 't' then
  if allows() then kept[#kept + 1] = ARGV[4]; ok = 1 end
elseif op == 'h' then
  if held or counted then ok = 1
  elseif allows() then kept[#kept + 1] = ARGV[4]; ok = 1 end
elseif op == 'c' then
  if not counted then kept[#kept + 1] = ARGV[4]; ok = 1 end
elseif op == 'r' then
  if held then ok = 1 end
elseif op == 'x' then
  if counted then ok = 1 end
end
if #kept == 0 then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  redis.call('HSET', KEYS[1], ARGV[2], table.concat(kept, ' '))
end
if ok == 1 and op ~= 'r' and op ~= 'x' then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl == -1 or (ttl >= 0 and ttl < tonumber(ARGV[7])) then redis.call('PEXPIRE', KEYS[1], ARGV[7]) end
end
if ARGV[8] == '1' then return {ok, redis.call('HGETALL', KEYS[1])} end
return {ok}`)

var frequencyOps = [...]string{tsubame.FrequencyTake: "t", tsubame.FrequencyHold: "h", tsubame.FrequencyCount: "c",
	tsubame.FrequencyRelease: "r", tsubame.FrequencyCancel: "x"}

func (s *Store) frequencyKey(visitor string) string { return s.opt.KeyPrefix + "fv:" + visitor }

// Read reads visitor's record (tsubame.FrequencyCounter) with one HGETALL
// of <prefix>fv:<visitor>, which rueidis retries as it does every read.
func (s *Store) Read(ctx context.Context, visitor string, rec *tsubame.FrequencyRecord) error {
	if err := tsubame.ValidateVisitor(visitor); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(s.frequencyKey(visitor)).Build()).AsStrMap()
	rec.Reset()
	if err != nil {
		return unavailable(err)
	}
	for line, entries := range m {
		l := rec.AddLine(line)
		if l.Entries, err = tsubame.ParseFrequencyEntries(l.Entries, entries); err != nil {
			rec.Reset()
			return err
		}
	}
	rec.Read = true
	return nil
}

// Update applies u to its visitor's record (tsubame.FrequencyCounter) with
// one script on <prefix>fv:<visitor>: Redis runs a script without any
// other command between its own, so calls from any number of nodes never
// pass a cap together, and a visitor is one slot, so a cluster spreads the
// visitors over its masters. The key expires when the last of its entries
// stops mattering (u.Expires), by the server's clock.
//
// The script is not retried (rueidis retries only read-only commands): a
// reply lost after the server ran it yields an error, and the update
// stays applied.
func (s *Store) Update(ctx context.Context, u *tsubame.FrequencyUpdate, rec *tsubame.FrequencyRecord) (bool, error) {
	if err := tsubame.ValidateFrequencyUpdate(u); err != nil {
		return false, err
	}
	if err := s.check(); err != nil {
		return false, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	now := u.Now.UnixMicro()
	entry := make([]byte, 0, 2+20+len(u.Bid))
	switch u.Op {
	case tsubame.FrequencyHold:
		entry = tsubame.AppendFrequencyEntries(entry, []tsubame.FrequencyEntry{{At: u.Until.UnixMicro(), Hold: true, ID: u.Bid}})
	default:
		entry = tsubame.AppendFrequencyEntries(entry, []tsubame.FrequencyEntry{{At: now, ID: u.Bid}})
	}
	readBack := "0"
	if rec != nil {
		readBack = "1"
		rec.Reset()
	}
	// The bid's id is the entry's end: its copy, not u.Bid, goes to the
	// client, which may write a command after its caller gave up on it
	// (ctx), when a bidder has reused the memory u.Bid views.
	e := string(entry)
	args := make([]string, 8, 8+2*len(u.Caps))
	args[0], args[1], args[2], args[3], args[4] = frequencyOps[u.Op], u.LineItem, strconv.FormatInt(now, 10), e, e[len(e)-len(u.Bid):]
	args[5] = strconv.FormatInt(now-tsubame.LongestFrequencyWindow(u.Caps), 10)
	args[6] = strconv.FormatInt(max((u.Expires()-now+999)/1000, 1), 10)
	args[7] = readBack
	for _, c := range u.Caps {
		args = append(args, strconv.FormatInt(c.Impressions, 10), strconv.FormatInt(now-tsubame.FrequencyMicros(c.Per), 10))
	}
	reply, err := updateFrequency.Exec(ctx, s.c, []string{s.frequencyKey(u.Visitor)}, args).ToArray()
	if err != nil || len(reply) == 0 {
		return false, unavailable(err)
	}
	n, err := reply[0].AsInt64()
	if err != nil {
		return false, unavailable(err)
	}
	if rec != nil {
		if len(reply) != 2 {
			return false, tsubame.Errorf(tsubame.EINTERNAL, "redis store: the frequency script answered %d values", len(reply))
		}
		fields, err := reply[1].AsStrSlice()
		if err != nil {
			return false, unavailable(err)
		}
		for i := 0; i+1 < len(fields); i += 2 {
			l := rec.AddLine(fields[i])
			if l.Entries, err = tsubame.ParseFrequencyEntries(l.Entries, fields[i+1]); err != nil {
				rec.Reset()
				return false, err
			}
		}
		rec.Read = true
	}
	return n == 1, nil
}
