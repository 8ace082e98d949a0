package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/campaigngen"
	"tsubame/internal/config"
	"tsubame/internal/decision"
)

// TestCatalogRoundTrip: the set a predecessor hands over is read back as
// the same set (every object, in order, the currency and version), and a
// catalog cut anywhere, with more after its end, or naming an unknown kind
// is refused, and so is one of another build's campaign model, so that
// the successor then reads the store.
func TestCatalogRoundTrip(t *testing.T) {
	set := campaigngen.Set(7, campaigngen.Size{LineItems: 300}, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	set.Currency = "JPY"
	set.Creatives[0].Image, set.Creatives[0].HTML = "", "<div class=\"ad\">\n\t<a href=\"https://shop.example/?a=1&b=2\">\u3042</a>\n</div>"
	id := fileID{Dev: 42, Ino: 4711}
	var buf bytes.Buffer
	if err := writeCatalog(&buf, set, 19, id); err != nil {
		t.Fatal(err)
	}
	got, h, err := readCatalog(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != 19 || h.Store != id || h.Currency != "JPY" {
		t.Fatalf("header %+v", h)
	}
	want, _ := json.Marshal(set)
	have, _ := json.Marshal(got)
	if !bytes.Equal(want, have) {
		t.Fatalf("the set read back differs: %d bytes against %d", len(have), len(want))
	}
	if got.Len() != set.Len() || got.Len() < 300 {
		t.Fatalf("%d objects read back of %d", got.Len(), set.Len())
	}

	whole := buf.String()
	for _, cut := range []int{0, 10, len(whole) / 3, len(whole) / 2, strings.LastIndex(whole, `{"objects"`), len(whole) - 3} {
		if _, _, err := readCatalog(strings.NewReader(whole[:cut])); err == nil {
			t.Errorf("a catalog cut at %d of %d bytes was read", cut, len(whole))
		}
	}
	if _, _, err := readCatalog(strings.NewReader(whole + `"line_item"` + "\n")); err == nil {
		t.Error("a catalog with more after its end was read")
	}
	end := strings.LastIndex(whole, `{"objects"`)
	if _, _, err := readCatalog(strings.NewReader(whole[:end] + `{"objects":1}` + "\n")); err == nil {
		t.Error("a catalog whose end counts other objects was read")
	}
	model := strings.Index(whole, modelFingerprint())
	other := map[byte]string{'0': "1"}[whole[model]]
	if other == "" {
		other = "0"
	}
	if _, _, err := readCatalog(strings.NewReader(whole[:model] + other + whole[model+1:])); err == nil {
		t.Error("a catalog of another campaign model was read")
	}
	first := strings.Index(whole, `"advertiser"`)
	if _, _, err := readCatalog(strings.NewReader(whole[:first] + `"publisher"` + whole[first+len(`"advertiser"`):])); err == nil {
		t.Error("a catalog with an unknown kind was read")
	}
}

// TestCheckPrimedTheStoresFile: the primed index is used with the store's
// file it was read from, and not with another file put at its path since.
func TestCheckPrimedTheStoresFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tsubame.db")
	if err := os.WriteFile(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := storeFileID(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := decision.Prime(&tsubame.CampaignSet{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	pc := &primedCatalog{primed: p, store: id}
	if got := pc.checkPrimed(path, slog.New(slog.DiscardHandler)); got != p {
		t.Fatal("the store's own file: the primed index is not used")
	}
	other := path + ".new"
	if err := os.WriteFile(other, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if got := pc.checkPrimed(path, slog.New(slog.DiscardHandler)); got != nil {
		t.Fatal("another file at the store's path: the primed index is used")
	}
	if got := pc.checkPrimed(filepath.Join(t.TempDir(), "none.db"), slog.New(slog.DiscardHandler)); got != nil {
		t.Fatal("no file at the store's path: the primed index is used")
	}
	if got := (*primedCatalog)(nil).checkPrimed(path, slog.New(slog.DiscardHandler)); got != nil {
		t.Fatal("no catalog: a primed index")
	}
}

// TestCatalogFromThePredecessor: the catalog a successor inherits is read
// and compiled, and a predecessor that stops writing it holds the
// successor back only until catalogTimeout: it then reads the store.
func TestCatalogFromThePredecessor(t *testing.T) {
	dir := t.TempDir()
	cfg, _, err := loadConfigWarnings("", []string{"TSUBAME_DATA_DIR=" + dir})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Ads.Enabled || cfg.Store.Type != "embedded" {
		t.Fatalf("defaults: ads %v, store %q", cfg.Ads.Enabled, cfg.Store.Type)
	}
	set := campaigngen.Set(3, campaigngen.Size{LineItems: 50}, time.Now())
	// inherit passes the read end of a new pipe as the successor's catalog,
	// as TSUBAME_INHERIT names it, and returns the write end.
	inherit := func(t *testing.T) (*handover, *os.File) {
		t.Helper()
		// Raw descriptors, each owned by one *os.File only (inherited's, or
		// w): two Files of one descriptor would close it twice, the second
		// time whatever the test process has opened under its number since.
		pipe := func() (r, w int) {
			var fds [2]int
			if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			return fds[0], fds[1]
		}
		catalog, cw := pipe()
		w := os.NewFile(uintptr(cw), "catalog-w")
		t.Cleanup(func() { w.Close() })
		public, ready := pipe()
		release, other := pipe()
		syscall.Close(other)
		h, err := inherited([]string{fmt.Sprintf("%s=public=%d,catalog=%d,ready=%d,release=%d", config.EnvInherit, public, catalog, ready, release)})
		if err != nil || h.catalog == nil {
			t.Fatalf("inherited: %v", err)
		}
		t.Cleanup(func() {
			for _, f := range []*os.File{h.public, h.readyW, h.releaseR} {
				f.Close()
			}
		})
		return h, w
	}

	h, w := inherit(t)
	go func(w *os.File) {
		_ = writeCatalog(w, set, 5, fileID{Dev: 1, Ino: 2})
		w.Close()
	}(w)
	p := primeFromCatalog(h.catalog, cfg, slog.New(slog.DiscardHandler))
	if p == nil || p.primed.Version() != 5 || p.store != (fileID{Dev: 1, Ino: 2}) {
		t.Fatalf("primed %+v from a whole catalog", p)
	}

	defer func(d time.Duration) { catalogTimeout = d }(catalogTimeout)
	catalogTimeout = 300 * time.Millisecond
	h, w = inherit(t)
	whole := new(bytes.Buffer)
	if err := writeCatalog(whole, set, 5, fileID{}); err != nil {
		t.Fatal(err)
	}
	go func(w *os.File) { _, _ = w.Write(whole.Bytes()[:whole.Len()/2]) }(w) // then nothing more, and the pipe stays open
	var logs bytes.Buffer
	done := make(chan *primedCatalog)
	go func() { done <- primeFromCatalog(h.catalog, cfg, slog.New(slog.NewTextHandler(&logs, nil))) }()
	select {
	case p := <-done:
		if p != nil {
			t.Fatal("primed from half a catalog")
		}
		if !strings.Contains(logs.String(), "timeout") {
			t.Fatalf("logged %q, want the read's timeout", logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the read of a catalog that stopped coming has no deadline")
	}
}

// Model types for TestFingerprint: one JSON name three types down differs
// (and so, in Go, do the names of the types that hold it).
type (
	fpSet struct {
		Items []*fpItem `json:"items"`
	}
	fpItem struct {
		ID    string    `json:"id"`
		Rules fpRules   `json:"rules"`
		At    time.Time `json:"at"`
		Next  *fpItem   `json:"next"`
	}
	fpRules struct {
		Sites map[string][]string `json:"sites"`
	}
	fpSet2 struct {
		Items []*fpItem2 `json:"items"`
	}
	fpItem2 struct {
		ID    string    `json:"id"`
		Rules fpRules2  `json:"rules"`
		At    time.Time `json:"at"`
		Next  *fpItem2  `json:"next"`
	}
	fpRules2 struct {
		Sites map[string][]string `json:"domains"`
	}
)

// TestFingerprint: the campaign model's fingerprint changes with a JSON
// name deep inside it, and is stable for the same model.
func TestFingerprint(t *testing.T) {
	a, b := fingerprint(reflect.TypeFor[fpSet]()), fingerprint(reflect.TypeFor[fpSet2]())
	if a == b {
		t.Fatal("a field renamed three types down: the same fingerprint")
	}
	if a != fingerprint(reflect.TypeFor[fpSet]()) || modelFingerprint() != fingerprint(reflect.TypeFor[tsubame.CampaignSet]()) {
		t.Fatal("the fingerprint of one model changes")
	}
}
