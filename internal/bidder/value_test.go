package bidder_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/bidder"
	"tsubame/internal/decision"
	"tsubame/internal/store/memory"
	"tsubame/internal/track"
)

// valueSet is a campaign set for the auction's choice: one advertiser per
// line item, a 300×250 and a 728×90 banner and a video of each, https
// unless a line item's name says http.
func valueSet(lines ...valueLine) *tsubame.CampaignSet {
	set := &tsubame.CampaignSet{}
	for _, l := range lines {
		adv, camp, cr := "a-"+l.id, "c-"+l.id, "cr-"+l.id
		scheme := "https"
		if strings.Contains(l.id, "http-") {
			scheme = "http"
		}
		set.Advertisers = append(set.Advertisers, &tsubame.Advertiser{ID: adv, Name: adv, Domains: []string{l.id + ".example"}})
		set.Campaigns = append(set.Campaigns, &tsubame.Campaign{ID: camp, Advertiser: adv, Timezone: "UTC"})
		c := &tsubame.Creative{ID: cr, Advertiser: adv, Format: l.format, Click: scheme + "://" + l.id + ".example/",
			Status: tsubame.StatusApproved}
		switch l.format {
		case tsubame.FormatBanner:
			c.W, c.H, c.Image = l.w, l.h, scheme+"://cdn.example/"+cr+".png"
		case tsubame.FormatVideo:
			c.W, c.H, c.Duration, c.MIMEs, c.Media = 640, 480, 15, []string{"video/mp4"}, scheme+"://cdn.example/"+cr+".mp4"
		}
		set.Creatives = append(set.Creatives, c)
		cpm, err := tsubame.ParseMoney(l.cpm)
		if err != nil {
			panic(err)
		}
		set.LineItems = append(set.LineItems, &tsubame.LineItem{ID: l.id, Campaign: camp, Priority: l.prio, Weight: l.weight,
			CPM: cpm, Creatives: []string{cr}})
	}
	return set
}

type valueLine struct {
	id, format, cpm    string
	prio, weight, w, h int
}

func banner(id string, prio, weight int, cpm string) valueLine {
	return valueLine{id: id, format: tsubame.FormatBanner, cpm: cpm, prio: prio, weight: weight, w: 300, h: 250}
}

func video(id string, prio, weight int, cpm string) valueLine {
	return valueLine{id: id, format: tsubame.FormatVideo, cpm: cpm, prio: prio, weight: weight}
}

// valueNode is a bidder over set on st, its notices under notice.
func valueNode(t *testing.T, st *memory.Store, notice string, exchanges ...bidder.Exchange) *fixture {
	t.Helper()
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "USD"})
	if _, err := eng.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	sg, err := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	if err != nil {
		t.Fatal(err)
	}
	rates, err := tsubame.NewRates("USD", map[string]string{"JPY": "150.25"})
	if err != nil {
		t.Fatal(err)
	}
	if len(exchanges) == 0 {
		exchanges = []bidder.Exchange{ssp()}
	}
	bd, err := bidder.New(bidder.Options{Engine: eng, Signer: sg, Currency: "USD", Rates: rates, NoticeURL: notice,
		TTL: time.Hour, Grace: time.Second, Dedupe: st, AdSystem: "Tsubame"}, exchanges)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{store: st, bidder: bd, signer: sg}
}

func valueStore(t *testing.T, set *tsubame.CampaignSet) *memory.Store {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), set); err != nil {
		t.Fatal(err)
	}
	return st
}

// auction is a bid request of one impression; imp is the impression's
// fields after its id, source the request's source object ("" none).
func auction(id, imp, source string) []byte {
	s := `{"id": "` + id + `", "imp": [{"id": "1", ` + imp + `}], "site": {"domain": "news.example"}, "tmax": 5000`
	if source != "" {
		s += `, "source": ` + source
	}
	return []byte(s + `}`)
}

const (
	impBanner      = `"banner": {"w": 300, "h": 250}`
	impVideo       = `"video": {"mimes": ["video/mp4"], "maxduration": 30, "protocols": [2, 3]}`
	impBannerVideo = impBanner + `, ` + impVideo
)

