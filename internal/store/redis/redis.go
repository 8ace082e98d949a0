// Package redis is the tsubame.Store on Redis, standalone or Redis Cluster,
// through rueidis (auto-pipelining; the cluster topology is discovered from
// the seed addresses and followed through failovers).
//
// Keys, all under Options.KeyPrefix:
//
//	p:<id>      a placement, as JSON
//	ids         a sorted set of every id (score 0, so ordered by id): List pages through it
//	accesslog   a list of access-log batches
//	results     a hash of webhook results by message id
//	invalidate  the pub/sub channel on which every write is announced
//	seen:<id>   an event id of FirstSeen, "1" until its ttl passes (dedupe.go)
//	fv:<visitor> a hash of a visitor's frequency entries, a field per line item (frequency.go)
//	...campaigns...  the campaign set (campaigns.go)
//
// Placements, event ids and visitors spread over the cluster's slots by id; the
// index, the log and the results each live in one slot. A placement and its index entry are
// two writes (value first, then index; on delete the reverse), so a crash
// between them leaves at worst an index entry without a value, which List
// skips.
//
// Like every store it imports only the domain, logbatch and certs: never the cache, the listeners, render or config (arch_test.go).
package redis

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"tsubame"
	"tsubame/internal/certs"
	"tsubame/internal/logbatch"
)

// Options configure the connection.
type Options struct {
	Addrs       []string // host:port; several addresses are cluster seeds
	Username    string
	Password    string // never logged
	TLS         bool
	TLSCAFile   string // PEM bundle to trust instead of the system roots
	KeyPrefix   string // default "tsubame:"
	DialTimeout time.Duration
	// Timeout bounds one command when the caller's context has no deadline.
	Timeout  time.Duration
	PoolSize int // connections for blocking commands; default 100
	// MaxFlushDelay lets the commands of concurrent callers gather into one
	// write (rueidis pauses its write loop up to this long after a flush);
	// 0 writes every command at once.
	MaxFlushDelay time.Duration
	// WaitReplicas is how many replicas must acknowledge a quota write
	// (Lease, Release) before it counts (Redis WAIT): WaitAuto (the zero
	// value) waits for one where the master has a replica the cluster does
	// not consider failed (or, standalone, a connected replica); WaitOff
	// never waits. See quota.go.
	WaitReplicas int
	// WaitTimeout bounds the wait (DefaultWaitTimeout): a write not
	// acknowledged by then is an error whose effect is unknown.
	WaitTimeout time.Duration
	Logger      *slog.Logger
}

// Values of Options.WaitReplicas besides a number of replicas.
const (
	WaitAuto = 0
	WaitOff  = -1
)

// DefaultWaitTimeout is Options.WaitTimeout's default.
const DefaultWaitTimeout = 500 * time.Millisecond

// Store is a Redis-backed tsubame.Store, CampaignStore, Deduper, LogStore
// and ResultStore, and a ChangeFeed. It is safe for concurrent use.
type Store struct {
	c       rueidis.Client
	opt     Options
	kIDs    string
	kLog    string
	kRes    string
	channel string
	now     func() time.Time
	closed  atomic.Bool
	// bound is the context shared by commands whose callers set no deadline.
	bound atomic.Pointer[sharedDeadline]
	// shards maps slots to masters (shards.go); nil on a standalone server.
	shards *shardMap
	// replicas is a standalone server's connected replicas, as last read
	// (for WaitAuto).
	replicas atomic.Int32
	// The shard watcher's own (clusterReplicas): the master each replica
	// was last seen replicating, when each failed replica was first seen
	// failed, and how long it may still be promoted.
	replicaOf   map[string]string
	failedSince map[string]time.Time
	window      time.Duration
	windowRead  time.Time
	stopShards  context.CancelFunc
	shardsDone  chan struct{}
	// copy returns the process's copy of the campaign set and its version
	// (UseCampaignCopy); nil: none.
	copy atomic.Pointer[func() (*tsubame.CampaignSet, uint64)]
	// answers are the campaign set's versions Snapshot and ChangedSince
	// answered, and the history (epoch) each was in, oldest first.
	answers struct {
		mu     sync.Mutex
		epochs map[uint64]string
		order  []uint64
	}
}

