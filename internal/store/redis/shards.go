package redis

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tsubame"
)

// The shard map: which Redis Cluster master serves each id, so that the
// cache can keep one circuit breaker and one read pool per master (see
// tsubame.Sharded). A dead master then costs only its own ids: they fail
// fast once its breaker opens, while the other masters' ids keep their
// latency. rueidis routes the commands itself and does not expose its slot
// table, so the store keeps its own copy, read with CLUSTER SLOTS at open
// and every second after (as often as rueidis rescans), which is one small
// command per second. Until a failover is seen here, ids of moved slots
// count against the old master's breaker; their successes close it.

const numSlots = 16384

// shardMap maps each slot to a small, stable index of the master serving it.
type shardMap struct {
	slots [numSlots]atomic.Uint32
	// replicas is, per slot, how many replicas of its master the cluster
	// has not marked failed (clusterReplicas), with WaitAuto.
	replicas [numSlots]atomic.Uint32
	mu       sync.Mutex
	index    map[string]uint32 // master address -> shard index, never reused
}

// Shard returns the index of the master that serves id's slot: 0 on a
// standalone Redis, else a small number, the same for one master for the
// life of the process (a promoted replica gets a new one).
func (s *Store) Shard(id string) int {
	if s.shards == nil {
		return 0
	}
	return int(s.shards.slots[slot(s.key(id))].Load())
}

var _ tsubame.Sharded = (*Store)(nil)

// watchShards reads the cluster's slot table now and then every interval
// until ctx ends. On a standalone server there is one shard: it reads how
// many replicas the server has instead, when quota writes wait for them
// (WaitAuto), and gives up at once otherwise.
func (s *Store) watchShards(ctx context.Context, every time.Duration) {
	refresh := s.refreshShards
	if !s.refreshShards(ctx) {
		s.shards = nil
		if s.opt.WaitReplicas != WaitAuto {
			close(s.shardsDone)
			return
		}
		refresh = s.refreshReplicas
		refresh(ctx)
	}
	go func() {
		defer close(s.shardsDone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				refresh(ctx)
			}
		}
	}()
}

// refreshReplicas reads a standalone server's connected replicas (INFO
// replication). A server that does not answer keeps the last count.
func (s *Store) refreshReplicas(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, s.opt.Timeout)
	defer cancel()
	info, err := s.c.Do(ctx, s.c.B().Info().Section("replication").Build()).ToString()
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				s.replicas.Store(int32(min(n, 1<<20)))
			}
		}
	}
	return true
}

// refreshShards reads CLUSTER SLOTS into the map. It reports false when
// the server is not a cluster.
func (s *Store) refreshShards(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, s.opt.Timeout)
	defer cancel()
	ranges, err := s.c.Do(ctx, s.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		// Not a cluster ("cluster support disabled"), or unreachable: the
		// map keeps what it had. A standalone server answers at once.
		return s.shards != nil && !isNotCluster(err)
	}
	m := s.shards
	replicas := s.clusterReplicas(ctx)
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || lo < 0 || hi >= numSlots || lo > hi {
			continue
		}
		host, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		m.mu.Lock()
		idx, ok := m.index[addr]
		if !ok {
			idx = uint32(len(m.index))
			m.index[addr] = idx
		}
		m.mu.Unlock()
		var id string
		if len(master) > 2 {
			id, _ = master[2].ToString()
		}
		n, known := replicas[id]
		for sl := lo; sl <= hi; sl++ {
			m.slots[sl].Store(idx)
			if known || replicas != nil {
				m.replicas[sl].Store(n)
			}
		}
	}
	return true
}

// clusterReplicas counts, per master id, the replicas a failover could
// promote (CLUSTER NODES), for WaitAuto. A replica the cluster marked
// failed still counts while it could come back and win an election with
// what it had: for cluster-node-timeout × cluster-replica-validity-factor
// + repl-ping-replica-period after it was first seen failed (for good
// when the factor is 0 or the settings cannot be read). CLUSTER SLOTS is
// no help here: it lists a replica only once its replication offset has
// reached every node by gossip, and never a failed one. nil when the
// command fails (the counts stay as they were).
func (s *Store) clusterReplicas(ctx context.Context) map[string]uint32 {
	if s.opt.WaitReplicas != WaitAuto {
		return nil
	}
	text, err := s.c.Do(ctx, s.c.B().ClusterNodes().Build()).ToString()
	if err != nil {
		return nil
	}
	text = strings.TrimPrefix(text, "txt:") // RESP3's verbatim string
	now := time.Now()
	window := s.promotable(ctx, now)
	failed := s.failedSince
	s.failedSince = map[string]time.Time{}
	if s.replicaOf == nil {
		s.replicaOf = map[string]string{}
	}
	out := map[string]uint32{}
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] == "-" {
			continue
		}
		flags := strings.Split(f[2], ",")
		if !slices.Contains(flags, "slave") || slices.Contains(flags, "noaddr") || slices.Contains(flags, "handshake") {
			continue
		}
		if slices.Contains(flags, "fail") {
			if s.replicaOf[f[0]] != f[3] {
				// Never seen replicating this master (a dead master its
				// replica replaced is listed as that replica's replica):
				// it has nothing of its writes to lose.
				continue
			}
			since, ok := failed[f[0]]
			if !ok {
				since = now
			}
			s.failedSince[f[0]] = since
			if window > 0 && now.Sub(since) > window {
				continue // too far behind to be promoted
			}
		} else {
			s.replicaOf[f[0]] = f[3]
		}
		out[f[3]]++
	}
	return out
}

// promotable is how long after it failed a replica may still be promoted
// (clusterReplicas), read from the cluster's settings once a minute; 0
// when it may always be.
func (s *Store) promotable(ctx context.Context, now time.Time) time.Duration {
	if now.Sub(s.windowRead) < time.Minute {
		return s.window
	}
	s.windowRead = now
	s.window = 0
	get := func(name string) int64 {
		kv, err := s.c.Do(ctx, s.c.B().ConfigGet().Parameter(name).Build()).AsStrMap()
		if err != nil {
			return -1
		}
		n, err := strconv.ParseInt(kv[name], 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	timeout, factor, ping := get("cluster-node-timeout"), get("cluster-replica-validity-factor"), get("repl-ping-replica-period")
	if timeout > 0 && factor > 0 && ping >= 0 {
		s.window = time.Duration(timeout*factor)*time.Millisecond + time.Duration(ping)*time.Second
	}
	return s.window
}

func isNotCluster(err error) bool {
	return err != nil && strings.Contains(err.Error(), "cluster support disabled")
}

// slot is Redis Cluster's key slot: CRC16 (XMODEM) of the key, or of its
// hash tag (the part between the first { and the next }, if not empty),
// modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^key[i]]
	}
	return crc & (numSlots - 1)
}

// crc16tab is the CRC16-CCITT (XMODEM, polynomial 0x1021) table.
var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