// The bid is the impression's most valuable line item of its first
// priority, across the formats and sizes it offers: not a banner first,
// not by weight.
func TestBidValue(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lines     []valueLine
		imp       string
		line      string // the line item bid
		price     string
		mtype     int
		bidfloors string // the impression's floor, when it has one
	}{
		{name: "a dear video over a cheap banner", imp: impBannerVideo,
			lines: []valueLine{banner("li-banner", 1, 1, "0.50"), video("li-video", 1, 1, "20.00")},
			line:  "li-video", price: "20", mtype: 2},
		{name: "a dear banner over a cheap video", imp: impBannerVideo,
			lines: []valueLine{banner("li-banner", 1, 1, "20.00"), video("li-video", 1, 1, "0.50")},
			line:  "li-banner", price: "20", mtype: 1},
		{name: "video listed first in the impression", imp: impVideo + `, ` + impBanner,
			lines: []valueLine{banner("li-banner", 1, 1, "0.50"), video("li-video", 1, 1, "20.00")},
			line:  "li-video", price: "20", mtype: 2},
		{name: "priority before price", imp: impBannerVideo,
			lines: []valueLine{banner("li-banner", 1, 1, "0.50"), video("li-video", 2, 1, "20.00")},
			line:  "li-banner", price: "0.5", mtype: 1},
		{name: "price before weight", imp: impBanner,
			lines: []valueLine{banner("li-heavy", 3, 1_000_000, "1.00"), banner("li-dear", 3, 1, "1.01")},
			line:  "li-dear", price: "1.01", mtype: 1},
		{name: "the dearer of two sizes", imp: `"banner": {"format": [{"w": 728, "h": 90}, {"w": 300, "h": 250}]}`,
			lines: []valueLine{{id: "li-leader", format: tsubame.FormatBanner, cpm: "1.00", prio: 4, weight: 1000, w: 728, h: 90},
				banner("li-rect", 4, 1, "3.00")},
			line: "li-rect", price: "3", mtype: 1},
		{name: "the video under the floor, the banner over it", imp: impBannerVideo + `, "bidfloor": 1.00`,
			lines: []valueLine{banner("li-banner", 2, 1, "1.50"), video("li-video", 1, 1, "0.90")},
			line:  "li-banner", price: "1.5", mtype: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := valueNode(t, valueStore(t, valueSet(tc.lines...)), noticeBase)
			for i := range 20 {
				o := f.bid(t, "ssp", auction(fmt.Sprintf("a%d", i), tc.imp, ""))
				bid := decodeResponse(t, o).SeatBid[0].Bid[0]
				if bid.CrID != "cr-"+tc.line || bid.Price.String() != tc.price || bid.MType != tc.mtype {
					t.Fatalf("bid %s at %s, mtype %d; want %s at %s, mtype %d", bid.CrID, bid.Price, bid.MType,
						"cr-"+tc.line, tc.price, tc.mtype)
				}
				if tc.mtype == 2 && (bid.Protocol != 3 || bid.Dur != 15 || !strings.Contains(bid.AdM, "<VAST")) {
					t.Fatalf("a video bid: protocol %d, dur %d, adm %.60s", bid.Protocol, bid.Dur, bid.AdM)
				}
			}
		})
	}
}

// imp.secure=1 bids only creatives and markup whose every URL is https;
// absent or 0 bids either; what secure rules out is counted as such.
func TestBidSecure(t *testing.T) {
	lines := []valueLine{banner("li-http-banner", 1, 1, "5.00"), banner("li-safe-banner", 2, 1, "1.00")}
	for _, tc := range []struct {
		name   string
		notice string
		lines  []valueLine
		secure string // the impression's secure field, "" absent
		line   string // the line item bid, "" none
		reason string // the no-bid reason
	}{
		{name: "secure absent: http allowed", notice: noticeBase, lines: lines, line: "li-http-banner"},
		{name: "secure 0: http allowed", notice: noticeBase, lines: lines, secure: `0`, line: "li-http-banner"},
		{name: "secure 1: https only", notice: noticeBase, lines: lines, secure: `1`, line: "li-safe-banner"},
		{name: "secure as a string", notice: noticeBase, lines: lines, secure: `"1"`, line: "li-safe-banner"},
		{name: "secure unreadable: https only", notice: noticeBase, lines: lines, secure: `"yes"`, line: "li-safe-banner"},
		{name: "secure 1, only http creatives", notice: noticeBase, lines: lines[:1], secure: `1`, reason: bidder.NoBidSecure},
		{name: "secure 1, notices on http", notice: "http://ads.example.com", lines: lines, secure: `1`, reason: bidder.NoBidSecure},
		{name: "secure 0, notices on http", notice: "http://ads.example.com", lines: lines, secure: `0`, line: "li-http-banner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := valueNode(t, valueStore(t, valueSet(tc.lines...)), tc.notice)
			imp := impBanner
			if tc.secure != "" {
				imp += `, "secure": ` + tc.secure
			}
			o := f.bid(t, "ssp", auction("a1", imp, ""))
			if tc.line == "" {
				if o.Status != 204 || o.Reason != tc.reason {
					t.Fatalf("%d %q, want a no-bid for %q", o.Status, o.Reason, tc.reason)
				}
				if n := f.bidder.Stats()[0].NoBids[tc.reason]; n != 1 {
					t.Fatalf("no-bids for %q counted %d times, want 1", tc.reason, n)
				}
				return
			}
			bid := decodeResponse(t, o).SeatBid[0].Bid[0]
			if bid.CrID != "cr-"+tc.line {
				t.Fatalf("bid %s, want cr-%s", bid.CrID, tc.line)
			}
			if strings.Contains(tc.secure, "1") || tc.secure == `"yes"` {
				if strings.Contains(bid.AdM, "http:") {
					t.Fatalf("a secure impression's markup has an http URL: %s", bid.AdM)
				}
			}
		})
	}
}

