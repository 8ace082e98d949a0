package main

import (
	"tsubame"
	"tsubame/internal/asset"
	"tsubame/internal/config"
)

// openAssets serves the creatives' uploaded files the store keeps on the
// public listener (/assets/), with a cache of ads.assets.cache_bytes, read
// at start. A store that keeps none serves none.
func (m *Main) openAssets(cfg *config.Config, backend tsubame.Store) error {
	as, ok := backend.(tsubame.Assets)
	if !ok {
		return nil
	}
	srv, err := asset.NewServer(as, int64(cfg.Ads.Assets.CacheBytes))
	if err != nil {
		return err
	}
	m.pub.assets = srv
	return nil
}
