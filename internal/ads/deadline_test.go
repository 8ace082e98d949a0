package ads_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/ads"
	"tsubame/internal/budget"
	"tsubame/internal/decision"
	"tsubame/internal/server"
	"tsubame/internal/store/memory"
	"tsubame/internal/track"
)

// stuckCaps is a frequency store that does not answer: each call reports
// when it was made and the deadline it was given, and waits until its
// context ends (or the test releases it: a cap reached).
type stuckCaps struct {
	calls   chan [2]time.Time
	release chan struct{}
}

func (s stuckCaps) Read(ctx context.Context, _ string, _ *tsubame.FrequencyRecord) error {
	_, err := s.Update(ctx, nil, nil)
	return err
}

func (s stuckCaps) Update(ctx context.Context, _ *tsubame.FrequencyUpdate, _ *tsubame.FrequencyRecord) (bool, error) {
	d, _ := ctx.Deadline()
	s.calls <- [2]time.Time{time.Now(), d}
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-s.release:
		return false, nil
	}
}

// A decision's store calls end at the request's deadline, its configured
// timeout after it was read, not at a timeout of each call's (here an
// hour): a store that does not answer costs the capped line item its
// slot, and the answer comes by the deadline.
func TestDecideStoreCallsEndAtTheDeadline(t *testing.T) {
	b, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	for _, li := range set.LineItems {
		if li.ID == "li-top" {
			li.Frequency = []tsubame.FrequencyCap{{Impressions: 3, Per: tsubame.Duration(time.Hour)}}
		}
	}
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	caps := stuckCaps{calls: make(chan [2]time.Time, 1)}
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "JPY", Counters: budget.New(caps, budget.Options{Timeout: time.Hour})})
	if _, err := eng.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	signer, _ := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	svc, err := ads.New(ads.Options{Engine: eng, Signer: signer, Currency: "JPY", TTL: time.Hour,
		CookieName: "tsubame_uid", CookieMaxAge: time.Hour, Dedupe: st})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := accesslog.OpenFile(accesslog.FileOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	log := accesslog.New(sink, accesslog.Options{})
	srv, err := server.New(server.Options{Routes: svc.Routes(log)}, nil)
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
	sent := time.Now()
	resp, body := get(t, "http://"+ln.Addr().String()+"/api/decide?placement=top&uid=u-1")
	answered := time.Now()
	var call [2]time.Time
	select {
	case call = <-caps.calls:
	default:
		t.Fatalf("the capped line item made no store call: %d %s", resp.StatusCode, body)
	}
	// The request was read between sent and the store call.
	read := call[1].Add(-ads.DefaultTimeout)
	if read.Before(sent) || read.After(call[0]) {
		t.Errorf("the store call's deadline is %v after the request was sent, %v before the call: want %v from when it was read",
			call[1].Sub(sent), call[1].Sub(call[0]), ads.DefaultTimeout)
	}
	if resp.StatusCode != http.StatusNoContent || answered.Before(call[1]) {
		t.Errorf("%d %s, answered %v after the deadline: want a 204 once it passed", resp.StatusCode, body, answered.Sub(call[1]))
	}
}

// /api/decide counts against max_in_flight_ads: a decision stuck on the
// store holds its slot, and one that finds the limit full is a 503 with
// Retry-After at once, while the tracking URLs, under their own limit,
// are still served.
func TestDecideOverTheLimitIs503(t *testing.T) {
	b, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	for _, li := range set.LineItems {
		if li.ID == "li-top" {
			li.Frequency = []tsubame.FrequencyCap{{Impressions: 3, Per: tsubame.Duration(time.Hour)}}
		}
	}
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	caps := stuckCaps{calls: make(chan [2]time.Time, 1), release: make(chan struct{})}
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "JPY", Counters: budget.New(caps, budget.Options{})})
	if _, err := eng.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	signer, _ := track.NewSigner("k1", track.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))})
	// The stuck decision's budget is long: the test releases it.
	svc, err := ads.New(ads.Options{Engine: eng, Signer: signer, Currency: "JPY", TTL: time.Hour, Timeout: time.Minute,
		CookieName: "tsubame_uid", CookieMaxAge: time.Hour, Dedupe: st})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := accesslog.OpenFile(accesslog.FileOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	log := accesslog.New(sink, accesslog.Options{})
	srv, err := server.New(server.Options{MaxInFlightAds: 1, MaxInFlightTracking: 1, Routes: svc.Routes(log)}, nil)
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
		resp, err := http.Get(base + "/api/decide?placement=top&uid=u-1")
		if err != nil {
			stuck <- 0
			return
		}
		resp.Body.Close()
		stuck <- resp.StatusCode
	}()
	<-caps.calls // the first decision waits on the store, in its slot
	resp, body := get(t, base+"/api/decide?placement=top&uid=u-2")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("a decision over the limit: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp, _ := get(t, base+"/t/i/not-a-token"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a tracking URL while the ads' limit is full: %d, want it served (400: a bad token)", resp.StatusCode)
	}
	if n := srv.Stats().Refused[server.ReasonInFlightAds]; n != 1 {
		t.Errorf("refused %d", n)
	}
	close(caps.release)
	if code := <-stuck; code != http.StatusNoContent {
		t.Errorf("the stuck decision, its line item capped: %d", code)
	}
}
