package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The real Main bids: rtb.exchanges from the config file, the bidder's
// test campaigns in its embedded store, example 6.2.1 posted as an
// exchange would (with its token, gzip accepted), the billing URL called
// twice; the access log holds the bid and one billed bill (the repeat not
// valid), and /metrics counts them.
func TestRTBEndToEnd(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(conf, []byte(`ads:
  currency: USD
rtb:
  notice_url: http://bidder.example
  rates: {JPY: "150.25"}
  exchanges:
    ssp:
      seat: Agency1
      token_header: X-Exchange-Token
      token: a-token-of-16-chars
      network_ms: 10
      reservation: 2m
admin:
  metrics_public: true
`), 0o600); err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	env := []string{"TSUBAME_LISTEN=127.0.0.1:0", "TSUBAME_ADMIN_LISTEN=127.0.0.1:0", "TSUBAME_DATA_DIR=" + t.TempDir(),
		"TSUBAME_ACCESS_LOG_DIR=" + logDir, "TSUBAME_CONFIG=" + conf}
	m := openMain(t, env, false)
	set, err := os.ReadFile("../../internal/bidder/testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	putCampaigns(t, m, string(set))
	body, err := os.ReadFile("../../internal/openrtb/testdata/example-6.2.1-banner.json")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + m.PublicAddr()
	var resp *http.Response
	var answer []byte
	waitUntil(t, "a bid", func() bool {
		req, _ := http.NewRequest("POST", base+"/rtb/ssp", bytes.NewReader(body))
		req.Header.Set("X-Exchange-Token", "a-token-of-16-chars")
		var err error
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		answer, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if resp.Header.Get("X-Openrtb-Version") != "2.6" {
		t.Errorf("headers %v", resp.Header)
	}
	var r struct {
		SeatBid []struct {
			Bid []struct {
				ID    string      `json:"id"`
				Price json.Number `json:"price"`
				BURL  string      `json:"burl"`
			} `json:"bid"`
		} `json:"seatbid"`
	}
	if err := json.Unmarshal(answer, &r); err != nil || len(r.SeatBid) != 1 || r.SeatBid[0].Bid[0].Price != "1.2" {
		t.Fatalf("%v: %s", err, answer)
	}
	bid := r.SeatBid[0].Bid[0]
	if !strings.HasPrefix(bid.BURL, "http://bidder.example/t/bill/") {
		t.Fatalf("burl %s", bid.BURL)
	}
	bill := base + strings.Replace(strings.TrimPrefix(bid.BURL, "http://bidder.example"), "${AUCTION_PRICE}", "1.15", 1)
	for range 2 {
		if code, _ := get(t, bill); code != 200 {
			t.Fatalf("bill: %d", code)
		}
	}
	resp, err = http.Post(base+"/rtb/ssp", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("without the token: %d", resp.StatusCode)
	}
	code, metrics := get(t, "http://"+m.AdminAddr()+"/metrics")
	for _, want := range []string{`tsubame_rtb_bids_total{exchange="ssp"} 1`, `tsubame_rtb_bills_total{exchange="ssp"} 1`,
		`tsubame_rtb_bill_repeats_total{exchange="ssp"} 1`, `tsubame_rtb_refused_total{exchange="ssp"} 1`,
		`tsubame_rtb_spend_micros_total{exchange="ssp"} 1.15e+06`} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(metrics, "tsubame_rtb_"))
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{}
	for _, fields := range accessEvents(t, logDir) {
		ev := fields["event"]
		lines[ev] = append(lines[ev], fields["valid"]+" "+fields["price"]+" "+fields["exchange"]+" "+fields["auction"]+" "+fields["decision"])
	}
	auction := "80ce30c53c16e6ede735f123ef6e32361bfc7b22"
	if b := lines["bid"]; len(b) != 1 || b[0] != "true 1200000 ssp "+auction+" "+bid.ID {
		t.Errorf("bid lines %q", b)
	}
	if b := lines["bill"]; len(b) != 2 || b[0] != "true 1150000 ssp "+auction+" "+bid.ID || !strings.HasPrefix(b[1], "false 1150000") {
		t.Errorf("bill lines %q", b)
	}

	// The reports count the auction by exchange, the site and the
	// advertiser the bid carried into its notices: one bid, one bill (the
	// exchange's retry apart), its clearing price as spend.
	code, out, errOut := runCmd(t, env, "", "report", "-by", "exchange,site,advertiser", "-format", "json")
	if code != 0 {
		t.Fatalf("report: %d %s", code, errOut)
	}
	var rep struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Rows) != 1 {
		t.Fatalf("report: %v %s", err, out)
	}
	row := rep.Rows[0]
	for k, want := range map[string]any{"exchange": "ssp", "site": "www.foobar.com", "advertiser": "adv-coffee", "currency": "USD",
		"bids": 1.0, "bills": 1.0, "impressions": 1.0, "invalid_bills": 1.0, "spend": "0.00115", "wins": 0.0} {
		if row[k] != want {
			t.Errorf("report %s = %v, want %v (%s)", k, row[k], want, out)
		}
	}
}
