package tsubame

import (
	"context"
)

// Store keeps placements. Implementations must be safe for concurrent use.
//
// Placements passed to and returned by a Store are owned by the caller: a
// Store copies what it keeps and never hands out memory it still uses, so
// callers may modify what they get.
type Store interface {
	// Get returns the placement with the given id, or an ENOTFOUND error.
	Get(ctx context.Context, id string) (*Placement, error)
	// Put validates p, sets p.UpdatedAt and creates or replaces the placement.
	Put(ctx context.Context, p *Placement) error
	// PutMany validates every placement first and writes none of them if any
	// is invalid. Backends with transactions (embedded, memory) write all or
	// nothing; others document what a failure half-way leaves behind.
	PutMany(ctx context.Context, ps []*Placement) error
	// Delete removes the placement with the given id, or returns ENOTFOUND.
	Delete(ctx context.Context, id string) error
	// List returns up to limit placements whose id sorts after the given one
	// (byte order), in id order; after == "" starts at the beginning.
	List(ctx context.Context, after string, limit int) ([]*Placement, error)
	// IDs returns the id of every placement, in byte order: for listings
	// sorted or counted another way (the admin's), without their values.
	IDs(ctx context.Context) ([]string, error)
	// Close releases the store. Calls after Close fail.
	Close() error
}

// Invalidator drops cached copies of placements. Stores that are cached call
// it after every write so no reader keeps serving a replaced value; it must be
// safe for concurrent use.
type Invalidator interface {
	// Invalidate drops the cached placement with the given id.
	Invalidate(id string)
	// InvalidateDep drops every cached placement that declared the dependency key.
	InvalidateDep(dep string)
	// InvalidateAll drops everything cached.
	InvalidateAll()
	// Revalidate marks everything cached as due for a refresh from the
	// store, without dropping it: for a change feed that may have missed
	// announcements, so values keep being served (stale) while the store
	// does not answer.
	Revalidate()
}

// Sharded is implemented by stores whose placements live on several
// servers (Redis Cluster). Shard returns a small number naming the server
// that serves id, so that a cache can isolate one server's failure from
// the others': its own circuit breaker and its own pool of reads. A store
// without it is one shard.
type Sharded interface {
	Shard(id string) int
}

// ChangeFeed is implemented by stores shared between processes (Redis):
// Watch delivers to inv every write any process makes, so the in-process
// cache of every node drops what changed. It runs until ctx ends.
type ChangeFeed interface {
	Watch(ctx context.Context, inv Invalidator) error
}

// ValidatePlacements validates every placement in ps and rejects duplicate ids,
// so a batch write can refuse a bad batch before touching anything.
func ValidatePlacements(ps []*Placement) error {
	seen := make(map[string]struct{}, len(ps))
	for _, p := range ps {
		if p == nil {
			return Errorf(EINVALID, "nil placement")
		}
		if err := p.Validate(); err != nil {
			return err
		}
		if _, dup := seen[p.ID]; dup {
			return Errorf(EINVALID, "placement %q appears twice", p.ID)
		}
		seen[p.ID] = struct{}{}
	}
	return nil
}

// Result is one message's stored outcome (webhook.ResultStore keeps them).
type Result struct {
	ID    string
	Value []byte
}
