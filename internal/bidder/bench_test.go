package bidder_test

import (
	"net/netip"
	"testing"
	"time"

	"tsubame/internal/accesslog"
)

// BenchmarkBid answers each of the specification's examples that bids
// (its markup, notice URLs and event line included; the line is handed
// to a log that drops it): the bidder's work for one request, without
// HTTP.
func BenchmarkBid(b *testing.B) {
	f := newFixture(b)
	ip := netip.MustParseAddr("192.0.2.10")
	drop := func(*accesslog.Event) error { return nil }
	buf := make([]byte, 0, 8192) // as the HTTP handler's pooled buffer
	for _, name := range []string{"example-6.2.1-banner.json", "example-6.2.3-mobile.json", "example-6.2.4-video.json", "example-6.2.5-pmp.json"} {
		body := exampleFile(b, name)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if o := f.bidder.Bid(buf[:0], "ssp", body, time.Now(), ip, drop); o.Status != 200 {
					b.Fatalf("%s: %d %s", name, o.Status, o.Reason)
				}
			}
		})
	}
}