// sharedDeadline is one context with a deadline, handed to every command
// that starts before until: a timer per command cost more than the command's
// own work on the store's hottest path (an uncached read per request).
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	until  int64 // unix nanoseconds
}

var (
	_ tsubame.Store      = (*Store)(nil)
	_ tsubame.ChangeFeed = (*Store)(nil)
)

// Open connects to Redis (and, for a cluster, learns its topology).
func Open(opt Options) (*Store, error) {
	if len(opt.Addrs) == 0 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "redis: no address given")
	}
	if opt.KeyPrefix == "" {
		opt.KeyPrefix = "tsubame:"
	}
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = 2 * time.Second
	}
	if opt.Timeout <= 0 {
		opt.Timeout = time.Second
	}
	if opt.PoolSize <= 0 {
		opt.PoolSize = 100
	}
	if opt.WaitTimeout <= 0 {
		opt.WaitTimeout = DefaultWaitTimeout
	}
	if opt.WaitReplicas < WaitOff {
		return nil, tsubame.Errorf(tsubame.EINVALID, "redis: wait replicas %d is not auto (0), off (-1) or a number of replicas", opt.WaitReplicas)
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	co := rueidis.ClientOption{
		InitAddress:      opt.Addrs,
		Username:         opt.Username,
		Password:         opt.Password,
		ClientName:       "tsubame",
		Dialer:           net.Dialer{Timeout: opt.DialTimeout, KeepAlive: 30 * time.Second},
		BlockingPoolSize: opt.PoolSize,
		ConnWriteTimeout: 5 * time.Second,
		DisableCache:     true, // the in-process cache is ours, invalidated through pub/sub
		ShuffleInit:      true,
		MaxFlushDelay:    opt.MaxFlushDelay,
		// A dead master's slots move to its replica; rescan the topology
		// every second so the client follows a failover promptly.
		ClusterOption: rueidis.ClusterOption{ShardsRefreshInterval: time.Second},
		// A read that meets a network error is retried once at once (a
		// connection that broke, a slot that moved) and then fails: the
		// default retries with backoff until the deadline, so every read
		// of a dead master's ids took most of a second to fail, holding its
		// request that long. The cache serves stale values and its breaker
		// (per master) answers the rest at once.
		RetryDelay: func(attempts int, _ rueidis.Completed, _ error) time.Duration {
			if attempts <= 1 {
				return 0
			}
			return -1
		},
	}
	if opt.TLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if opt.TLSCAFile != "" {
			pool, err := certs.LoadCAPool(opt.TLSCAFile)
			if err != nil {
				return nil, tsubame.WrapError(tsubame.EINVALID, err, "redis: tls_ca_file")
			}
			cfg.RootCAs = pool
		}
		co.TLSConfig = cfg
	}
	c, err := rueidis.NewClient(co)
	if err != nil {
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "cannot connect to redis at %s", strings.Join(opt.Addrs, ","))
	}
	p := opt.KeyPrefix
	s := &Store{c: c, opt: opt, kIDs: p + "ids", kLog: p + "accesslog", kRes: p + "results", channel: p + "invalidate", now: time.Now,
		shards: &shardMap{index: make(map[string]uint32)}, shardsDone: make(chan struct{})}
	var ctx context.Context
	ctx, s.stopShards = context.WithCancel(context.Background())
	s.watchShards(ctx, time.Second)
	return s, nil
}

func (s *Store) key(id string) string { return s.opt.KeyPrefix + "p:" + id }

// Client is the store's Redis client, for a package that keeps its own
// keys beside the store's (internal/report's shared rollups), under
// KeyPrefix.
func (s *Store) Client() rueidis.Client { return s.c }

// KeyPrefix starts every key of the store.
func (s *Store) KeyPrefix() string { return s.opt.KeyPrefix }

func noCancel() {}

