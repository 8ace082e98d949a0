package openrtb_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/openrtb"
)

func decodeResponseFile(t *testing.T, name string) *openrtb.BidResponse {
	t.Helper()
	body, err := os.ReadFile("testdata/responses/" + name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := openrtb.DecodeResponse(body)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// The specification's example responses decode with every field a seller
// reads; iurl, attr and the other fields Bid does not define are skipped.
func TestDecodeResponseSpecExamples(t *testing.T) {
	r := decodeResponseFile(t, "example-6.3.1-win-notice.json")
	want := &openrtb.BidResponse{ID: "1234567890", BidID: "abc1123", Cur: "USD", SeatBid: []openrtb.SeatBid{{Seat: "512", Bid: []openrtb.Bid{{
		ID: "1", ImpID: "102", Price: 9_430_000, NURL: "http://adserver.com/winnotice?impid=102",
		ADomain: []string{"advertiserdomain.com"}, CID: "campaign111", CrID: "creative112"}}}}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("6.3.1:\n got %+v\nwant %+v", r, want)
	}
	r = decodeResponseFile(t, "example-6.3.2-vast-inline.json")
	if b := r.SeatBid[0].Bid[0]; r.ID != "123" || r.Cur != "" || r.SeatBid[0].Seat != "" || b.Price != 3_000_000 ||
		!strings.HasPrefix(b.AdM, `<?xml version="1.0" encoding="utf-8"?>`+"\n<VAST") || !strings.HasSuffix(b.AdM, "</VAST>") {
		t.Errorf("6.3.2: %+v", r)
	}
	r = decodeResponseFile(t, "example-6.3.3-deal-win-notice.json")
	if b := r.SeatBid[0].Bid[0]; b.Price != 5_000_000 || b.DealID != "ABC-1234-6789" || b.AdID != "314" || b.NURL != "http: //adserver.com/winnotice?impid=102" {
		t.Errorf("6.3.3: %+v", b)
	}
	r = decodeResponseFile(t, "example-6.3.4-native-inline.json")
	if b := r.SeatBid[0].Bid[0]; b.Price != 3_000_000 || !strings.HasPrefix(b.AdM, `{"native":{"ver":"1.0"`) {
		t.Errorf("6.3.4: %+v", b)
	}
}

// A buyer's response: prices as strings and past the micro-unit, sizes as
// strings, several seats, no cur, extensions and unknown fields.
func TestDecodeResponseDeviations(t *testing.T) {
	r := decodeResponseFile(t, "real-1-two-seats.json")
	if r.ID != "b8c1f4de-2d6a-4c5e-9a1f-6f3e0d2c7a91" || r.BidID != "dsp-resp-77" || r.Cur != "" || r.NBR != nil || len(r.SeatBid) != 2 {
		t.Fatalf("%+v", r)
	}
	a, b := r.SeatBid[0], r.SeatBid[1]
	if a.Seat != "agency-1" || len(a.Bid) != 2 || b.Seat != "agency-2" || len(b.Bid) != 1 {
		t.Fatalf("seats %+v %+v", a, b)
	}
	b1, b2, b3 := a.Bid[0], a.Bid[1], b.Bid[0]
	if b1.ID != "bid-1" || b1.ImpID != "1" || b1.Price != 1_250_000 || b1.W != 300 || b1.H != 250 || b1.MType != openrtb.MTypeBanner ||
		b1.Exp != 300 || b1.CrID != "cr-300x250-1" || b1.CID != "camp-9" || b1.Cat[0] != "IAB3-1" || b1.ADomain[0] != "brand.example" ||
		b1.BURL != "https://dsp.example/bill?p=${AUCTION_PRICE}" || b1.LURL != "https://dsp.example/loss?r=${AUCTION_LOSS}" ||
		!strings.Contains(b1.AdM, `href="https://click.example/c?x=1&y=2"`) {
		t.Errorf("bid 1: %+v", b1)
	}
	if b2.Price != 420_000 || b2.DealID != "deal-news-q4" || b2.AdID != "314" || b2.NURL == "" || b2.H != 600 {
		t.Errorf("bid 2 (0.4200000001 read down): %+v", b2)
	}
	if b3.Price != 950_000 || b3.ImpID != "1" || b3.CrID != "cr-2" {
		t.Errorf("bid 3: %+v", b3)
	}
	// Each seat's bids are its own: appending to one does not write
	// over the next's.
	_ = append(a.Bid, openrtb.Bid{ID: "appended"})
	if b.Bid[0].ID != "bid-3" {
		t.Error("appending to a seat's bids wrote over another's")
	}
}

// Prices: exact, from numbers or strings, rounded down below the
// micro-unit (where a floor is rounded up).
func TestDecodeResponsePrices(t *testing.T) {
	for _, tc := range []struct {
		price string
		want  openrtb.Price
	}{
		{`1.25`, 1_250_000}, {`"1.25"`, 1_250_000}, {`125e-2`, 1_250_000}, {`"0.03"`, 30_000}, {`0`, 0}, {`-0`, 0},
		{`null`, 0}, {`""`, 0}, {`1.0000009`, 1_000_000}, {`0.0000001`, 0}, {`9223372036854.775807`, 9_223_372_036_854_775_807},
		{`12`, 12_000_000},
	} {
		r, err := openrtb.DecodeResponse([]byte(`{"id":"1","seatbid":[{"bid":[{"id":"b","impid":"1","price":` + tc.price + `}]}]}`))
		if err != nil {
			t.Errorf("price %s: %v", tc.price, err)
			continue
		}
		if got := r.SeatBid[0].Bid[0].Price; got != tc.want {
			t.Errorf("price %s: %d, want %d", tc.price, got, tc.want)
		}
	}
	// A missing price reads 0, for the caller's floor to refuse.
	if r, err := openrtb.DecodeResponse([]byte(`{"id":"1","seatbid":[{"bid":[{"id":"b","impid":"1"}]}]}`)); err != nil || r.SeatBid[0].Bid[0].Price != 0 {
		t.Errorf("no price: %v", err)
	}
}

// A response whose structure is broken is refused whole, with EINVALID;
// one the specification tolerates is read.
func TestDecodeResponseRefuses(t *testing.T) {
	bid := func(fields string) string {
		return `{"id":"r","seatbid":[{"bid":[{"id":"b","impid":"1","price":1` + fields + `}]}]}`
	}
	manyBids := func(seats, perSeat int) string {
		s := make([]string, seats)
		for i := range s {
			s[i] = `{"bid":[` + strings.TrimSuffix(strings.Repeat(`{"id":"b","impid":"1","price":1},`, perSeat), ",") + `]}`
		}
		return `{"id":"r","seatbid":[` + strings.Join(s, ",") + `]}`
	}
	long := strings.Repeat("x", openrtb.MaxIDLength+1)
	for _, tc := range []struct{ name, body, message string }{
		{"not JSON", `id=1`, "not a JSON object"},
		{"array", `[{"id":"r"}]`, "not a JSON object"},
		{"string", `"r"`, "not a JSON object"},
		{"truncated", `{"id":"r","seatbid":[`, "not OpenRTB JSON"},
		{"trailing garbage", `{"id":"r"} {}`, "not OpenRTB JSON"},
		{"no id", `{"seatbid":[{"bid":[{"id":"b","impid":"1","price":1}]}]}`, "no id"},
		{"empty id", `{"id":""}`, "no id"},
		{"long id", `{"id":"` + long + `"}`, "the id is too long"},
		{"id not a string", `{"id":7}`, "not OpenRTB JSON"},
		{"seatbid not a list", `{"id":"r","seatbid":{"bid":[]}}`, "not OpenRTB JSON"},
		{"adomain not a list", bid(`,"adomain":"brand.example"`), "not OpenRTB JSON"},
		{"too many bids in one seat", manyBids(1, openrtb.MaxBids+1), "more bids"},
		{"too many bids in all seats", manyBids(openrtb.MaxBids/2+1, 2), "more bids"},
		{"bid without impid", `{"id":"r","seatbid":[{"bid":[{"id":"b","price":1}]}]}`, "without an impid"},
		{"bid with an empty impid", bid(`,"impid":""`), "without an impid"},
		{"long bid id", bid(`,"id":"` + long + `"`), "id or impid is too long"},
		{"long impid", bid(`,"impid":"` + long + `"`), "id or impid is too long"},
		{"negative price", bid(`,"price":-0.01`), "price"},
		{"price not a number", bid(`,"price":"cheap"`), "price"},
		{"price a boolean", bid(`,"price":true`), "price"},
		{"price past int64", bid(`,"price":1e20`), "price"},
	} {
		r, err := openrtb.DecodeResponse([]byte(tc.body))
		if tsubame.ErrorCode(err) != tsubame.EINVALID || r != nil {
			t.Errorf("%s: %+v, %v; want EINVALID", tc.name, r, err)
			continue
		}
		if !strings.Contains(tsubame.ErrorMessage(err), tc.message) {
			t.Errorf("%s: %q does not say %q", tc.name, tsubame.ErrorMessage(err), tc.message)
		}
	}
	for _, tc := range []struct{ name, body string }{
		{"unknown fields", `{"id":"r","future":[1,{"a":2}],"seatbid":[{"x":1,"bid":[{"id":"b","impid":"1","price":1,"newthing":{"y":null}}]}],"ext":{"z":1}}`},
		{"no bid, with a reason", `{"id":"r","nbr":2}`},
		{"seat without bids", `{"id":"r","seatbid":[{"seat":"s","bid":[]},{"seat":"t"}]}`},
		{"bid without id", `{"id":"r","seatbid":[{"bid":[{"impid":"1","price":1}]}]}`},
		{"as many bids as may be", manyBids(openrtb.MaxBids/2, 2)},
		{"integers as strings or unreadable", bid(`,"w":"300","h":"tall","mtype":"2","exp":null`)},
		{"spaces around", " \r\n\t" + bid("") + "\n"},
		{"nulls", `{"id":"r","seatbid":null,"cur":null,"nbr":null}`},
	} {
		if _, err := openrtb.DecodeResponse([]byte(tc.body)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	r, err := openrtb.DecodeResponse([]byte(`{"id":"r","nbr":"2","cur":"JPY"}`))
	if err != nil || r.NBR == nil || *r.NBR != 2 || r.Cur != "JPY" || r.SeatBid != nil {
		t.Errorf("nbr: %+v %v", r, err)
	}
}

// An empty body is the specification's no-bid: a response without bids,
// not an error.
func TestDecodeResponseEmpty(t *testing.T) {
	for _, body := range []string{``, " \n\t\r "} {
		r, err := openrtb.DecodeResponse([]byte(body))
		if err != nil || r == nil || r.SeatBid != nil || r.ID != "" || r.NBR != nil {
			t.Errorf("%q: %+v, %v", body, r, err)
		}
	}
}

// What AppendResponse writes, DecodeResponse reads back as it was.
func TestDecodeResponseRoundTrip(t *testing.T) {
	nbr := openrtb.Int(1)
	for _, want := range []*openrtb.BidResponse{
		{ID: "r", NBR: &nbr},
		{ID: "IxexyLDIIk", BidID: "bid-1", Cur: "USD", SeatBid: []openrtb.SeatBid{
			{Seat: "Agency1", Bid: []openrtb.Bid{
				{ID: "b1", ImpID: "1", Price: 1_250_001, NURL: "https://n.example/w?p=${AUCTION_PRICE}", BURL: "https://n.example/b", LURL: "https://n.example/l",
					AdM: `<a href="x?a=1&b=2">é</a>`, AdID: "ad", ADomain: []string{"a.example"}, Bundle: "com.example", CID: "c", CrID: "cr",
					Cat: []string{"IAB1"}, Protocol: 3, DealID: "d", W: 300, H: 250, Dur: 15, MType: 2, Exp: 60},
				{ID: "b2", ImpID: "2", Price: 999_999_999_999}}},
			{Seat: "Agency2", Bid: []openrtb.Bid{{ID: "b3", ImpID: "1", Price: 1}}}}},
	} {
		got, err := openrtb.DecodeResponse(openrtb.AppendResponse(nil, want))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("\n got %+v\nwant %+v", got, want)
		}
	}
}

// FuzzDecodeResponse: whatever the body, DecodeResponse returns a
// response that keeps its promises or an error, and never panics; what it
// returns, AppendResponse writes as valid JSON.
func FuzzDecodeResponse(f *testing.F) {
	files, _ := filepath.Glob("testdata/responses/*.json")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"id":"r","seatbid":[{"bid":[{"id":"b","impid":"1","price":"1e-7","w":"3"}]},{"bid":null}],"nbr":"x"}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := openrtb.DecodeResponse(body)
		if err != nil {
			if r != nil {
				t.Fatal("a response returned with an error")
			}
			return
		}
		if len(bytes.TrimSpace(body)) == 0 {
			if r.ID != "" || r.SeatBid != nil {
				t.Fatalf("empty body read as %+v", r)
			}
			return
		}
		if r.ID == "" || len(r.ID) > openrtb.MaxIDLength {
			t.Fatalf("accepted id %q", r.ID)
		}
		n := 0
		for _, s := range r.SeatBid {
			for _, b := range s.Bid {
				if b.ImpID == "" || len(b.ImpID) > openrtb.MaxIDLength || len(b.ID) > openrtb.MaxIDLength || b.Price < 0 {
					t.Fatalf("accepted bid %+v", b)
				}
				n++
			}
		}
		if n > openrtb.MaxBids {
			t.Fatalf("accepted %d bids", n)
		}
		if !json.Valid(openrtb.AppendResponse(nil, r)) {
			t.Fatal("AppendResponse wrote invalid JSON")
		}
	})
}

var responseSink *openrtb.BidResponse

// BenchmarkDecodeResponse decodes each response of testdata/responses.
func BenchmarkDecodeResponse(b *testing.B) {
	files, _ := filepath.Glob("testdata/responses/*.json")
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(f), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				r, err := openrtb.DecodeResponse(body)
				if err != nil {
					b.Fatal(err)
				}
				responseSink = r
			}
		})
	}
}
