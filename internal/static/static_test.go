package static_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tsubame/internal/static"
)

func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func open(t *testing.T, opt static.Options) *static.Server {
	t.Helper()
	s, err := static.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestSplit(t *testing.T) {
	good := map[string]string{
		"a.js":                   "[a.js]",
		"js/a.js~js/b.js~v3.js":  "[js/a.js js/b.js]",
		"a.css~b.css~2026-1.css": "[a.css b.css]",
	}
	for in, want := range good {
		files, _, err := static.Split(in, 16)
		if err != nil || fmt.Sprint(files) != want {
			t.Errorf("Split(%q) = %v, %v; want %s", in, files, err, want)
		}
	}
	bad := []string{"", "a", "../a.js", "js/../../a.js", "/etc/passwd.js", ".hidden.js", "js/.git/x.js", "a.js~b.css~v1.css",
		"a.js~b.js~v 1.js", "a\\b.js", "c:/x.js", "a.js~b.js~.js", "a//b.js", strings.Repeat("a.js~", 17) + "v.js"}
	for _, in := range bad {
		if files, _, err := static.Split(in, 16); err == nil {
			t.Errorf("Split(%q) accepted: %v", in, files)
		}
	}
}

func TestCombineAndCompress(t *testing.T) {
	a := strings.Repeat("var a = 1;\n", 100)
	b := strings.Repeat("var b = 2;", 100) // no final newline
	c := "var c = 3;\n"
	s := open(t, static.Options{Root: tree(t, map[string]string{"js/a.js": a, "js/b.js": b, "js/c.js": c})})
	asset, err := s.Get("js/a.js~js/b.js~js/c.js~v1.js")
	if err != nil {
		t.Fatal(err)
	}
	want := a + b + "\n" + c
	if string(asset.Body) != want || asset.ContentType != "application/javascript; charset=utf-8" {
		t.Fatalf("body %d bytes (want %d), type %q", len(asset.Body), len(want), asset.ContentType)
	}
	gz, err := fasthttp.AppendGunzipBytes(nil, asset.Gzip)
	if err != nil || string(gz) != want {
		t.Fatalf("gzip does not decode to the combined bytes: %v", err)
	}
	br, err := fasthttp.AppendUnbrotliBytes(nil, asset.Brotli)
	if err != nil || string(br) != want {
		t.Fatalf("brotli does not decode to the combined bytes: %v", err)
	}
	if len(asset.Gzip) >= len(want) || len(asset.Brotli) >= len(want) {
		t.Fatal("compressed forms are not smaller")
	}
	again, _ := s.Get("js/a.js~js/b.js~js/c.js~v2.js")
	if again != asset {
		t.Fatal("a new version string did not hit the cached combination")
	}
}

func TestRefusesWhatIsNotARegularFileUnderTheRoot(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.js"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := tree(t, map[string]string{"ok.js": "ok", "dir/x.js": "x"})
	if err := os.Symlink(filepath.Join(outside, "secret.js"), filepath.Join(root, "link.js")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "d.js"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := open(t, static.Options{Root: root})
	for _, p := range []string{"link.js", "out/secret.js", "d.js", "missing.js", "ok.js~link.js~v1.js", "../" + filepath.Base(outside) + "/secret.js"} {
		if a, err := s.Get(p); !errors.Is(err, static.ErrNotFound) {
			t.Errorf("Get(%q) = %v, %v; want ErrNotFound", p, a != nil, err)
		}
	}
	if _, err := s.Get("ok.js"); err != nil {
		t.Fatal(err)
	}
}

func TestPicksUpChangedFiles(t *testing.T) {
	root := tree(t, map[string]string{"a.css": "a{}"})
	s := open(t, static.Options{Root: root, CheckEvery: 10 * time.Millisecond})
	first, err := s.Get("a.css")
	if err != nil || string(first.Body) != "a{}" {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Second)
	if err := os.WriteFile(filepath.Join(root, "a.css"), []byte("a{color:red}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(root, "a.css"), later, later); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	second, err := s.Get("a.css")
	if err != nil || string(second.Body) != "a{color:red}" || !second.ModTime.After(first.ModTime) {
		t.Fatalf("change not picked up: %q %v", second.Body, err)
	}
	if err := os.Remove(filepath.Join(root, "a.css")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := s.Get("a.css"); !errors.Is(err, static.ErrNotFound) {
		t.Fatalf("removed file still served: %v", err)
	}
}

func TestCacheBound(t *testing.T) {
	files := map[string]string{}
	for i := range 200 {
		files[fmt.Sprintf("f%d.js", i)] = string(bytes.Repeat([]byte{'x'}, 10<<10))
	}
	s := open(t, static.Options{Root: tree(t, files), CacheBytes: 256 << 10})
	for i := range 200 {
		if _, err := s.Get(fmt.Sprintf("f%d.js", i)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, b := s.Stats(); b <= 256<<10 {
			break
		}
		if time.Now().After(deadline) {
			_, b := s.Stats()
			t.Fatalf("cache holds %d bytes over a 256 KiB bound", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := static.New(static.Options{Root: filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Fatal("a missing root was accepted")
	}
	if _, err := s.Get(strings.Repeat("f1.js~", 3) + "v.js"); err != nil {
		t.Fatal(err)
	}
	big := open(t, static.Options{Root: tree(t, map[string]string{"a.js": strings.Repeat("a", 100), "b.js": "b"}), MaxBytes: 50})
	if _, err := big.Get("a.js"); !errors.Is(err, static.ErrTooLarge) {
		t.Fatalf("over MaxBytes: %v", err)
	}
}

// A cached asset is served without allocating (the request path reuses the
// URL's bytes as the cache key).
func TestHitDoesNotAllocate(t *testing.T) {
	s := open(t, static.Options{Root: tree(t, map[string]string{"a.js": "a", "b.js": "b"}), CheckEvery: time.Hour})
	if _, err := s.Get("a.js~b.js~v1.js"); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := s.Get("a.js~b.js~v2.js"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per cached Get", allocs)
	}
	if _, err := s.Get("a.js~b.js~bad version.js"); !errors.Is(err, static.ErrNotFound) {
		t.Fatalf("a bad version on a cached key: %v", err)
	}
	if _, err := s.Get("a.js~b.js~v1.css"); !errors.Is(err, static.ErrNotFound) {
		t.Fatalf("another extension on a cached key: %v", err)
	}
}
