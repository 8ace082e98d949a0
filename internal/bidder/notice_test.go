package bidder_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"tsubame/internal/device"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
	"tsubame/internal/track"
)

// noticeEvents are the event kinds of the notices' lines, by the kind of
// their URL.
var noticeEvents = map[track.Kind]accesslog.EventKind{track.KindWin: accesslog.EventWin, track.KindBill: accesslog.EventBill,
	track.KindLoss: accesslog.EventLoss}

// bidImpURL is the markup's impression URL (/t/bi/) in a bid's markup, or
// "".
var bidImpURL = regexp.MustCompile(`https://ads\.example\.com/t/bi/([A-Za-z0-9_-]+)`)

// lastEvent is the line f logged last.
func (f *fixture) lastEvent(t *testing.T) accesslog.Event {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.events) == 0 {
		t.Fatal("no line logged")
	}
	return f.events[len(f.events)-1]
}

// eventsOf are the lines f logged for bid.
func (f *fixture) eventsOf(bid string) []accesslog.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []accesslog.Event
	for _, e := range f.events {
		if e.Decision.String() == bid && e.Kind != accesslog.EventBid {
			out = append(out, e)
		}
	}
	return out
}

// Every notice whose token verifies is logged and answered, whatever its
// clearing price: a win's or a bill's read leniently and rounded down,
// counted at most at the bid's (one above it flagged, the exchange's
// figure kept apart), the bid's when none can be read (flagged); a
// loss's, usually above the bid (why it lost), kept apart and never
// counted. The bid is 1.20 USD.
func TestNoticePrices(t *testing.T) {
	f := newFixture(t)
	banner := example(t, "example-6.2.1-banner.json")
	const bid = 1_200_000
	for _, tc := range []struct {
		kind  track.Kind
		price string
		want  int64
		flags map[string]string // extra fields of the line; the others of price_missing, price_above_bid, clearing absent
	}{
		{track.KindWin, "0.95", 950_000, nil},
		{track.KindWin, "1.2", bid, nil},
		{track.KindWin, "1.200000000001", bid, nil},
		{track.KindWin, "1.2000009", bid, nil},
		{track.KindWin, "1.25", bid, map[string]string{"price_above_bid": "true", "clearing": "1250000"}},
		{track.KindWin, "", bid, map[string]string{"price_missing": "true"}},
		{track.KindWin, "${AUCTION_PRICE}", bid, map[string]string{"price_missing": "true"}},
		{track.KindBill, "0.95", 950_000, nil},
		{track.KindBill, "1.59e-1", 159_000, nil},
		{track.KindBill, "1.20000", bid, nil},
		{track.KindBill, "1.200000000001", bid, nil},
		{track.KindBill, "1.2000001", bid, nil},
		{track.KindBill, "1.25", bid, map[string]string{"price_above_bid": "true", "clearing": "1250000"}},
		{track.KindBill, "0", 0, nil},
		{track.KindBill, "null", bid, map[string]string{"price_missing": "true"}},
		{track.KindBill, `""`, bid, map[string]string{"price_missing": "true"}},
		{track.KindBill, "", bid, map[string]string{"price_missing": "true"}},
		{track.KindBill, "${AUCTION_PRICE}", bid, map[string]string{"price_missing": "true"}},
		{track.KindBill, "AUDIT", bid, map[string]string{"price_missing": "true"}},
		{track.KindBill, "-1", bid, map[string]string{"price_missing": "true"}},
		{track.KindBill, "cheap", bid, map[string]string{"price_missing": "true"}},
		{track.KindLoss, "1.5", bid, map[string]string{"clearing": "1500000"}},
		{track.KindLoss, "0.8", bid, map[string]string{"clearing": "800000"}},
		{track.KindLoss, "99999", bid, map[string]string{"clearing": "99999000000"}},
		{track.KindLoss, "", bid, map[string]string{"price_missing": "true"}},
		{track.KindLoss, "${AUCTION_PRICE}", bid, map[string]string{"price_missing": "true"}},
		{track.KindLoss, "null", bid, map[string]string{"price_missing": "true"}},
	} {
		name := fmt.Sprintf("%s at %q", tc.kind, tc.price)
		b := decodeResponse(t, f.bid(t, "ssp", banner)).SeatBid[0].Bid[0]
		u := map[track.Kind]string{track.KindWin: b.NURL, track.KindBill: b.BURL, track.KindLoss: b.LURL}[tc.kind]
		path := map[track.Kind]string{track.KindWin: bidder.PathWin, track.KindBill: bidder.PathBill, track.KindLoss: bidder.PathLoss}[tc.kind]
		loss := []byte(nil)
		if tc.kind == track.KindLoss {
			loss = []byte("102")
		}
		a, err := f.bidder.Notice(tc.kind, tokenOf(t, u, path), []byte(tc.price), loss, nil, time.Now(), f.log)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if tc.kind == track.KindBill && (a.ContentType != "image/gif" || len(a.Body) == 0) {
			t.Errorf("%s: answered %q %q", name, a.ContentType, a.Body)
		}
		e := f.lastEvent(t)
		kind := noticeEvents[tc.kind]
		if e.Kind != kind || e.ID.String() != tc.kind.String()+":"+b.ID || !e.Valid || e.Price != tc.want || e.Currency.String() != "USD" {
			t.Errorf("%s: line %s %s valid %v price %d %s, want %s valid at %d", name, e.Kind, e.ID, e.Valid, e.Price, e.Currency, kind, tc.want)
		}
		for _, key := range []string{"price_missing", "price_above_bid", "clearing"} {
			got, ok := e.Extra(key)
			if want, wanted := tc.flags[key]; ok != wanted || got != want {
				t.Errorf("%s: %s %q (%v), want %q", name, key, got, ok, want)
			}
		}
		if code, _ := e.Extra("loss"); tc.kind == track.KindLoss && code != "102" {
			t.Errorf("%s: loss code %q", name, code)
		}
	}
	s := f.bidder.Stats()[0]
	if s.Wins != 7 || s.Bills != 14 || s.Losses != 6 || s.AboveBid != 2 || s.PriceMissing != 9 {
		t.Errorf("stats %+v", s)
	}
}

