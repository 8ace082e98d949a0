package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"sync"
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
// catalog cut short is refused, and so is one written by a build whose
// campaign model differs (modelFingerprint): an older predecessor would
// have dropped the fields it does not know.
//
// Both processes hold a set and its index while the successor starts:
// server.handover_campaigns turns the hand-over off where memory is too
// tight for two.

// catalogHeader opens a catalog.
type catalogHeader struct {
	Version  uint64 `json:"version"`
	Currency string `json:"currency,omitempty"`
	Store    fileID `json:"store"`
	Model    string `json:"model"`
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

// catalogTimeout bounds the successor's read and compile of the catalog
// (seconds at a million line items), so that it is ready well inside the
// minute its predecessor waits for it; past it, the successor reads the
// store once it has it. A variable for a test.
var catalogTimeout = 30 * time.Second

// modelFingerprint names the campaign model of this build: each field's
// JSON name and Go type, through every type a CampaignSet holds. Two
// builds that encode and decode a set alike have the same.
var modelFingerprint = sync.OnceValue(func() string { return fingerprint(reflect.TypeFor[tsubame.CampaignSet]()) })

// fingerprint hashes the fields of root and of every type of root's
// package it holds: their names, JSON names and types.
func fingerprint(root reflect.Type) string {
	h := sha256.New()
	own := root.PkgPath()
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		fmt.Fprintf(h, "%s:%s;", t.PkgPath(), t.String())
		switch t.Kind() {
		case reflect.Map:
			walk(t.Key())
			walk(t.Elem())
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(t.Elem())
		case reflect.Struct:
			if seen[t] || t.PkgPath() != own {
				return // once; another package's (time.Time) by its name
			}
			seen[t] = true
			for i := range t.NumField() {
				f := t.Field(i)
				fmt.Fprintf(h, "{%s %q ", f.Name, f.Tag.Get("json"))
				walk(f.Type)
				h.Write([]byte("}"))
			}
		}
	}
	walk(root)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// writeCatalog writes set, the store's at version, to w.
func writeCatalog(w io.Writer, set *tsubame.CampaignSet, version uint64, store fileID) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(catalogHeader{Version: version, Currency: set.Currency, Store: store, Model: modelFingerprint()}); err != nil {
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
	if h.Model != modelFingerprint() {
		return nil, h, errors.New("written by a build whose campaign model differs")
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
// is what keeps the successor from reading it itself, no index yet, or
// server.handover_campaigns off). The store is the file this process
// opened (storeFile), whatever a reload has made of the configuration
// since. The writer ends when the successor has read it all or closed it.
func (m *Main) handCatalog() *os.File {
	if m.ads.engine == nil || m.run.storeFile == nil || !m.Config.Server.HandoverCampaigns {
		return nil
	}
	set, version := m.ads.engine.Set()
	if set == nil {
		return nil
	}
	id := *m.run.storeFile
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
	if !cfg.Ads.Enabled || cfg.Store.Type != "embedded" || !cfg.Server.HandoverCampaigns {
		return nil
	}
	start := time.Now()
	deadline := start.Add(catalogTimeout)
	if err := f.SetReadDeadline(deadline); err != nil {
		log.Warn("the previous process's campaigns are read without a deadline", "err", err)
	}
	set, h, err := readCatalog(f)
	if err != nil {
		log.Warn("cannot read the previous process's campaigns; reading them from the store", "err", err)
		return nil
	}
	type compiled struct {
		p   *decision.Primed
		err error
	}
	done := make(chan compiled, 1) // the compile cannot be stopped: past the deadline, it ends unread
	go func() {
		p, err := decision.Prime(set, h.Version)
		done <- compiled{p, err}
	}()
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case c := <-done:
		if c.err != nil {
			log.Warn("cannot compile the previous process's campaigns; reading them from the store", "err", c.err)
			return nil
		}
		log.Info("the previous process's campaigns compiled", "version", h.Version, "line_items", len(set.LineItems), "took", time.Since(start).Round(time.Microsecond))
		return &primedCatalog{primed: c.p, store: h.Store}
	case <-wait.C:
		log.Warn("the previous process's campaigns took too long to compile; reading them from the store", "timeout", catalogTimeout)
		return nil
	}
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
