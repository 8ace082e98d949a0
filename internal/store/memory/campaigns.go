package memory

import (
	"context"
	"sync"

	"tsubame"
)

// campaigns is the store's campaign set. It has its own lock: campaign
// writes, which validate the whole set, never hold up placement reads.
type campaigns struct {
	mu      sync.RWMutex
	set     *tsubame.CampaignSet // sorted by id per kind; never handed out
	version uint64
}

var _ tsubame.CampaignStore = (*Store)(nil)

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// read runs fn under the campaigns' read lock.
func (s *Store) readCampaigns(fn func(set *tsubame.CampaignSet, version uint64) error) error {
	if s.isClosed() {
		return errClosed
	}
	s.camp.mu.RLock()
	defer s.camp.mu.RUnlock()
	return fn(s.camp.set, s.camp.version)
}

// writeCampaigns applies fn to a copy of the set and keeps the copy if fn
// succeeds: a failed write leaves the set as it was. With at set, the write
// is made only while the set is at that version.
func (s *Store) writeCampaigns(at *uint64, fn func(set *tsubame.CampaignSet) (*tsubame.CampaignSet, error)) error {
	if s.isClosed() {
		return errClosed
	}
	s.camp.mu.Lock()
	defer s.camp.mu.Unlock()
	if at != nil && *at != s.camp.version {
		return tsubame.CampaignsChanged(*at)
	}
	next, err := fn(s.camp.set.Clone())
	if err != nil {
		return err
	}
	next.Sort()
	s.camp.set = next
	s.camp.version++
	return nil
}

// GetObject returns a copy of the object of kind k with the given id.
func (s *Store) GetObject(_ context.Context, k tsubame.CampaignKind, id string) (tsubame.CampaignObject, error) {
	if !k.Valid() {
		return nil, tsubame.Errorf(tsubame.EINVALID, "unknown kind %s", k)
	}
	var out tsubame.CampaignObject
	err := s.readCampaigns(func(set *tsubame.CampaignSet, _ uint64) error {
		o := set.Object(k, id)
		if o == nil {
			return tsubame.Errorf(tsubame.ENOTFOUND, "%s %q not found", k, id)
		}
		out = tsubame.CloneCampaignObject(o)
		return nil
	})
	return out, err
}

// ListObjects returns copies of every object of kind k, in id order.
func (s *Store) ListObjects(_ context.Context, k tsubame.CampaignKind) ([]tsubame.CampaignObject, error) {
	if !k.Valid() {
		return nil, tsubame.Errorf(tsubame.EINVALID, "unknown kind %s", k)
	}
	var out []tsubame.CampaignObject
	err := s.readCampaigns(func(set *tsubame.CampaignSet, _ uint64) error {
		for _, o := range set.Objects(k) {
			out = append(out, tsubame.CloneCampaignObject(o))
		}
		return nil
	})
	return out, err
}

// PutObject stores a copy of o if the set stays valid.
func (s *Store) PutObject(_ context.Context, o tsubame.CampaignObject) error {
	return s.putObject(nil, o)
}

// PutObjectAt stores a copy of o if the set is still at version and stays
// valid.
func (s *Store) PutObjectAt(_ context.Context, o tsubame.CampaignObject, version uint64) error {
	return s.putObject(&version, o)
}

func (s *Store) putObject(at *uint64, o tsubame.CampaignObject) error {
	return s.writeCampaigns(at, func(set *tsubame.CampaignSet) (*tsubame.CampaignSet, error) {
		return set, set.Put(o)
	})
}

// DeleteObject removes an object nothing refers to.
func (s *Store) DeleteObject(_ context.Context, k tsubame.CampaignKind, id string) error {
	if !k.Valid() {
		return tsubame.Errorf(tsubame.EINVALID, "unknown kind %s", k)
	}
	return s.writeCampaigns(nil, func(set *tsubame.CampaignSet) (*tsubame.CampaignSet, error) {
		return set, set.Delete(k, id)
	})
}

// ReplaceAll validates set and swaps a copy of it in at once.
func (s *Store) ReplaceAll(_ context.Context, set *tsubame.CampaignSet) error {
	return s.replaceAll(nil, set)
}

// ReplaceAllAt is ReplaceAll if the set is still at version.
func (s *Store) ReplaceAllAt(_ context.Context, set *tsubame.CampaignSet, version uint64) error {
	return s.replaceAll(&version, set)
}

func (s *Store) replaceAll(at *uint64, set *tsubame.CampaignSet) error {
	if err := set.Validate(); err != nil {
		return err
	}
	next := set.Clone()
	return s.writeCampaigns(at, func(*tsubame.CampaignSet) (*tsubame.CampaignSet, error) { return next, nil })
}

// Snapshot returns a copy of the set and its version.
func (s *Store) Snapshot(context.Context) (*tsubame.CampaignSet, uint64, error) {
	var out *tsubame.CampaignSet
	var v uint64
	err := s.readCampaigns(func(set *tsubame.CampaignSet, version uint64) error {
		out, v = set.Clone(), version
		return nil
	})
	return out, v, err
}

// CampaignsVersion returns the number of writes to the set so far.
func (s *Store) CampaignsVersion(context.Context) (uint64, error) {
	var v uint64
	err := s.readCampaigns(func(_ *tsubame.CampaignSet, version uint64) error { v = version; return nil })
	return v, err
}