// ctx bounds a command by Options.Timeout unless the caller set a deadline.
// A caller's context that can never be cancelled is replaced by a shared one
// renewed every tenth of the timeout, so such a command is bounded by
// between one and 1.1 timeouts.
func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, noCancel
	}
	if ctx.Done() != nil {
		return context.WithTimeout(ctx, s.opt.Timeout)
	}
	now := time.Now()
	if b := s.bound.Load(); b != nil && now.UnixNano() < b.until {
		return b.ctx, noCancel
	}
	step := max(s.opt.Timeout/10, time.Millisecond)
	c, cancel := context.WithDeadline(context.Background(), now.Add(s.opt.Timeout+step))
	// Callers racing here make a context each; all are valid, and each
	// timer ends its own context at its deadline.
	s.bound.Store(&sharedDeadline{ctx: c, cancel: cancel, until: now.Add(step).UnixNano()})
	return c, noCancel
}

func unavailable(err error) error {
	if err == nil {
		return nil
	}
	var e *tsubame.Error
	if errors.As(err, &e) {
		return err
	}
	return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "redis store failed")
}

func (s *Store) check() error {
	if s.closed.Load() {
		return tsubame.Errorf(tsubame.EUNAVAILABLE, "store is closed")
	}
	return nil
}

// Get reads the placement with the given id.
func (s *Store) Get(ctx context.Context, id string) (*tsubame.Placement, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	b, err := s.c.Do(ctx, s.c.B().Get().Key(s.key(id)).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, tsubame.Errorf(tsubame.ENOTFOUND, "placement %q not found", id)
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return decode(b)
}

func firstError(rs []rueidis.RedisResult) error {
	for _, r := range rs {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

func decode(b []byte) (*tsubame.Placement, error) {
	var p tsubame.Placement
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, tsubame.WrapError(tsubame.EINTERNAL, err, "corrupt placement record")
	}
	return &p, nil
}

// Put writes p and announces the change.
func (s *Store) Put(ctx context.Context, p *tsubame.Placement) error {
	return s.PutMany(ctx, []*tsubame.Placement{p})
}

// putChunk bounds the commands of one pipelined round trip in PutMany.
const putChunk = 1000

// PutMany validates every placement first and writes none if one is
// invalid; then it pipelines the writes in chunks. If Redis fails half-way,
// the chunks written so far stay (Redis has no transaction across cluster
// slots); the error says so, and re-running the import is safe.
func (s *Store) PutMany(ctx context.Context, ps []*tsubame.Placement) error {
	if err := tsubame.ValidatePlacements(ps); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	now := s.now().UTC()
	written := 0
	for start := 0; start < len(ps); start += putChunk {
		chunk := ps[start:min(start+putChunk, len(ps))]
		cmds := make(rueidis.Commands, 0, len(chunk)+2)
		zadd := s.c.B().Zadd().Key(s.kIDs).ScoreMember()
		ids := make([]string, 0, len(chunk))
		for _, p := range chunk {
			p.UpdatedAt = now
			v, err := json.Marshal(p)
			if err != nil {
				return tsubame.WrapError(tsubame.EINTERNAL, err, "cannot encode placement %q", p.ID)
			}
			cmds = append(cmds, s.c.B().Set().Key(s.key(p.ID)).Value(rueidis.BinaryString(v)).Build())
			zadd = zadd.ScoreMember(0, p.ID)
			ids = append(ids, p.ID)
		}
		cmds = append(cmds, zadd.Build())
		cctx, cancel := context.WithTimeout(ctx, 10*s.opt.Timeout)
		err := firstError(s.c.DoMulti(cctx, cmds...))
		if err == nil {
			// A separate round trip: a cluster cannot mix PUBLISH (no slot)
			// with keyed commands in one pipeline.
			err = s.c.Do(cctx, s.publishCmd(ids...)).Error()
		}
		cancel()
		if err != nil {
			if written > 0 {
				return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "redis failed after %d of %d placements were written", written, len(ps))
			}
			return unavailable(err)
		}
		written += len(chunk)
	}
	return nil
}

// Delete removes the placement and announces it.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n, err := s.c.Do(ctx, s.c.B().Del().Key(s.key(id)).Build()).AsInt64()
	if err != nil {
		return unavailable(err)
	}
	if err := s.c.Do(ctx, s.c.B().Zrem().Key(s.kIDs).Member(id).Build()).Error(); err != nil {
		return unavailable(err)
	}
	if err := s.c.Do(ctx, s.publishCmd(id)).Error(); err != nil {
		return unavailable(err)
	}
	if n == 0 {
		return tsubame.Errorf(tsubame.ENOTFOUND, "placement %q not found", id)
	}
	return nil
}

