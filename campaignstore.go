package tsubame

import (
	"context"
	"slices"
	"sync"
	"time"
)

// CampaignStore keeps the campaign model (advertisers, campaigns, creatives,
// line items) beside the placements, in the same backend. Implementations
// must be safe for concurrent use.
//
// Objects passed to and returned by a CampaignStore are owned by the caller:
// a store copies what it keeps and never hands out memory it still uses, so
// callers may modify what they get.
//
// The stored objects always form a valid CampaignSet: every write is checked
// against the whole set (CampaignSet.Put, Delete and Validate) in the
// transaction that makes it, so a write costs a read of the set. Writes are
// rare (imports, admin edits); the request path never reads this store — the
// decision index (internal/decision) compiles a Snapshot into memory.
//
// Every committed write increments a version number, in the same transaction
// as the write: the decision index remembers the version it was built from
// and rebuilds from a new Snapshot when CampaignsVersion differs (after a
// write through its own process, on a CampaignFeed signal, and on a periodic
// check that catches signals a feed missed). A version is only ever compared
// for equality: a store emptied by other means (a flushed Redis) may start
// again from zero, and one that can says when a version it answered is of
// a history it lost (CampaignHistory).
type CampaignStore interface {
	// GetObject returns the object of kind k with the given id, or an
	// ENOTFOUND error.
	GetObject(ctx context.Context, k CampaignKind, id string) (CampaignObject, error)
	// ListObjects returns every object of kind k, in id order (byte order).
	ListObjects(ctx context.Context, k CampaignKind) ([]CampaignObject, error)
	// PutObject creates or replaces the object of o's kind with o's id. It
	// fails with EINVALID, listing every problem, when o breaks a rule or the
	// set would (its advertiser, campaign or creatives do not exist, or a
	// campaign moved to another advertiser would leave its line items with
	// creatives of the old one).
	PutObject(ctx context.Context, o CampaignObject) error
	// DeleteObject removes the object of kind k with the given id: ENOTFOUND
	// when there is none, ECONFLICT while other objects refer to it.
	DeleteObject(ctx context.Context, k CampaignKind, id string) error
	// ReplaceAll validates set (every problem at once, EINVALID) and then
	// replaces everything stored with it, as one transaction where the
	// backend has them: readers see the old set or the new one, never a mix,
	// and a rejected or failed replace leaves the old set whole. Each backend
	// documents what a failure half-way leaves where it cannot promise that.
	ReplaceAll(ctx context.Context, set *CampaignSet) error
	// ReplaceAllAt is ReplaceAll made only while the stored set is at
	// version, as Snapshot or CampaignsVersion read it: the version is
	// compared in the transaction (or script) that writes, so when any
	// process wrote after that read, nothing is written and the error is
	// ECONFLICT. A write computed from what was read (a merge import) uses
	// it, so that it never undoes a write it did not see.
	ReplaceAllAt(ctx context.Context, set *CampaignSet, version uint64) error
	// PutObjectAt is PutObject made only while the stored set is at
	// version, compared as ReplaceAllAt compares it (ECONFLICT otherwise):
	// for a change of an object read at that version (a pause).
	PutObjectAt(ctx context.Context, o CampaignObject, version uint64) error
	// Snapshot returns every object, each kind in id order, and the version
	// they are at, read at one instant.
	Snapshot(ctx context.Context) (*CampaignSet, uint64, error)
	// CampaignsVersion returns the version of the stored set: 0 for a store
	// never written, then one more after each write.
	CampaignsVersion(ctx context.Context) (uint64, error)
}

// CampaignFeed is implemented by campaign stores shared between processes
// (Redis): WatchCampaigns calls changed after every write any process makes
// to the set, and after it reconnects (writes meanwhile went unannounced),
// until ctx ends; it returns ctx's error. changed carries no data: the
// receiver compares CampaignsVersion with its own and reads a Snapshot when
// they differ, so signals may be merged, repeated or spurious. changed must
// not block for long. Stores of one process (memory, embedded) have no feed:
// their writes go through the process that reads them.
type CampaignFeed interface {
	WatchCampaigns(ctx context.Context, changed func()) error
}

