package memory

import (
	"bytes"
	"context"
	"sync"

	"tsubame"
)

var _ tsubame.Assets = (*Store)(nil)

// assets holds creatives' files, in this process only: name -> its record
// (tsubame.AppendAssetRecord).
type assets struct {
	mu sync.RWMutex
	m  map[string][]byte
}

// PutAsset keeps a (tsubame.Assets): a copy of its bytes.
func (s *Store) PutAsset(ctx context.Context, a *tsubame.Asset) error {
	if err := tsubame.ValidateAsset(a); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	as := &s.assets
	as.mu.Lock()
	defer as.mu.Unlock()
	if s.seen.closed.Load() {
		return errClosed
	}
	if as.m == nil {
		as.m = map[string][]byte{}
	}
	if _, ok := as.m[a.SHA256]; !ok {
		as.m[a.SHA256] = tsubame.AppendAssetRecord(nil, a)
	}
	return nil
}

// GetAsset returns a copy of the asset of the given name (tsubame.Assets).
func (s *Store) GetAsset(ctx context.Context, sum string) (*tsubame.Asset, error) {
	if !tsubame.ValidAssetSum(sum) {
		return nil, tsubame.Errorf(tsubame.EINVALID, "asset name %q is not a SHA-256 in lower-case hex", sum)
	}
	if err := ctx.Err(); err != nil {
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "memory store: %v", err)
	}
	as := &s.assets
	as.mu.RLock()
	defer as.mu.RUnlock()
	if s.seen.closed.Load() {
		return nil, errClosed
	}
	rec, ok := as.m[sum]
	if !ok {
		return nil, tsubame.Errorf(tsubame.ENOTFOUND, "asset %s not found", sum)
	}
	return tsubame.ParseAssetRecord(sum, bytes.Clone(rec))
}
