package bidder_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/bidder"
	"tsubame/internal/decision"
	"tsubame/internal/openrtb"
	"tsubame/internal/store/memory"
	"tsubame/internal/track"
)

const noticeBase = "https://ads.example.com"

// fixture is a bidder over testdata/campaigns.json on a memory store, one
// exchange "ssp" bidding as seat Agency1, and the event lines it logged.
type fixture struct {
	store  *memory.Store
	bidder *bidder.Bidder
	signer *track.Signer

	mu     sync.Mutex
	events []accesslog.Event
}

func newFixture(t testing.TB, exchanges ...bidder.Exchange) *fixture {
	t.Helper()
	return newFixtureWith(t, nil, exchanges...)
}

// newFixtureWith is newFixture with its bidder's options changed by opt.
func newFixtureWith(t testing.TB, opt func(*bidder.Options), exchanges ...bidder.Exchange) *fixture {
	t.Helper()
	return newFixtureEdited(t, nil, opt, exchanges...)
}

// newFixtureEdited is newFixtureWith on the test campaigns as edit
// changes their JSON.
func newFixtureEdited(t testing.TB, edit func([]byte) []byte, opt func(*bidder.Options), exchanges ...bidder.Exchange) *fixture {
	t.Helper()
	b, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		b = edit(b)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	return newNodeWith(t, st, opt, exchanges...)
}

// newNodeWith is a bidder on st (with the test campaigns in it), its
// options changed by opt: another node of the same store.
func newNodeWith(t testing.TB, st *memory.Store, opt func(*bidder.Options), exchanges ...bidder.Exchange) *fixture {
	t.Helper()
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "USD"})
	if _, err := eng.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	sg, err := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	if err != nil {
		t.Fatal(err)
	}
	rates, err := tsubame.NewRates("USD", map[string]string{"JPY": "150.25", "EUR": "0.92"})
	if err != nil {
		t.Fatal(err)
	}
	if len(exchanges) == 0 {
		exchanges = []bidder.Exchange{ssp()}
	}
	o := bidder.Options{Engine: eng, Signer: sg, Currency: "USD", Rates: rates, NoticeURL: noticeBase,
		TTL: time.Hour, Grace: time.Second, Dedupe: st, AdSystem: "Tsubame"}
	if opt != nil {
		opt(&o)
	}
	bd, err := bidder.New(o, exchanges)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{store: st, bidder: bd, signer: sg}
}

func ssp() bidder.Exchange {
	return bidder.Exchange{Name: "ssp", Seat: "Agency1", PriceEncoding: bidder.PricePlain, Reservation: time.Minute}
}

func (f *fixture) log(e *accesslog.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e.Clone()) // kept past the call: its strings are the request's
	return nil
}

func (f *fixture) bid(t *testing.T, exchange string, body []byte) bidder.Outcome {
	t.Helper()
	return f.bidder.Bid(nil, exchange, body, time.Now(), netip.MustParseAddr("192.0.2.10"), f.log)
}

func example(t *testing.T, name string) []byte { return exampleFile(t, name) }

func exampleFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../openrtb/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// response is a bid response as an exchange reads it.
type response struct {
	ID      string `json:"id"`
	BidID   string `json:"bidid"`
	Cur     string `json:"cur"`
	SeatBid []struct {
		Seat string `json:"seat"`
		Bid  []struct {
			ID       string          `json:"id"`
			ImpID    string          `json:"impid"`
			Price    json.Number     `json:"price"`
			NURL     string          `json:"nurl"`
			BURL     string          `json:"burl"`
			LURL     string          `json:"lurl"`
			AdM      string          `json:"adm"`
			AdID     string          `json:"adid"`
			CrID     string          `json:"crid"`
			CID      string          `json:"cid"`
			ADomain  []string        `json:"adomain"`
			Bundle   string          `json:"bundle"`
			Cat      []string        `json:"cat"`
			W        int             `json:"w"`
			H        int             `json:"h"`
			MType    int             `json:"mtype"`
			DealID   string          `json:"dealid"`
			Protocol int             `json:"protocol"`
			Dur      int             `json:"dur"`
			Rest     json.RawMessage `json:"-"`
		} `json:"bid"`
	} `json:"seatbid"`
}

// decodeResponse decodes a response of one bid.
func decodeResponse(t *testing.T, o bidder.Outcome) response {
	t.Helper()
	r := decodeBids(t, o)
	if len(r.SeatBid[0].Bid) != 1 {
		t.Fatalf("seatbid %s", o.Body)
	}
	return r
}

