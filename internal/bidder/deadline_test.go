package bidder_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/bidder"
	"tsubame/internal/budget"
	"tsubame/internal/decision"
	"tsubame/internal/server"
	"tsubame/internal/store/memory"
	"tsubame/internal/track"
)

// stuckCaps is a frequency store that does not answer: each call reports
// the deadline it was given and waits until its context ends (or the test
// releases it: a cap reached).
type stuckCaps struct {
	deadlines chan time.Time
	release   chan struct{}
}

func (s *stuckCaps) Read(ctx context.Context, _ string, _ *tsubame.FrequencyRecord) error {
	_, err := s.Update(ctx, nil, nil)
	return err
}

func (s *stuckCaps) Update(ctx context.Context, _ *tsubame.FrequencyUpdate, _ *tsubame.FrequencyRecord) (bool, error) {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Time{}
	}
	s.deadlines <- d
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-s.release:
		return false, nil
	}
}

// cappedBidder is a bidder whose banner line item (li-coffee-web) is
// frequency-capped on a store that never answers, with a per-call
// timeout far longer than any bid's budget: only the request's deadline
// can end its store call.
func cappedBidder(t *testing.T, caps *stuckCaps, timeout time.Duration, ex bidder.Exchange) *bidder.Bidder {
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
			li.Frequency = []tsubame.FrequencyCap{{Impressions: 3, Per: tsubame.Duration(time.Hour)}}
		}
	}
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "USD", Counters: budget.New(caps, budget.Options{Timeout: time.Hour})})
	if _, err := eng.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	sg, _ := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	rates, _ := tsubame.NewRates("USD", nil)
	bd, err := bidder.New(bidder.Options{Engine: eng, Signer: sg, Currency: "USD", Rates: rates, NoticeURL: noticeBase,
		TTL: time.Hour, Grace: time.Second, Dedupe: st, Timeout: timeout}, []bidder.Exchange{ex})
	if err != nil {
		t.Fatal(err)
	}
	return bd
}

// withTmax is the specification's banner example for a known buyer (so
// that its frequency cap is counted), with tmax when positive.
func withTmax(t *testing.T, tmax int) []byte {
	t.Helper()
	var req map[string]any
	if err := json.Unmarshal(example(t, "example-6.2.1-banner.json"), &req); err != nil {
		t.Fatal(err)
	}
	req["user"] = map[string]any{"id": "x", "buyeruid": "buyer-1"}
	if tmax > 0 {
		req["tmax"] = tmax
	}
	b, _ := json.Marshal(req)
	return b
}

// A bid request's store calls end at its deadline: its tmax less the
// exchange's network time, at most the bidder's Timeout (and that when
// there is no tmax), not a fixed timeout of each call. A store that
// never answers costs the capped line item the bid, and the answer is a
// 204 once the deadline has passed.
func TestBidStoreCallsEndAtTheDeadline(t *testing.T) {
	caps := &stuckCaps{deadlines: make(chan time.Time, 1)}
	ex := bidder.Exchange{Name: "ssp", Seat: "Agency1", PriceEncoding: bidder.PricePlain, Reservation: time.Minute,
		Network: 40 * time.Millisecond}
	const timeout = 300 * time.Millisecond
	bd := cappedBidder(t, caps, timeout, ex)
	for _, tc := range []struct {
		name string
		tmax int
		want time.Duration // after the request was received
	}{
		{"tmax less the network", 120, 80 * time.Millisecond},
		{"no tmax: the bidder's bound", 0, timeout},
		{"a tmax past the bidder's bound", 5000, timeout},
	} {
		at := time.Now()
		o := bd.Bid(nil, "ssp", withTmax(t, tc.tmax), at, netip.MustParseAddr("192.0.2.10"), func(*accesslog.Event) error { return nil })
		var got time.Time
		select {
		case got = <-caps.deadlines:
		default:
			t.Fatalf("%s: the capped line item made no store call (%d %s)", tc.name, o.Status, o.Reason)
		}
		if !got.Equal(at.Add(tc.want)) {
			t.Errorf("%s: the store call's deadline is %v after the request, want %v", tc.name, got.Sub(at), tc.want)
		}
		if o.Status != http.StatusNoContent || !time.Now().After(at.Add(tc.want)) {
			t.Errorf("%s: %d %s, want a 204 after the deadline", tc.name, o.Status, o.Reason)
		}
	}
	// A caller's earlier deadline comes first.
	at := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), at.Add(20*time.Millisecond))
	defer cancel()
	bd.BidContext(ctx, nil, "ssp", withTmax(t, 120), at, netip.MustParseAddr("192.0.2.10"), func(*accesslog.Event) error { return nil })
	if got := <-caps.deadlines; !got.Equal(at.Add(20 * time.Millisecond)) {
		t.Errorf("under a caller's deadline: %v after the request", got.Sub(at))
	}
}

// Over HTTP: a bid stuck on the store holds its slot of
// max_in_flight_ads until its deadline, and a bid request that finds the
// limit full is answered a bare 204 at once, counted as overloaded.
func TestBidOverTheLimitIsANoBid(t *testing.T) {
	caps := &stuckCaps{deadlines: make(chan time.Time, 2), release: make(chan struct{})}
	ex := bidder.Exchange{Name: "ssp", Seat: "Agency1", PriceEncoding: bidder.PricePlain, Reservation: time.Minute}
	// The stuck bid's deadline is far: the test releases it.
	bd := cappedBidder(t, caps, time.Minute, ex)
	sink, err := accesslog.OpenFile(accesslog.FileOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	log := accesslog.New(sink, accesslog.Options{})
	srv, err := server.New(server.Options{MaxInFlightAds: 1, Routes: bd.Routes(log, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		_ = log.Close(ctx)
	})
	base := "http://" + ln.Addr().String()
	stuck := make(chan int, 1)
	go func() {
		resp, err := http.Post(base+"/rtb/ssp", "application/json", bytes.NewReader(withTmax(t, 0)))
		if err != nil {
			stuck <- 0
			return
		}
		resp.Body.Close()
		stuck <- resp.StatusCode
	}()
	<-caps.deadlines // the first bid waits on the store, in its slot
	resp, body := post(t, base+"/rtb/ssp", withTmax(t, 0))
	if resp.StatusCode != http.StatusNoContent || len(body) != 0 || resp.Header.Get("X-Openrtb-Version") != "2.6" {
		t.Errorf("a bid over the limit: %d %q %v, want a bare 204", resp.StatusCode, body, resp.Header)
	}
	if n := srv.Stats().Refused[server.ReasonInFlightAds]; n != 1 {
		t.Errorf("refused %d", n)
	}
	for _, s := range bd.Stats() {
		if s.NoBids[bidder.NoBidOverload] != 1 {
			t.Errorf("overloaded no-bids: %v", s.NoBids)
		}
	}
	close(caps.release)
	if code := <-stuck; code != http.StatusNoContent {
		t.Errorf("the stuck bid, its line item capped: %d", code)
	}
}
