package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"tsubame"
	"tsubame/internal/config"
	"tsubame/internal/decision"
)

// The campaign set handed to a successor at a restart (restart.go). On the
// embedded store the successor cannot read the set before its predecessor
// lets go of the store's lock, and reading and compiling it then (a fifth
// of a second at 10,000 line items, seconds at a million) was a pause in
// which neither process served. So the predecessor writes the set it
// serves on a pipe when it starts the successor, and the successor reads
// and compiles it while the predecessor still serves. Once it has the
// store, the successor uses that index if the store's file is the one the
// set was read from and still at the set's version; else it reads the
// store as it would without (decision.Primed).
//
// The catalog is the header, then each object as its kind's name and its
// JSON (the store's own encoding of it), then the count of objects: a
// catalog cut short is refused.

// catalogHeader opens a catalog.
type catalogHeader struct {
	Version  uint64 `json:"version"`
	Currency string `json:"currency,omitempty"`
	Store    fileID `json:"store"`
}

// catalogEnd closes a catalog.
type catalogEnd struct {
	Objects int `json:"objects"`
}

// fileID names a file by its device and inode: the store's file, not
// another put at its path since.
type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func storeFileID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, errors.New("no device and inode for " + path)
	}
	return fileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil //nolint:unconvert // Dev's type differs by platform
}

// catalogReadTimeout bounds the successor's read of the catalog, so that
// with its compile (seconds at a million line items) it is ready well
// inside the minute its predecessor waits for it; past it, the successor
// reads the store once it has it. A variable for a test.
var catalogReadTimeout = 20 * time.Second

// writeCatalog writes set, the store's at version, to w.
func writeCatalog(w io.Writer, set *tsubame.CampaignSet, version uint64, store fileID) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(catalogHeader{Version: version, Currency: set.Currency, Store: store}); err != nil {
		return err
	}
	n := 0
	for _, k := range tsubame.CampaignKinds {
		for _, o := range set.Objects(k) {
			if err := enc.Encode(k.String()); err != nil {
				return err
			}
			if err := enc.Encode(o); err != nil {
				return err
			}
			n++
		}
	}
	if err := enc.Encode(catalogEnd{Objects: n}); err != nil {
		return err
	}
	return bw.Flush()
}

// readCatalog reads a catalog written by writeCatalog.
func readCatalog(r io.Reader) (*tsubame.CampaignSet, catalogHeader, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 64<<10))
	var h catalogHeader
	if err := dec.Decode(&h); err != nil {
		return nil, h, fmt.Errorf("header: %w", err)
	}
	kinds := make(map[string]tsubame.CampaignKind, len(tsubame.CampaignKinds))
	for _, k := range tsubame.CampaignKinds {
		kinds[k.String()] = k
	}
	set := &tsubame.CampaignSet{Currency: h.Currency}
	for n := 0; ; n++ {
		var next json.RawMessage
		if err := dec.Decode(&next); err != nil {
			return nil, h, fmt.Errorf("after %d objects: %w", n, err)
		}
		if bytes.HasPrefix(next, []byte("{")) {
			var end catalogEnd
			if err := json.Unmarshal(next, &end); err != nil {
				return nil, h, fmt.Errorf("end: %w", err)
			}
			if end.Objects != n {
				return nil, h, fmt.Errorf("%d objects, the end says %d", n, end.Objects)
			}
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				return nil, h, errors.New("more after the end")
			}
			return set, h, nil
		}
		var name string
		if err := json.Unmarshal(next, &name); err != nil {
			return nil, h, fmt.Errorf("object %d: not a kind: %w", n, err)
		}
		k, ok := kinds[name]
		if !ok {
			return nil, h, fmt.Errorf("object %d: unknown kind %q", n, name)
		}
		o := tsubame.NewCampaignObject(k)
		if err := dec.Decode(o); err != nil {
			return nil, h, fmt.Errorf("object %d, a %s: %w", n, k, err)
		}
		set.Add(o)
	}
}

// handCatalog starts writing the set this process serves to a new pipe
// and returns the pipe's read end for the successor, or nil when there is
// none to hand (no ads, a store other than the embedded one, whose lock
// is what keeps the successor from reading it itself, or no index yet).
// The writer ends when the successor has read it all or closed it.
func (m *Main) handCatalog() *os.File {
	cfg := m.Config
	if m.ads.engine == nil || cfg.Store.Type != "embedded" {
		return nil
	}
	set, version := m.ads.engine.Set()
	if set == nil {
		return nil
	}
	id, err := storeFileID(cfg.StorePath())
	if err != nil {
		m.Logger.Warn("the new process will read the campaigns from the store", "err", err)
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		m.Logger.Warn("the new process will read the campaigns from the store", "err", err)
		return nil
	}
	go func() {
		err := writeCatalog(w, set, version, id)
		w.Close()
		if err != nil && !errors.Is(err, syscall.EPIPE) {
			m.Logger.Warn("cannot hand the campaigns to the new process; it reads them from the store", "err", err)
		}
	}()
	return r
}

// primeFromCatalog reads the catalog the predecessor hands over and
// compiles it, for the first refresh to take if the store is still at it
// (checkPrimed). It returns nil, after saying why, when it cannot.
func primeFromCatalog(f *os.File, cfg *config.Config, log *slog.Logger) *primedCatalog {
	defer f.Close()
	if !cfg.Ads.Enabled || cfg.Store.Type != "embedded" {
		return nil
	}
	start := time.Now()
	if err := f.SetReadDeadline(start.Add(catalogReadTimeout)); err != nil {
		log.Warn("the previous process's campaigns are read without a deadline", "err", err)
	}
	set, h, err := readCatalog(f)
	if err != nil {
		log.Warn("cannot read the previous process's campaigns; reading them from the store", "err", err)
		return nil
	}
	p, err := decision.Prime(set, h.Version)
	if err != nil {
		log.Warn("cannot compile the previous process's campaigns; reading them from the store", "err", err)
		return nil
	}
	log.Info("the previous process's campaigns compiled", "version", h.Version, "line_items", len(set.LineItems), "took", time.Since(start).Round(time.Microsecond))
	return &primedCatalog{primed: p, store: h.Store}
}

// primedCatalog is a primed index and the store file its set was read from.
type primedCatalog struct {
	primed *decision.Primed
	store  fileID
}

// checkPrimed returns the primed index to start the engine with, or nil
// when the store at path is not the file its set was read from.
func (p *primedCatalog) checkPrimed(path string, log *slog.Logger) *decision.Primed {
	if p == nil {
		return nil
	}
	id, err := storeFileID(path)
	if err == nil && id != p.store {
		err = errors.New("another file than the previous process's")
	}
	if err != nil {
		log.Info("the previous process's campaigns are not of this store: reading the store", "path", path, "err", err)
		return nil
	}
	return p.primed
}