// decodeBids decodes a response of one seat's bids.
func decodeBids(t *testing.T, o bidder.Outcome) response {
	t.Helper()
	if o.Status != 200 {
		t.Fatalf("status %d (%s), want 200", o.Status, o.Reason)
	}
	var r response
	d := json.NewDecoder(strings.NewReader(string(o.Body)))
	d.UseNumber()
	if err := d.Decode(&r); err != nil {
		t.Fatalf("%v: %s", err, o.Body)
	}
	if len(r.SeatBid) != 1 || len(r.SeatBid[0].Bid) == 0 {
		t.Fatalf("seatbid %s", o.Body)
	}
	return r
}

// verifyNotice checks that u is a notice URL of kind for bid, signed, with
// the clearing price macro (and the loss macro for a loss).
func verifyNotice(t *testing.T, f *fixture, u, path string, kind track.Kind, bidID string) track.Token {
	t.Helper()
	rest, ok := strings.CutPrefix(u, noticeBase+path)
	if !ok {
		t.Fatalf("%s is not under %s%s", u, noticeBase, path)
	}
	tok, query, _ := strings.Cut(rest, "?")
	if !strings.Contains(query, "price=${AUCTION_PRICE}") || kind == track.KindLoss && !strings.Contains(query, "loss=${AUCTION_LOSS}") {
		t.Errorf("%s: query %q lacks the macros", path, query)
	}
	tk, err := f.signer.VerifyKind(tok, kind, time.Now())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if tk.Decision != bidID {
		t.Errorf("%s: token of bid %q, want %q", path, tk.Decision, bidID)
	}
	return tk
}

// The specification's example requests 6.2.1 to 6.2.5, answered field by
// field: a bid where a line item fits (the banner on the site, the banner
// in the app once the blocked advertiser and categories are left out, the
// video in the VAST version its protocols allow), the deal bid of 6.2.5
// for the seat its deal names, and 204 for a seat it does not.
func TestSpecExamples(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		file                    string
		line, creative, price   string
		w, h, mtype, protocol   int
		deal, domain, admPrefix string
		bundle                  string
	}{
		{"example-6.2.1-banner.json", "li-coffee-web", "cr-coffee-300x250", "1.2", 300, 250, 1, 0, "", "sakura-coffee.example", `<a href="https://ads.example.com/t/c/`, ""},
		{"example-6.2.2-expandable.json", "li-coffee-web", "cr-coffee-300x250", "1.2", 300, 250, 1, 0, "", "sakura-coffee.example", `<a href="https://ads.example.com/t/c/`, ""},
		{"example-6.2.3-mobile.json", "li-coffee-app", "cr-coffee-728x90", "0.9", 728, 90, 1, 0, "", "sakura-coffee.example", `<a href="https://sakura-coffee.example/">`, "com.sakura-coffee.order"},
		{"example-6.2.4-video.json", "li-travel-video", "cr-travel-video", "4.5", 640, 480, 2, 3, "", "kaze-travel.example", `<?xml version="1.0" encoding="UTF-8"?>`, ""},
		{"example-6.2.5-pmp.json", "li-coffee-deal", "cr-coffee-300x250", "3", 300, 250, 1, 0, "AB-Agency1-0001", "sakura-coffee.example", `<a href="https://ads.example.com/t/c/`, ""},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body := example(t, tc.file)
			var req struct {
				ID  string `json:"id"`
				Imp []struct {
					ID string `json:"id"`
				} `json:"imp"`
			}
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatal(err)
			}
			o := f.bid(t, "ssp", body)
			r := decodeResponse(t, o)
			b := r.SeatBid[0].Bid[0]
			if r.ID != req.ID || r.BidID == "" || r.Cur != "USD" || r.SeatBid[0].Seat != "Agency1" {
				t.Errorf("response id %q bidid %q cur %q seat %q", r.ID, r.BidID, r.Cur, r.SeatBid[0].Seat)
			}
			if b.ID == "" || b.ImpID != req.Imp[0].ID || b.Price.String() != tc.price || b.AdID != tc.creative || b.CrID != tc.creative ||
				b.W != tc.w || b.H != tc.h || b.MType != tc.mtype || b.DealID != tc.deal || b.Protocol != tc.protocol ||
				b.Bundle != tc.bundle || len(b.ADomain) != 1 || b.ADomain[0] != tc.domain || len(b.Cat) == 0 || !strings.HasPrefix(b.AdM, tc.admPrefix) {
				t.Errorf("bid %+v", b)
			}
			if tc.mtype == 2 && (!strings.Contains(b.AdM, `<VAST version="3.0"`) || b.Dur != 15 || !strings.Contains(b.AdM, noticeBase+bidder.PathBidImp) || strings.Contains(b.AdM, bidder.PathBill)) {
				t.Errorf("video markup: %.300s", b.AdM)
			}
			for _, n := range []struct {
				u, path string
				kind    track.Kind
			}{{b.NURL, bidder.PathWin, track.KindWin}, {b.BURL, bidder.PathBill, track.KindBill}, {b.LURL, bidder.PathLoss, track.KindLoss}} {
				tk := verifyNotice(t, f, n.u, n.path, n.kind, b.ID)
				if tk.Exchange != "ssp" || tk.Auction != req.ID || tk.Imp != req.Imp[0].ID || tk.Deal != tc.deal || tk.Currency != "USD" ||
					tk.LineItem != tc.line || tk.Creative != tc.creative {
					t.Errorf("%s token %+v", n.path, tk)
				}
			}
			e := f.events[len(f.events)-1]
			if e.Kind != accesslog.EventBid || e.ID.String() != "bid:"+b.ID || e.LineItem.String() != tc.line || !e.Valid ||
				e.Currency.String() != "USD" || tsubame.Money(e.Price).String() != tc.price {
				t.Errorf("event %+v", e)
			}
		})
	}
	// 6.2.5 for a seat its deals do not name: a private auction, no open
	// bid: 204.
	g := newFixture(t, bidder.Exchange{Name: "ssp", Seat: "Agency3", PriceEncoding: bidder.PricePlain, Reservation: time.Minute})
	if o := g.bid(t, "ssp", example(t, "example-6.2.5-pmp.json")); o.Status != 204 || o.Body != nil || o.Reason != bidder.NoBidNoMatch {
		t.Errorf("6.2.5 for seat Agency3: %d %q %s", o.Status, o.Reason, o.Body)
	}
}

