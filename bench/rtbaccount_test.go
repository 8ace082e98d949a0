package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"tsubame"
)

// The account is valid, of the sizes the report states, every campaign
// with a daily budget, and about half its line items on 6.2.3's app.
func TestRTBAccountSet(t *testing.T) {
	set := rtbAccountSet()
	if err := set.Validate(); err != nil {
		t.Fatalf("the account does not validate: %v", err)
	}
	if got, want := [3]int{len(set.Advertisers), len(set.Campaigns), len(set.LineItems)},
		[3]int{rtbAcctAdvertisers, rtbAcctCampaigns, rtbAcctLineItems}; got != want {
		t.Fatalf("advertisers, campaigns, line items = %v, want %v", got, want)
	}
	for _, c := range set.Campaigns {
		if c.Budget.Daily <= 0 {
			t.Errorf("campaign %s has no daily budget", c.ID)
		}
	}
	onApp := 0
	for _, li := range set.LineItems {
		if contains(li.Targeting.Apps, rtbApp(0)) {
			onApp++
		}
	}
	if onApp < rtbAcctLineItems/3 || onApp > 2*rtbAcctLineItems/3 {
		t.Fatalf("%d of %d line items are on app %s, want about half", onApp, rtbAcctLineItems, rtbApp(0))
	}
}