// One impression offered through several resellers (one source.tid) is
// bid on once across nodes sharing the store: the first request that
// would bid claims it; one that bids nothing (under its floor) leaves it
// to the others; an exchange may turn it off.
func TestBidOncePerTransaction(t *testing.T) {
	every := bidder.Exchange{Name: "every", Seat: "Agency1", PriceEncoding: bidder.PricePlain, Reservation: time.Minute,
		BidEveryTID: true}
	st := valueStore(t, valueSet(banner("li-banner", 1, 1, "2.00")))
	n1 := valueNode(t, st, noticeBase, ssp(), every)
	n2 := valueNode(t, st, noticeBase, ssp(), every)
	src := func(tid string) string { return `{"tid": "` + tid + `", "fd": 1}` }
	type step struct {
		node   *fixture
		ex     string
		body   []byte
		reason string // "" a bid
		bids   int    // bids expected when more than one
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"three resellers, two nodes", []step{
			{n1, "ssp", auction("r1", impBanner, src("t-1")), "", 0},
			{n2, "ssp", auction("r2", impBanner, src("t-1")), bidder.NoBidDuplicate, 0},
			{n1, "ssp", auction("r3", impBanner, src("t-1")), bidder.NoBidDuplicate, 0},
		}},
		{"another transaction", []step{
			{n1, "ssp", auction("r1", impBanner, src("t-2a")), "", 0},
			{n2, "ssp", auction("r2", impBanner, src("t-2b")), "", 0},
		}},
		{"under its floor, the first leaves the transaction", []step{
			{n1, "ssp", auction("r1", impBanner+`, "bidfloor": 3`, src("t-3")), bidder.NoBidFloor, 0},
			{n2, "ssp", auction("r2", impBanner+`, "bidfloor": 1`, src("t-3")), "", 0},
			{n1, "ssp", auction("r3", impBanner+`, "bidfloor": 1`, src("t-3")), bidder.NoBidDuplicate, 0},
		}},
		{"no tid, no dedupe", []step{
			{n1, "ssp", auction("r1", impBanner, `{"fd": 1}`), "", 0},
			{n2, "ssp", auction("r1", impBanner, `{"fd": 1}`), "", 0},
		}},
		{"a tid that is not a string is no tid", []step{
			{n1, "ssp", auction("r1", impBanner, `{"tid": 42}`), "", 0},
			{n2, "ssp", auction("r2", impBanner, `{"tid": 42}`), "", 0},
		}},
		{"an exchange bidding every tid", []step{
			{n1, "every", auction("r1", impBanner, src("t-4")), "", 0},
			{n2, "every", auction("r2", impBanner, src("t-4")), "", 0},
			{n1, "ssp", auction("r3", impBanner, src("t-4")), "", 0},
			{n2, "ssp", auction("r4", impBanner, src("t-4")), bidder.NoBidDuplicate, 0},
		}},
		{"a test auction claims nothing", []step{
			{n1, "ssp", []byte(strings.Replace(string(auction("r1", impBanner, src("t-5"))), `"tmax"`, `"test": 1, "tmax"`, 1)), "", 0},
			{n2, "ssp", auction("r2", impBanner, src("t-5")), "", 0},
		}},
		{"two impressions of one request share its claim", []step{
			{n1, "ssp", []byte(`{"id": "r1", "imp": [{"id": "1", ` + impBanner + `}, {"id": "2", ` + impBanner + `}],
				"site": {"domain": "news.example"}, "source": ` + src("t-6") + `}`), "", 2},
			{n2, "ssp", auction("r2", impBanner, src("t-6")), bidder.NoBidDuplicate, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, s := range tc.steps {
				o := s.node.bid(t, s.ex, s.body)
				switch {
				case s.reason == "" && o.Status != 200:
					t.Fatalf("step %d: %d %q, want a bid", i, o.Status, o.Reason)
				case s.reason != "" && (o.Status != 204 || o.Reason != s.reason):
					t.Fatalf("step %d: %d %q, want a no-bid for %q", i, o.Status, o.Reason, s.reason)
				}
				if s.bids > 0 && o.Bids != s.bids {
					t.Fatalf("step %d: %d bids, want one per impression", i, o.Bids)
				}
			}
		})
	}
}

