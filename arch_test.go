package tsubame_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The layering the packages' doc comments state: the domain at the root
// imports no package of ours; adapters never import the wiring (cmd,
// config) or each other's listeners; the stores know only the domain.
// A rule names a package (or a prefix ending in "/") and the packages of
// ours it must not import (but those layeringAllowed lets it).
var layering = []struct {
	pkg       string
	forbidden []string
}{
	{"tsubame", []string{"tsubame/"}},
	{"tsubame/internal/render", []string{"tsubame/internal/"}},
	{"tsubame/internal/health", []string{"tsubame", "tsubame/"}},
	{"tsubame/internal/framing", []string{"tsubame", "tsubame/"}},
	{"tsubame/internal/deadline", []string{"tsubame", "tsubame/"}},
	{"tsubame/internal/store/", []string{"tsubame/internal/cache", "tsubame/internal/server", "tsubame/internal/admin",
		"tsubame/internal/config", "tsubame/internal/render", "tsubame/internal/accesslog", "tsubame/internal/webhook"}},
	{"tsubame/internal/cache", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/"}},
	{"tsubame/internal/server", []string{"tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/internal/metrics"}},
	{"tsubame/internal/admin", []string{"tsubame/internal/server", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/internal/cache"}},
	{"tsubame/internal/h2call", []string{"tsubame/internal/webhook", "tsubame/internal/server", "tsubame/internal/admin",
		"tsubame/internal/config", "tsubame/internal/store/", "tsubame/internal/render", "tsubame/internal/cache"}},
	{"tsubame/internal/webhook", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/"}},
	{"tsubame/internal/accesslog", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/"}},
	{"tsubame/internal/logship", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/"}},
	{"tsubame/internal/decision", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/cmd/"}},
	{"tsubame/internal/budget", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/cmd/"}},
	{"tsubame/internal/track", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/cmd/"}},
	{"tsubame/internal/geo", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/cmd/"}},
	{"tsubame/internal/device", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/cmd/"}},
	{"tsubame/internal/openrtb", []string{"tsubame/internal/"}},
	{"tsubame/internal/campaigngen", []string{"tsubame/internal/"}},
	{"tsubame/internal/privacy", []string{"tsubame", "tsubame/"}},
	{"tsubame/internal/bidder", []string{"tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/internal/cache",
		"tsubame/internal/ads", "tsubame/cmd/"}},
	{"tsubame/internal/report", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/",
		"tsubame/internal/cache", "tsubame/internal/ads", "tsubame/internal/bidder", "tsubame/cmd/"}},
	{"tsubame/internal/units", []string{"tsubame", "tsubame/"}},
	{"tsubame/internal/ssp", []string{"tsubame/internal/server", "tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/",
		"tsubame/internal/cache", "tsubame/internal/ads", "tsubame/internal/bidder", "tsubame/cmd/"}},
	{"tsubame/internal/asset", []string{"tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/internal/cache",
		"tsubame/internal/ads", "tsubame/cmd/"}},
	{"tsubame/internal/ads", []string{"tsubame/internal/admin", "tsubame/internal/config", "tsubame/internal/store/", "tsubame/internal/cache", "tsubame/cmd/"}},
	{"tsubame/internal/", []string{"tsubame/cmd/", "tsubame/bench", "tsubame/tools/"}},
}

// layeringAllowed are the exceptions to a rule's forbidden packages, by
// the rule's package: the OpenRTB encoders escape strings as the rest of
// the server does (render, which imports none of ours).
var layeringAllowed = map[string][]string{
	"tsubame/internal/openrtb": {"tsubame/internal/render"},
}

func TestLayering(t *testing.T) {
	imports := map[string][]string{} // package -> our packages it imports
	for _, root := range []string{".", "internal", "cmd"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if root == "." && path != "." {
					return filepath.SkipDir // the root package alone; internal and cmd are walked next
				}
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			pkg := "tsubame"
			if dir := filepath.Dir(path); dir != "." {
				pkg += "/" + filepath.ToSlash(dir)
			}
			for _, spec := range f.Imports {
				p, _ := strconv.Unquote(spec.Path.Value)
				if p == "tsubame" || strings.HasPrefix(p, "tsubame/") {
					imports[pkg] = append(imports[pkg], p)
				}
			}
			if _, ok := imports[pkg]; !ok {
				imports[pkg] = nil
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(imports) < 20 {
		t.Fatalf("found only %d packages", len(imports))
	}
	matches := func(pattern, pkg string) bool {
		if strings.HasSuffix(pattern, "/") {
			return strings.HasPrefix(pkg, pattern)
		}
		return pkg == pattern
	}
	for _, rule := range layering {
		seen := false
		for pkg, deps := range imports {
			if !matches(rule.pkg, pkg) {
				continue
			}
			seen = true
		dep:
			for _, dep := range deps {
				for _, ok := range layeringAllowed[rule.pkg] {
					if matches(ok, dep) {
						continue dep
					}
				}
				for _, bad := range rule.forbidden {
					if matches(bad, dep) || (strings.HasSuffix(bad, "/") && dep+"/" == bad) {
						t.Errorf("%s imports %s (%s must not import %s)", pkg, dep, rule.pkg, bad)
					}
				}
			}
		}
		if !seen {
			t.Errorf("rule for %s matches no package", rule.pkg)
		}
	}
}
