package config_test

import (
	"strings"
	"testing"

	"tsubame/internal/bidder"
)

// An exchange's shading and bid_every_tid: a factor over 0 and at most 1,
// written as a string or a number; a step of at least 0; the bidder gets
// them as configured.
func TestRTBExchangeShading(t *testing.T) {
	exchange := func(keys string) string {
		return "ads: {enabled: true, tracking: {url: https://ads.example.com}}\nrtb:\n  exchanges:\n    ssp: {seat: Agency1" + keys + "}\n"
	}
	for _, tc := range []struct {
		keys, want string // want "" is valid
	}{
		{"", ""},
		{`, shading: "0.85"`, ""},
		{`, shading: 0.85, shading_step: 0.02`, ""},
		{`, shading: "1"`, ""},
		{`, bid_every_tid: true`, ""},
		{`, shading: "0"`, "rtb.exchanges.ssp.shading:"},
		{`, shading: "1.5"`, "rtb.exchanges.ssp.shading:"},
		{`, shading: "85%"`, "rtb.exchanges.ssp.shading:"},
		{`, shading: "0.85", shading_step: "-0.01"`, "rtb.exchanges.ssp.shading_step:"},
	} {
		cfg := load(t, exchange(tc.keys))
		text := ""
		for _, e := range cfg.Validate() {
			text += e.Error() + "\n"
		}
		if tc.want == "" && text != "" || tc.want != "" && !strings.Contains(text, tc.want) {
			t.Errorf("%s: Validate says %q, want %q", tc.keys, text, tc.want)
		}
	}
	cfg := load(t, exchange(`, shading: 0.85, shading_step: 0.02, bid_every_tid: true`))
	e := cfg.RTB.Exchanges["ssp"]
	if s, err := bidder.ParseShading(e.Shading, e.ShadingStep); err != nil || s.Factor != 850_000 || s.Step != 20_000 || !e.BidEveryTID {
		t.Fatalf("read as %+v (%v), bid_every_tid %v", s, err, e.BidEveryTID)
	}
}
