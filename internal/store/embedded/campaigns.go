package embedded

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"tsubame"
)

// The campaign model lives in buckets of its own: one per kind, each object
// as JSON under its id, and campaign_meta holding the set's currency and
// version. Every write is one bbolt transaction that reads the set, checks
// the change against it and bumps the version: a write is all or nothing,
// and readers (each in a read transaction) see one version whole.
var (
	bucketCampaignMeta = []byte("campaign_meta")
	kindBuckets        = map[tsubame.CampaignKind][]byte{
		tsubame.KindAdvertiser: []byte("advertisers"),
		tsubame.KindCampaign:   []byte("campaigns"),
		tsubame.KindCreative:   []byte("creatives"),
		tsubame.KindLineItem:   []byte("line_items"),
	}
	keyCurrency = []byte("currency")
	keyVersion  = []byte("version")
)

var _ tsubame.CampaignStore = (*Store)(nil)

// createCampaignBuckets runs in Open's transaction.
func createCampaignBuckets(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketCampaignMeta); err != nil {
		return err
	}
	for _, name := range kindBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

func kindBucket(k tsubame.CampaignKind) ([]byte, error) {
	name, ok := kindBuckets[k]
	if !ok {
		return nil, tsubame.Errorf(tsubame.EINVALID, "unknown kind %s", k)
	}
	return name, nil
}

func decodeObject(k tsubame.CampaignKind, v []byte) (tsubame.CampaignObject, error) {
	o := tsubame.NewCampaignObject(k)
	if err := json.Unmarshal(v, o); err != nil {
		return nil, fmt.Errorf("corrupt %s record: %w", k, err)
	}
	return o, nil
}

// readSet reads the whole set in tx. A file written before campaigns
// existed, opened read-only, has none of their buckets: an empty set.
func readSet(tx *bolt.Tx) (*tsubame.CampaignSet, uint64, error) {
	set := &tsubame.CampaignSet{}
	version := storedVersion(tx)
	if meta := tx.Bucket(bucketCampaignMeta); meta != nil {
		set.Currency = string(meta.Get(keyCurrency))
	}
	for _, k := range tsubame.CampaignKinds {
		b := tx.Bucket(kindBuckets[k])
		if b == nil {
			continue
		}
		err := b.ForEach(func(_, v []byte) error {
			o, err := decodeObject(k, v)
			if err == nil {
				set.Add(o)
			}
			return err
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return set, version, nil
}

// storedVersion reads the set's version in tx: 0 for a set never written.
func storedVersion(tx *bolt.Tx) uint64 {
	if meta := tx.Bucket(bucketCampaignMeta); meta != nil {
		if v := meta.Get(keyVersion); len(v) == 8 {
			return binary.BigEndian.Uint64(v)
		}
	}
	return 0
}

// checkVersion fails with ECONFLICT when at is set and the set in tx is at
// another version.
func checkVersion(tx *bolt.Tx, at *uint64) error {
	if at != nil && storedVersion(tx) != *at {
		return tsubame.CampaignsChanged(*at)
	}
	return nil
}

// bumpVersion increments the set's version in tx.
func bumpVersion(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketCampaignMeta)
	version := storedVersion(tx)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], version+1)
	return meta.Put(keyVersion, b[:])
}

// GetObject reads the object of kind k with the given id.
func (s *Store) GetObject(ctx context.Context, k tsubame.CampaignKind, id string) (tsubame.CampaignObject, error) {
	name, err := kindBucket(k)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	var o tsubame.CampaignObject
	err = s.db.View(func(tx *bolt.Tx) error {
		var v []byte
		if b := tx.Bucket(name); b != nil {
			v = b.Get([]byte(id))
		}
		if v == nil {
			return tsubame.Errorf(tsubame.ENOTFOUND, "%s %q not found", k, id)
		}
		var err error
		o, err = decodeObject(k, v)
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	return o, nil
}

// ListObjects reads every object of kind k, in id order.
func (s *Store) ListObjects(ctx context.Context, k tsubame.CampaignKind) ([]tsubame.CampaignObject, error) {
	name, err := kindBucket(k)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	var out []tsubame.CampaignObject
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(name)
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			o, err := decodeObject(k, v)
			if err == nil {
				out = append(out, o)
			}
			return err
		})
	})
	if err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

