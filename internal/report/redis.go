package report

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The rollups in Redis (or Redis Cluster), shared by every node: each
// node rolls up its own access log into the same rows, so a report over
// all nodes is one query, and keeps its read positions beside them. Every
// key carries one hash tag, so that a commit's script touches a single
// slot (one master of a cluster: the rollups are a few writes a second per
// node, not the request path).
//
//	P = <key prefix>{report}:
//	P pos:<node>      hash: file key → the node's fileState (JSON)
//	P gone:<node>     hash: file key → first line's time (tombstones)
//	P compacted       the compaction point (Unix seconds)
//	P m, P q          sorted sets of the minute and quarter buckets held
//	P m:<t>, P q:<t>  hash: row (dimensions, then a counter's index byte) → count
//
// A commit is one script: it checks that the node's position is still the
// one the node read from (a retry after a lost answer finds it moved and
// is told so), adds the rows (into quarters below the compaction point)
// and moves the position; Redis runs it whole or not at all.
type redisBackend struct {
	c    rueidis.Client
	p    string // the keys' prefix, with the hash tag
	node string
}

// Shared names the Redis rollups of Options.
type Shared struct {
	Client rueidis.Client
	// KeyPrefix starts every key (the store's, "tsubame:").
	KeyPrefix string
}

func newRedisBackend(s *Shared, node string) *redisBackend {
	p := s.KeyPrefix + "{report}:"
	return &redisBackend{c: s.Client, p: p, node: node}
}

// redisTimeout bounds one command of the rollups.
const redisTimeout = 10 * time.Second

func (b *redisBackend) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), redisTimeout)
}

func (b *redisBackend) load() (map[string]*fileState, int64, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	files, err := b.positions(ctx)
	if err != nil {
		return nil, 0, err
	}
	c, err := b.compactedCtx(ctx)
	return files, c, err
}

func (b *redisBackend) positions(ctx context.Context) (map[string]*fileState, error) {
	m, err := b.c.Do(ctx, b.c.B().Hgetall().Key(b.p+"pos:"+b.node).Build()).AsStrMap()
	if err != nil {
		return nil, err
	}
	out := make(map[string]*fileState, len(m))
	for k, v := range m {
		f := new(fileState)
		if err := json.Unmarshal([]byte(v), f); err != nil {
			return nil, fmt.Errorf("position of file %s: %w", k, err)
		}
		out[k] = f
	}
	return out, nil
}

func (b *redisBackend) compacted() (int64, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	return b.compactedCtx(ctx)
}

func (b *redisBackend) compactedCtx(ctx context.Context) (int64, error) {
	n, err := b.c.Do(ctx, b.c.B().Get().Key(b.p+"compacted").Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return n, err
}

// commitRows: KEYS pos hash, compacted, minutes set, quarters set, then
// the bucket hashes it may write (declared, not read from KEYS);
// ARGV file key, the position read from ("" for none), the next one, the
// prefix, then per count: its minute, its quarter, the field, the amount.
// Times are passed as strings, never formatted by Lua.
var commitRows = rueidis.NewLuaScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then cur = '' end
if cur ~= ARGV[2] then return redis.error_reply('STALE the position moved') end
local compacted = tonumber(redis.call('GET', KEYS[2]) or '0')
for i = 5, #ARGV, 4 do
  local t, k = ARGV[i], nil
  if tonumber(t) < compacted then
    k = ARGV[4] .. 'q:' .. ARGV[i + 1]
    redis.call('ZADD', KEYS[4], ARGV[i + 1], ARGV[i + 1])
  else
    k = ARGV[4] .. 'm:' .. t
    redis.call('ZADD', KEYS[3], t, t)
  end
  redis.call('HINCRBY', k, ARGV[i + 2], ARGV[i + 3])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1`)

func (b *redisBackend) commit(key string, prev, next *fileState, rows map[string]*Counts) error {
	var prevJSON []byte
	if prev != nil {
		var err error
		if prevJSON, err = json.Marshal(prev); err != nil {
			return err
		}
	}
	nextJSON, err := json.Marshal(next)
	if err != nil {
		return err
	}
	args := []string{key, string(prevJSON), string(nextJSON), b.p}
	keys := []string{b.p + "pos:" + b.node, b.p + "compacted", b.p + "m", b.p + "q"}
	buckets := map[string]bool{}
	for k, c := range rows {
		t := int64(beUint64(k))
		ts, qs := strconv.FormatInt(t, 10), strconv.FormatInt(floorDiv(t, int64(quarter/time.Second)), 10)
		// Every key the script may write is declared: a cluster checks
		// them before the script runs (a slot on the move fails it
		// whole, not after some of its writes).
		for _, bk := range []string{b.p + "m:" + ts, b.p + "q:" + qs} {
			if !buckets[bk] {
				buckets[bk] = true
				keys = append(keys, bk)
			}
		}
		for i, v := range c {
			if v != 0 {
				args = append(args, ts, qs, k[8:]+string(rune(i)), strconv.FormatInt(v, 10))
			}
		}
	}
	ctx, cancel := b.ctx()
	defer cancel()
	err = commitRows.Exec(ctx, b.c, keys, args).Error()
	if err == nil {
		return nil
	}
	// The answer may have been lost after the script ran: the position
	// tells.
	cur, gerr := b.c.Do(ctx, b.c.B().Hget().Key(keys[0]).Field(key).Build()).ToString()
	if gerr == nil && cur == string(nextJSON) {
		return nil
	}
	if strings.HasPrefix(err.Error(), "STALE") {
		// Another process of this node (same report.node and access
		// log) committed first: nothing was added; read on from its
		// position.
		return errStale
	}
	return fmt.Errorf("reports in redis: %w", err)
}

// errStale: the position moved under a commit, which added nothing.
var errStale = errors.New("reports: another process of this node moved the read position first (two servers with one report.node and one access log?)")

// compactRows folds up to 100 minute buckets before ARGV[1] into quarters
// and moves the compaction point there once none is left; it returns 1
// when done, or at once while a node rebuilds (its reset reads the
// buckets one by one: a minute moved meanwhile would escape it). KEYS
// compacted, minutes set, quarters set, the rebuild mark; ARGV the point,
// the prefix.
var compactRows = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[4]) == 1 then return 1 end
if tonumber(redis.call('GET', KEYS[1]) or '0') >= tonumber(ARGV[1]) then return 1 end
local ms = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1], 'LIMIT', 0, 100)
for _, t in ipairs(ms) do
  local q = tostring(tonumber(t) - tonumber(t) % 900)
  local src = ARGV[2] .. 'm:' .. t
  local kv = redis.call('HGETALL', src)
  for j = 1, #kv, 2 do redis.call('HINCRBY', ARGV[2] .. 'q:' .. q, kv[j], kv[j + 1]) end
  redis.call('DEL', src)
  redis.call('ZREM', KEYS[2], t)
  redis.call('ZADD', KEYS[3], q, q)
end
if #ms < 100 then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0`)

