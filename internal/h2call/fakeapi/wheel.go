package fakeapi

import (
	"sync"
	"time"
)

// wheel holds HTTP/2 answers until their time, in 5 ms slots: one goroutine
// answers a slot's calls together, a lock and a flush per connection,
// instead of a timer and a goroutine per call.
type wheel struct {
	mu    sync.Mutex
	slots map[int64][]pending
	next  int64 // first slot not yet answered
	done  chan struct{}
	once  sync.Once
}

const slotWidth = 5 * time.Millisecond

// pending is an answer to give: a 500 if fail (Options.FailFirst).
type pending struct {
	c    *h2Conn
	id   uint32
	fail bool
}

func (w *wheel) start(s *Server) {
	w.slots = map[int64][]pending{}
	w.next = time.Now().UnixNano() / int64(slotWidth)
	w.done = make(chan struct{})
	go w.run(s)
}

func (w *wheel) stop() { w.once.Do(func() { close(w.done) }) }

func (w *wheel) add(at time.Time, p pending) {
	slot := at.UnixNano() / int64(slotWidth)
	w.mu.Lock()
	slot = max(slot, w.next)
	w.slots[slot] = append(w.slots[slot], p)
	w.mu.Unlock()
}

func (w *wheel) run(s *Server) {
	t := time.NewTicker(slotWidth)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case now := <-t.C:
			if s.held() != nil {
				continue // slots keep their calls until Release
			}
			cur := now.UnixNano() / int64(slotWidth)
			var due []pending
			w.mu.Lock()
			for ; w.next <= cur; w.next++ {
				due = append(due, w.slots[w.next]...)
				delete(w.slots, w.next)
			}
			w.mu.Unlock()
			answerAll(s, due)
		}
	}
}

// answerAll answers due calls, grouped by connection.
func answerAll(s *Server, due []pending) {
	byConn := map[*h2Conn][]pending{}
	for _, p := range due {
		byConn[p.c] = append(byConn[p.c], p)
	}
	for c, ps := range byConn {
		s.inflight.Add(-int64(len(ps)))
		s.answered.Add(int64(len(ps)))
		c.mu.Lock()
		for _, p := range ps {
			if p.fail {
				c.respondLocked(p.id, 500, internalError)
			} else {
				c.respondLocked(p.id, 200, "{}")
			}
		}
		c.mu.Unlock()
		c.w.Kick()
	}
}