// CampaignChanges is implemented by campaign stores that log their writes
// (Redis): a reader that holds the set at one version reads what changed
// since, rather than the whole set again.
type CampaignChanges interface {
	// ChangedSince returns the objects the writes after version changed,
	// each once at its state now (a nil Object: deleted), and the version
	// the set is at with them (objects may be read newer than it: a
	// reader applying them again later changes nothing). It reports false
	// when the store no longer knows every write since version, or one of
	// them replaced the whole set: the reader reads a Snapshot.
	ChangedSince(ctx context.Context, version uint64) (changes []CampaignChange, now uint64, ok bool, err error)
}

// CampaignCopies is implemented by campaign stores that can check a write
// against a copy of the set the process already holds (the decision
// engine's, at the version it returns) rather than read the whole set
// again: a delete of a campaign, a creative or an advertiser, or a move to
// another advertiser, is checked against everything that names the
// object. The store brings the copy to its own version with its log and
// compares that version when it writes, so the check is the same as
// against a set read whole. copy must not block, and neither it nor the
// store may change the set it returns.
type CampaignCopies interface {
	UseCampaignCopy(copy func() (*CampaignSet, uint64))
}

// CampaignRebase is what a replace computed from a read of the set (an
// import) does when the stored set moved past the version it read: given
// every object the writes since changed (each at its state now, as
// ChangedSince returns them; a nil Object: deleted), it returns the set to
// write instead, with those writes kept, or an error (ECONFLICT when the
// replace and a write changed the same object) and nothing is written. The
// store checks the references of the set it returns (ValidateRefs): each
// object was checked, in the replace or by its write.
// A store may call it several times, with the writes since the last call.
type CampaignRebase func(changes []CampaignChange) (*CampaignSet, error)

// CampaignRebases is implemented by campaign stores that can carry the
// writes other processes made during a long replace (Redis, where a
// million line items take seconds to write) into it, rather than refuse
// it: ReplaceAllRebasing is ReplaceAllAt, except that when the set moved
// past version, the store reads what changed since, asks rebase for the
// set to write, writes only the objects that differ from what it staged,
// and compares the version it read the changes at.
type CampaignRebases interface {
	ReplaceAllRebasing(ctx context.Context, set *CampaignSet, version uint64, rebase CampaignRebase) error
}

// ReplaceAllRebasing is s's ReplaceAllRebasing when it has one, else
// ReplaceAllAt (ECONFLICT when the set moved past version).
func ReplaceAllRebasing(ctx context.Context, s CampaignStore, set *CampaignSet, version uint64, rebase CampaignRebase) error {
	if r, ok := s.(CampaignRebases); ok {
		return r.ReplaceAllRebasing(ctx, set, version, rebase)
	}
	return s.ReplaceAllAt(ctx, set, version)
}

// CampaignHistory is implemented by campaign stores shared between
// processes whose set can be lost and written again from version zero
// (Redis emptied, or restarted without persistence): the same version
// number is then another set. HistoryChanged reports whether the stored
// set is no longer in the history it was in when this store last answered
// version (Snapshot, ChangedSince), false when it cannot tell; a reader at
// that version reads a Snapshot. ChangedSince reports false for a version
// of another history.
type CampaignHistory interface {
	HistoryChanged(ctx context.Context, version uint64) (bool, error)
}

// CampaignChange is an object a write changed: Object nil when it was
// deleted.
type CampaignChange struct {
	Kind   CampaignKind
	ID     string
	Object CampaignObject
}

// Apply returns a copy of s with changes made (objects replaced, added or
// removed; of two changes of one object, the last), sharing the objects
// it does not change: for a reader that follows a store's writes. It
// checks nothing: the store checked each write. The changed objects come
// after the others of their kind, in the order of their first change.
func (s *CampaignSet) Apply(changes []CampaignChange) *CampaignSet {
	var kinds [KindLineItem + 1]objectChanges
	for _, c := range changes {
		if c.Kind.Valid() {
			kinds[c.Kind].add(c.ID, c.Object)
		}
	}
	next := *s
	if k := &kinds[KindAdvertiser]; len(k.ids) > 0 {
		next.Advertisers = applyKind(s.Advertisers, k)
	}
	if k := &kinds[KindCampaign]; len(k.ids) > 0 {
		next.Campaigns = applyKind(s.Campaigns, k)
	}
	if k := &kinds[KindCreative]; len(k.ids) > 0 {
		next.Creatives = applyKind(s.Creatives, k)
	}
	if k := &kinds[KindLineItem]; len(k.ids) > 0 {
		next.LineItems = applyKind(s.LineItems, k)
	}
	return &next
}

