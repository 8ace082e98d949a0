package ssp_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/openrtb"
	"tsubame/internal/privacy"
	"tsubame/internal/privacy/privacytest"
	"tsubame/internal/ssp"
)

// partner is a scripted demand partner on 127.0.0.1: it answers each bid
// request with answer(req), and records the requests and the notices
// (nurl, lurl, burl) it is called on.
type partner struct {
	t      *testing.T
	srv    *httptest.Server
	answer func(req *openrtb.BidRequest) (status int, body []byte)

	mu       sync.Mutex
	requests []*openrtb.BidRequest
	raw      [][]byte
	notices  []string
	noticed  chan string
}

func newPartner(t *testing.T, answer func(*openrtb.BidRequest) (int, []byte)) *partner {
	p := &partner{t: t, answer: answer, noticed: make(chan string, 64)}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *partner) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet { // a notice
		p.mu.Lock()
		p.notices = append(p.notices, r.URL.RequestURI())
		p.mu.Unlock()
		p.noticed <- r.URL.RequestURI()
		if strings.HasPrefix(r.URL.Path, "/markup") {
			_, _ = io.WriteString(w, `<div>markup from nurl</div>`)
		}
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body = zr
	}
	raw, _ := io.ReadAll(body)
	req, err := openrtb.Decode(raw)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	p.mu.Lock()
	p.requests = append(p.requests, req)
	p.raw = append(p.raw, raw)
	p.mu.Unlock()
	status, out := p.answer(req)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

// bid answers with one bid of price (a decimal string) on imp 1.
func bid(price string, extra string) func(*openrtb.BidRequest) (int, []byte) {
	return func(req *openrtb.BidRequest) (int, []byte) {
		return 200, fmt.Appendf(nil, `{"id":%q,"cur":"USD","seatbid":[{"seat":"s1","bid":[{"id":"b-%s","impid":"1","price":%s,
			"adm":"<div>ad %s</div>","adomain":["brand.example"],"w":300,"h":250%s}]}]}`, req.ID, price, price, price, extra)
	}
}

// notices returns what p was called on, waiting until it has n of them.
func (p *partner) waitNotices(n int) []string {
	p.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		p.mu.Lock()
		got := append([]string(nil), p.notices...)
		p.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-p.noticed:
		case <-deadline:
			p.t.Fatalf("%d notices within 20s, want %d: %v", len(got), n, got)
		}
	}
}

func (p *partner) seen() ([]*openrtb.BidRequest, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*openrtb.BidRequest(nil), p.requests...), append([]string(nil), p.notices...)
}

func (p *partner) lastRequest() *openrtb.BidRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.requests) == 0 {
		return nil
	}
	return p.requests[len(p.requests)-1]
}

// config is a configuration selling placement top (300x250, floor 0.50
// USD) to the named partners.
func config(partners map[string]ssp.Partner) ssp.Config {
	c := ssp.Config{
		Seller: ssp.Seller{Domain: "ssp.example", Name: "Example SSP"}, TMax: 2 * time.Second, Margin: 10 * time.Millisecond,
		Auction: ssp.FirstPrice, PriceStep: "0.01", GuaranteedPriority: 2, MaxResponse: 64 << 10,
		Notices:    ssp.Notices{Workers: 2, Queue: 100, Timeout: 5 * time.Second, AllowPrivate: true},
		MarkupTime: 30 * time.Millisecond,
		LogEvery:   time.Second,
		Demand:     partners,
		Publishers: map[string]ssp.Publisher{"news": {SellerID: "pub-1", Name: "News", Domain: "news.example"}},
		Placements: map[string]ssp.Placement{"top": {Publisher: "news", Floor: "0.50", Sizes: []string{"300x250", "336x280"},
			BAdv: []string{"blocked.example"}, BCat: []string{"IAB25"}}},
	}
	return c
}

