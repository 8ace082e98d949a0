package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"tsubame/internal/budget"
)

// TrafficFile is where a server keeps, in its data directory, what it
// learned of its traffic's days (budget.Ledger.WriteTraffic), so that
// even pacing follows the traffic from the first request after a restart.
const TrafficFile = "traffic.json"

// trafficEvery is how often the file is written while the server runs.
const trafficEvery = 15 * time.Minute

// loadTraffic reads the traffic file of dir into g, if there is one.
func loadTraffic(g *budget.Ledger, dir string, log *slog.Logger) {
	path := filepath.Join(dir, TrafficFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return // first start: pacing follows the clock until a day is learned
	}
	if err == nil {
		err = g.ReadTraffic(bytes.NewReader(b))
	}
	if err != nil {
		log.Warn("cannot read what this server learned of its traffic: even pacing follows the clock until it learns a day again", "path", path, "err", err)
	}
}

// saveTraffic writes g's traffic file into dir (a temporary file renamed
// over it: a crash leaves the old one whole).
func saveTraffic(g *budget.Ledger, dir string, log *slog.Logger) {
	var buf bytes.Buffer
	err := g.WriteTraffic(&buf)
	path := filepath.Join(dir, TrafficFile)
	if err == nil {
		err = os.MkdirAll(dir, 0o750)
	}
	if err == nil {
		tmp := path + ".tmp"
		if err = os.WriteFile(tmp, buf.Bytes(), 0o640); err == nil {
			err = os.Rename(tmp, path)
		}
	}
	if err != nil {
		log.Warn("cannot record what this server learned of its traffic", "path", path, "err", err)
	}
}

// keepTraffic writes g's traffic file every trafficEvery until ctx ends.
func keepTraffic(ctx context.Context, g *budget.Ledger, dir string, log *slog.Logger) {
	t := time.NewTicker(trafficEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			saveTraffic(g, dir, log)
		}
	}
}