// The nginx + Lua bidder of the account bids on 6.2.3, takes each bid's
// price from its campaign's budget (the shared dict's sum goes down by
// exactly the prices bid) and writes a JSON line a request, which
// countLuaJSONBids counts.
func TestLuaAccountBidder(t *testing.T) {
	for _, f := range []string{"/usr/lib/nginx/modules/ngx_http_lua_module.so", "/usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so"} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("the nginx + Lua bidder needs %s (Debian's libnginx-mod-http-lua and lua-cjson; make bench-tools installs them)", f)
		}
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Skip("the nginx + Lua bidder needs nginx (Debian's nginx-light; make bench-tools installs it)")
	}
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if err := writeRTBAccountFiles(dir, port-4); err != nil {
		t.Fatal(err)
	}
	// The budgets are read back through a location of the test's own.
	conf, err := os.ReadFile(filepath.Join(dir, "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	probe := []byte(`    location = /budgets {
      content_by_lua_block {
        local sum = 0
        for _, k in ipairs(ngx.shared.budgets:get_keys(0)) do sum = sum + ngx.shared.budgets:get(k) end
        ngx.print(string.format("%d", sum))
      }
    }
    location /rtb/ {`)
	conf = replaceOnce(t, conf, []byte("    location /rtb/ {"), probe)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var p procs
	defer p.stop()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if _, err := runNginx(ctx, &p, dir, addr, conf); err != nil {
		t.Fatal(err)
	}
	budgets := func() int64 {
		t.Helper()
		s, err := httpGet("http://" + addr + "/budgets")
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("budgets: %q: %v", s, err)
		}
		return n
	}
	var want int64
	for _, c := range rtbAccountSet().Campaigns {
		want += int64(c.Budget.Daily)
	}
	if got := budgets(); got != want {
		t.Fatalf("the budgets start at %d micro-units, want the campaigns' daily budgets' %d", got, want)
	}
	const n = 20
	var spent int64
	for range n {
		body, err := httpPost("http://"+addr+"/rtb/bench", rtbExample, "X-Exchange-Token", rtbToken)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			SeatBid []struct {
				Bid []struct {
					Price json.Number `json:"price"`
					NURL  string      `json:"nurl"`
					BURL  string      `json:"burl"`
					LURL  string      `json:"lurl"`
				} `json:"bid"`
			} `json:"seatbid"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.SeatBid) != 1 || len(r.SeatBid[0].Bid) != 1 {
			t.Fatalf("no bid on 6.2.3: %v %.300s", err, body)
		}
		b := r.SeatBid[0].Bid[0]
		if b.NURL == "" || b.BURL == "" || b.LURL == "" {
			t.Fatalf("a bid without its three notice URLs: %.300s", body)
		}
		var cpm tsubame.Money
		if err := json.Unmarshal([]byte(b.Price), &cpm); err != nil {
			t.Fatal(err)
		}
		spent += (int64(cpm) + 500) / 1000 // the price of one impression, rounded as the bidder does
	}
	if got := budgets(); got != want-spent {
		t.Fatalf("after %d bids the budgets hold %d, want %d (%d spent)", n, got, want-spent, spent)
	}
	var c rtbCount
	deadline := time.Now().Add(30 * time.Second)
	for c.Requests < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // the log's buffer is flushed every 100 ms
		if c, _, err = countLuaJSONBids(filepath.Join(dir, "rtb-lua.log"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if c.Requests != n || c.Bids != n {
		t.Fatalf("the JSON log counts %d requests and %d bids, want %d and %d", c.Requests, c.Bids, n, n)
	}
}

func replaceOnce(t *testing.T, in, old, new []byte) []byte {
	t.Helper()
	if n := bytes.Count(in, old); n != 1 {
		t.Fatalf("%q is in the configuration %d times, want once", old, n)
	}
	return bytes.Replace(in, old, new, 1)
}

// The goals' ratios pair each round's bidders: a round where the box was
// slow for both leaves the ratio as it was, where a ratio of medians
// takes each bidder's median from a different round.
func TestPairedRatio(t *testing.T) {
	runs := func(rates ...float64) []rtbAcctRun {
		rs := make([]rtbAcctRun, len(rates))
		for i, r := range rates {
			rs[i].CPUPerReq = time.Duration(r)
		}
		return rs
	}
	f := func(x rtbAcctRun) float64 { return float64(x.CPUPerReq) }
	a, b := runs(20, 40, 60), runs(10, 20, 30) // 2× in every round
	if got := pairedRatio(a, b, f); got != 2 {
		t.Errorf("2× in every round: %v", got)
	}
	a, b = runs(45, 35, 33), runs(26, 26, 20) // 1.73×, 1.35×, 1.65×
	if got, want := pairedRatio(a, b, f), 33.0/20; got != want {
		t.Errorf("the rounds' median ratio: %v, want %v", got, want)
	}
	if m := median(a, f) / median(b, f); m == pairedRatio(a, b, f) {
		t.Errorf("the ratio of medians %v should differ here", m)
	}
	a, b = runs(30, 45, 40, 20), runs(20, 0, 20, 10) // 1.5×, a failed round, 2×, 2×
	if got := pairedRatio(a, b, f); got != 2 {
		t.Errorf("without the failed round: %v, want 2", got)
	}
	a, b = runs(30, 40), runs(20, 20) // an even count: the middle two's mean
	if got := pairedRatio(a, b, f); got != 1.75 {
		t.Errorf("two rounds: %v, want 1.75", got)
	}
	if got := pairedRatio(runs(1), runs(0), f); !math.IsNaN(got) {
		t.Errorf("no round measured: %v, want NaN", got)
	}
}

// Each round runs every bidder once; the JSON bidder runs right beside the
// two it is compared with; and each of those pairs runs in both orders
// over two rounds.
func TestRTBAcctOrder(t *testing.T) {
	const json, ltsv, procs0, lua = 0, 1, 2, 3
	first := map[[2]int]int{} // pair -> rounds where the pair's first ran first
	for r := range 4 {
		order := rtbAcctOrder(r)
		at := map[int]int{}
		for pos, b := range order {
			if _, dup := at[b]; dup {
				t.Fatalf("round %d runs bidder %d twice: %v", r, b, order)
			}
			at[b] = pos
		}
		if len(at) != 4 {
			t.Fatalf("round %d runs %d bidders: %v", r, len(at), order)
		}
		for _, p := range [][2]int{{json, ltsv}, {json, lua}} {
			if d := at[p[0]] - at[p[1]]; d != 1 && d != -1 {
				t.Errorf("round %d: bidders %d and %d do not run back to back: %v", r, p[0], p[1], order)
			}
			if at[p[0]] < at[p[1]] {
				first[p]++
			}
		}
		if at[procs0] != 0 && at[procs0] != 3 {
			t.Errorf("round %d: the variant without a goal runs between the pairs: %v", r, order)
		}
	}
	for _, p := range [][2]int{{json, ltsv}, {json, lua}} {
		if first[p] != 2 {
			t.Errorf("over 4 rounds bidder %d ran before %d in %d, want 2", p[0], p[1], first[p])
		}
	}
}
