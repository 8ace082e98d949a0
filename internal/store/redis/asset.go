package redis

import (
	"context"

	"github.com/redis/rueidis"

	"tsubame"
)

var _ tsubame.Assets = (*Store)(nil)

// assetKey is the key of the asset of the given name, <prefix>asset:<sum>,
// holding its record (tsubame.AppendAssetRecord): a key of its own, so
// that in a cluster the assets spread over the masters like the
// placements, and every node reads any of them.
func (s *Store) assetKey(sum string) string { return s.opt.KeyPrefix + "asset:" + sum }

// PutAsset keeps a (tsubame.Assets) with SET NX: a name kept already holds
// the same bytes.
func (s *Store) PutAsset(ctx context.Context, a *tsubame.Asset) error {
	if err := tsubame.ValidateAsset(a); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rec := tsubame.AppendAssetRecord(nil, a)
	err := s.c.Do(ctx, s.c.B().Set().Key(s.assetKey(a.SHA256)).Value(rueidis.BinaryString(rec)).Nx().Build()).Error()
	if err != nil && !rueidis.IsRedisNil(err) { // nil: kept already
		return unavailable(err)
	}
	return nil
}

// GetAsset returns the asset of the given name (tsubame.Assets).
func (s *Store) GetAsset(ctx context.Context, sum string) (*tsubame.Asset, error) {
	if !tsubame.ValidAssetSum(sum) {
		return nil, tsubame.Errorf(tsubame.EINVALID, "asset name %q is not a SHA-256 in lower-case hex", sum)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rec, err := s.c.Do(ctx, s.c.B().Get().Key(s.assetKey(sum)).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, tsubame.Errorf(tsubame.ENOTFOUND, "asset %s not found", sum)
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return tsubame.ParseAssetRecord(sum, rec)
}