// objectChanges are the changes of one kind: ids in the order of their
// first change, and each one's last object.
type objectChanges struct {
	ids  []string
	last map[string]CampaignObject
}

func (c *objectChanges) add(id string, o CampaignObject) {
	if c.last == nil {
		c.last = map[string]CampaignObject{}
	}
	if _, ok := c.last[id]; !ok {
		c.ids = append(c.ids, id)
	}
	c.last[id] = o
}

// applyKind returns in without the changed objects, then those not
// deleted. A few changes (a write's) are looked for by comparing ids, a
// few nanoseconds each, rather than hashing each of a million ids.
func applyKind[T any, P interface {
	*T
	CampaignObject
}](in []*T, c *objectChanges) []*T {
	out := make([]*T, 0, len(in)+len(c.ids))
	few := len(c.ids) <= 8
	for _, o := range in {
		if o == nil {
			continue
		}
		id := P(o).ObjectID()
		var hit bool
		if few {
			hit = slices.Contains(c.ids, id)
		} else {
			_, hit = c.last[id]
		}
		if !hit {
			out = append(out, o)
		}
	}
	for _, id := range c.ids {
		if o, ok := c.last[id].(P); ok && o != nil {
			out = append(out, (*T)(o))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// CampaignsChanged is the ECONFLICT error of a ReplaceAllAt or PutObjectAt
// whose version is no longer the stored set's: every backend words it so.
func CampaignsChanged(version uint64) error {
	return Errorf(ECONFLICT, "the stored campaigns changed after version %d was read: read them again", version)
}

// GetCampaignObject reads the object of type T (*Advertiser, *Campaign,
// *Creative or *LineItem) with the given id from s.
func GetCampaignObject[T CampaignObject](ctx context.Context, s CampaignStore, id string) (T, error) {
	var zero T
	o, err := s.GetObject(ctx, zero.Kind(), id)
	if err != nil {
		return zero, err
	}
	t, ok := o.(T)
	if !ok {
		return zero, Errorf(EINTERNAL, "store returned a %s for a %s", o.Kind(), zero.Kind())
	}
	return t, nil
}

// ListCampaignObjects reads every object of type T from s, in id order.
func ListCampaignObjects[T CampaignObject](ctx context.Context, s CampaignStore) ([]T, error) {
	var zero T
	list, err := s.ListObjects(ctx, zero.Kind())
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(list))
	for _, o := range list {
		t, ok := o.(T)
		if !ok {
			return nil, Errorf(EINTERNAL, "store returned a %s for a %s", o.Kind(), zero.Kind())
		}
		out = append(out, t)
	}
	return out, nil
}

// Add appends o (not a copy) to the set's list of its kind, without any
// check: for stores decoding what they wrote, and for building a set.
func (s *CampaignSet) Add(o CampaignObject) {
	switch o := o.(type) {
	case *Advertiser:
		s.Advertisers = append(s.Advertisers, o)
	case *Campaign:
		s.Campaigns = append(s.Campaigns, o)
	case *Creative:
		s.Creatives = append(s.Creatives, o)
	case *LineItem:
		s.LineItems = append(s.LineItems, o)
	}
}

// locations caches time.LoadLocation, which reads a file per call: a set of
// thousands of campaigns names a handful of zones.
var locations sync.Map // name -> *time.Location

func loadLocation(name string) (*time.Location, error) {
	if v, ok := locations.Load(name); ok {
		return v.(*time.Location), nil
	}
	// LoadLocation("") and "Local" would mean UTC and the machine's zone:
	// neither is a name a campaign can mean.
	if name == "" || name == "Local" || len(name) > 64 {
		return nil, Errorf(EINVALID, "unknown time zone %q", clip(name, 64))
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		// Not cached: names that fail are the input's, without bound.
		return nil, Errorf(EINVALID, "unknown time zone %q", name)
	}
	locations.Store(name, loc)
	return loc, nil
}
