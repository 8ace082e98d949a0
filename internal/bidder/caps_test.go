package bidder_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/bidder"
	"tsubame/internal/budget"
	"tsubame/internal/decision"
	"tsubame/internal/store/memory"
	"tsubame/internal/track"
)

// newCapsFixture is the test campaigns with li-coffee-web bidding cpm and
// capped at 3 a day per visitor, its caps counted in a memory store by
// budget.Counters, as a server's are.
func newCapsFixture(t testing.TB, cpm tsubame.Money) *fixture {
	t.Helper()
	b, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	for _, li := range set.LineItems {
		if li.ID == "li-coffee-web" {
			li.CPM = cpm
			li.Frequency = []tsubame.FrequencyCap{{Impressions: 3, Per: tsubame.Duration(24 * time.Hour)}}
		}
	}
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "USD", Counters: budget.New(st, budget.Options{})})
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
	bd, err := bidder.New(bidder.Options{Engine: eng, Signer: sg, Currency: "USD", Rates: rates, NoticeURL: noticeBase,
		TTL: time.Hour, Grace: time.Second, Dedupe: st}, []bidder.Exchange{ssp()})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{store: st, bidder: bd, signer: sg}
}

// capsRequest is a bid request of visitor u-1 for li-coffee-web's site and
// size, in currency cur, with imp members added ("" for none).
func capsRequest(n int, cur, imp string) []byte {
	if imp != "" {
		imp = "," + imp
	}
	return []byte(fmt.Sprintf(`{"id":"auction-%d","cur":[%q],"imp":[{"id":"1","banner":{"w":300,"h":250}%s}],`+
		`"site":{"domain":"www.foobar.com"},"user":{"buyeruid":"u-1"}}`, n, cur, imp))
}

// A floor in yen that the bid, converted to euros, misses by a rounding
// is a no-bid that takes nothing from the visitor's cap: three of them,
// and the visitor's next request without a floor is still bid on. (The
// line item's 1.000001 USD clears the floor of 150.25015 JPY in dollars,
// rounded up, but is 0.920000 EUR, rounded down, under the floor's
// 0.920001 EUR, rounded up.)
func TestCapsNotTakenByNoBids(t *testing.T) {
	f := newCapsFixture(t, 1_000_001)
	for i := range 3 {
		o := f.bid(t, "ssp", capsRequest(i, "EUR", `"bidfloor":150.25015,"bidfloorcur":"JPY"`))
		if o.Status != 204 || o.Reason != bidder.NoBidFloor {
			t.Fatalf("request %d with a floor in yen: %d %q, want 204 %q", i, o.Status, o.Reason, bidder.NoBidFloor)
		}
	}
	for i := 3; i < 6; i++ {
		o := f.bid(t, "ssp", capsRequest(i, "EUR", ""))
		if o.Status != 200 {
			t.Fatalf("request %d after three no-bids: %d %q, want a bid", i, o.Status, o.Reason)
		}
		if b := decodeResponse(t, o).SeatBid[0].Bid[0]; b.CrID != "cr-coffee-300x250" {
			t.Fatalf("request %d: %s", i, o.Body)
		}
	}
}

// A capped line item counts wins, not bids: the visitor's bids in flight
// hold the cap (3 a day), a loss gives its hold back at once, a win counts
// once however many notices say so, and three wins end the bidding.
func TestCapsCountWinsNotBids(t *testing.T) {
	f := newCapsFixture(t, 1_200_000)
	type made struct{ win, loss, bill string }
	n := 0
	bid := func(want int) made {
		t.Helper()
		n++
		o := f.bid(t, "ssp", capsRequest(n, "USD", ""))
		if o.Status != want {
			t.Fatalf("request %d: %d %q, want %d", n, o.Status, o.Reason, want)
		}
		if want != 200 {
			return made{}
		}
		b := decodeResponse(t, o).SeatBid[0].Bid[0]
		return made{tokenOf(t, b.NURL, bidder.PathWin), tokenOf(t, b.LURL, bidder.PathLoss), tokenOf(t, b.BURL, bidder.PathBill)}
	}
	notice := func(kind track.Kind, tok string) {
		t.Helper()
		if _, err := f.bidder.Notice(kind, tok, []byte("1.00"), nil, nil, time.Now(), f.log); err != nil {
			t.Fatalf("%s notice: %v", kind, err)
		}
	}
	b1, b2, b3 := bid(200), bid(200), bid(200)
	bid(204) // three bids in flight hold the cap
	notice(track.KindLoss, b1.loss)
	b4 := bid(200) // b1 lost: its hold is back
	notice(track.KindWin, b2.win)
	notice(track.KindWin, b2.win)   // a repeat
	notice(track.KindBill, b2.bill) // and its bill: one impression
	notice(track.KindWin, b3.win)
	bid(204) // two won, one in flight
	notice(track.KindLoss, b4.loss)
	b5 := bid(200)                  // b4 lost
	notice(track.KindBill, b5.bill) // an exchange that sends no win notice: the bill counts
	for range 3 {
		bid(204) // three won: never a fourth
	}
	rec := &tsubame.FrequencyRecord{}
	if err := f.store.Read(t.Context(), "u-1", rec); err != nil {
		t.Fatal(err)
	}
	if es := rec.Entries("li-coffee-web"); len(es) != 3 || es[0].Hold || es[1].Hold || es[2].Hold {
		t.Fatalf("the visitor's record of li-coffee-web: %+v, want the 3 impressions won", es)
	}
}