// PutObject writes o if the set stays valid, in one transaction with the check.
func (s *Store) PutObject(ctx context.Context, o tsubame.CampaignObject) error {
	return s.putObject(ctx, nil, o)
}

// PutObjectAt is PutObject if the set is still at version, compared in the
// transaction that writes.
func (s *Store) PutObjectAt(ctx context.Context, o tsubame.CampaignObject, version uint64) error {
	return s.putObject(ctx, &version, o)
}

func (s *Store) putObject(ctx context.Context, at *uint64, o tsubame.CampaignObject) error {
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.db.Update(func(tx *bolt.Tx) error {
		if err := checkVersion(tx, at); err != nil {
			return err
		}
		set, _, err := readSet(tx)
		if err != nil {
			return err
		}
		if err := set.Put(o); err != nil {
			return err
		}
		v, err := json.Marshal(o)
		if err != nil {
			return err
		}
		if err := tx.Bucket(kindBuckets[o.Kind()]).Put([]byte(o.ObjectID()), v); err != nil {
			return err
		}
		return bumpVersion(tx)
	}))
}

// DeleteObject removes an object nothing refers to.
func (s *Store) DeleteObject(ctx context.Context, k tsubame.CampaignKind, id string) error {
	name, err := kindBucket(k)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.db.Update(func(tx *bolt.Tx) error {
		set, _, err := readSet(tx)
		if err != nil {
			return err
		}
		if err := set.Delete(k, id); err != nil {
			return err
		}
		if err := tx.Bucket(name).Delete([]byte(id)); err != nil {
			return err
		}
		return bumpVersion(tx)
	}))
}

// ReplaceAll validates set and replaces every campaign bucket's content with
// it in one transaction: a failure leaves the old set whole.
func (s *Store) ReplaceAll(ctx context.Context, set *tsubame.CampaignSet) error {
	return s.replaceAll(ctx, nil, set)
}

// ReplaceAllAt is ReplaceAll if the set is still at version, compared in
// the transaction that writes.
func (s *Store) ReplaceAllAt(ctx context.Context, set *tsubame.CampaignSet, version uint64) error {
	return s.replaceAll(ctx, &version, set)
}

func (s *Store) replaceAll(ctx context.Context, at *uint64, set *tsubame.CampaignSet) error {
	if err := set.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.db.Update(func(tx *bolt.Tx) error {
		if err := checkVersion(tx, at); err != nil {
			return err
		}
		for _, k := range tsubame.CampaignKinds {
			name := kindBuckets[k]
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
			b, err := tx.CreateBucket(name)
			if err != nil {
				return err
			}
			for _, o := range set.Objects(k) {
				v, err := json.Marshal(o)
				if err != nil {
					return err
				}
				if err := b.Put([]byte(o.ObjectID()), v); err != nil {
					return err
				}
			}
		}
		meta := tx.Bucket(bucketCampaignMeta)
		var err error
		if set.Currency == "" {
			err = meta.Delete(keyCurrency)
		} else {
			err = meta.Put(keyCurrency, []byte(set.Currency))
		}
		if err != nil {
			return err
		}
		return bumpVersion(tx)
	}))
}

// Snapshot reads the whole set and its version in one read transaction.
func (s *Store) Snapshot(ctx context.Context) (*tsubame.CampaignSet, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, unavailable(err)
	}
	var set *tsubame.CampaignSet
	var version uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		set, version, err = readSet(tx)
		return err
	})
	if err != nil {
		return nil, 0, wrap(err)
	}
	return set, version, nil
}

// CampaignsVersion reads the set's version.
func (s *Store) CampaignsVersion(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, unavailable(err)
	}
	var version uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		version = storedVersion(tx)
		return nil
	})
	return version, wrap(err)
}