// What an auction rules out is not bid: a floor above every price, a
// currency without a rate, a tmax the network eats, no line item for the
// place; a malformed request is a 400 with no body.
func TestNoBid(t *testing.T) {
	f := newFixture(t, bidder.Exchange{Name: "ssp", Seat: "Agency1", PriceEncoding: bidder.PricePlain, Reservation: time.Minute,
		Network: 50 * time.Millisecond})
	banner := string(example(t, "example-6.2.1-banner.json"))
	mobile := string(example(t, "example-6.2.3-mobile.json"))
	for _, tc := range []struct {
		name, body, reason string
		status             int
	}{
		{"floor above", strings.Replace(banner, `"bidfloor": 0.03`, `"bidfloor": 1.21`, 1), bidder.NoBidFloor, 204},
		{"floor in yen", strings.Replace(banner, `"bidfloor": 0.03`, `"bidfloor": 181, "bidfloorcur": "JPY"`, 1), bidder.NoBidFloor, 204},
		{"floor in an unknown currency", strings.Replace(banner, `"bidfloor": 0.03`, `"bidfloor": 1, "bidfloorcur": "XXX"`, 1), bidder.NoBidCurrency, 204},
		{"no allowed currency has a rate", strings.Replace(banner, `"USD"`, `"GBP"`, 1), bidder.NoBidCurrency, 204},
		{"tmax under the network", strings.Replace(banner, `"at": 1,`, `"at": 1, "tmax": 40,`, 1), bidder.NoBidTimeout, 204},
		{"another site", strings.Replace(banner, `"domain": "www.foobar.com"`, `"domain": "www.elsewhere.example"`, 1), bidder.NoBidNoMatch, 204},
		{"another size", strings.Replace(banner, `"w": 300`, `"w": 320`, 1), bidder.NoBidNoMatch, 204},
		{"our seat not in wseat", strings.Replace(banner, `"at": 1,`, `"at": 1, "wseat": ["Agency2", "Agency3"],`, 1), bidder.NoBidSeat, 204},
		{"our seat in bseat", strings.Replace(banner, `"at": 1,`, `"at": 1, "bseat": ["Agency1"],`, 1), bidder.NoBidSeat, 204},
		{"not JSON", `<xml/>`, bidder.NoBidMalformed, 400},
		{"no imp", `{"id":"1","imp":[]}`, bidder.NoBidMalformed, 400},
	} {
		o := f.bid(t, "ssp", []byte(tc.body))
		if o.Status != tc.status || o.Reason != tc.reason || o.Body != nil {
			t.Errorf("%s: %d %q %s, want %d %q", tc.name, o.Status, o.Reason, o.Body, tc.status, tc.reason)
		}
	}
	// Yen: the bid in the currency the request allows, converted exactly
	// (1.20 USD at 150.25 is 180.3 JPY), and a floor of 180.3 is cleared.
	o := f.bid(t, "ssp", []byte(strings.NewReplacer(`"USD"`, `"JPY"`, `"bidfloor": 0.03`, `"bidfloor": 180.3, "bidfloorcur": "JPY"`).Replace(banner)))
	if r := decodeResponse(t, o); r.Cur != "JPY" || r.SeatBid[0].Bid[0].Price.String() != "180.3" {
		t.Errorf("in yen: cur %q price %s", r.Cur, r.SeatBid[0].Bid[0].Price)
	}
	// bapp: the coffee app's ad is blocked, the travel ad of the next
	// priority (which promotes no app) is bid instead.
	o = f.bid(t, "ssp", []byte(strings.Replace(mobile, `"badv":`, `"bapp": ["com.other.app", "com.sakura-coffee.order"], "badv":`, 1)))
	if b := decodeResponse(t, o).SeatBid[0].Bid[0]; b.CrID != "cr-travel-728x90" || b.Bundle != "" {
		t.Errorf("6.2.3 with the coffee app blocked: %+v", b)
	}
	if o := f.bid(t, "nope", []byte(banner)); o.Status != 404 {
		t.Errorf("an unknown exchange: %d", o.Status)
	}
	s := f.bidder.Stats()[0]
	if s.Requests != 13 || s.Answered != 2 || s.NoBids[bidder.NoBidFloor] != 2 || s.NoBids[bidder.NoBidMalformed] != 2 {
		t.Errorf("stats %+v", s)
	}
}

