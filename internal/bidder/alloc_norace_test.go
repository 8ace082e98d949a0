//go:build !race

package bidder_test

import (
	"net/netip"
	"testing"
	"time"

	"tsubame/internal/accesslog"
	"tsubame/internal/bidder"
)

// TestBidAllocations: a bid costs no allocation in steady state: the
// request's text is the pooled openrtb.Decoder's, and the bid's id, URLs
// and markup are views of the pooled work's. (Not under -race, which
// empties sync.Pools at random.)
// The examples' devices have no IP address, and the bidder maps
// addresses to countries.
func TestBidAllocations(t *testing.T) {
	geo := func(a netip.Addr) (string, string) { return "JP", "" }
	f := newFixtureWith(t, func(o *bidder.Options) { o.Geo = geo })
	ip := netip.MustParseAddr("192.0.2.10")
	drop := func(*accesslog.Event) error { return nil }
	buf := make([]byte, 0, 8192)
	for _, name := range []string{"example-6.2.1-banner.json", "example-6.2.3-mobile.json", "example-6.2.4-video.json", "example-6.2.5-pmp.json"} {
		body := exampleFile(t, name)
		bid := func() {
			if o := f.bidder.Bid(buf[:0], "ssp", body, time.Now(), ip, drop); o.Status != 200 {
				t.Fatalf("%s: %d %s", name, o.Status, o.Reason)
			}
		}
		bid()
		if n := testing.AllocsPerRun(200, bid); n > 0 {
			t.Errorf("%s: %v allocations a bid, want none", name, n)
		}
	}
}
