package decision_test

import (
	"testing"

	"tsubame"
	"tsubame/internal/decision"
)

func TestTargets(t *testing.T) {
	var f fixture
	f.single("any", 4, 1)
	f.single("jp-phones", 4, 1).Targeting = tsubame.Targeting{Criteria: tsubame.Criteria{Countries: []string{"JP"}, Devices: []string{"mobile"}}}
	f.single("news", 4, 1).Targeting = tsubame.Targeting{Criteria: tsubame.Criteria{Sites: []string{"example.com"}},
		Exclude: &tsubame.Criteria{Sites: []string{"ads.example.com"}}}
	f.single("top-not-us", 4, 1).Targeting = tsubame.Targeting{Criteria: tsubame.Criteria{Placements: []string{"top"}},
		Exclude: &tsubame.Criteria{Countries: []string{"US"}}}
	// What the counts do not tell (the OS) is not held against it.
	f.single("ios", 4, 1).Targeting = tsubame.Targeting{Criteria: tsubame.Criteria{OS: []string{"ios"}}}
	ix := f.compile(t)
	for _, c := range []struct {
		line string
		tr   decision.Traffic
		want bool
	}{
		{"any", decision.Traffic{}, true},
		{"jp-phones", decision.Traffic{Country: "JP", Device: "mobile"}, true},
		{"jp-phones", decision.Traffic{Country: "JP", Device: "desktop"}, false},
		{"jp-phones", decision.Traffic{Country: "US", Device: "mobile"}, false},
		{"jp-phones", decision.Traffic{Device: "mobile"}, false},
		{"news", decision.Traffic{Site: "example.com"}, true},
		{"news", decision.Traffic{Site: "sports.news.example.com"}, true},
		{"news", decision.Traffic{Site: "ads.example.com"}, false},
		{"news", decision.Traffic{Site: "x.ads.example.com"}, false},
		{"news", decision.Traffic{Site: "example.org"}, false},
		{"news", decision.Traffic{Site: "notexample.com"}, false},
		{"news", decision.Traffic{}, false},
		{"top-not-us", decision.Traffic{Placement: "top", Country: "JP"}, true},
		{"top-not-us", decision.Traffic{Placement: "top", Country: "US"}, false},
		{"top-not-us", decision.Traffic{Placement: "side"}, false},
		{"ios", decision.Traffic{Placement: "side", Device: "desktop"}, true},
	} {
		l, ok := ix.LineByID(c.line)
		if !ok {
			t.Fatalf("no line %s", c.line)
		}
		if got := ix.Targets(l, c.tr); got != c.want {
			t.Errorf("%s targets %+v: %v, want %v", c.line, c.tr, got, c.want)
		}
	}
}
