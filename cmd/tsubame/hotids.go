package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"tsubame/internal/cache"
	"tsubame/internal/config"

	"tsubame"
)

// The most used placement ids, carried from one run to the next
// (cache.warm_ids): recorded at shutdown, loaded into the cache before the
// next start serves.

// HotIDsFile is the file in the data directory that carries the most used
// placement ids from one run to the next (cache.warm_ids).
const HotIDsFile = "cache-hot-ids"

// warm loads the ids the previous run used most, before serving.
func warmCache(ctx context.Context, c *cache.Cache, cfg *config.Config, log *slog.Logger) {
	n := cfg.Cache.WarmIDs
	if n <= 0 {
		return
	}
	b, err := os.ReadFile(filepath.Join(cfg.DataDir, HotIDsFile))
	if err != nil {
		return // first start, or nothing recorded
	}
	var ids []string
	for _, id := range strings.Fields(string(b)) {
		if tsubame.ValidID(id) == nil && len(ids) < n {
			ids = append(ids, id)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.Cache.WarmTimeout)
	defer cancel()
	start := time.Now()
	loaded := c.Warm(wctx, ids, 16)
	log.Info("cache warmed", "ids", len(ids), "loaded", loaded, "in", time.Since(start).Round(time.Millisecond))
}

// saveHotIDs records the most used ids for the next run's warm-up.
func saveHotIDs(c *cache.Cache, n int, dir string, log *slog.Logger) {
	if n <= 0 || c == nil {
		return
	}
	ids := c.Hottest(n)
	if len(ids) == 0 {
		return
	}
	path := filepath.Join(dir, HotIDsFile)
	tmp := path + ".tmp"
	if err := os.MkdirAll(dir, 0o750); err == nil {
		if err = os.WriteFile(tmp, []byte(strings.Join(ids, "\n")+"\n"), 0o640); err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			log.Warn("cannot record the most used ids for the next start", "err", err)
		}
	}
}
