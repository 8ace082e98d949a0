package asset

import (
	"bytes"
	"context"
	"strings"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/maypok86/otter/v2/stats"

	"tsubame"
	"tsubame/internal/server"
)

// Path is the public listener's prefix of the assets: /assets/<sha256>.<ext>.
const Path = "/assets/"

// RouteName counts the assets' requests.
const RouteName = "assets"

// storeTimeout bounds a read of an asset the cache does not hold.
const storeTimeout = 5 * time.Second

// Server serves the assets the store keeps, from a cache bounded by bytes
// (the assets never change: an entry is dropped only for room). It is safe
// for concurrent use.
type Server struct {
	store tsubame.Assets
	cache *otter.Cache[string, *tsubame.Asset]
	stats *stats.Counter
}

// NewServer returns a Server of the assets store keeps, caching up to
// cacheBytes of them (an asset larger than the cache is read from the
// store every time).
func NewServer(store tsubame.Assets, cacheBytes int64) (*Server, error) {
	counter := stats.NewCounter()
	c, err := otter.New(&otter.Options[string, *tsubame.Asset]{
		MaximumWeight: uint64(max(cacheBytes, 1)),
		Weigher: func(k string, a *tsubame.Asset) uint32 {
			return uint32(min(len(k)+len(a.ContentType)+len(a.Data)+128, 1<<31))
		},
		StatsRecorder: counter,
	})
	if err != nil {
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "asset cache: bad options")
	}
	return &Server{store: store, cache: c, stats: counter}, nil
}

// Stats reports the cache's hits and misses.
func (s *Server) Stats() (hits, misses uint64) {
	st := s.stats.Snapshot()
	return st.Hits, st.Misses
}

// Close stops the cache's goroutines.
func (s *Server) Close() { s.cache.StopAllGoroutines() }

// Route is the public route of the assets, GET and HEAD, under the ad
// requests' in-flight bound (a page fetches its ad's file right after the
// decision).
func (s *Server) Route() server.Route {
	return server.Route{Name: RouteName, Path: Path, Handler: server.HandlerFunc(s.serve), Limit: server.LimitAds}
}

var errNotFound = tsubame.Errorf(tsubame.ENOTFOUND, "no such asset")

// serve answers /assets/<sha256>.<ext> with the asset's bytes and the
// type read from them at the upload, for a year (its name is its hash),
// never sniffed again by the browser nor run as a document: a 404 for a
// name the store does not keep or an extension not its type's.
func (s *Server) serve(w server.Response, r server.Request) error {
	name := string(bytes.TrimPrefix(r.Path(), []byte(Path)))
	sum, ext, ok := strings.Cut(name, ".")
	if !ok || !tsubame.ValidAssetSum(sum) {
		return errNotFound
	}
	etag := `"` + sum + `"`
	a, err := s.cache.Get(context.Background(), sum, otter.LoaderFunc[string, *tsubame.Asset](func(ctx context.Context, sum string) (*tsubame.Asset, error) {
		ctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		return s.store.GetAsset(ctx, sum)
	}))
	if err != nil {
		return err
	}
	if t, ok := TypeOf(a.ContentType); !ok || t.Ext != ext {
		return errNotFound
	}
	w.Header("X-Content-Type-Options", "nosniff")
	w.Header("Cache-Control", "public, max-age=31536000, immutable")
	w.Header("ETag", etag)
	// Opened on its own, the file is a sandboxed document that loads
	// nothing; embedded by any page's <img> or <video>, it is only read.
	w.Header("Content-Security-Policy", "default-src 'none'; sandbox")
	w.Header("Cross-Origin-Resource-Policy", "cross-origin")
	if inm := bytes.TrimSpace(r.Header("If-None-Match")); len(inm) > 0 && (string(inm) == "*" || bytes.Contains(inm, []byte(etag))) {
		w.Status(304)
		return nil
	}
	w.BodyShared(a.ContentType, a.Data)
	return nil
}
