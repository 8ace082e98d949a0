// Package memory is an in-memory tsubame.Store: the reference backend for
// tests and for running without a data directory. Nothing survives Close.
//
// Like every store it imports only the domain and logbatch: never the cache, the listeners, render or config (arch_test.go).
package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"tsubame"
	"tsubame/internal/logbatch"
)

// Store is an in-memory tsubame.Store, CampaignStore, Deduper and
// FrequencyCounter. It is safe for concurrent use.
type Store struct {
	mu      sync.RWMutex
	byID    map[string]*tsubame.Placement
	ids     []string // sorted, for List
	closed  bool
	now     func() time.Time
	log     [][]byte // batches of lines
	results map[string][]byte
	camp    campaigns
	seen    seen        // event ids (dedupe.go), with locks of their own
	freq    frequencies // frequency caps' times (frequency.go), likewise
	quota   quotas      // leases of limited counters (quota.go), likewise
	out     outcomes    // outcomes of bids (outcome.go), likewise
	hand    handovers   // stopped ledgers' holds (handover.go), likewise
	assets  assets      // creatives' files (asset.go), likewise
}

var (
	_ tsubame.Store = (*Store)(nil)
)

// New returns an empty Store.
func New() *Store {
	s := &Store{byID: make(map[string]*tsubame.Placement), results: make(map[string][]byte), now: time.Now,
		camp: campaigns{set: &tsubame.CampaignSet{}}}
	s.seen.init()
	return s
}

// Get returns a copy of the placement with the given id.
func (s *Store) Get(_ context.Context, id string) (*tsubame.Placement, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	p, ok := s.byID[id]
	if !ok {
		return nil, tsubame.Errorf(tsubame.ENOTFOUND, "placement %q not found", id)
	}
	return p.Clone(), nil
}

// Put stores a copy of p.
func (s *Store) Put(ctx context.Context, p *tsubame.Placement) error {
	return s.PutMany(ctx, []*tsubame.Placement{p})
}

// PutMany stores copies of every placement in ps, or none if one is invalid.
func (s *Store) PutMany(_ context.Context, ps []*tsubame.Placement) error {
	if err := tsubame.ValidatePlacements(ps); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	now := s.now().UTC()
	for _, p := range ps {
		p.UpdatedAt = now
		if _, ok := s.byID[p.ID]; !ok {
			i, _ := slices.BinarySearch(s.ids, p.ID)
			s.ids = slices.Insert(s.ids, i, p.ID)
		}
		s.byID[p.ID] = p.Clone()
	}
	return nil
}

// Delete removes the placement with the given id.
func (s *Store) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if _, ok := s.byID[id]; !ok {
		return tsubame.Errorf(tsubame.ENOTFOUND, "placement %q not found", id)
	}
	delete(s.byID, id)
	i, _ := slices.BinarySearch(s.ids, id)
	s.ids = slices.Delete(s.ids, i, i+1)
	return nil
}

// List returns copies of up to limit placements with ids after the given one.
func (s *Store) List(_ context.Context, after string, limit int) ([]*tsubame.Placement, error) {
	if limit <= 0 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "list limit must be positive")
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	i, found := slices.BinarySearch(s.ids, after)
	if found {
		i++
	}
	end := min(i+limit, len(s.ids))
	out := make([]*tsubame.Placement, 0, end-i)
	for _, id := range s.ids[i:end] {
		out = append(out, s.byID[id].Clone())
	}
	return out, nil
}

// IDs returns every id, in byte order.
func (s *Store) IDs(context.Context) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	return slices.Clone(s.ids), nil
}

// Close empties the store; later calls fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.byID, s.ids = nil, nil
	// Lock order: mu before a seen or frequency shard's (FirstSeen and
	// Take take a shard's alone).
	s.seen.close()
	s.freq.close()
	return nil
}

// AppendLog keeps a copy of the batch.
func (s *Store) AppendLog(_ context.Context, batch []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	s.log = append(s.log, slices.Clone(batch))
	return nil
}

// ScanLog calls fn for each stored line in order.
func (s *Store) ScanLog(_ context.Context, fn func(line []byte) error) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return errClosed
	}
	lines := s.log[:len(s.log):len(s.log)]
	s.mu.RUnlock()
	var d logbatch.Decoder
	for _, b := range lines {
		if err := d.Each(b, fn); err != nil {
			return err
		}
	}
	return nil
}

// PutResult keeps a copy of result under id.
func (s *Store) PutResult(_ context.Context, id string, result []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	s.results[id] = slices.Clone(result)
	return nil
}

// PutResults writes the batch at once.
func (s *Store) PutResults(_ context.Context, results []tsubame.Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	for _, r := range results {
		s.results[r.ID] = slices.Clone(r.Value)
	}
	return nil
}

// GetResult returns a copy of the result stored under id.
func (s *Store) GetResult(_ context.Context, id string) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	r, ok := s.results[id]
	if !ok {
		return nil, tsubame.Errorf(tsubame.ENOTFOUND, "no result for %q", id)
	}
	return slices.Clone(r), nil
}

// CountResults returns the number of stored results.
func (s *Store) CountResults(context.Context) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, errClosed
	}
	return len(s.results), nil
}

var errClosed = tsubame.Errorf(tsubame.EUNAVAILABLE, "store is closed")
