package yamlpos_test

import (
	"testing"

	"tsubame/internal/yamlpos"
)

func TestPathAt(t *testing.T) {
	campaigns := "advertisers:\n  - id: a\n    name: A\ncampaigns:\n  - id: c0\n    advertiser: a\n  - id: c1\n    advertiser: a\n     budget: {total: \"5\"}\n"
	config := "# the server\nads:\n  currency: USD\nserver:\n  listen: 127.0.0.1:0\n   bad: indent\n"
	flush := "line_items:\n- id: li-1\n  targeting:\n    countries:\n    - JP\n    - KR\n    devices: [phone]\n"
	for _, tc := range []struct {
		name, data string
		line       int
		want       string
	}{
		{"a key indented into the one above, in a list's second item", campaigns, 9, "campaigns[1].advertiser"},
		{"a list's first item", campaigns, 3, "advertisers[0]"},
		{"the top", campaigns, 4, ""},
		{"under a key, after a comment", config, 6, "server.listen"},
		{"a key's first child", config, 3, "ads"},
		{"a list at its key's indent", flush, 3, "line_items[0]"},
		{"inside a nested list", flush, 6, "line_items[0].targeting.countries"},
		{"after a nested list", flush, 7, "line_items[0].targeting"},
	} {
		if got := yamlpos.PathAt([]byte(tc.data), tc.line); got != tc.want {
			t.Errorf("%s: line %d is under %q, want %q", tc.name, tc.line, got, tc.want)
		}
	}
}
