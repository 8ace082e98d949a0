package config_test

import (
	"strings"
	"testing"
)

// An exchange's bill_on is one of the bidder's: burl, nurl, markup, or
// unset (burl); anything else is reported with its key.
func TestRTBBillOn(t *testing.T) {
	for _, tc := range []struct {
		billOn string
		ok     bool
	}{{"", true}, {"burl", true}, {"nurl", true}, {"markup", true}, {"lurl", false}, {"NURL", false}} {
		line := ""
		if tc.billOn != "" {
			line = "\n      bill_on: " + tc.billOn
		}
		cfg := load(t, `
ads:
  enabled: true
  tracking:
    url: https://ads.example.com
rtb:
  exchanges:
    ssp:
      seat: Agency1`+line+"\n")
		var problems []string
		for _, err := range cfg.Validate() {
			problems = append(problems, err.Error())
		}
		found := strings.Contains(strings.Join(problems, "\n"), "rtb.exchanges.ssp.bill_on")
		if found == tc.ok || tc.ok && len(problems) != 0 {
			t.Errorf("bill_on %q: %q", tc.billOn, problems)
		}
	}
}
