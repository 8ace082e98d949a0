package report

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"tsubame/internal/accesslog"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
)

func sharedStore(t *testing.T, cluster bool) *redis.Store {
	t.Helper()
	redistest.Require(t)
	var addrs []string
	if cluster {
		c := redistest.StartCluster(t)
		addrs = c.Addrs()
	} else {
		addrs = []string{redistest.Start(t).Addr}
	}
	s, err := redis.Open(redis.Options{Addrs: addrs, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openShared(t *testing.T, s *redis.Store, dir, node string, edit func(*Options)) *Roller {
	t.Helper()
	return openRoller(t, dir, func(o *Options) {
		o.Path, o.Node = "", node
		o.Shared = &Shared{Client: s.Client(), KeyPrefix: s.KeyPrefix()}
		if edit != nil {
			edit(o)
		}
	})
}

// Three nodes roll their own logs up into one Redis (standalone, and a
// 6-node cluster), concurrently: one query on any node gives every node's
// counts, exactly; each node's verify checks its own rows; a node stopped
// and started again counts nothing twice; a node's rebuild leaves the
// others' rows alone and comes back to the same totals.
func TestSharedRollupsAcrossNodes(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster=%v", cluster), func(t *testing.T) {
			s := sharedStore(t, cluster)
			nodes := []string{"node-a", "node-b", "node-c"}
			dirs := map[string]string{}
			var all []event
			var wg sync.WaitGroup
			var mu sync.Mutex
			rollers := map[string]*Roller{}
			for i, node := range nodes {
				dirs[node] = t.TempDir()
				evs := traffic(600+100*i, t0.Add(time.Duration(i)*time.Minute))
				all = append(all, evs...)
				writeLog(t, dirs[node], accesslog.LTSV, i == 1, evs)
				r := openShared(t, s, dirs[node], node, nil)
				rollers[node] = r
				wg.Go(func() {
					if err := r.CatchUp(context.Background()); err != nil {
						mu.Lock()
						t.Errorf("%s: %v", node, err)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			for _, node := range nodes {
				equalCounts(t, node+" asked", byLineItem(t, rollers[node], Query{}), want(all))
				if v, err := rollers[node].Verify(Query{}); err != nil || !v.OK() {
					t.Fatalf("%s verify: %+v %v", node, v, err)
				}
			}
			res, err := rollers["node-a"].Query(Query{By: []string{"node"}})
			if err != nil {
				t.Fatal(err)
			}
			perNode := map[string]int64{}
			for _, row := range res.Rows {
				perNode[row.Dims[DimNode]] += row.Counts[Decisions]
			}
			for i, node := range nodes {
				if want := int64((600 + 100*i + trafficKinds - 1) / trafficKinds); perNode[node] != want {
					t.Errorf("%s: %d decisions, want %d (%v)", node, perNode[node], want, perNode)
				}
			}

			// node-b stops and starts again on the same log, with more.
			rollers["node-b"].Close()
			more := traffic(300, t0.Add(time.Hour))
			writeLog(t, dirs["node-b"], accesslog.JSON, false, more)
			all = append(all, more...)
			rb := openShared(t, s, dirs["node-b"], "node-b", nil)
			if err := rb.CatchUp(context.Background()); err != nil {
				t.Fatal(err)
			}
			equalCounts(t, "after a restart", byLineItem(t, rb, Query{}), want(all))

			// node-c rebuilds: its rows go and come back; the others' stay.
			if err := rollers["node-c"].Rebuild(context.Background()); err != nil {
				t.Fatal(err)
			}
			equalCounts(t, "after a rebuild", byLineItem(t, rollers["node-a"], Query{}), want(all))
			if v, err := rollers["node-c"].Verify(Query{}); err != nil || !v.OK() {
				t.Fatalf("verify after a rebuild: %+v %v", v, err)
			}
		})
	}
}

// In Redis too, rows older than the window fold into quarters, the
// totals stay, and a commit of an old minute lands in its quarter.
func TestSharedCompaction(t *testing.T) {
	s := sharedStore(t, false)
	// 72 hours before the roller's clock (t0 and a day), not the
	// machine's: a start that moved with the machine's clock passed the
	// compaction bound one day and failed from then on.
	start := t0.Add(24*time.Hour - 72*time.Hour)
	dir := t.TempDir()
	evs := traffic(900, start)
	writeLog(t, dir, accesslog.LTSV, false, evs[:600])
	r := openShared(t, s, dir, "n1", func(o *Options) { o.Minutes = time.Hour })
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := r.Query(Query{By: []string{ByMinute}})
	if err != nil || res.Compacted.IsZero() {
		t.Fatalf("not compacted: %+v %v", res, err)
	}
	for _, row := range res.Rows {
		if row.Time.Unix()%900 != 0 {
			t.Fatalf("a row at %v after compaction", row.Time)
		}
	}
	writeLog(t, dir, accesslog.LTSV, false, evs[600:]) // old lines, after the compaction
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	equalCounts(t, "compacted", byLineItem(t, r, Query{}), want(evs))
	if v, err := r.Verify(Query{}); err != nil || !v.OK() {
		t.Fatalf("verify: %+v %v", v, err)
	}
}

// A file committed in part while it was the active file, then closed
// under its range's name (a stop, or the crash-clean after a kill), is
// read on from its position in Redis, exactly: the stored position is
// compared as it was stored, whatever the file is called now.
func TestSharedPositionAcrossRename(t *testing.T) {
	s := sharedStore(t, false)
	dir := t.TempDir()
	evs := traffic(900, t0)
	fs, err := accesslog.OpenFile(accesslog.FileOptions{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l := accesslog.New(fs, accesslog.Options{Logger: quiet})
	for i := range evs[:500] {
		if err := l.Append(&evs[i].rec, 0); err != nil {
			t.Fatal(err)
		}
	}
	l.WriteBack()
	r := openShared(t, s, dir, "n1", nil)
	if err := r.CatchUp(context.Background()); err != nil { // commits the active file's part
		t.Fatal(err)
	}
	r.Close()
	for i := range evs[500:] {
		if err := l.Append(&evs[500+i].rec, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(context.Background()); err != nil { // renamed to its range's name
		t.Fatal(err)
	}
	if names, _ := accesslog.ClosedFiles(dir, "access.log", false); len(names) != 1 {
		t.Fatalf("closed files %v, want the one", names)
	}
	r = openShared(t, s, dir, "n1", nil)
	done := make(chan error, 1)
	go func() { done <- r.CatchUp(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("CatchUp did not finish: the position in Redis is never taken as the stored one")
	}
	equalCounts(t, "after the rename", byLineItem(t, r, Query{}), want(evs))
	if v, err := r.Verify(Query{}); err != nil || !v.OK() {
		t.Fatalf("verify: %+v %v", v, err)
	}
}

// countingBackend records the counters each commit adds.
type countingBackend struct {
	backend
	mu    sync.Mutex
	cells []int
}

func (b *countingBackend) commit(key string, prev, next *fileState, rows map[string]*Counts) error {
	n := 0
	for _, c := range rows {
		for _, v := range c {
			if v != 0 {
				n++
			}
		}
	}
	b.mu.Lock()
	b.cells = append(b.cells, n)
	b.mu.Unlock()
	return b.backend.commit(key, prev, next, rows)
}

// A log of thousands of distinct rows (a line item each) is committed to
// Redis in several scripts, each adding at most redisCommitCells counters
// and one line's more (one script holds Redis while it runs: no command
// over 10 ms), each moving the position with its counts: the totals come
// out exact, and a node started again counts nothing twice.
func TestSharedCommitsAreBounded(t *testing.T) {
	s := sharedStore(t, false)
	dir := t.TempDir()
	evs := traffic(9_000, t0)
	for i := range evs {
		if e := evs[i].rec.Event; e != nil && evs[i].li != "" {
			li := fmt.Sprintf("li-%d", i)
			e.LineItem, evs[i].li = accesslog.String(li), li
		}
	}
	// One file (writeLog's are of 150 lines), closed: read by one pass.
	fs, err := accesslog.OpenFile(accesslog.FileOptions{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l := accesslog.New(fs, accesslog.Options{Format: accesslog.LTSV, Logger: quiet})
	for i := range evs {
		if err := l.Append(&evs[i].rec, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := openShared(t, s, dir, "node-a", nil)
	cb := &countingBackend{backend: r.be}
	r.be = cb
	if err := r.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	equalCounts(t, "bounded commits", byLineItem(t, r, Query{}), want(evs))
	big := 0
	for _, n := range cb.cells {
		if n > redisCommitCells+int(numCounters) {
			t.Fatalf("a commit added %d counters, more than %d and a line's", n, redisCommitCells)
		}
		if n >= redisCommitCells {
			big++
		}
	}
	if big < 2 {
		t.Fatalf("commits of %v counters: the log never filled one", cb.cells)
	}
	r.Close()
	r2 := openShared(t, s, dir, "node-a", nil)
	if err := r2.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	equalCounts(t, "after a restart", byLineItem(t, r2, Query{}), want(evs))
}
