package server_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/cache"
	"tsubame/internal/render"
	"tsubame/internal/server"
	"tsubame/internal/store/memory"
)

func TestTemplateGolden(t *testing.T) {
	text, err := os.ReadFile("testdata/templates/inject.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := render.CompileTemplate("inject", string(text))
	if err != nil {
		t.Fatal(err)
	}
	failing, err := render.CompileTemplate("failing", `{{if eq (len .URLs) 3}}{{index .URLs 5}}{{end}}ok`)
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New()
	if err := store.PutMany(context.Background(), []*tsubame.Placement{
		{ID: "1", Name: "Top", URLs: []string{"http://ad1.example.com/tag.js", "http://ad2.example.com/tag.js"}},
		{ID: "evil", Name: "</script><script>alert(1)</script>", URLs: []string{"http://a.example.com/?'+alert(1)+'&x=</script>"}},
		{ID: "three", URLs: []string{"http://a.example.com/1", "http://a.example.com/2", "http://a.example.com/3"}},
	}); err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(store, cache.Options{Encoders: render.Encoders(render.EncoderOptions{}, []render.Format{render.FormatJSONP})})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, addr := startWith(t, server.Options{MaxConns: 100, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		server.Endpoint{Name: "tags", Source: server.Cached{Cache: c}, Template: tmpl},
		server.Endpoint{Name: "direct", Source: server.Direct{Store: store, Encoders: render.Encoders(render.EncoderOptions{}, render.Formats())}, Template: tmpl},
		server.Endpoint{Name: "fixed", Source: server.FixedURLs([]string{"http://f.example.com/x.js"}, render.Encoders(render.EncoderOptions{}, render.Formats())), Template: tmpl},
		server.Endpoint{Name: "failing", Source: server.Cached{Cache: c}, Template: failing},
	)
	base := "http://" + addr
	for _, tc := range []struct{ name, path string }{
		{"found", "/api/tags.js?id=1"},
		{"found_callback", "/api/tags.js?id=1&callback=Example.process"},
		{"escaping", "/api/tags.js?id=evil&callback=cb"},
		{"not_found", "/api/tags.js?id=nope"},
		{"direct", "/api/direct.js?id=1"},
		{"fixed", "/api/fixed.js?id=42"},
		{"json_unaffected", "/api/tags.json?id=1"},
		{"bad_callback", "/api/tags.js?id=1&callback=alert(1)"},
		{"render_error", "/api/failing.js?id=three"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := roundTrip(t, "GET", base+tc.path)
			file := filepath.Join("testdata", "templates", tc.name+".golden")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("GET %s\n--- got\n%s\n--- want\n%s", tc.path, got, want)
			}
		})
	}
	// A changed placement renders anew; an unchanged one is served from memory.
	first := roundTrip(t, "GET", base+"/api/tags.js?id=1")
	if err := c.Put(context.Background(), &tsubame.Placement{ID: "1", URLs: []string{"https://changed.example.com/t.js"}}); err != nil {
		t.Fatal(err)
	}
	second := roundTrip(t, "GET", base+"/api/tags.js?id=1")
	if first == second || !strings.Contains(second, "changed.example.com") {
		t.Fatalf("output not re-rendered after the placement changed:\n%s", second)
	}
}

func TestTemplateNeedsPlacementSource(t *testing.T) {
	tmpl, err := render.CompileTemplate("t", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(server.Options{}, []server.Endpoint{{Name: "e", Source: server.Fixed("{}"), Template: tmpl}}); err == nil {
		t.Fatal("a template over a source without placements was accepted")
	}
}
