package embedded

import (
	"errors"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// maxCommit bounds the jobs one commit takes (as bbolt's
// DefaultMaxBatchSize does), so that a commit, and the wait of the calls
// behind it, stays short.
const maxCommit = 1000

// groupCommit gathers writes into shared transactions (a group commit). A
// call that finds no commit under way commits at once; the calls that
// arrive meanwhile queue, and when it is done the first of them commits
// them all in one transaction and one fsync. So a lone call waits for no
// one, and under load the commits grow with the calls arriving during
// each. (bbolt's Batch also shares commits, but every call waits for a
// timer, 10 ms by default, for others to join: 6.4 ms per new id from two
// goroutines, and a lone new id waits the whole delay.) A leader commits
// once and hands over, so a caller waits for the commit under way, those
// of the calls queued before it (a commit takes up to maxCommit) and its
// own, never for calls that came after it. The zero value is ready to use.
type groupCommit struct {
	mu    sync.Mutex
	queue []*commitJob
	busy  bool // a call is leading a commit
}

// commitJob is one call waiting for a commit.
type commitJob struct {
	run func(tx *bolt.Tx) error
	err error
	// wake gets one message: false once the job is answered by another
	// call's commit, true when this call is to lead the next commit.
	wake chan bool
}

// do runs run in a write transaction of db shared with the concurrent
// calls, and returns once that transaction is committed, with nil, or has
// failed, with its error. The jobs of one commit run one after another in
// the order they queued, so run sees the writes of those before it; run
// keeps its results itself, and they hold only if do returns nil (an error
// of any job, or of the commit, fails every job of it). run must not keep
// tx or call do.
func (g *groupCommit) do(db *bolt.DB, run func(tx *bolt.Tx) error) error {
	j := &commitJob{run: run, wake: make(chan bool, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, j)
	lead := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !lead && !<-j.wake {
		return j.err
	}
	// j is first in the queue: the queue was empty when this call found no
	// commit under way, and a leader hands over to the first one waiting.
	g.mu.Lock()
	n := min(len(g.queue), maxCommit)
	batch := g.queue[:n:n]
	g.queue = append([]*commitJob(nil), g.queue[n:]...)
	g.mu.Unlock()

	// Deferred, so that a panic in the commit still answers the batch and
	// hands over: the calls queued behind would otherwise wait for ever.
	err := errCommitPanicked
	defer func() { g.finish(j, batch, err) }()
	err = db.Update(func(tx *bolt.Tx) error {
		for _, x := range batch {
			if err := x.run(tx); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

var errCommitPanicked = errors.New("group commit panicked")

// finish answers the jobs of the batch that the leader j committed, with
// err, and hands the lead to the first call waiting.
func (g *groupCommit) finish(j *commitJob, batch []*commitJob, err error) {
	for _, x := range batch {
		x.err = err
		if x != j {
			x.wake <- false
		}
	}
	g.mu.Lock()
	var next *commitJob
	if len(g.queue) > 0 {
		next = g.queue[0]
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	if next != nil {
		next.wake <- true
	}
}
