package openrtb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"tsubame/internal/render"
)

func responses() []BidResponse {
	nbr := Int(2)
	full := Bid{ID: "b1", ImpID: "1", Price: 1_250_000, NURL: "https://n.example/t/win/x?price=${AUCTION_PRICE}&vast=3",
		BURL: "https://n.example/t/bill/y?price=${AUCTION_PRICE}", LURL: "https://n.example/t/loss/z?loss=${AUCTION_LOSS}",
		AdM:  `<a href="https://n.example/t/c/q" target="_blank"><img src="https://cdn.example/a.png" alt="" style="border:0"></a>`,
		AdID: "cr-1", ADomain: []string{"a.example", "b.example"}, Bundle: "com.example.game", CID: "camp", CrID: "cr-1", Cat: []string{"IAB1", "IAB2-3"},
		Protocol: 3, DealID: "deal-1", W: 300, H: 250, Dur: 15, MType: 2, Exp: 3600}
	// A bidder's notice URLs, plain (Bid.Plain): written as escaped ones
	// would be.
	plain := full
	plain.NURL, plain.BURL, plain.LURL = "https://n.example/t/win/AQ-_x?price=${AUCTION_PRICE}",
		"https://n.example/t/bill/AQ-_y?price=${AUCTION_PRICE}", "https://n.example/t/loss/AQ-_z?price=${AUCTION_PRICE}&loss=${AUCTION_LOSS}"
	plain.Plain = PlainNURL | PlainBURL | PlainLURL
	noLoss := plain
	noLoss.LURL = ""
	return []BidResponse{
		{},
		{ID: "plain", SeatBid: []SeatBid{{Bid: []Bid{plain, noLoss}}}},
		{ID: "only"},
		{ID: "x", NBR: &nbr},
		{ID: "x", SeatBid: []SeatBid{{}}},
		{ID: "x", SeatBid: []SeatBid{{Bid: []Bid{}}}},
		{ID: "IxexyLDIIk", BidID: "bid-1", Cur: "USD", SeatBid: []SeatBid{{Seat: "Agency1", Bid: []Bid{full, {ID: "b2", ImpID: "2", Price: 1}}}}},
		{ID: "esc\"\\\n\t\x01<>&\u2028\u2029é\xff", Cur: "JPY", SeatBid: []SeatBid{{Seat: "s", Bid: []Bid{
			{ID: "b", ImpID: "i", Price: -1_000_001, AdM: "\x7f\u0085 </script>", ADomain: []string{""}, Cat: []string{"\x00"}}}},
			{Seat: "t", Bid: []Bid{{ID: "c", ImpID: "j", Price: 999_999_999_999}}}}},
	}
}

// AppendResponse writes what encoding/json writes, byte for byte: every
// field, empty ones left out as the tags say, strings escaped alike.
func TestAppendResponse(t *testing.T) {
	for i, r := range responses() {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendResponse(nil, &r); !bytes.Equal(got, want) {
			t.Errorf("response %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func FuzzAppendResponse(f *testing.F) {
	f.Add("IxexyLDIIk", "Agency1", "<a href=\"x\">é</a>", "IAB1", int64(1_250_000), int64(300))
	f.Add("\u2028", "", "\xff\xfe", "", int64(-5), int64(0))
	f.Fuzz(func(t *testing.T, id, seat, adm, cat string, price, w int64) {
		r := BidResponse{ID: id, Cur: seat, SeatBid: []SeatBid{{Seat: seat, Bid: []Bid{
			{ID: id, ImpID: seat, Price: Price(price), AdM: adm, Cat: []string{cat, adm}, W: Int(w)}}}}}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendResponse(nil, &r); !bytes.Equal(got, want) {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkAppendResponse writes a bid as the bidder makes one: three
// notice URLs of a 300-byte token each and markup with a fourth, the
// notices' escaped (scanned) or plain (copied).
func BenchmarkAppendResponse(b *testing.B) {
	tok := strings.Repeat("BQY4dXM5bm4DAAAAAGsPbygAAAAAACLKQAAAAABrDiAKGjAx", 7)
	bid := Bid{ID: "01M8QJ7PTBTT0W97X4CNYMS9KX", ImpID: "1", Price: 2_280_000,
		NURL: "http://bidder.example/t/win/" + tok + "?price=${AUCTION_PRICE}",
		BURL: "http://bidder.example/t/bill/" + tok + "?price=${AUCTION_PRICE}",
		LURL: "http://bidder.example/t/loss/" + tok + "?price=${AUCTION_PRICE}&loss=${AUCTION_LOSS}",
		AdM: `<a href="http://bidder.example/t/c/` + tok + `" target="_blank" rel="noopener"><img src="https://cdn.adv4.example/728x90.png"` +
			` width="728" height="90" alt="" style="border:0"></a>`,
		AdID: "cr-adv4-0", ADomain: []string{"adv4.example"}, CID: "camp4", CrID: "cr-adv4-0", Cat: []string{"IAB1"}, W: 728, H: 90, MType: 1}
	for _, plain := range []Plain{0, PlainNURL | PlainBURL | PlainLURL} {
		bid.Plain = plain
		r := BidResponse{ID: "IxexyLDIIk", BidID: "01M8QJ7PTBTTDWK2ZNBFC2XP26", Cur: "USD", SeatBid: []SeatBid{{Seat: "bench-seat", Bid: []Bid{bid}}}}
		b.Run(fmt.Sprintf("plain=%d", plain), func(b *testing.B) {
			buf := AppendResponse(nil, &r)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendResponse(buf[:0], &r)
			}
		})
	}
}

// A markup its maker escaped (EscapedAdM) is written as encoding/json
// writes the markup itself; an empty one is left out.
func TestEscapedAdM(t *testing.T) {
	for _, html := range []string{
		`<a href="https://n.example/t/c/AQ-_x" target="_blank" rel="noopener"><img src="https://cdn.example/a.png?a=1&amp;b=2" width="300" height="250"></a>`,
		"esc\"\\\n\t\x01<>&\u2028\u2029é\x7f\u0085 </script>",
		"",
	} {
		bid := Bid{ID: "b", ImpID: "1", Price: 1, AdM: html, W: 300, H: 250}
		want, err := json.Marshal(&BidResponse{ID: "r", SeatBid: []SeatBid{{Bid: []Bid{bid}}}})
		if err != nil {
			t.Fatal(err)
		}
		esc := render.AppendJSONString(nil, html)
		bid.AdM, bid.Plain = string(esc[1:len(esc)-1]), EscapedAdM
		if got := AppendResponse(nil, &BidResponse{ID: "r", SeatBid: []SeatBid{{Bid: []Bid{bid}}}}); !bytes.Equal(got, want) {
			t.Errorf("%q:\n got %s\nwant %s", html, got, want)
		}
	}
}
