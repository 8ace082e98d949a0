package campaigngen_test

import (
	"encoding/json"
	"testing"
	"time"

	"tsubame/internal/campaigngen"
)

var now = time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)

// TestSetIsValidAndRepeatable checks that a generated set passes the
// model's validation, has the size asked, and is the same for a seed.
func TestSetIsValidAndRepeatable(t *testing.T) {
	size := campaigngen.Size{LineItems: 20_000}
	set := campaigngen.Set(1, size, now)
	if err := set.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(set.LineItems) != 20_000 || len(set.Campaigns) != 1000 || len(set.Advertisers) != 40 || len(set.Creatives) != 120 {
		t.Fatalf("%d line items, %d campaigns, %d advertisers, %d creatives", len(set.LineItems), len(set.Campaigns),
			len(set.Advertisers), len(set.Creatives))
	}
	a, _ := json.Marshal(set)
	b, _ := json.Marshal(campaigngen.Set(1, size, now))
	c, _ := json.Marshal(campaigngen.Set(2, size, now))
	if string(a) != string(b) {
		t.Fatal("two sets of one seed differ")
	}
	if string(a) == string(c) {
		t.Fatal("two seeds made one set")
	}
	reqs := campaigngen.Requests(1, size, 100, now)
	again := campaigngen.Requests(1, size, 100, now)
	x, _ := json.Marshal(reqs)
	y, _ := json.Marshal(again)
	if len(reqs) != 100 || string(x) != string(y) {
		t.Fatal("requests of one seed differ")
	}
}
