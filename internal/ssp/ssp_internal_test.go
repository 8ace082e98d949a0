package ssp

import (
	"testing"
	"time"

	"tsubame/internal/openrtb"
)

// Every macro is substituted, escaped as a query value where it is a
// partner's or a request's id; an unknown one and an unclosed one are left
// as they are.
func TestSubstitute(t *testing.T) {
	opp := &Opportunity{ID: "a b&c", Start: time.UnixMilli(1_700_000_000_123)}
	b := &Bid{Bid: openrtb.Bid{ID: "bid/1", ImpID: "1", AdID: "ad"}, Seat: "s", Cur: "JPY"}
	got := substitute("x?a=${AUCTION_ID}&b=${AUCTION_BID_ID}&i=${AUCTION_IMP_ID}&s=${AUCTION_SEAT_ID}&d=${AUCTION_AD_ID}"+
		"&p=${AUCTION_PRICE}&c=${AUCTION_CURRENCY}&l=${AUCTION_LOSS}&m=${AUCTION_MBR}${AUCTION_MIN_TO_WIN}&t=${AUCTION_IMP_TS}"+
		"&u=${AUCTION_UNKNOWN}&z=${AUCTION_", opp, b, 1_250_000, 102)
	want := "x?a=a+b%26c&b=bid%2F1&i=1&s=s&d=ad&p=1.25&c=JPY&l=102&m=&t=1700000000123&u=${AUCTION_UNKNOWN}&z=${AUCTION_"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := substitute("no macros", opp, b, 0, 0); got != "no macros" {
		t.Fatal(got)
	}
}