// redisNode is a bidder with its own connection to the Redis at addr, the
// test campaigns in it: a node of a cluster of bidders.
func redisNode(t *testing.T, addr string, exchanges ...bidder.Exchange) *fixture {
	t.Helper()
	st, err := redis.Open(redis.Options{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	raw, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "USD"})
	if _, err := eng.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	sg, err := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	if err != nil {
		t.Fatal(err)
	}
	rates, err := tsubame.NewRates("USD", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(exchanges) == 0 {
		exchanges = []bidder.Exchange{ssp()}
	}
	bd, err := bidder.New(bidder.Options{Engine: eng, Signer: sg, Currency: "USD", Rates: rates, NoticeURL: noticeBase,
		TTL: time.Hour, Grace: time.Second, Dedupe: st}, exchanges)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{bidder: bd, signer: sg}
}

// Two nodes on one real Redis: a bid's win, billing and loss URLs, each
// called five times on each node at once, are each counted once, the
// other nine logged as repeats; and so is the markup's impression of a
// video bid. Each node's counters count what it logged.
func TestNoticesCountOnceAcrossNodesOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	nodes := []*fixture{redisNode(t, srv.Addr), redisNode(t, srv.Addr)}
	for _, file := range []string{"example-6.2.1-banner.json", "example-6.2.4-video.json"} {
		b := decodeResponse(t, nodes[0].bid(t, "ssp", example(t, file))).SeatBid[0].Bid[0]
		calls := []func(n *fixture) error{
			func(n *fixture) error {
				_, err := n.bidder.Notice(track.KindWin, tokenOf(t, b.NURL, bidder.PathWin), []byte("0.5"), nil, nil, time.Now(), n.log)
				return err
			},
			func(n *fixture) error {
				_, err := n.bidder.Notice(track.KindBill, tokenOf(t, b.BURL, bidder.PathBill), []byte("0.5"), nil, nil, time.Now(), n.log)
				return err
			},
			func(n *fixture) error {
				_, err := n.bidder.Notice(track.KindLoss, tokenOf(t, b.LURL, bidder.PathLoss), []byte("9.99"), []byte("102"), nil, time.Now(), n.log)
				return err
			},
		}
		if m := bidImpURL.FindStringSubmatch(b.AdM); m != nil {
			calls = append(calls, func(n *fixture) error {
				_, err := n.bidder.Impression(m[1], []byte("Mozilla/5.0"), time.Now(), n.log)
				return err
			})
		} else if strings.Contains(file, "video") {
			t.Fatalf("no impression URL in the video's markup %s", b.AdM)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 10*len(calls))
		for i := range 10 {
			for _, call := range calls {
				wg.Go(func() { errs <- call(nodes[i%2]) })
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		valid, repeats := map[accesslog.EventKind]int{}, map[accesslog.EventKind]int{}
		for _, n := range nodes {
			for _, e := range n.eventsOf(b.ID) {
				reason, _ := e.Extra("reason")
				switch {
				case e.Valid && reason == "":
					valid[e.Kind]++
				case !e.Valid && reason == "repeat":
					repeats[e.Kind]++
				default:
					t.Errorf("%s: line %s valid %v reason %q", file, e.Kind, e.Valid, reason)
				}
			}
		}
		kinds := []accesslog.EventKind{accesslog.EventWin, accesslog.EventBill, accesslog.EventLoss}
		if len(calls) == 4 {
			kinds = append(kinds, accesslog.EventBidImp)
		}
		for _, k := range kinds {
			if valid[k] != 1 || repeats[k] != 9 {
				t.Errorf("%s: %d valid %s lines and %d repeats, want 1 and 9", file, valid[k], k, repeats[k])
			}
		}
		if len(valid) != len(kinds) {
			t.Errorf("%s: valid lines %v", file, valid)
		}
	}
	var s bidder.Snapshot
	for _, n := range nodes {
		ns := n.bidder.Stats()[0]
		s.Wins, s.Bills, s.Losses, s.BidImps = s.Wins+ns.Wins, s.Bills+ns.Bills, s.Losses+ns.Losses, s.BidImps+ns.BidImps
		s.WinRepeats, s.BillRepeats, s.LossRepeats = s.WinRepeats+ns.WinRepeats, s.BillRepeats+ns.BillRepeats, s.LossRepeats+ns.LossRepeats
	}
	if s.Wins != 2 || s.Bills != 2 || s.Losses != 2 || s.BidImps != 1 || s.WinRepeats != 18 || s.BillRepeats != 18 || s.LossRepeats != 18 {
		t.Errorf("the nodes' counters add up to %+v", s)
	}
}

// bill_on says which notice bills a bid: of the bid's notices, that one
// logs the one valid bill line (billed once: its repeat is not), with its
// price (the markup's impression: the bid's, never one of its URL), and
// records the bill the budget ledger settles by (bill:<bid> seen); the
// other notices are logged as what they are, a billing notice not billed
// (reason:bill_on). A video's VAST impression is the markup's impression
// URL, never the exchange's billing URL; a banner's markup carries one
// only where the markup bills.
func TestBillOn(t *testing.T) {
	for _, billOn := range bidder.BillOns {
		for _, file := range []string{"example-6.2.1-banner.json", "example-6.2.4-video.json"} {
			t.Run(billOn+"/"+file, func(t *testing.T) {
				ex := ssp()
				ex.BillOn = billOn
				f := newFixture(t, ex)
				b := decodeResponse(t, f.bid(t, "ssp", example(t, file))).SeatBid[0].Bid[0]
				video := b.MType == 2
				bidPrice := map[bool]int64{false: 1_200_000, true: 4_500_000}[video]
				if strings.Contains(b.AdM, bidder.PathBill) {
					t.Errorf("the markup holds the billing URL: %s", b.AdM)
				}
				m := bidImpURL.FindStringSubmatch(b.AdM)
				if (m != nil) != (video || billOn == bidder.BillOnMarkup) {
					t.Fatalf("markup impression %v in %s", m, b.AdM)
				}
				notices := map[string]func() error{
					bidder.BillOnNURL: func() error {
						_, err := f.bidder.Notice(track.KindWin, tokenOf(t, b.NURL, bidder.PathWin), []byte("0.9"), nil, nil, time.Now(), f.log)
						return err
					},
					bidder.BillOnBURL: func() error {
						_, err := f.bidder.Notice(track.KindBill, tokenOf(t, b.BURL, bidder.PathBill), []byte("0.8"), nil, nil, time.Now(), f.log)
						return err
					},
				}
				if m != nil {
					notices[bidder.BillOnMarkup] = func() error {
						_, err := f.bidder.Impression(m[1], []byte("Mozilla/5.0"), time.Now(), f.log)
						return err
					}
				}
				settled := func() bool {
					seen, err := f.store.Seen(t.Context(), []string{tsubame.OutcomeKey(tsubame.OutcomeBill, b.ID)})
					if err != nil {
						t.Fatal(err)
					}
					return seen[0]
				}
				// The notices that do not bill first: nothing billed yet.
				for _, on := range bidder.BillOns {
					if call, ok := notices[on]; ok && on != billOn {
						if err := call(); err != nil {
							t.Fatal(err)
						}
					}
				}
				if settled() {
					t.Fatal("settled by a notice that does not bill")
				}
				for range 2 {
					if err := notices[billOn](); err != nil {
						t.Fatal(err)
					}
				}
				if !settled() {
					t.Fatal("the billing notice left the bid unsettled")
				}
				var bills, repeats, notBilled, wins, imps int
				for _, e := range f.eventsOf(b.ID) {
					reason, _ := e.Extra("reason")
					switch {
					case e.Kind == accesslog.EventBill && e.Valid:
						bills++
						want := map[string]int64{bidder.BillOnNURL: 900_000, bidder.BillOnBURL: 800_000, bidder.BillOnMarkup: bidPrice}[billOn]
						if e.Price != want || e.ID.String() != "bill:"+b.ID {
							t.Errorf("bill line %s at %d, want %d", e.ID, e.Price, want)
						}
					case e.Kind == accesslog.EventBill && reason == "repeat":
						repeats++
					case e.Kind == accesslog.EventBill && reason == "bill_on":
						notBilled++
					case e.Kind == accesslog.EventWin && e.Valid:
						wins++
					case e.Kind == accesslog.EventBidImp && e.Valid:
						imps++
						if e.Price != bidPrice {
							t.Errorf("markup impression at %d", e.Price)
						}
					}
				}
				wantNotBilled := 0
				if billOn != bidder.BillOnBURL {
					wantNotBilled = 1
				}
				wantImps := 0
				if m != nil {
					wantImps = 1
				}
				if bills != 1 || repeats != 1 || notBilled != wantNotBilled || wins != 1 || imps != wantImps {
					t.Errorf("%d bills, %d repeats, %d not billed, %d wins, %d markup impressions; want 1, 1, %d, 1, %d",
						bills, repeats, notBilled, wins, imps, wantNotBilled, wantImps)
				}
				if s := f.bidder.Stats()[0]; s.Bills != 1 || s.BillRepeats != 1 || s.Wins != 1 {
					t.Errorf("stats %+v", s)
				}
			})
		}
	}
}

// The markup's impression of a test auction's bid, or a crawler's fetch
// of it, counts nothing and bills nothing, and does not use the bid's up:
// the viewer's own is counted next.
func TestBidImpressionNotCounted(t *testing.T) {
	ex := ssp()
	ex.BillOn = bidder.BillOnMarkup
	f := newFixture(t, ex)
	f.bidder = withDevice(t, f, ex)
	b := decodeResponse(t, f.bid(t, "ssp", example(t, "example-6.2.1-banner.json"))).SeatBid[0].Bid[0]
	m := bidImpURL.FindStringSubmatch(b.AdM)
	if m == nil {
		t.Fatalf("no impression in %s", b.AdM)
	}
	for _, ua := range []string{"Googlebot/2.1", "Mozilla/5.0"} {
		if _, err := f.bidder.Impression(m[1], []byte(ua), time.Now(), f.log); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, e := range f.eventsOf(b.ID) {
		reason, _ := e.Extra("reason")
		got = append(got, fmt.Sprintf("%s %v %s", e.Kind, e.Valid, reason))
	}
	if want := []string{"bill false crawler", "bid_imp false crawler", "bill true ", "bid_imp true "}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines %q, want %q", got, want)
	}
	test := strings.Replace(string(example(t, "example-6.2.1-banner.json")), `"at": 1,`, `"at": 1, "test": 1,`, 1)
	b = decodeResponse(t, f.bid(t, "ssp", []byte(test))).SeatBid[0].Bid[0]
	if _, err := f.bidder.Impression(bidImpURL.FindStringSubmatch(b.AdM)[1], []byte("Mozilla/5.0"), time.Now(), f.log); err != nil {
		t.Fatal(err)
	}
	for _, e := range f.eventsOf(b.ID) {
		if reason, _ := e.Extra("reason"); e.Valid || reason != "test" {
			t.Errorf("a test auction's %s line: valid %v reason %q", e.Kind, e.Valid, reason)
		}
	}
	if _, err := f.bidder.Notice(track.KindBidImp, m[1], []byte("0.01"), nil, nil, time.Now(), f.log); err == nil {
		t.Error("the markup's impression taken as an exchange's notice, with a price")
	}
}

// withDevice is f's bidder again, parsing User-Agents as a crawler's when
// they say bot.
func withDevice(t *testing.T, f *fixture, exchanges ...bidder.Exchange) *bidder.Bidder {
	t.Helper()
	eng := decision.NewEngine(f.store, decision.EngineOptions{Currency: "USD"})
	if _, err := eng.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	rates, _ := tsubame.NewRates("USD", nil)
	bd, err := bidder.New(bidder.Options{Engine: eng, Signer: f.signer, Currency: "USD", Rates: rates, NoticeURL: noticeBase,
		TTL: time.Hour, Grace: time.Second, Dedupe: f.store,
		Device: func(ua []byte) device.Info {
			return device.Info{Bot: strings.Contains(strings.ToLower(string(ua)), "bot")}
		}}, exchanges)
	if err != nil {
		t.Fatal(err)
	}
	return bd
}
