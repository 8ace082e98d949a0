package redis

import (
	"context"
	"net"
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
	// does not consider failed (CLUSTER SLOTS lists only those).
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
		replicas := uint32(len(f) - 3)
		for sl := lo; sl <= hi; sl++ {
			m.slots[sl].Store(idx)
			m.replicas[sl].Store(replicas)
		}
	}
	return true
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
