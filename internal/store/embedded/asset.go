package embedded

import (
	"bytes"
	"context"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"tsubame"
)

var _ tsubame.Assets = (*Store)(nil)

// bucketAssets holds creatives' files: name -> its record
// (tsubame.AppendAssetRecord).
var bucketAssets = []byte("assets")

// PutAsset keeps a (tsubame.Assets), in a write transaction of its own: an
// upload is rare, and its bytes are many.
func (s *Store) PutAsset(ctx context.Context, a *tsubame.Asset) error {
	if err := tsubame.ValidateAsset(a); err != nil {
		return err
	}
	if s.db.IsReadOnly() {
		return wrap(bolterr.ErrDatabaseReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return unavailable(err)
	}
	return wrap(s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketAssets)
		if err != nil {
			return err
		}
		if b.Get([]byte(a.SHA256)) != nil {
			return nil
		}
		return b.Put([]byte(a.SHA256), tsubame.AppendAssetRecord(nil, a))
	}))
}

// GetAsset returns the asset of the given name (tsubame.Assets), copied
// out of the file's map.
func (s *Store) GetAsset(ctx context.Context, sum string) (*tsubame.Asset, error) {
	if !tsubame.ValidAssetSum(sum) {
		return nil, tsubame.Errorf(tsubame.EINVALID, "asset name %q is not a SHA-256 in lower-case hex", sum)
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	var rec []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketAssets); b != nil {
			rec = bytes.Clone(b.Get([]byte(sum)))
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	if rec == nil {
		return nil, tsubame.Errorf(tsubame.ENOTFOUND, "asset %s not found", sum)
	}
	return tsubame.ParseAssetRecord(sum, rec)
}
