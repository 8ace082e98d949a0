// Package static serves a site's static assets the Zotonic way: several
// files of one type combined in one URL, /lib/a.js~b.js~v3.js, the combined
// bytes and their gzip and brotli forms cached in memory (bounded by
// bytes), with far-future cache headers and If-Modified-Since. Files changed
// on disk are picked up without a restart: each cached asset re-reads its
// files' modification times at most once per CheckEvery.
//
// Only regular files under the root can be read: paths are opened through
// os.Root, which refuses "..", absolute paths and symbolic links that lead
// out of the root.
package static

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/valyala/fasthttp"
)

// Options configure a Server; zero values take Defaults'.
type Options struct {
	Root       string        // directory the asset paths are relative to
	CacheBytes uint64        // bound on the cached assets
	MaxFiles   int           // most files combined in one URL
	MaxBytes   int64         // largest combined asset
	CheckEvery time.Duration // how often a cached asset re-checks its files
}

// Defaults are the values zero options take. The configuration's defaults
// (static: in defaults.yaml) are checked against them.
var Defaults = Options{CacheBytes: 64 << 20, MaxFiles: 16, MaxBytes: 8 << 20, CheckEvery: time.Second}

func (o *Options) setDefaults() {
	d := Defaults
	if o.CacheBytes == 0 {
		o.CacheBytes = d.CacheBytes
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = d.MaxFiles
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = d.MaxBytes
	}
	if o.CheckEvery <= 0 {
		o.CheckEvery = d.CheckEvery
	}
}

// Asset is a combined, ready-to-send file. It is shared and must not be modified.
type Asset struct {
	Body        []byte
	Gzip        []byte // nil when compression does not pay
	Brotli      []byte
	ContentType string
	ModTime     time.Time // the newest of the files, to the second
	// ETag, ETagGzip and ETagBrotli are strong entity tags (quotes
	// included) of the three representations: one per content coding, as
	// RFC 9110 §8.8.3 wants of a strong validator.
	ETag, ETagGzip, ETagBrotli []byte

	files     []stamp
	checkedAt atomic.Int64 // unix nanoseconds of the last check of the files
}

type stamp struct {
	name string
	mod  time.Time
	size int64
}

// Errors of Get. ErrNotFound covers every path that must not be served
// (missing, outside the root, not a regular file, malformed), so a client
// cannot tell them apart.
var (
	ErrNotFound = errors.New("no such asset")
	ErrTooLarge = errors.New("combined asset too large")
)

// Server looks up assets under one root. It is safe for concurrent use.
type Server struct {
	opt   Options
	root  *os.Root
	cache *otter.Cache[string, *Asset]
}

// New opens root.
func New(opt Options) (*Server, error) {
	opt.setDefaults()
	root, err := os.OpenRoot(opt.Root)
	if err != nil {
		return nil, err
	}
	c, err := otter.New(&otter.Options[string, *Asset]{
		MaximumWeight: opt.CacheBytes,
		Weigher: func(k string, a *Asset) uint32 {
			return uint32(min(len(k)+len(a.Body)+len(a.Gzip)+len(a.Brotli)+256, 1<<31))
		},
	})
	if err != nil {
		root.Close()
		return nil, err
	}
	return &Server{opt: opt, root: root, cache: c}, nil
}

// Close releases the root.
func (s *Server) Close() error {
	s.cache.StopAllGoroutines()
	return s.root.Close()
}

// Stats reports the cache's size.
func (s *Server) Stats() (entries int, bytes uint64) {
	return s.cache.EstimatedSize(), s.cache.WeightedSize()
}

// Split parses the part of a URL after /lib/: "a.js" is one file;
// "a.js~b.js~v3.js" combines a.js and b.js, the last element being a
// version (ignored, for cache busting) with the common extension.
func Split(rest string, maxFiles int) ([]string, string, error) {
	parts := strings.Split(rest, "~")
	if len(parts) > 1 {
		last := parts[len(parts)-1]
		parts = parts[:len(parts)-1]
		if !validVersion(last) {
			return nil, "", ErrNotFound
		}
	}
	if len(parts) > maxFiles {
		return nil, "", ErrNotFound
	}
	ext := path.Ext(parts[0])
	for _, p := range parts {
		if !validPath(p) || path.Ext(p) != ext {
			return nil, "", ErrNotFound
		}
	}
	if ext == "" {
		return nil, "", ErrNotFound
	}
	return parts, ext, nil
}