func (b *redisBackend) maintain(changed, forget map[string]*fileState, until int64) (int64, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	var cmds rueidis.Commands
	for key, f := range changed {
		v, err := json.Marshal(f)
		if err != nil {
			return 0, err
		}
		cmds = append(cmds, b.c.B().Hset().Key(b.p+"pos:"+b.node).FieldValue().FieldValue(key, string(v)).Build())
	}
	for key, f := range forget {
		cmds = append(cmds, b.c.B().Hset().Key(b.p+"gone:"+b.node).FieldValue().FieldValue(key, f.First.UTC().Format(time.RFC3339Nano)).Build(),
			b.c.B().Hdel().Key(b.p+"pos:"+b.node).Field(key).Build())
	}
	for _, r := range b.c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return 0, err
		}
	}
	if until > 0 {
		keys := []string{b.p + "compacted", b.p + "m", b.p + "q", b.p + "rebuilding"}
		for range 10_000 {
			done, err := compactRows.Exec(ctx, b.c, keys, []string{strconv.FormatInt(until, 10), b.p}).AsInt64()
			if err != nil {
				return 0, err
			}
			if done == 1 {
				break
			}
		}
	}
	return b.compactedCtx(ctx)
}

func (b *redisBackend) tombstones() (map[string]bool, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	keys, err := b.c.Do(ctx, b.c.B().Hkeys().Key(b.p+"gone:"+b.node).Build()).AsStrSlice()
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out, nil
}

func (b *redisBackend) scan(from, to int64, fn func(t int64, d *Dims, c *Counts) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	compacted, err := b.compactedCtx(ctx)
	if err != nil {
		return err
	}
	for _, part := range []struct {
		set      string
		from, to int64
	}{{"q", from, min(to, compacted)}, {"m", max(from, compacted), to}} {
		if part.from >= part.to {
			continue
		}
		ts, err := b.c.Do(ctx, b.c.B().Zrangebyscore().Key(b.p+part.set).
			Min(strconv.FormatInt(max(part.from, 0), 10)).Max("("+strconv.FormatInt(min(part.to, 1<<62), 10)).Build()).AsStrSlice()
		if err != nil {
			return err
		}
		if err := b.readBuckets(ctx, part.set, ts, fn); err != nil {
			return err
		}
	}
	// A compaction between the reads moved minutes into quarters that
	// were read before it: the caller reads again.
	if now, err := b.compactedCtx(ctx); err != nil || now != compacted {
		return cmp.Or(err, errCompactedMeanwhile)
	}
	return nil
}

// errCompactedMeanwhile: a scan met a compaction; what it gave is not whole.
var errCompactedMeanwhile = errors.New("reports: compacted during the read; read again")