// List pages through the id index and reads the placements it names.
func (s *Store) List(ctx context.Context, after string, limit int) ([]*tsubame.Placement, error) {
	if limit <= 0 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "list limit must be positive")
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var out []*tsubame.Placement
	for len(out) < limit {
		lo := "-"
		if after != "" {
			lo = "(" + after
		}
		want := int64(limit - len(out))
		ids, err := s.c.Do(ctx, s.c.B().Zrange().Key(s.kIDs).Min(lo).Max("+").Bylex().Limit(0, want).Build()).AsStrSlice()
		if err != nil {
			return nil, unavailable(err)
		}
		if len(ids) == 0 {
			break
		}
		cmds := make(rueidis.Commands, len(ids))
		for i, id := range ids {
			cmds[i] = s.c.B().Get().Key(s.key(id)).Build()
		}
		for _, r := range s.c.DoMulti(ctx, cmds...) {
			b, err := r.AsBytes()
			if rueidis.IsRedisNil(err) {
				continue // an index entry whose value is gone (see the package comment)
			}
			if err != nil {
				return nil, unavailable(err)
			}
			p, err := decode(b)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		after = ids[len(ids)-1]
		if int64(len(ids)) < want {
			break
		}
	}
	return out, nil
}

// IDs returns the id index, in byte order (an entry whose value is gone
// may be among them: see the package comment).
func (s *Store) IDs(ctx context.Context) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	ids, err := s.c.Do(ctx, s.c.B().Zrange().Key(s.kIDs).Min("-").Max("+").Bylex().Build()).AsStrSlice()
	if err != nil {
		return nil, unavailable(err)
	}
	return ids, nil
}

// AppendLog pushes the batch as one list element.
func (s *Store) AppendLog(ctx context.Context, batch []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return unavailable(s.c.Do(ctx, s.c.B().Rpush().Key(s.kLog).Element(rueidis.BinaryString(batch)).Build()).Error())
}

// ScanLog reads the log's batches in order, a page at a time.
func (s *Store) ScanLog(ctx context.Context, fn func(line []byte) error) error {
	if err := s.check(); err != nil {
		return err
	}
	const page = 100
	var d logbatch.Decoder
	for start := int64(0); ; start += page {
		cctx, cancel := s.ctx(ctx)
		batches, err := s.c.Do(cctx, s.c.B().Lrange().Key(s.kLog).Start(start).Stop(start+page-1).Build()).AsStrSlice()
		cancel()
		if err != nil {
			return unavailable(err)
		}
		for _, b := range batches {
			if err := d.Each([]byte(b), fn); err != nil {
				return err
			}
		}
		if len(batches) < page {
			return nil
		}
	}
}

// PutResult stores result under id in the results hash.
func (s *Store) PutResult(ctx context.Context, id string, result []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return unavailable(s.c.Do(ctx, s.c.B().Hset().Key(s.kRes).FieldValue().FieldValue(id, rueidis.BinaryString(result)).Build()).Error())
}

// PutResults writes the batch with one HSET per 1,000 results, pipelined.
func (s *Store) PutResults(ctx context.Context, results []tsubame.Result) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var cmds rueidis.Commands
	for len(results) > 0 {
		n := min(len(results), 1000)
		fv := s.c.B().Hset().Key(s.kRes).FieldValue()
		for _, r := range results[:n] {
			fv = fv.FieldValue(r.ID, rueidis.BinaryString(r.Value))
		}
		cmds = append(cmds, fv.Build())
		results = results[n:]
	}
	return unavailable(firstError(s.c.DoMulti(ctx, cmds...)))
}

