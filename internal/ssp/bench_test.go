package ssp_test

import (
	"context"
	"fmt"
	"testing"

	"tsubame/internal/ssp"
)

// BenchmarkRun holds an auction of four partners on loopback that answer
// at once, each a bid: the auction's own cost (request encoding, the
// calls, decoding, validation, ranking), the partners' included.
func BenchmarkRun(b *testing.B) {
	t := &testing.T{}
	partners := map[string]ssp.Partner{}
	for i := range 4 {
		p := newPartner(t, bid(fmt.Sprintf("1.%d0", i), ""))
		b.Cleanup(p.srv.Close)
		partners[fmt.Sprint("p", i)] = on(p.srv.URL)
	}
	a := auctioneer(t, config(partners), nil)
	b.Cleanup(func() { a.Close(context.Background()) })
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		res := a.Run(context.Background(), opp(fmt.Sprint("b", i)), ssp.Direct{})
		if res.Sold == nil {
			b.Fatal("no sale")
		}
	}
}
