package tsubame

import (
	"context"
	"time"
)

// MaxEventIDLength is the longest event id a Deduper accepts, in bytes. An
// id names one event (a decision's impression, a click on it), not a URL:
// this is ample, and it bounds what a store keeps per event.
const MaxEventIDLength = 128

// Deduper remembers event ids for a while, so that an event delivered more
// than once (a browser's retry, a prefetcher, a double click, one URL fetched
// through two nodes) is counted once: across goroutines, and across processes
// and nodes that share the store. Implementations must be safe for concurrent
// use.
type Deduper interface {
	// FirstSeen records id and reports whether this is its first sighting
	// within ttl. Among any number of concurrent calls with the same id, on
	// any node sharing the store, exactly one returns true; every later call
	// returns false until ttl has passed since the call that returned true,
	// and the first call after that returns true again and starts a new
	// window. A call that returns false does not extend the window.
	//
	// id is 1 to MaxEventIDLength bytes of any value and ttl is positive;
	// otherwise FirstSeen fails with EINVALID (ValidateFirstSeen) and
	// records nothing. A backend keeps ttl to its own resolution, rounding
	// up (Redis: milliseconds), and measures it with its own clock (Redis:
	// the server's).
	//
	// An error means the store could not tell, and the id may or may not
	// be recorded: a caller must not retry to get an answer (a retry may
	// see its own first attempt and answer false). Tracking records such
	// an event as not counted: a repeat is never counted twice, at the
	// price of an event not counted while the store fails.
	FirstSeen(ctx context.Context, id string, ttl time.Duration) (bool, error)
	// Seen reports, for each of ids, whether it is recorded now: a
	// FirstSeen of it returned true (or failed after recording it) and its
	// window has not passed. It records nothing and extends no window: it
	// is how a node that reserved money for an event learns whether the
	// event was counted, on whichever node that happened. The answer has
	// one value per id, in order.
	//
	// ids are at most MaxSeenBatch, each as FirstSeen takes it; otherwise
	// Seen fails with EINVALID (ValidateSeen). An error means the store
	// could not tell.
	Seen(ctx context.Context, ids []string) ([]bool, error)
}

// MaxSeenBatch is the most ids one Seen call takes.
const MaxSeenBatch = 1024

// ValidateSeen checks the arguments of a Seen call.
func ValidateSeen(ids []string) error {
	if len(ids) > MaxSeenBatch {
		return Errorf(EINVALID, "%d event ids in one Seen call, more than %d", len(ids), MaxSeenBatch)
	}
	for _, id := range ids {
		if err := ValidateFirstSeen(id, time.Second); err != nil {
			return err
		}
	}
	return nil
}

// ValidateFirstSeen checks the arguments of a FirstSeen call: an EINVALID
// error unless id is 1 to MaxEventIDLength bytes and ttl is positive.
func ValidateFirstSeen(id string, ttl time.Duration) error {
	switch {
	case id == "":
		return Errorf(EINVALID, "empty event id")
	case len(id) > MaxEventIDLength:
		return Errorf(EINVALID, "event id of %d bytes is longer than %d", len(id), MaxEventIDLength)
	case ttl <= 0:
		return Errorf(EINVALID, "event id window %v is not positive", ttl)
	}
	return nil
}