// Through POST /rtb/ on a real listener: a banner-or-video impression gets
// the dear video, and a second reseller's copy of it a bare 204.
func TestBidValueOverHTTP(t *testing.T) {
	st := valueStore(t, valueSet(banner("li-banner", 1, 1, "0.50"), video("li-video", 1, 1, "20.00")))
	f := valueNode(t, st, noticeBase)
	base := serve(t, f, 64<<10)
	resp, body := post(t, base+"/rtb/ssp", auction("r1", impBannerVideo, `{"tid": "tx-http"}`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var r response
	if err := json.Unmarshal(body, &r); err != nil || len(r.SeatBid) != 1 || len(r.SeatBid[0].Bid) != 1 {
		t.Fatalf("%v: %s", err, body)
	}
	if bid := r.SeatBid[0].Bid[0]; bid.CrID != "cr-li-video" || bid.Price.String() != "20" || bid.MType != 2 {
		t.Fatalf("bid %s at %s, mtype %d; want the video at 20", bid.CrID, bid.Price, bid.MType)
	}
	resp, body = post(t, base+"/rtb/ssp", auction("r2", impBannerVideo, `{"tid": "tx-http"}`))
	if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("the transaction's second request: %d %s, want a bare 204", resp.StatusCode, body)
	}
	if n := f.bidder.Stats()[0].NoBids[bidder.NoBidDuplicate]; n != 1 {
		t.Fatalf("duplicate no-bids: %d, want 1", n)
	}
}

// An exchange's shading lowers open-auction bids in first-price auctions
// (at=1) only: to its factor of the CPM, a step over the floor at least,
// in the bid's currency; the token carries the bid it shaded to.
func TestBidShading(t *testing.T) {
	shading, err := bidder.ParseShading("0.8", "0.05")
	if err != nil {
		t.Fatal(err)
	}
	shaded := bidder.Exchange{Name: "shaded", Seat: "Agency1", PriceEncoding: bidder.PricePlain, Reservation: time.Minute,
		Shading: shading}
	f := valueNode(t, valueStore(t, valueSet(banner("li-banner", 1, 1, "2.00"))), noticeBase, ssp(), shaded)
	at := func(a int, rest string) []byte {
		return []byte(fmt.Sprintf(`{"id": "r", "at": %d, "imp": [{"id": "1", %s%s}], "site": {"domain": "news.example"}, "cur": ["USD", "JPY"]}`,
			a, impBanner, rest))
	}
	for _, tc := range []struct {
		name, ex string
		body     []byte
		price    string
	}{
		{"first price, shaded", "shaded", at(1, ""), "1.6"},
		{"second price, not shaded", "shaded", at(2, ""), "2"},
		{"auction type absent (second price)", "shaded", []byte(strings.Replace(string(at(2, "")), `"at": 2, `, "", 1)), "2"},
		{"an exchange without shading", "ssp", at(1, ""), "2"},
		{"the floor and step over the factor", "shaded", at(1, `, "bidfloor": 1.7`), "1.75"},
		{"never over the CPM", "shaded", at(1, `, "bidfloor": 1.98`), "2"},
		{"the floor in yen", "shaded", at(1, `, "bidfloor": 270, "bidfloorcur": "JPY"`), "1.847005"},
		{"a bid in yen", "shaded", []byte(strings.Replace(string(at(1, "")), `"USD", `, "", 1)), "240.4"},
	} {
		o := f.bid(t, tc.ex, tc.body)
		bid := decodeResponse(t, o).SeatBid[0].Bid[0]
		if bid.Price.String() != tc.price {
			t.Errorf("%s: bid %s, want %s", tc.name, bid.Price, tc.price)
			continue
		}
		tk := verifyNotice(t, f, bid.BURL, bidder.PathBill, track.KindBill, bid.ID)
		if want, _ := tsubame.ParseMoney(tc.price); tk.Price != want {
			t.Errorf("%s: the notices' bid price %s, want %s", tc.name, tk.Price, tc.price)
		}
	}
	for _, bad := range [][2]string{{"0", ""}, {"1.5", ""}, {"-0.5", ""}, {"85%", ""}, {"0.8", "-0.01"}, {"0.8", "cent"}} {
		if _, err := bidder.ParseShading(bad[0], bad[1]); err == nil {
			t.Errorf("shading %q, step %q: no error", bad[0], bad[1])
		}
	}
}
