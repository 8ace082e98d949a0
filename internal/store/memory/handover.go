package memory

import (
	"context"
	"sync"
	"time"

	"tsubame"
)

var _ tsubame.Handovers = (*Store)(nil)

// handovers holds the handovers not yet claimed, in this process only.
type handovers struct {
	mu sync.Mutex
	m  map[string]handover
}

type handover struct {
	data    []byte
	expires int64 // seen's clock
}

// PutHandover keeps data as holder's handover for ttl (tsubame.Handovers).
func (s *Store) PutHandover(ctx context.Context, holder string, data []byte, ttl time.Duration) error {
	if err := tsubame.ValidateHandover(holder, data, ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	h := &s.hand
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.seen.closed.Load() {
		return errClosed
	}
	if h.m == nil {
		h.m = map[string]handover{}
	}
	h.m[holder] = handover{append([]byte(nil), data...), s.seen.clock() + int64(ttl)}
	return nil
}

// ClaimHandover takes a handover not yet claimed (tsubame.Handovers).
func (s *Store) ClaimHandover(ctx context.Context) (string, []byte, error) {
	if err := ctx.Err(); err != nil {
		return "", nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	h := &s.hand
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.seen.closed.Load() {
		return "", nil, errClosed
	}
	now := s.seen.clock()
	for holder, x := range h.m {
		delete(h.m, holder)
		if x.expires > now {
			return holder, x.data, nil
		}
	}
	return "", nil, nil
}