// GetResult reads the result stored under id.
func (s *Store) GetResult(ctx context.Context, id string) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	b, err := s.c.Do(ctx, s.c.B().Hget().Key(s.kRes).Field(id).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, tsubame.Errorf(tsubame.ENOTFOUND, "no result for %q", id)
	}
	return b, unavailable(err)
}

// CountResults returns the number of stored results.
func (s *Store) CountResults(ctx context.Context) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n, err := s.c.Do(ctx, s.c.B().Hlen().Key(s.kRes).Build()).AsInt64()
	return int(n), unavailable(err)
}

// Close closes the connections.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.stopShards()
	<-s.shardsDone
	s.c.Close()
	if b := s.bound.Load(); b != nil {
		b.cancel()
	}
	return nil
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return unavailable(s.c.Do(ctx, s.c.B().Ping().Build()).Error())
}

// Invalidation messages on the channel: "p <id>" drops a placement, "d <key>"
// every placement with that dependency key, "*" everything.
func (s *Store) publishCmd(ids ...string) rueidis.Completed {
	msg := "p " + strings.Join(ids, "\np ")
	return s.c.B().Publish().Channel(s.channel).Message(msg).Build()
}

// Publish announces, in one message, that every node must drop the given
// placements, the placements declaring the given dependency keys, or (all)
// everything cached.
func (s *Store) Publish(ctx context.Context, ids, deps []string, all bool) error {
	var lines []string
	if all {
		lines = append(lines, "*")
	}
	for _, id := range ids {
		lines = append(lines, "p "+id)
	}
	for _, d := range deps {
		lines = append(lines, "d "+d)
	}
	if len(lines) == 0 {
		return nil
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return unavailable(s.c.Do(ctx, s.c.B().Publish().Channel(s.channel).Message(strings.Join(lines, "\n")).Build()).Error())
}

// Watch delivers the invalidations announced by every process writing to
// this Redis to inv, until ctx ends. Each time the subscription is
// (re)established after the first, inv.Revalidate runs: announcements
// made while it was down are lost, so everything cached is read again —
// but kept, and served, while Redis does not answer. It returns ctx's
// error.
func (s *Store) Watch(ctx context.Context, inv tsubame.Invalidator) error {
	return s.subscribe(ctx, s.channel, func(m string) { apply(inv, m) }, func() {
		inv.Revalidate()
		s.opt.Logger.Info("redis invalidation channel resubscribed; every cached placement will be read again")
	})
}

// subscribe delivers the messages on channel to onMessage until ctx ends,
// resubscribing with backoff when the connection breaks; resubscribed runs
// each time the subscription is re-established after the first. It
// returns ctx's error.
func (s *Store) subscribe(ctx context.Context, channel string, onMessage func(string), resubscribed func()) error {
	first := true
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		dc, release := s.c.Dedicate()
		wait := dc.SetPubSubHooks(rueidis.PubSubHooks{
			OnMessage: func(m rueidis.PubSubMessage) { onMessage(m.Message) },
			OnSubscription: func(sub rueidis.PubSubSubscription) {
				if sub.Kind != "subscribe" {
					return
				}
				if !first {
					resubscribed()
				}
				first = false
				backoff = 50 * time.Millisecond
			},
		})
		err := dc.Do(ctx, dc.B().Subscribe().Channel(channel).Build()).Error()
		if err == nil {
			select {
			case err = <-wait:
			case <-ctx.Done():
			}
		}
		release()
		if ctx.Err() != nil {
			break
		}
		s.opt.Logger.Warn("redis channel lost; resubscribing", "channel", channel, "err", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return ctx.Err()
}

func apply(inv tsubame.Invalidator, msg string) {
	for _, line := range strings.Split(msg, "\n") {
		switch {
		case strings.HasPrefix(line, "p "):
			inv.Invalidate(line[2:])
		case strings.HasPrefix(line, "d "):
			inv.InvalidateDep(line[2:])
		case line == "*":
			inv.InvalidateAll()
		}
	}
}

// String describes the store for logs (never the password).
func (s *Store) String() string { return fmt.Sprintf("redis %s", strings.Join(s.opt.Addrs, ",")) }
