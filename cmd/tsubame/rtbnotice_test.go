package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The real Main with two exchanges billing on other notices than burl:
// one on the win notice (bill_on: nurl), one on the markup's impression
// (bill_on: markup). Each notice is called as an exchange or a viewer
// would, more than once; the access log holds one valid bill a bid, at
// the win notice's clearing price or, for the markup's impression (called
// with a price of its own), the bid's; the billing URL of either is not
// a bill. Loss notices, the clearing price above the bid or missing, are
// answered and logged; the report counts wins, losses and bills.
func TestRTBBillOnEndToEnd(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(conf, []byte(`ads:
  currency: USD
rtb:
  notice_url: http://bidder.example
  exchanges:
    onwin:
      seat: Agency1
      bill_on: nurl
    onview:
      seat: Agency1
      bill_on: markup
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
	base := "http://" + m.PublicAddr()
	type bid struct {
		ID   string `json:"id"`
		NURL string `json:"nurl"`
		BURL string `json:"burl"`
		LURL string `json:"lurl"`
		AdM  string `json:"adm"`
	}
	bidOn := func(exchange, example, id string) bid {
		t.Helper()
		body, err := os.ReadFile("../../internal/openrtb/testdata/" + example)
		if err != nil {
			t.Fatal(err)
		}
		var req map[string]any
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		req["id"] = id
		body, _ = json.Marshal(req)
		var answer []byte
		waitUntil(t, "a bid on "+exchange, func() bool {
			resp, err := http.Post(base+"/rtb/"+exchange, "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			answer, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == 200
		})
		var r struct {
			SeatBid []struct {
				Bid []bid `json:"bid"`
			} `json:"seatbid"`
		}
		if err := json.Unmarshal(answer, &r); err != nil || len(r.SeatBid) != 1 || len(r.SeatBid[0].Bid) != 1 {
			t.Fatalf("%v: %s", err, answer)
		}
		return r.SeatBid[0].Bid[0]
	}
	// Notices come from exchanges' servers; the markup's impression from
	// a viewer's browser (a crawler's is not counted).
	call := func(u, price string) {
		t.Helper()
		u = strings.NewReplacer("http://bidder.example", base, "${AUCTION_PRICE}", price, "${AUCTION_LOSS}", "102").Replace(u)
		if code, body := getAs(t, http.DefaultClient, u, browserUA); code != 200 {
			t.Fatalf("%s: %d %s", u, code, body)
		}
	}

	// On the win: nurl three times, burl once; two lost bids' loss notices,
	// one with the winner's price (above ours), one with none.
	won := bidOn("onwin", "example-6.2.1-banner.json", "auction-won")
	for range 3 {
		call(won.NURL, "1.15")
	}
	call(won.BURL, "1.1")
	lost := bidOn("onwin", "example-6.2.1-banner.json", "auction-lost")
	call(lost.LURL, "2.50")
	call(lost.LURL, "2.50")
	unpriced := bidOn("onwin", "example-6.2.1-banner.json", "auction-unpriced")
	call(unpriced.LURL, "")

	// On the view: the VAST impression, twice, with a price of the
	// viewer's making; then the exchange's billing notice.
	video := bidOn("onview", "example-6.2.4-video.json", "auction-video")
	if strings.Contains(video.AdM, "/t/bill/") {
		t.Fatalf("the VAST holds the billing URL: %s", video.AdM)
	}
	imp := regexp.MustCompile(`http://bidder\.example/t/bi/[A-Za-z0-9_-]+`).FindString(video.AdM)
	if imp == "" {
		t.Fatalf("no impression URL in %s", video.AdM)
	}
	for range 2 {
		call(imp+"?price=0.01", "")
	}
	call(video.BURL, "0.5")

	code, metrics := get(t, "http://"+m.AdminAddr()+"/metrics")
	for _, want := range []string{`tsubame_rtb_bills_total{exchange="onwin"} 1`, `tsubame_rtb_bills_total{exchange="onview"} 1`,
		`tsubame_rtb_win_repeats_total{exchange="onwin"} 2`, `tsubame_rtb_losses_total{exchange="onwin"} 2`,
		`tsubame_rtb_loss_repeats_total{exchange="onwin"} 1`, `tsubame_rtb_bid_imps_total{exchange="onview"} 1`} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(metrics, "tsubame_rtb_"))
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	// The lines, by bid: event valid price reason and flags.
	lines := map[string][]string{}
	for _, fields := range accessEvents(t, logDir) {
		if ev := fields["event"]; ev != "bid" {
			reason := fields["reason"]
			if reason == "" {
				reason = "-"
			}
			l := ev + " " + fields["valid"] + " " + fields["price"] + " " + reason
			for _, k := range []string{"clearing", "price_missing"} {
				if v, ok := fields[k]; ok {
					l += " " + k + ":" + v
				}
			}
			lines[fields["decision"]] = append(lines[fields["decision"]], l)
		}
	}
	for _, tc := range []struct {
		id   string
		want []string
	}{
		{won.ID, []string{
			"win true 1150000 -", "bill true 1150000 -",
			"win false 1150000 repeat", "bill false 1150000 repeat",
			"win false 1150000 repeat", "bill false 1150000 repeat",
			"bill false 1100000 bill_on"}},
		{lost.ID, []string{"loss true 1200000 - clearing:2500000", "loss false 1200000 repeat clearing:2500000"}},
		{unpriced.ID, []string{"loss true 1200000 - price_missing:true"}},
		{video.ID, []string{
			"bill true 4500000 -", "bid_imp true 4500000 -",
			"bill false 4500000 repeat", "bid_imp false 4500000 repeat",
			"bill false 500000 bill_on"}},
	} {
		if got := strings.Join(lines[tc.id], "\n"); got != strings.Join(tc.want, "\n") {
			t.Errorf("the lines of bid %s:\n%s\nwant\n%s", tc.id, got, strings.Join(tc.want, "\n"))
		}
	}

	// The reports: per exchange, wins, losses and bills, the bills'
	// clearing prices as spend; the table has a losses column.
	code, out, errOut := runCmd(t, env, "", "report", "-by", "exchange", "-format", "json")
	if code != 0 {
		t.Fatalf("report: %d %s", code, errOut)
	}
	var rep struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Rows) != 2 {
		t.Fatalf("report: %v %s", err, out)
	}
	for _, row := range rep.Rows {
		want := map[string]any{"bids": 3.0, "wins": 1.0, "losses": 2.0, "bills": 1.0, "impressions": 1.0, "spend": "0.00115",
			"invalid_wins": 2.0, "invalid_losses": 1.0, "invalid_bills": 3.0, "bid_imps": 0.0}
		if row["exchange"] == "onview" {
			want = map[string]any{"bids": 1.0, "wins": 0.0, "losses": 0.0, "bills": 1.0, "impressions": 1.0, "spend": "0.0045",
				"invalid_bills": 2.0, "bid_imps": 1.0, "invalid_impressions": 1.0}
		}
		for k, w := range want {
			if row[k] != w {
				t.Errorf("report %s %s = %v, want %v (%s)", row["exchange"], k, row[k], w, out)
			}
		}
	}
	code, out, errOut = runCmd(t, env, "", "report", "-by", "exchange")
	if head := strings.Fields(strings.SplitN(out, "\n", 2)[0]); code != 0 || !strings.Contains(strings.Join(head, " "), "bids wins losses bills") {
		t.Errorf("report table: %d %s %s", code, out, errOut)
	}
}
