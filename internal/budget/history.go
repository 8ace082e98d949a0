package budget

import (
	"slices"
	"sync"
	"time"
)

// History keeps, per key, what was committed (settled + reserved) at each
// Record, so that a dashboard draws delivery against the ideal curve over
// the period, not only from when it was opened. It is kept in memory by
// each node that records (what every node reads from a shared store is
// the same), at most MaxPoints a key: past that, every other point is
// dropped, so a long flight keeps its shape at a coarser step. A key not
// recorded for a day is forgotten. Safe for concurrent use.
type History struct {
	mu   sync.Mutex
	keys map[string]*series
}

// MaxPoints bounds the points History keeps of a key.
const MaxPoints = 1440

type series struct {
	points []Point
	last   time.Time // when the key was last recorded
}

// Record adds what each usage commits at now.
func (h *History) Record(us []Usage, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys == nil {
		h.keys = map[string]*series{}
	}
	for _, u := range us {
		s := h.keys[u.Key]
		if s == nil {
			s = &series{}
			h.keys[u.Key] = s
		}
		s.last = now
		s.points = append(s.points, Point{Time: now.UTC(), Value: u.Settled + u.Reserved})
		if len(s.points) > MaxPoints {
			half := s.points[:0]
			for i, p := range s.points {
				if i%2 == 0 || i == len(s.points)-1 {
					half = append(half, p)
				}
			}
			s.points = slices.Clip(half)
		}
	}
	for k, s := range h.keys {
		if now.Sub(s.last) > 24*time.Hour {
			delete(h.keys, k)
		}
	}
}

// Fill sets each usage's Committed to the points recorded of its key.
func (h *History) Fill(us []Usage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range us {
		if s := h.keys[us[i].Key]; s != nil {
			us[i].Committed = slices.Clone(s.points)
		}
	}
}
