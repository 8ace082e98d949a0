package bidder_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"tsubame/internal/accesslog"
	"tsubame/internal/bidder"
	"tsubame/internal/server"
)

// serve starts the bidder's routes on a real server on 127.0.0.1 and
// returns its base URL.
func serve(t *testing.T, f *fixture, maxBody int) string {
	t.Helper()
	sink, err := accesslog.OpenFile(accesslog.FileOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	log := accesslog.New(sink, accesslog.Options{})
	srv, err := server.New(server.Options{Routes: f.bidder.Routes(log, maxBody)}, nil)
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
	return "http://" + ln.Addr().String()
}

func post(t *testing.T, url string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// POST /rtb/<exchange> over HTTP: gzip in and out, x-openrtb-version on
// every answer, bare 204 and 400, the body limit after gunzip too (a
// small gzip bomb), the exchange's token, its sources and its QPS.
func TestHTTP(t *testing.T) {
	guarded := bidder.Exchange{Name: "guarded", Seat: "Agency1", PriceEncoding: bidder.PricePlain, Reservation: time.Minute,
		TokenHeader: "X-Exchange-Token", Token: "s3cret-token", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	far := bidder.Exchange{Name: "far", Seat: "Agency1", PriceEncoding: bidder.PricePlain, Reservation: time.Minute,
		Sources: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	slow := bidder.Exchange{Name: "slow", Seat: "Agency1", PriceEncoding: bidder.PricePlain, Reservation: time.Minute, QPS: 1}
	f := newFixture(t, ssp(), guarded, far, slow)
	base := serve(t, f, 16<<10)
	banner := example(t, "example-6.2.1-banner.json")

	resp, body := post(t, base+"/rtb/ssp", banner)
	if resp.StatusCode != 200 || resp.Header.Get("X-Openrtb-Version") != "2.6" || resp.Header.Get("Content-Type") != "application/json" ||
		!bytes.Contains(body, []byte(`"seat":"Agency1"`)) {
		t.Fatalf("a bid: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = post(t, base+"/rtb/ssp", gzipped(banner), "Content-Encoding", "gzip", "Accept-Encoding", "gzip")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip: %d %v", resp.StatusCode, resp.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := io.ReadAll(zr); err != nil || !bytes.Contains(plain, []byte(`"impid":"1"`)) {
		t.Fatalf("gzipped answer: %v %s", err, plain)
	}
	bare := func(name, url string, body []byte, status int, header ...string) {
		t.Helper()
		resp, got := post(t, url, body, header...)
		if resp.StatusCode != status || len(got) != 0 || resp.Header.Get("X-Openrtb-Version") != "2.6" {
			t.Errorf("%s: %d %q, want a bare %d", name, resp.StatusCode, got, status)
		}
	}
	bare("no bid", base+"/rtb/ssp", bytes.Replace(banner, []byte(`"w": 300`), []byte(`"w": 301`), 1), 204)
	bare("not JSON", base+"/rtb/ssp", []byte("nonsense"), 400)
	bare("bad gzip", base+"/rtb/ssp", []byte("not gzip"), 400, "Content-Encoding", "gzip")
	padded := append(bytes.TrimRight(banner, "\n}"), []byte(`,"ext":{"pad":"`+strings.Repeat("x", 20<<10)+`"}}`)...)
	bare("over the limit", base+"/rtb/ssp", padded, 400)
	bomb := gzipped(append(bytes.TrimRight(banner, "\n}"), []byte(`,"ext":{"pad":"`+strings.Repeat("0", 1<<20)+`"}}`)...))
	if len(bomb) > 16<<10 {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}
	bare("over the limit once gunzipped", base+"/rtb/ssp", bomb, 400, "Content-Encoding", "gzip")

	for _, tc := range []struct {
		name, url string
		status    int
		header    []string
	}{
		{"unknown exchange", "/rtb/nope", 404, nil},
		{"no token", "/rtb/guarded", 401, nil},
		{"wrong token", "/rtb/guarded", 401, []string{"X-Exchange-Token", "s3cret-tokeX"}},
		{"token", "/rtb/guarded", 200, []string{"X-Exchange-Token", "s3cret-token"}},
		{"a source not listed", "/rtb/far", 403, nil},
	} {
		resp, _ := post(t, base+tc.url, banner, tc.header...)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
	// One a second: of twenty in a row, the first bids and those past
	// the bucket are a bare 204 (all but one a second of them).
	bids, refused := 0, 0
	for range 20 {
		resp, body := post(t, base+"/rtb/slow", banner)
		switch {
		case resp.StatusCode == 200:
			bids++
		case resp.StatusCode == 204 && len(body) == 0:
			refused++
		}
	}
	if bids == 0 || refused == 0 || bids+refused != 20 {
		t.Errorf("at 1 QPS: %d of 20 bid, %d throttled", bids, refused)
	}
	var throttled uint64
	for _, s := range f.bidder.Stats() {
		if s.Exchange == "slow" {
			throttled = s.NoBids[bidder.NoBidThrottled]
		}
		if s.Exchange == "guarded" && s.Refused != 2 {
			t.Errorf("guarded refused %d, want 2", s.Refused)
		}
	}
	if throttled != uint64(refused) {
		t.Errorf("%d throttled, %d bid", throttled, bids)
	}
	// The notices over HTTP: the billing URL as the exchange calls it.
	b := decodeResponse(t, f.bid(t, "ssp", banner)).SeatBid[0].Bid[0]
	billURL := strings.Replace(strings.Replace(b.BURL, "${AUCTION_PRICE}", "1.05", 1), noticeBase, base, 1)
	for i := range 2 {
		resp, err := http.Get(billURL)
		if err != nil {
			t.Fatal(err)
		}
		gif, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.HasPrefix(gif, []byte("GIF89a")) {
			t.Fatalf("bill %d: %d %q", i, resp.StatusCode, gif)
		}
	}
	// A loss notice's clearing price above the bid (why it lost), and a
	// bill's: answered, never refused (the exchange invoices it anyway).
	lossURL := strings.Replace(strings.Replace(strings.Replace(b.LURL, "${AUCTION_PRICE}", "1.25", 1), "${AUCTION_LOSS}", "102", 1), noticeBase, base, 1)
	for _, u := range []string{strings.Replace(billURL, "1.05", "1.25", 1), lossURL} {
		resp, err = http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", u, resp.StatusCode)
		}
	}
	// The impression of a video's markup: a pixel, whatever its query.
	v := decodeResponse(t, f.bid(t, "ssp", example(t, "example-6.2.4-video.json"))).SeatBid[0].Bid[0]
	m := bidImpURL.FindString(v.AdM)
	if m == "" {
		t.Fatalf("no impression URL in %s", v.AdM)
	}
	resp, err = http.Get(strings.Replace(m, noticeBase, base, 1) + "?price=0.01")
	if err != nil {
		t.Fatal(err)
	}
	gif, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.HasPrefix(gif, []byte("GIF89a")) {
		t.Errorf("the markup's impression: %d %q", resp.StatusCode, gif)
	}
	for _, s := range f.bidder.Stats() {
		if s.Exchange == "ssp" && (s.BidImps != 1 || s.Losses != 1 || s.AboveBid != 1) {
			t.Errorf("stats %+v", s)
		}
	}
}