// A test request (test=1) is bid on, and its bid's line, notices and the
// click tracker of its markup are marked test: nothing it does is billed
// or counted.
func TestTestRequest(t *testing.T) {
	f := newFixture(t)
	body := strings.Replace(string(example(t, "example-6.2.1-banner.json")), `"at": 1,`, `"at": 1, "test": 1,`, 1)
	b := decodeResponse(t, f.bid(t, "ssp", []byte(body))).SeatBid[0].Bid[0]
	if e := f.events[0]; e.Valid {
		t.Errorf("a test bid's line is valid: %+v", e)
	}
	tk := verifyNotice(t, f, b.BURL, bidder.PathBill, track.KindBill, b.ID)
	if !tk.Test {
		t.Fatal("a test bid's billing token is not marked test")
	}
	click := regexp.MustCompile(`/t/c/([A-Za-z0-9_-]+)`).FindStringSubmatch(b.AdM)
	if click == nil {
		t.Fatalf("no click tracker in the markup %s", b.AdM)
	}
	if ck, err := f.signer.VerifyKind(click[1], track.KindClick, time.Now()); err != nil || !ck.Test {
		t.Errorf("a test bid's click tracker: %+v (%v), not marked test", ck, err)
	}
	u, _ := url.Parse(strings.ReplaceAll(b.BURL, "${AUCTION_PRICE}", "1.1"))
	tok := strings.TrimPrefix(u.Path, bidder.PathBill)
	if _, err := f.bidder.Notice(track.KindBill, tok, []byte("1.1"), nil, nil, time.Now(), f.log); err != nil {
		t.Fatal(err)
	}
	if e := f.events[len(f.events)-1]; e.Kind != accesslog.EventBill || e.Valid {
		t.Errorf("a test auction's bill: %+v", e)
	}
}

// tokenOf is the token of a notice URL, its macros substituted.
func tokenOf(t *testing.T, u, path string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(u, noticeBase+path)
	if !ok {
		t.Fatalf("%s not under %s", u, path)
	}
	tok, _, _ := strings.Cut(rest, "?")
	return tok
}

