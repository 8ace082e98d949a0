package bidder_test

import (
	"context"
	"encoding/json"
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

// A line item's impression limit holds across bids: a bid reserves its
// impression until the exchange's reservation ends, a billing notice
// spends it (the notice's outcome, recorded for the ledger holding it),
// and one never billed is given back and bid again. Five
// impressions: five bids, three billed; once the two others' reservations
// end, two more bids, both billed: five billed in all, and the store
// settles five.
func TestBidsSpendTheLimit(t *testing.T) {
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
			li.Limits.Impressions.Total = 5
		}
	}
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	ledger, err := budget.NewLedger(st, st, budget.LedgerOptions{Holder: "n", Interval: 20 * time.Millisecond,
		Grace: time.Second, Lease: 10 * time.Second, MaxHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ledger.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "USD", Counters: budget.New(st, budget.Options{Ledger: ledger})})
	if _, err := eng.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	sg, _ := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	rates, _ := tsubame.NewRates("USD", nil)
	bd, err := bidder.New(bidder.Options{Engine: eng, Signer: sg, Currency: "USD", Rates: rates, NoticeURL: noticeBase,
		TTL: time.Hour, Grace: time.Second, Dedupe: st, Holder: ledger.Holder(), Outcomes: st},
		[]bidder.Exchange{{Name: "ssp", Seat: "s", PriceEncoding: bidder.PricePlain, Reservation: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: st, bidder: bd, signer: sg}
	request := example(t, "example-6.2.1-banner.json")
	bidUntil := func(want int, deadline time.Duration) []string {
		t.Helper()
		var bills []string
		end := time.Now().Add(deadline)
		for len(bills) < want && time.Now().Before(end) {
			o := f.bid(t, "ssp", request)
			if o.Status == 204 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			bills = append(bills, tokenOf(t, decodeResponse(t, o).SeatBid[0].Bid[0].BURL, bidder.PathBill))
		}
		return bills
	}
	first := bidUntil(5, 20*time.Second)
	if len(first) != 5 {
		t.Fatalf("%d bids on a limit of 5", len(first))
	}
	if extra := bidUntil(1, 300*time.Millisecond); len(extra) != 0 {
		t.Fatal("a sixth bid while five are reserved")
	}
	for _, tok := range first[:3] {
		if _, err := bd.Notice(track.KindBill, tok, []byte("1.2"), nil, nil, time.Now(), f.log); err != nil {
			t.Fatal(err)
		}
	}
	// The two unbilled ones end (1 s, and 1 s of grace), come back, and
	// are bid again.
	second := bidUntil(2, 30*time.Second)
	if len(second) != 2 {
		t.Fatalf("%d bids after two reservations ended unbilled, want 2", len(second))
	}
	for _, tok := range second {
		if _, err := bd.Notice(track.KindBill, tok, []byte("1.2"), nil, nil, time.Now(), f.log); err != nil {
			t.Fatal(err)
		}
	}
	if extra := bidUntil(1, 3*time.Second); len(extra) != 0 {
		t.Fatal("a bid past the limit")
	}
	cancel()
	<-done
	if err := ledger.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s, o, err := st.Committed(t.Context(), "li/li-coffee-web/imp"); err != nil || s != 5 || o != 0 {
		t.Fatalf("the store settles %d, holds %d (%v); want 5 and 0", s, o, err)
	}
}