func validVersion(v string) bool {
	dot := strings.LastIndexByte(v, '.')
	if dot <= 0 {
		return false
	}
	for _, c := range v[:dot] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// validPath refuses what os.Root would refuse anyway, and some it would
// allow: empty or dot segments, backslashes and control characters.
func validPath(p string) bool {
	if p == "" || len(p) > 512 || strings.HasPrefix(p, "/") {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".") {
			return false
		}
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\' || p[i] == ':' {
			return false
		}
	}
	return true
}

// Get returns the asset for the part of the URL after /lib/. rest is only
// read during the call. A cached asset costs no allocation: the cache key is
// rest without its version, and a key is only ever stored once validated.
func (s *Server) Get(rest string) (*Asset, error) {
	key := rest
	if i := strings.LastIndexByte(rest, '~'); i >= 0 {
		key = rest[:i]
	}
	if a, ok := s.cache.GetIfPresent(key); ok && s.fresh(a) {
		if key == rest || validVersion(rest[len(key)+1:]) && path.Ext(rest) == path.Ext(key) {
			return a, nil
		}
		return nil, ErrNotFound
	}
	rest = strings.Clone(rest) // kept in the asset's file names
	files, ext, err := Split(rest, s.opt.MaxFiles)
	if err != nil {
		return nil, err
	}
	key = strings.Join(files, "~")
	a, err := s.build(files, ext)
	if err != nil {
		s.cache.Invalidate(key)
		return nil, err
	}
	s.cache.Set(key, a)
	return a, nil
}

// fresh re-reads the files' stamps at most once per CheckEvery.
func (s *Server) fresh(a *Asset) bool {
	now, last := time.Now().UnixNano(), a.checkedAt.Load()
	if now-last < int64(s.opt.CheckEvery) || !a.checkedAt.CompareAndSwap(last, now) {
		return true // checked lately, or another request is checking now
	}
	for _, f := range a.files {
		st, err := s.root.Stat(f.name)
		if err != nil || !st.Mode().IsRegular() || !st.ModTime().Equal(f.mod) || st.Size() != f.size {
			return false
		}
	}
	return true
}

func (s *Server) build(files []string, ext string) (*Asset, error) {
	a := &Asset{ContentType: contentType(ext)}
	a.checkedAt.Store(time.Now().UnixNano())
	var body []byte
	for _, name := range files {
		f, err := s.root.Open(name)
		if err != nil {
			return nil, ErrNotFound
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			return nil, ErrNotFound
		}
		if int64(len(body))+st.Size() > s.opt.MaxBytes {
			f.Close()
			return nil, ErrTooLarge
		}
		b := make([]byte, st.Size())
		_, err = io.ReadFull(f, b)
		f.Close()
		if err != nil {
			return nil, ErrNotFound
		}
		if len(body) > 0 && len(b) > 0 && body[len(body)-1] != '\n' {
			body = append(body, '\n') // keep the last line of one file apart from the next
		}
		body = append(body, b...)
		a.files = append(a.files, stamp{name: name, mod: st.ModTime(), size: st.Size()})
		if m := st.ModTime().Truncate(time.Second); m.After(a.ModTime) {
			a.ModTime = m
		}
	}
	a.Body = body
	sum := sha256.Sum256(body)
	tag := hex.EncodeToString(sum[:12])
	a.ETag, a.ETagGzip, a.ETagBrotli = []byte(`"`+tag+`"`), []byte(`"`+tag+`-gz"`), []byte(`"`+tag+`-br"`)
	if compressible(a.ContentType) && len(body) > 256 {
		if gz := fasthttp.AppendGzipBytesLevel(nil, body, fasthttp.CompressDefaultCompression); len(gz) < len(body) {
			a.Gzip = gz
		}
		if br := fasthttp.AppendBrotliBytesLevel(nil, body, fasthttp.CompressBrotliDefaultCompression); len(br) < len(body) {
			a.Brotli = br
		}
	}
	return a, nil
}

func contentType(ext string) string {
	switch ext {
	case ".js", ".mjs":
		return "application/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".json", ".map":
		return "application/json; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}

func compressible(ct string) bool {
	return strings.HasPrefix(ct, "text/") || strings.Contains(ct, "javascript") || strings.Contains(ct, "json") ||
		strings.Contains(ct, "xml") || strings.Contains(ct, "svg")
}