// readBuckets reads the hashes of buckets ts of set ("m" or "q") and calls
// fn for each row.
func (b *redisBackend) readBuckets(ctx context.Context, set string, ts []string, fn func(t int64, d *Dims, c *Counts) error) error {
	const batch = 256
	for len(ts) > 0 {
		n := min(len(ts), batch)
		cmds := make(rueidis.Commands, n)
		for i, t := range ts[:n] {
			cmds[i] = b.c.B().Hgetall().Key(b.p + set + ":" + t).Build()
		}
		for i, r := range b.c.DoMulti(ctx, cmds...) {
			m, err := r.AsStrMap()
			if err != nil {
				return err
			}
			t, err := strconv.ParseInt(ts[i], 10, 64)
			if err != nil {
				return fmt.Errorf("bucket %q: %w", ts[i], err)
			}
			if err := emitRows(t, m, fn); err != nil {
				return err
			}
		}
		ts = ts[n:]
	}
	return nil
}

// emitRows gathers a bucket's fields (a row's dimensions, then a counter's
// index) into rows and calls fn for each.
func emitRows(t int64, m map[string]string, fn func(t int64, d *Dims, c *Counts) error) error {
	rows := map[string]*Counts{}
	for field, v := range m {
		if len(field) < 1 {
			return errRowKey
		}
		i := int(field[len(field)-1])
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("count %q: %w", v, err)
		}
		if i >= int(numCounters) {
			continue // a counter of a later build
		}
		k := field[:len(field)-1]
		c := rows[k]
		if c == nil {
			c = new(Counts)
			rows[k] = c
		}
		c[i] += n
	}
	var d Dims
	var key []byte
	for k, c := range rows {
		key = append(append(key[:0], make([]byte, 8)...), k...)
		if _, err := parseRowKey(key, &d); err != nil {
			return err
		}
		if err := fn(t, &d, c); err != nil {
			return err
		}
	}
	return nil
}

func (b *redisBackend) snapshot(fn func(t int64, d *Dims, c *Counts) error) (map[string]*fileState, int, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	files, err := b.positions(ctx)
	if err != nil {
		return nil, 0, err
	}
	gone, err := b.c.Do(ctx, b.c.B().Hlen().Key(b.p+"gone:"+b.node).Build()).AsInt64()
	if err != nil {
		return nil, 0, err
	}
	// Only this node's rows: the others' are theirs to verify. The Roller
	// holds its lock, so this node's positions and rows stand still.
	err = b.scan(-1<<63, 1<<63-1, func(t int64, d *Dims, c *Counts) error {
		if d[DimNode] != b.node {
			return nil
		}
		return fn(t, d, c)
	})
	return files, int(gone), err
}

// reset removes this node's positions, tombstones and rows (the others'
// stay): a rebuild counts this node's files again.
func (b *redisBackend) reset() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// No node compacts while this one removes its rows (the mark expires
	// if this process dies meanwhile).
	mark := b.p + "rebuilding"
	if err := b.c.Do(ctx, b.c.B().Set().Key(mark).Value(b.node).Ex(10*time.Minute).Build()).Error(); err != nil {
		return err
	}
	defer func() {
		dctx, dcancel := b.ctx()
		_ = b.c.Do(dctx, b.c.B().Del().Key(mark).Build()).Error()
		dcancel()
	}()
	// A compaction script that began before the mark has finished: Redis
	// runs one script at a time.
	for _, set := range []string{"q", "m"} {
		ts, err := b.c.Do(ctx, b.c.B().Zrange().Key(b.p+set).Min("0").Max("-1").Build()).AsStrSlice()
		if err != nil {
			return err
		}
		for _, t := range ts {
			key := b.p + set + ":" + t
			m, err := b.c.Do(ctx, b.c.B().Hgetall().Key(key).Build()).AsStrMap()
			if err != nil {
				return err
			}
			var mine []string
			var d Dims
			for field := range m {
				if _, err := parseRowKey(append(make([]byte, 8), field[:len(field)-1]...), &d); err == nil && d[DimNode] == b.node {
					mine = append(mine, field)
				}
			}
			if len(mine) > 0 {
				if err := b.c.Do(ctx, b.c.B().Hdel().Key(key).Field(mine...).Build()).Error(); err != nil {
					return err
				}
			}
		}
	}
	return b.c.Do(ctx, b.c.B().Del().Key(b.p+"pos:"+b.node, b.p+"gone:"+b.node).Build()).Error()
}

func (b *redisBackend) close() error { return nil } // the client is the store's

// redisCommitCells bounds the counters one commit script adds: about 4 µs
// each (an HINCRBY and the bucket's ZADD), so that no commit holds Redis
// for 10 ms. A batch of more is committed in several, each moving the
// file's position with its counts.
const redisCommitCells = 2000

func (b *redisBackend) maxCells() int { return redisCommitCells }