// A request of many impressions: each bid's notice URLs and markup are
// its own (their text shares a buffer that grows while the bids are made).
func TestManyImps(t *testing.T) {
	f := newFixture(t)
	var imps []string
	for i := range 12 {
		imps = append(imps, fmt.Sprintf(`{"id":"imp-%d","bidfloor":0.03,"banner":{"w":300,"h":250}}`, i))
	}
	body := `{"id":"many","cur":["USD"],"imp":[` + strings.Join(imps, ",") + `],"site":{"domain":"www.foobar.com"}}`
	r := decodeBids(t, f.bid(t, "ssp", []byte(body)))
	bids := r.SeatBid[0].Bid
	if len(bids) != len(imps) {
		t.Fatalf("%d bids for %d impressions", len(bids), len(imps))
	}
	seen := map[string]bool{}
	for i, b := range bids {
		if b.ImpID != fmt.Sprintf("imp-%d", i) || seen[b.ID] {
			t.Fatalf("bid %d: impid %q id %q", i, b.ImpID, b.ID)
		}
		seen[b.ID] = true
		for _, n := range []struct {
			u, path string
			kind    track.Kind
		}{{b.NURL, bidder.PathWin, track.KindWin}, {b.BURL, bidder.PathBill, track.KindBill}, {b.LURL, bidder.PathLoss, track.KindLoss}} {
			if tk := verifyNotice(t, f, n.u, n.path, n.kind, b.ID); tk.Imp != b.ImpID || tk.Auction != "many" {
				t.Errorf("bid %d: %s token of imp %q auction %q", i, n.path, tk.Imp, tk.Auction)
			}
		}
		click, ok := strings.CutPrefix(b.AdM, `<a href="`+noticeBase+"/t/c/")
		if !ok {
			t.Fatalf("bid %d: markup %.80s", i, b.AdM)
		}
		click, _, _ = strings.Cut(click, `"`)
		if tk, err := f.signer.VerifyKind(click, track.KindClick, time.Now()); err != nil || tk.Decision != b.ID {
			t.Errorf("bid %d: click token %+v %v", i, tk, err)
		}
	}
}

// A response's notice URLs are copied without escaping only when they need
// none (openrtb.Bid.Plain): every example's answer is byte for byte what
// encoding/json writes of it, with a notice host that needs escaping too.
//
// The same with the banners' images ending in a query of two parameters
// (plain but its '&') and in bytes both HTML and JSON escape, for the
// markup the bidder writes as JSON itself (openrtb.EscapedAdM).
func TestPlainNoticeURLs(t *testing.T) {
	for _, suffix := range []string{"", "?w=728&h=90", `?q=\"<b>'`} {
		for _, base := range []string{noticeBase, "https://a&b.example", "https://a<b.example"} {
			f := newFixtureEdited(t, func(b []byte) []byte { return bytes.ReplaceAll(b, []byte(`.png"`), []byte(`.png`+suffix+`"`)) },
				func(o *bidder.Options) { o.NoticeURL = base })
			checkPlainNoticeURLs(t, f, base, suffix)
		}
	}
}

func checkPlainNoticeURLs(t *testing.T, f *fixture, base, suffix string) {
	t.Helper()
	var imageSuffix string // the suffix in an HTML attribute, once in a markup
	if err := json.Unmarshal([]byte(`"`+suffix+`"`), &imageSuffix); err != nil {
		t.Fatal(err)
	}
	attr := strings.NewReplacer("&", "&amp;", `"`, "&quot;", "<", "&lt;", ">", "&gt;")
	imageSuffix = attr.Replace(imageSuffix)
	images := 0
	for _, name := range []string{"example-6.2.1-banner.json", "example-6.2.3-mobile.json", "example-6.2.4-video.json", "example-6.2.5-pmp.json"} {
		o := f.bid(t, "ssp", example(t, name))
		if o.Status != 200 {
			t.Fatalf("%s %s %s: %d %s", suffix, base, name, o.Status, o.Reason)
		}
		var r openrtb.BidResponse
		if err := json.Unmarshal(o.Body, &r); err != nil {
			t.Fatalf("%s %s %s: %v\n%s", suffix, base, name, err, o.Body)
		}
		b := &r.SeatBid[0].Bid[0]
		if !strings.HasPrefix(b.NURL, base+"/") || !strings.HasPrefix(b.BURL, base+"/") || !strings.HasPrefix(b.LURL, base+"/") {
			t.Fatalf("%s %s %s: notice URLs %q %q %q", suffix, base, name, b.NURL, b.BURL, b.LURL)
		}
		if strings.Contains(b.AdM, `rel="noopener"><img src="`) { // an image in a link, the bidder's markup
			images++
			if !strings.HasPrefix(b.AdM, `<a href="`+attr.Replace(base)+"/") || !strings.Contains(b.AdM, ".png"+imageSuffix+`"`) {
				t.Errorf("%s %s %s: not the click tracker on the notice host and the image, escaped: %s", suffix, base, name, b.AdM)
			}
		}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(o.Body, want) {
			t.Errorf("%s %s %s:\n got %s\nwant %s", suffix, base, name, o.Body, want)
		}
	}
	if images == 0 {
		t.Errorf("%s %s: no markup of an image in a link", suffix, base)
	}
}