func auctioneer(t *testing.T, cfg ssp.Config, rates map[string]string) *ssp.Auctioneer {
	t.Helper()
	r, err := tsubame.NewRates("USD", rates)
	if err != nil {
		t.Fatal(err)
	}
	if errs := cfg.Validate(ssp.Env{Currency: "USD", AdsEnabled: true, HasRate: r.Has}); len(errs) > 0 {
		t.Fatal(errs)
	}
	a, err := ssp.New(cfg, ssp.Options{Currency: "USD", Rates: r})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

func opp(id string) *ssp.Opportunity {
	return &ssp.Opportunity{ID: id, Placement: "top", Site: "news.example", Page: "https://news.example/a", UA: "Mozilla/5.0",
		IP: netip.MustParseAddr("203.0.113.77"), Country: "JP", Region: "JP-13", Device: "desktop", User: "u-1", Start: time.Now()}
}

func on(url string) ssp.Partner { return ssp.Partner{URL: url} }

// The highest valid bid wins at its price (first price); a bid whose
// advertiser the placement blocks is dropped with loss 205 and one below
// the floor with 100; the losers' lurl get 102 with their reasons, and the
// winner's nurl is called once, its markup's macros substituted.
func TestHighestValidBidWins(t *testing.T) {
	a1 := newPartner(t, bid("1.50", `,"lurl":"LURL/l?loss=${AUCTION_LOSS}"`))
	a2 := newPartner(t, bid("2.00", `,"adomain":["ads.blocked.example"],"lurl":"LURL/l?loss=${AUCTION_LOSS}"`))
	a3 := newPartner(t, bid("1.80", `,"nurl":"NURL/n?p=${AUCTION_PRICE}&c=${AUCTION_CURRENCY}&id=${AUCTION_ID}"`))
	a4 := newPartner(t, bid("0.40", `,"lurl":"LURL/l?loss=${AUCTION_LOSS}"`))
	for _, p := range []*partner{a1, a2, a3, a4} {
		p.answer = rewrite(p.answer, p.srv.URL)
	}
	a := auctioneer(t, config(map[string]ssp.Partner{"a1": on(a1.srv.URL), "a2": on(a2.srv.URL), "a3": on(a3.srv.URL),
		"a4": on(a4.srv.URL)}), nil)
	res := run(a, opp("auc-1"), ssp.Direct{})
	if res.Sold == nil || res.Sold.Partner != "a3" || res.Price != 1_800_000 || res.Gross != 1_800_000 {
		t.Fatalf("sold %+v at %d (gross %d), want a3 at 1.80", res.Sold, res.Price, res.Gross)
	}
	if asked, answered, timedOut := res.Asked(); asked != 4 || answered != 4 || timedOut != 0 {
		t.Fatalf("asked %d, answered %d, timed out %d", asked, answered, timedOut)
	}
	if got := a3.waitNotices(1); got[0] != "/n?p=1.8&c=USD&id=auc-1" {
		t.Fatalf("nurl called as %v", got)
	}
	if got := a1.waitNotices(1); got[0] != "/l?loss=102" {
		t.Fatalf("a1's lurl: %v", got)
	}
	if got := a2.waitNotices(1); got[0] != "/l?loss=205" {
		t.Fatalf("a2's lurl: %v", got)
	}
	if got := a4.waitNotices(1); got[0] != "/l?loss=100" {
		t.Fatalf("a4's lurl: %v", got)
	}
	st := a.Stats()
	if st["a2"].Invalid.Load() != 1 || st["a3"].Wins.Load() != 1 || st["a1"].Requests.Load() != 1 {
		t.Fatalf("stats: a2 invalid %d, a3 wins %d, a1 requests %d", st["a2"].Invalid.Load(), st["a3"].Wins.Load(), st["a1"].Requests.Load())
	}
}

// rewrite makes a partner's NURL/ and LURL/ prefixes its own address.
func rewrite(f func(*openrtb.BidRequest) (int, []byte), base string) func(*openrtb.BidRequest) (int, []byte) {
	return func(r *openrtb.BidRequest) (int, []byte) {
		st, b := f(r)
		b = bytes.ReplaceAll(b, []byte(`"NURL/`), []byte(`"`+base+`/`))
		b = bytes.ReplaceAll(b, []byte(`"LURL/`), []byte(`"`+base+`/`))
		b = bytes.ReplaceAll(b, []byte(`"BURL/`), []byte(`"`+base+`/`))
		b = bytes.ReplaceAll(b, []byte(`"MARKUP/`), []byte(`"`+base+`/markup`))
		return st, b
	}
}

// A direct line item of a guaranteed priority wins outright, and no
// partner is asked; one of a price priority competes by its CPM: it beats
// a lower bid and loses to a higher one, and it takes its budget only when
// it wins.
func TestDirectLineItemsCompete(t *testing.T) {
	low := newPartner(t, bid("1.50", ""))
	high := newPartner(t, bid("1.80", ""))
	a := auctioneer(t, config(map[string]ssp.Partner{"low": on(low.srv.URL), "high": on(high.srv.URL)}), nil)
	var takes atomic.Int64
	direct := func(priority int, cpm tsubame.Money) ssp.Direct {
		return ssp.Direct{Line: &decision.Line{ID: "li", Priority: priority, CPM: cpm},
			Take: func(time.Time) bool { takes.Add(1); return true }}
	}
	res := run(a, opp("g"), direct(1, 100_000))
	if !res.DirectWon || !res.Guaranteed || res.Price != 100_000 || len(res.Calls) != 0 || low.lastRequest() != nil {
		t.Fatalf("guaranteed: %+v, partners asked: %v", res, low.lastRequest() != nil)
	}
	res = run(a, opp("p1"), direct(5, 1_600_000))
	if res.Sold == nil || res.Sold.Partner != "high" || res.DirectWon {
		t.Fatalf("a CPM of 1.60 against 1.80: %+v", res)
	}
	if takes.Load() != 1 {
		t.Fatalf("%d takes: a line item that lost took its budget", takes.Load())
	}
	a2 := auctioneer(t, config(map[string]ssp.Partner{"low": on(low.srv.URL)}), nil)
	res = run(a2, opp("p2"), direct(5, 1_600_000))
	if !res.DirectWon || res.Price != 1_600_000 || res.Bids[0].Loss != ssp.LossOutbid {
		t.Fatalf("a CPM of 1.60 against 1.50: %+v", res)
	}
	// A line item that can no longer take its budget leaves the slot to
	// the best bid.
	res = run(a2, opp("p3"), ssp.Direct{Line: &decision.Line{ID: "li", Priority: 5, CPM: 1_600_000},
		Take: func(time.Time) bool { return false }})
	if res.DirectWon || res.Sold == nil || res.Sold.Partner != "low" {
		t.Fatalf("a spent line item: %+v", res)
	}
}

// A partner that never answers is cut at the deadline: the auction ends
// with the others' bids, the hung call counted as a timeout.
func TestHungPartnerIsNotWaitedFor(t *testing.T) {
	// Never answers: it reads the request and waits until the caller
	// hangs up.
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(hung.Close)
	fast := newPartner(t, bid("1.00", ""))
	cfg := config(map[string]ssp.Partner{"hung": on(hung.URL), "fast": on(fast.srv.URL)})
	pl := cfg.Placements["top"]
	pl.TMax = 300 * time.Millisecond
	cfg.Placements["top"] = pl
	a := auctioneer(t, cfg, nil)
	for i := range 3 {
		res := run(a, opp(fmt.Sprint("h", i)), ssp.Direct{})
		if res.Sold == nil || res.Sold.Partner != "fast" {
			t.Fatalf("round %d: %+v", i, res)
		}
		var outcome ssp.Outcome
		for _, c := range res.Calls {
			if c.Partner == "hung" {
				outcome = c.Outcome
			}
		}
		if outcome != ssp.OutcomeTimeout {
			t.Fatalf("round %d: the hung partner's outcome %q", i, outcome)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for a.Stats()["hung"].Timeouts.Load() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d timeouts counted, want 3", a.Stats()["hung"].Timeouts.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// No goroutine or connection grows with the hung calls: 30 more
	// auctions leave the process's goroutines (the hung partner's server
	// side included: a call cut closes its connection) where they were.
	base := runtime.NumGoroutine()
	for i := range 30 {
		run(a, opp(fmt.Sprint("g", i)), ssp.Direct{})
	}
	deadline = time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > base+4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after 30 auctions with a hung partner, %d before", runtime.NumGoroutine(), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawPartner answers every connection with the bytes of answer (a whole
// HTTP response, or nothing and a reset).
func rawPartner(t *testing.T, answer func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				req, err := http.ReadRequest(r)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				answer(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// Bad partners are each cut and counted with their outcome, and the good
// partner's bid still wins: a 500, garbage, a body past max_response, a
// gzip bomb, an HTTP/1.0 answer, a reset, a bid for another imp, a price
// above any sane one, another auction's id.
func TestBadPartners(t *testing.T) {
	good := newPartner(t, bid("1.00", ""))
	bomb := func() []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte(`{"id":"x","seatbid":[{"bid":[{"id":"1","impid":"1","price":1,"adm":"`))
		_, _ = zw.Write(bytes.Repeat([]byte("A"), 10<<20))
		_, _ = zw.Write([]byte(`"}]}]}`))
		_ = zw.Close()
		return b.Bytes()
	}()
	answers := map[string]func(*openrtb.BidRequest) (int, []byte){
		"status":  func(*openrtb.BidRequest) (int, []byte) { return 500, []byte("oops") },
		"garbage": func(*openrtb.BidRequest) (int, []byte) { return 200, []byte("<html>not json") },
		"huge": func(r *openrtb.BidRequest) (int, []byte) {
			return 200, fmt.Appendf(nil, `{"id":%q,"seatbid":[{"bid":[{"id":"1","impid":"1","price":1,"adm":"%s"}]}]}`, r.ID,
				bytes.Repeat([]byte("A"), 10<<20))
		},
		"otherimp": func(r *openrtb.BidRequest) (int, []byte) {
			return 200, fmt.Appendf(nil, `{"id":%q,"seatbid":[{"bid":[{"id":"1","impid":"2","price":9,"adm":"x","w":300,"h":250}]}]}`, r.ID)
		},
		"insane": func(r *openrtb.BidRequest) (int, []byte) {
			return 200, fmt.Appendf(nil, `{"id":%q,"seatbid":[{"bid":[{"id":"1","impid":"1","price":99999999,"adm":"x","w":300,"h":250}]}]}`, r.ID)
		},
		"otherauction": func(r *openrtb.BidRequest) (int, []byte) {
			return 200, []byte(`{"id":"not-this-one","seatbid":[{"bid":[{"id":"1","impid":"1","price":5,"adm":"x","w":300,"h":250}]}]}`)
		},
	}
	partners := map[string]ssp.Partner{"good": on(good.srv.URL)}
	for name, f := range answers {
		partners[name] = on(newPartner(t, f).srv.URL)
	}
	partners["bomb"] = on(rawPartner(t, func(c net.Conn) {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", len(bomb))
		_, _ = c.Write(bomb)
	}))
	partners["http10"] = on(rawPartner(t, func(c net.Conn) {
		_, _ = io.WriteString(c, "HTTP/1.0 204 No Content\r\n\r\n")
	}))
	partners["reset"] = on(rawPartner(t, func(c net.Conn) {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}))
	a := auctioneer(t, config(partners), nil)
	res := run(a, opp("bad-1"), ssp.Direct{})
	if res.Sold == nil || res.Sold.Partner != "good" || res.Price != 1_000_000 {
		t.Fatalf("sold %+v at %d", res.Sold, res.Price)
	}
	want := map[string]ssp.Outcome{"status": ssp.OutcomeStatus, "garbage": ssp.OutcomeInvalid, "huge": ssp.OutcomeTooLarge,
		"bomb": ssp.OutcomeTooLarge, "http10": ssp.OutcomeHTTP10, "reset": ssp.OutcomeError, "otherimp": ssp.OutcomeBid,
		"insane": ssp.OutcomeBid, "otherauction": ssp.OutcomeBid, "good": ssp.OutcomeBid}
	for _, c := range res.Calls {
		if want[c.Partner] != c.Outcome {
			t.Errorf("%s: outcome %q, want %q", c.Partner, c.Outcome, want[c.Partner])
		}
	}
	reasons := map[string]string{}
	for _, b := range res.Bids {
		reasons[b.Partner] = b.Reason
	}
	for p, r := range map[string]string{"otherimp": "imp_id", "insane": "price_too_high", "otherauction": "auction_id"} {
		if reasons[p] != r {
			t.Errorf("%s's bid dropped for %q, want %q", p, reasons[p], r)
		}
	}
}

// Money is exact across currencies and bid adjustments: a partner bidding
// in JPY at 150.25 per USD with a bid adjustment of 0.8 is sent the floor
// grossed up and converted, rounding up; its bid is valued rounding down;
// the second price it pays is converted back to JPY, never above its bid.
func TestCurrencyAndAdjustmentAreExact(t *testing.T) {
	jp := newPartner(t, func(r *openrtb.BidRequest) (int, []byte) {
		return 200, fmt.Appendf(nil, `{"id":%q,"cur":"JPY","seatbid":[{"bid":[{"id":"j","impid":"1","price":"300.50","adm":"<div>jp</div>","w":300,"h":250,"adomain":["jp.example"],
			"nurl":"%s/n?p=${AUCTION_PRICE}&c=${AUCTION_CURRENCY}"}]}]}`, r.ID, jpURL.Load())
	})
	jpURL.Store(jp.srv.URL)
	us := newPartner(t, bid("1.00", ""))
	cfg := config(map[string]ssp.Partner{"jp": {URL: jp.srv.URL, Currency: "JPY", BidAdjustment: "0.8"}, "us": on(us.srv.URL)})
	cfg.Auction = ssp.SecondPrice
	a := auctioneer(t, cfg, map[string]string{"JPY": "150.25"})
	res := run(a, opp("fx-1"), ssp.Direct{})
	// 300.50 JPY = 2.000000 USD (300.50 / 150.25 exactly); × 0.8 = 1.60.
	if res.Sold == nil || res.Sold.Partner != "jp" || res.Sold.Value != 1_600_000 {
		for _, b := range res.Bids {
			t.Logf("%s: %+v", b.Partner, *b)
		}
		t.Fatalf("sold %+v", res.Sold)
	}
	// Second price: the US bid 1.00 + 0.01 = 1.01 net; gross 1.01 / 0.8 =
	// 1.2625 USD = 189.690625 JPY, rounded down to the micro-unit.
	if res.Price != 1_010_000 || res.Gross != 189_690_625 {
		t.Fatalf("price %d, gross %d JPY micro-units", res.Price, res.Gross)
	}
	if got := jp.waitNotices(1); got[0] != "/n?p=189.690625&c=JPY" {
		t.Fatalf("nurl %v", got)
	}
	// The floor of 0.50 USD sent to it: 0.50 / 0.8 = 0.625 USD = 93.90625 JPY.
	if f := jp.lastRequest().Imp[0].BidFloor; f != 93_906_250 || jp.lastRequest().Imp[0].BidFloorCur != "JPY" {
		t.Fatalf("floor sent %d %s", f, jp.lastRequest().Imp[0].BidFloorCur)
	}
}

var jpURL atomic.Value

// A winning bid without markup gets it from its nurl, which is then not
// called again; the markup's macros are substituted.
func TestMarkupFromNURL(t *testing.T) {
	p := newPartner(t, nil)
	p.answer = func(r *openrtb.BidRequest) (int, []byte) {
		return 200, fmt.Appendf(nil, `{"id":%q,"seatbid":[{"bid":[{"id":"m","impid":"1","price":2,"w":300,"h":250,"adomain":["m.example"],
			"nurl":"%s/markup?p=${AUCTION_PRICE}"}]}]}`, r.ID, p.srv.URL)
	}
	a := auctioneer(t, config(map[string]ssp.Partner{"m": on(p.srv.URL)}), nil)
	res := run(a, opp("mk-1"), ssp.Direct{})
	if res.Sold == nil || res.Markup != "<div>markup from nurl</div>" {
		t.Fatalf("sold %+v, markup %q, calls %+v, bids %+v", res.Sold, res.Markup, res.Calls, res.Bids)
	}
	time.Sleep(50 * time.Millisecond)
	if got := p.waitNotices(1); len(got) != 1 || got[0] != "/markup?p=2" {
		t.Fatalf("nurl called %v", got)
	}
}

// The request a partner receives: the impression with the placement's
// sizes, floor and blocks, the site and its publisher, the device with the
// address truncated when a privacy signal rules the visitor out (and no
// user then), regs with the signals, source.tid, and the incoming supply
// chain with this seller's node appended.
func TestRequestOut(t *testing.T) {
	p := newPartner(t, func(*openrtb.BidRequest) (int, []byte) { return 204, nil })
	cfg := config(map[string]ssp.Partner{"p": {URL: p.srv.URL, Gzip: true, TokenHeader: "X-Token", Token: "0123456789abcdef0123"}})
	a := auctioneer(t, cfg, nil)
	o := opp("out-1")
	o.SChain = &openrtb.SupplyChain{Ver: "1.0", Complete: 1, Nodes: []openrtb.SupplyChainNode{{ASI: "upstream.example", SID: "77"}}}
	run(a, o, ssp.Direct{})
	r := p.lastRequest()
	if r == nil {
		t.Fatal("no request")
	}
	imp := r.Imp[0]
	if imp.TagID != "top" || imp.Banner == nil || len(imp.Banner.Format) != 2 || imp.BidFloor != 500_000 || imp.BidFloorCur != "USD" {
		t.Fatalf("imp %+v", imp)
	}
	if r.Site == nil || r.Site.Domain != "news.example" || r.Site.Page != "https://news.example/a" || r.Site.Publisher.ID != "pub-1" {
		t.Fatalf("site %+v", r.Site)
	}
	if r.Device.IP != "203.0.113.77" || r.Device.Geo.Country != "JPN" || r.Device.DeviceType != 2 || r.User == nil || r.User.ID != "u-1" {
		t.Fatalf("device %+v, user %+v", r.Device, r.User)
	}
	if len(r.BAdv) != 1 || len(r.BCat) != 1 || r.TMax > 1960 || r.TMax < 1 || r.Cur[0] != "USD" || r.Source.TID.Value != "out-1" {
		t.Fatalf("request %+v", r)
	}
	nodes := r.Source.SChain.Nodes
	if len(nodes) != 2 || nodes[0].ASI != "upstream.example" || nodes[1].ASI != "ssp.example" || nodes[1].SID != "pub-1" ||
		nodes[1].HP == nil || *nodes[1].HP != 1 {
		t.Fatalf("schain %+v", r.Source.SChain)
	}
	o = opp("out-2")
	o.Private, o.User = true, ""
	o.Signals = privacy.Signals{GDPR: privacy.On, Consent: privacy.Text{Value: "CONSENT"}, USPrivacy: privacy.Text{Value: "1YYN"}}
	o.GPPSID = []int{2, 6}
	run(a, o, ssp.Direct{})
	r = p.lastRequest()
	if r.Device.IP != "203.0.113.0" || r.User != nil && r.User.ID != "" {
		t.Fatalf("private: device %+v, user %+v", r.Device, r.User)
	}
	if r.Regs == nil || r.Regs.GDPR != openrtb.FlagOn || r.Regs.USPrivacy.Value != "1YYN" || len(r.Regs.GPPSID.IDs) != 2 ||
		r.User == nil || r.User.Consent.Value != "CONSENT" {
		t.Fatalf("regs %+v, user %+v", r.Regs, r.User)
	}
	var raw map[string]any
	p.mu.Lock()
	_ = json.Unmarshal(p.raw[len(p.raw)-1], &raw)
	p.mu.Unlock()
	if _, ok := raw["user"].(map[string]any)["id"]; ok {
		t.Fatalf("a private request sent a user id: %v", raw["user"])
	}
}

// A partner past its qps is not asked, and counted as throttled.
func TestQPSBound(t *testing.T) {
	p := newPartner(t, bid("1.00", ""))
	a := auctioneer(t, config(map[string]ssp.Partner{"p": {URL: p.srv.URL, QPS: 1}}), nil)
	throttled := 0
	start := time.Now()
	for i := range 5 {
		res := run(a, opp(fmt.Sprint("q", i)), ssp.Direct{})
		if res.Calls[0].Outcome == ssp.OutcomeThrottled {
			throttled++
		}
	}
	// One at once, and one more for each second the five took.
	allowed := 1 + int(time.Since(start)/time.Second)
	sent := int(a.Stats()["p"].Requests.Load())
	if sent < 1 || sent > allowed || throttled != 5-sent || int(a.Stats()["p"].Throttled.Load()) != throttled {
		t.Fatalf("%d sent, %d throttled in %v at qps 1", sent, throttled, time.Since(start))
	}
}

// run holds an auction and commits it, as /api/decide does once it has
// served the result.
func run(a *ssp.Auctioneer, o *ssp.Opportunity, d ssp.Direct) *ssp.Result {
	res := a.Run(context.Background(), o, d)
	a.Commit(res)
	return res
}

// A partner's notice URLs may only reach public addresses unless
// ssp.notices.allow_private: a winning bid without markup whose nurl
// names a loopback address (the cloud metadata address, the admin
// listener) gets no markup from it and loses; its win notice is never
// called either.
func TestNoticesReachOnlyPublicAddresses(t *testing.T) {
	p := newPartner(t, nil)
	p.answer = func(r *openrtb.BidRequest) (int, []byte) {
		return 200, fmt.Appendf(nil, `{"id":%q,"seatbid":[{"bid":[{"id":"m","impid":"1","price":2,"w":300,"h":250,"adomain":["m.example"],
			"nurl":"%s/markup"}]}]}`, r.ID, p.srv.URL)
	}
	cfg := config(map[string]ssp.Partner{"m": on(p.srv.URL)})
	cfg.Notices.AllowPrivate = false
	a := auctioneer(t, cfg, nil)
	res := run(a, opp("ssrf"), ssp.Direct{})
	if res.Sold != nil || res.Bids[0].Reason != "nurl_markup" {
		t.Fatalf("a nurl on loopback served: %+v", res.Sold)
	}
	if _, notices := p.seen(); len(notices) != 0 {
		t.Fatalf("the loopback partner was called on %v", notices)
	}
}

// A request naming a site its placement's publisher does not sell on is
// not offered to partners under the publisher's seller id (domain
// spoofing): the direct line item still serves; nor one asking a size the
// placement does not offer; a subdomain of the publisher's domain, or one
// of its other sites, is offered.
func TestSiteMustBeThePublishers(t *testing.T) {
	p := newPartner(t, bid("2.00", ""))
	cfg := config(map[string]ssp.Partner{"p": on(p.srv.URL)})
	pub := cfg.Publishers["news"]
	pub.Sites = []string{"news-mirror.example"}
	cfg.Publishers["news"] = pub
	a := auctioneer(t, cfg, nil)
	o := opp("spoof")
	o.Site = "premium.example"
	res := run(a, o, ssp.Direct{Line: &decision.Line{ID: "li", Priority: 5, CPM: 100_000}})
	if res.Unsold != ssp.UnsoldSite || len(res.Calls) != 0 || !res.DirectWon || p.lastRequest() != nil {
		t.Fatalf("a spoofed site: %+v", res)
	}
	o = opp("no-size")
	o.W, o.H = 728, 90 // top offers 300x250 and 336x280
	if res := run(a, o, ssp.Direct{}); res.Unsold != ssp.UnsoldFormat || len(res.Calls) != 0 {
		t.Fatalf("a size not offered: %+v", res)
	}
	for _, site := range []string{"www.news.example", "news-mirror.example"} {
		o := opp("ok-" + site)
		o.Site = site
		if res := run(a, o, ssp.Direct{}); res.Sold == nil {
			t.Fatalf("%s: not sold: %+v", site, res)
		}
	}
}

// A placement's deals are offered to the partners that may bid on them:
// one whose deals name another gets no pmp, and its bid on the deal is
// dropped (loss 4); the deal's own partner wins at its deal floor's
// second price.
func TestDealsOfferedPerPartner(t *testing.T) {
	dealBid := func(price string) func(*openrtb.BidRequest) (int, []byte) {
		return func(r *openrtb.BidRequest) (int, []byte) {
			return 200, fmt.Appendf(nil, `{"id":%q,"seatbid":[{"bid":[{"id":"d","impid":"1","price":%s,"dealid":"D-1","adm":"<div>d</div>",
				"adomain":["d.example"],"w":300,"h":250}]}]}`, r.ID, price)
		}
	}
	in := newPartner(t, dealBid("9.00"))
	out := newPartner(t, dealBid("12.00"))
	cfg := config(map[string]ssp.Partner{"in": {URL: in.srv.URL, Deals: []string{"D-1"}}, "out": {URL: out.srv.URL, Deals: []string{"D-2"}}})
	pl := cfg.Placements["top"]
	pl.Deals = map[string]string{"D-1": "8.00", "D-2": "3.00"}
	cfg.Placements["top"] = pl
	cfg.Auction = ssp.SecondPrice
	a := auctioneer(t, cfg, nil)
	res := run(a, opp("deal-1"), ssp.Direct{})
	if res.Sold == nil || res.Sold.Partner != "in" || res.Price != 8_010_000 {
		t.Fatalf("sold %+v at %d", res.Sold, res.Price)
	}
	if d := in.lastRequest().Imp[0].Pmp; d == nil || len(d.Deals) != 1 || d.Deals[0].ID != "D-1" || d.Deals[0].BidFloor != 8_000_000 {
		t.Fatalf("in's pmp %+v", d)
	}
	if d := out.lastRequest().Imp[0].Pmp; d == nil || len(d.Deals) != 1 || d.Deals[0].ID != "D-2" {
		t.Fatalf("out's pmp %+v", d)
	}
	for _, b := range res.Bids {
		if b.Partner == "out" && b.Loss != ssp.LossInvalidDeal {
			t.Fatalf("out's bid on a deal it was not offered: loss %d", b.Loss)
		}
	}
}

// Notices follow up to three redirects, are called with their URL as the
// partner wrote it (its escapes kept), and count as sent on a 2xx answer
// whatever the size of its body; a fourth redirect and an answer that is
// not 2xx count as failed.
func TestNoticeCallsFollowRedirectsAndKeepURLs(t *testing.T) {
	var mu sync.Mutex
	var hits []string
	ns := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, r.RequestURI)
		mu.Unlock()
		if n, ok := strings.CutPrefix(r.URL.Path, "/hop/"); ok {
			if left, _ := strconv.Atoi(n); left > 0 {
				http.Redirect(w, r, fmt.Sprintf("/hop/%d?%s", left-1, r.URL.RawQuery), http.StatusFound)
				return
			}
			_, _ = w.Write(bytes.Repeat([]byte("x"), 200<<10))
			return
		}
		http.Error(w, "gone", http.StatusGone)
	}))
	t.Cleanup(ns.Close)
	partners := map[string]ssp.Partner{}
	for name, b := range map[string]func(*openrtb.BidRequest) (int, []byte){
		"win":  bid("3.00", fmt.Sprintf(`,"nurl":%q`, ns.URL+"/hop/3?id=a%2Fb%20c")),
		"hops": bid("2.00", fmt.Sprintf(`,"lurl":%q`, ns.URL+"/hop/4")),
		"gone": bid("1.00", fmt.Sprintf(`,"lurl":%q`, ns.URL+"/gone")),
	} {
		partners[name] = on(newPartner(t, b).srv.URL)
	}
	a := auctioneer(t, config(partners), nil)
	if res := run(a, opp("notices"), ssp.Direct{}); res.Sold == nil || res.Sold.Partner != "win" {
		t.Fatalf("sold: %+v", res.Sold)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		sent, failed, _ := a.NoticeStats()
		if sent+failed == 3 {
			if sent != 1 || failed != 2 {
				t.Fatalf("notices: %d sent, %d failed; want 1 and 2", sent, failed)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("notices: %d sent, %d failed within 20s", sent, failed)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(hits, "/hop/3?id=a%2Fb%20c") || !slices.Contains(hits, "/hop/0?id=a%2Fb%20c") {
		t.Fatalf("the win notice's calls: %q", hits)
	}
	if n := len(hits); n != 4+4+1 {
		t.Fatalf("%d calls, want 9 (4 for the win and as many for the one redirected once too often, 1 for gone): %q", n, hits)
	}
}

// Where the GDPR applies, each partner is judged by its own TCF vendor id
// (ssp.demand.<name>.gvl_id): one the consent string grants gets the
// visitor's ids and full address; one it does not, or without a vendor
// id, gets neither, and is offered no user sync. Without the GDPR every
// partner gets them.
func TestPartnersGetIdsOnlyWithTheirOwnConsent(t *testing.T) {
	granted, denied, none := newPartner(t, bid("1.00", "")), newPartner(t, bid("1.10", "")), newPartner(t, bid("1.20", ""))
	partners := map[string]ssp.Partner{"granted": on(granted.srv.URL), "denied": on(denied.srv.URL), "none": on(none.srv.URL)}
	for name, id := range map[string]int{"granted": 32, "denied": 52} {
		p := partners[name]
		p.GVLID, p.Sync = id, "https://sync."+name+".example/u?r={redirect}"
		partners[name] = p
	}
	p := partners["none"]
	p.Sync = "https://sync.none.example/u"
	partners["none"] = p
	a := auctioneer(t, config(partners), nil)
	consent := privacytest.Consent{Purposes: []int{1, 2, 3, 4}, Vendors: []int{32, 700}}.String()

	for _, gdpr := range []privacy.Flag{privacy.On, privacy.Off} {
		o := opp("gdpr-" + strconv.Itoa(int(gdpr)))
		o.Signals = privacy.Signals{GDPR: gdpr, Consent: privacy.Text{Value: consent}}
		o.BuyerUIDs = map[string]string{"granted": "g-uid", "denied": "d-uid", "none": "n-uid"}
		run(a, o, ssp.Direct{})
		for name, p := range map[string]*partner{"granted": granted, "denied": denied, "none": none} {
			r := p.lastRequest()
			withIDs := gdpr == privacy.Off || name == "granted"
			gotIDs := r.User != nil && r.User.ID == "u-1" && r.User.BuyerUID == name[:1]+"-uid"
			if gotIDs != withIDs || (r.Device.IP == "203.0.113.77") != withIDs {
				t.Errorf("gdpr %v, %s: user %+v, ip %s; want the ids and full address: %v", gdpr, name, r.User, r.Device.IP, withIDs)
			}
			if gdpr == privacy.On && (r.User == nil || r.User.Consent.Value != consent) {
				t.Errorf("%s: the consent string was not passed on: %+v", name, r.User)
			}
		}
	}

	sg := privacy.Signals{GDPR: privacy.On, Consent: privacy.Text{Value: consent}}
	var synced []string
	for _, s := range a.Syncs(&sg, func(p string) string { return "https://ssp.example/setuid?partner=" + p + "&uid=" }) {
		synced = append(synced, s.Partner)
	}
	if !slices.Equal(synced, []string{"granted"}) || a.Refused("granted", &sg) || !a.Refused("denied", &sg) || !a.Refused("none", &sg) {
		t.Fatalf("under the GDPR: syncs %v, refused granted %v, denied %v, none %v", synced,
			a.Refused("granted", &sg), a.Refused("denied", &sg), a.Refused("none", &sg))
	}
	sg.GDPR = privacy.Absent
	if n := len(a.Syncs(&sg, func(string) string { return "" })); n != 3 || a.Refused("none", &sg) {
		t.Fatalf("without the GDPR: %d syncs, want 3", n)
	}
}

// A configuration's problems are all reported at once, each by its path:
// a partner's vendor id out of range, a sync URL that is not https, a
// placement it names that does not exist.
func TestConfigProblemsByPath(t *testing.T) {
	cfg := config(map[string]ssp.Partner{"p": {URL: "http://127.0.0.1:9/bid", GVLID: 70_000, Sync: "http://sync.example/u",
		Placements: []string{"nowhere"}, OpenRTB: "3.0"}})
	cfg.Auction = "third"
	got := strings.Join(cfg.Validate(ssp.Env{Currency: "USD", AdsEnabled: true}), "\n")
	for _, want := range []string{"ssp.demand.p.gvl_id: 0 (none) or an IAB TCF vendor id, 1 to 65535",
		`ssp.demand.p.sync: "http://sync.example/u" is not an https URL`,
		`ssp.demand.p.placements: "nowhere" is not in ssp.placements`, `ssp.demand.p.openrtb: "2.6" or "2.5" (got "3.0")`, `ssp.auction: first or second (got "third")`} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
	cfg = config(map[string]ssp.Partner{"p": {URL: "http://127.0.0.1:9/bid", GVLID: 65_535}})
	if errs := cfg.Validate(ssp.Env{Currency: "USD", AdsEnabled: true}); len(errs) > 0 {
		t.Fatalf("a valid configuration: %q", errs)
	}
}

// A partner that reads OpenRTB 2.5 (openrtb: "2.5") also gets the privacy
// signals and the supply chain in the extensions 2.5 had them in; a 2.6
// partner gets no such extension.
func TestPartnerOfOpenRTB25GetsTheExtensions(t *testing.T) {
	old, cur := newPartner(t, bid("1.00", "")), newPartner(t, bid("1.10", ""))
	p25 := on(old.srv.URL)
	p25.OpenRTB = ssp.OpenRTB25
	a := auctioneer(t, config(map[string]ssp.Partner{"old": p25, "cur": on(cur.srv.URL)}), nil)
	o := opp("v25")
	o.Signals = privacy.Signals{GDPR: privacy.On, Consent: privacy.Text{Value: "CONSENT"}, USPrivacy: privacy.Text{Value: "1YNN"}}
	run(a, o, ssp.Direct{})
	type ext struct {
		User   struct{ Ext *struct{ Consent string } }
		Source struct {
			SChain json.RawMessage
			Ext    *struct{ SChain json.RawMessage }
		}
		Regs struct {
			Ext *struct {
				GDPR      int
				USPrivacy string `json:"us_privacy"`
			}
		}
	}
	read := func(p *partner) (e ext) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if err := json.Unmarshal(p.raw[len(p.raw)-1], &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := read(old)
	if e.User.Ext == nil || e.User.Ext.Consent != "CONSENT" || e.Regs.Ext == nil || e.Regs.Ext.GDPR != 1 ||
		e.Regs.Ext.USPrivacy != "1YNN" || e.Source.Ext == nil || string(e.Source.Ext.SChain) != string(e.Source.SChain) {
		t.Fatalf("the 2.5 partner's request: %+v", e)
	}
	if e := read(cur); e.User.Ext != nil || e.Regs.Ext != nil || e.Source.Ext != nil || len(e.Source.SChain) == 0 {
		t.Fatalf("the 2.6 partner's request: %+v", e)
	}
}
