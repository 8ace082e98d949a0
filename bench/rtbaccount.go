package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"tsubame"
)

// The bidder on a real account (make bench-rtb, and the end of make
// bench): 57 line items of 7 advertisers in 10 campaigns, every campaign
// with a daily budget (half of them a total too), OpenRTB 2.6 example
// 6.2.3 posted at c=64 to four bidders in turn each round (rtbAcctOrder): Tsubame with
// its access log in JSON (what Kafka and ClickHouse users run), the same
// with LTSV (the log format's cost), the JSON one on Go's default GOMAXPROCS,
// and an nginx + Lua bidder doing the
// same work (the matching of the rtb scenario, the price taken from the
// campaign's budget in a lua_shared_dict, the notice and click URLs signed
// with HMAC, a JSON event line). Each round then sends each bidder the
// same fixed rate with vegeta (open loop), a share of what the Lua bidder
// answers vegeta at its fastest in that round: at full load on two shared
// cores a p99 measures the scheduler, at a rate below every bidder's
// maximum it measures the bidder. CPU per request is the process's (nginx: its
// workers') user and system time over the requests answered; GC is
// Tsubame's own count and pause time from /metrics. Every server runs its
// shipped defaults (GOGC, the access log's durability, the exchange's
// reservation).
const (
	rtbAcctBegin       = "<!-- bench-rtb:begin -->"
	rtbAcctEnd         = "<!-- bench-rtb:end -->"
	rtbAcctAdvertisers = 7
	rtbAcctCampaigns   = 10
	rtbAcctLineItems   = 57
	// rtbAcctRateShare is the fixed rate's share of the Lua bidder's
	// throughput under vegeta at its fastest. Not 70 %: vegeta (Go's
	// HTTP client) costs the two shared cores several times what either
	// bidder does per request, and open loop at half its closed-loop
	// ceiling already queues in vegeta itself, whatever the server.
	rtbAcctRateShare = 0.35
)

// rtbAccountSet is the account: 7 advertisers (one of them apple.com,
// which 6.2.3 blocks), 10 campaigns, each with a daily budget of 250,000
// USD (every other one a total of 1,000,000 too: far above what a run
// spends, so that no bidder runs out and answers the cheaper 204), 57
// line items of priorities 1 to 3 on app 12345 (about half of them),
// other apps or sites, banners of three sizes whose categories 6.2.3
// sometimes blocks, CPMs of 0.30 to 4.00.
func rtbAccountSet() *tsubame.CampaignSet {
	r := rand.New(rand.NewPCG(2026, 46))
	set := &tsubame.CampaignSet{Currency: "USD"}
	cats := []string{"IAB1", "IAB3", "IAB7-39", "IAB8-5", "IAB9", "IAB12", "IAB15-10", "IAB19", "IAB20", "IAB25"}
	for a := range rtbAcctAdvertisers {
		id := fmt.Sprintf("adv%d", a)
		domain := id + ".example"
		if a == 3 {
			domain = "apple.com"
		}
		addBannerAdvertiser(set, r, id, domain, cats)
	}
	for c := range rtbAcctCampaigns {
		adv := fmt.Sprintf("adv%d", c%rtbAcctAdvertisers)
		camp := &tsubame.Campaign{ID: fmt.Sprintf("camp%d", c), Advertiser: adv, Timezone: "UTC",
			Budget: tsubame.Budget{Daily: 250_000 * tsubame.Money(1_000_000)}}
		if c%2 == 0 {
			camp.Budget.Total = 1_000_000 * tsubame.Money(1_000_000)
		}
		set.Campaigns = append(set.Campaigns, camp)
	}
	for i := range rtbAcctLineItems {
		camp := set.Campaigns[i%rtbAcctCampaigns]
		li := &tsubame.LineItem{ID: fmt.Sprintf("li-%02d", i), Campaign: camp.ID, Priority: 1 + r.IntN(3), Weight: 1 + r.IntN(10),
			CPM:       tsubame.Money(300_000 + 10_000*r.Int64N(371)), // 0.30 to 4.00
			Creatives: []string{fmt.Sprintf("cr-%s-%d", camp.Advertiser, r.IntN(3))}}
		switch n := r.IntN(4); {
		case n < 2:
			li.Targeting.Apps = []string{rtbApp(0)}
			if r.IntN(2) == 0 {
				li.Targeting.Apps = append(li.Targeting.Apps, rtbApp(1+r.IntN(rtbApps-1)))
			}
		case n == 2:
			li.Targeting.Apps = []string{rtbApp(1 + r.IntN(rtbApps-1))}
		default:
			li.Targeting.Sites = []string{rtbSite(r.IntN(rtbSites))}
		}
		set.LineItems = append(set.LineItems, li)
	}
	return set
}

// rtbAccountConfig is the configuration of the account's Tsubame: one
// exchange, the access log in format (json or ltsv), everything else its
// defaults.
func rtbAccountConfig(format string) string {
	return `ads:
  currency: USD
access_log:
  format: ` + format + `
rtb:
  notice_url: http://bidder.example
  exchanges:
    bench:
      seat: bench-seat
      token_header: X-Exchange-Token
      token: ` + rtbToken + `
      network_ms: 20
`
}

// luaAccountBidderConf is luaBidderConf taking each bid's price from its
// campaign's daily budget, held in a lua_shared_dict (an atomic
// decrement, given back when it would go under zero: the budget is
// never overspent across workers), and writing a JSON line (nginx's
// escape=json) for every request.
func luaAccountBidderConf() (string, error) {
	conf := luaBidderConf
	for _, r := range [][2]string{
		{`  log_format rtb '$time_iso8601 $request_id $status $bid_line';
  access_log %[2]s/rtb-lua.log rtb buffer=64k flush=100ms;`,
			`  lua_shared_dict budgets 1m;
  log_format rtbjson escape=json '{"time":"$time_iso8601","request_id":"$request_id","remote":"$remote_addr",'
    '"method":"$request_method","path":"$uri","status":$status,"bytes":$body_bytes_sent,"ms":$request_time,'
    '"exchange":"bench","auction":"$bid_auction","bid":"$bid_id","line_item":"$bid_line_item",'
    '"campaign":"$bid_campaign","creative":"$bid_creative","price":"$bid_price"}';
  access_log %[2]s/rtb-lua.log rtbjson buffer=64k flush=100ms;`},
		{`    for _, c in ipairs(set.campaigns) do advOf[c.id] = c.advertiser end`,
			`    for _, c in ipairs(set.campaigns) do
      advOf[c.id] = c.advertiser
      ngx.shared.budgets:set(c.id, math.floor(tonumber(c.budget.daily) * 1e6 + 0.5))
    end
    budgets = ngx.shared.budgets`},
		{`      set $bid_line "-";`, `      set $bid_auction ""; set $bid_id ""; set $bid_line_item ""; set $bid_campaign ""; set $bid_creative ""; set $bid_price "";`},
		{`              local l, c = pick[1], pick[2]
`, `              local l, c = pick[1], pick[2]
              local cost = math.floor(l.cpm * 1000 + 0.5) -- micro-units of one impression
              local left = budgets:incr(l.campaign, -cost)
              if left and left < 0 then budgets:incr(l.campaign, cost) end
              if left and left >= 0 then
`},
		{`              ngx.var.bid_line = "bid:" .. id .. " " .. l.id .. " " .. string.format("%%.6f", price)
`, `              local v = ngx.var
              v.bid_auction, v.bid_id, v.bid_line_item, v.bid_campaign, v.bid_creative = req.id, id, l.id, l.campaign, c.id
              v.bid_price = string.format("%%.6f", price)
              end
`},
	} {
		if strings.Count(conf, r[0]) != 1 {
			return "", fmt.Errorf("the Lua bidder's configuration no longer has %.60q once", r[0])
		}
		conf = strings.Replace(conf, r[0], r[1], 1)
	}
	return conf, nil
}

// writeRTBAccountFiles writes the account's files into dir, the Lua
// bidder's listening on port+4 as in the measurement.
func writeRTBAccountFiles(dir string, port int) error {
	b, err := json.Marshal(rtbAccountSet())
	if err != nil {
		return err
	}
	conf, err := luaAccountBidderConf()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	campaigns := filepath.Join(dir, "campaigns.json")
	for name, body := range map[string][]byte{
		"campaigns.json":    b,
		"tsubame-json.yaml": []byte(rtbAccountConfig("json")),
		"tsubame-ltsv.yaml": []byte(rtbAccountConfig("ltsv")),
		"rtb.lua":           []byte(rtbScript()),
		"nginx.conf":        fmt.Appendf(nil, conf, cores(), dir, "127.0.0.1:"+strconv.Itoa(port+4), campaigns),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// countLuaJSONBids counts the account's Lua bidder's answers in its JSON
// access log from offset on, as countLuaBids does the text one's.
func countLuaJSONBids(log string, offset int64) (rtbCount, int64, error) {
	return countLuaLines(log, offset, func(line string) (answered, bid bool) {
		var ev struct {
			Path   string `json:"path"`
			Status int    `json:"status"`
			Bid    string `json:"bid"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil || !strings.HasPrefix(ev.Path, "/rtb/") || ev.Status != 200 && ev.Status != 204 {
			return false, false
		}
		return true, ev.Bid != ""
	})
}

// rtbAcctOrder is the order the bidders (tsubame-json, tsubame-ltsv,
// tsubame-json-procs0, nginx-lua, as runRTBAccount starts them) run in in
// round r: the JSON bidder beside each bidder a goal holds it against (the
// LTSV one and the Lua one), the variant with no goal at an end, and every
// other round reversed. The box's speed drifts within a round as well as
// between rounds; a fixed order would give the drift to one side of a
// pair every round.
func rtbAcctOrder(r int) []int {
	order := []int{1, 0, 3, 2}
	if r%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// rtbBidder is one of the account's bidders.
type rtbBidder struct {
	Name string
	addr string
	cpu  func() time.Duration
	// count returns the requests answered and bids made so far (each
	// round's are the difference).
	count func() (rtbCount, error)
	// admin is Tsubame's admin listener (its /metrics), empty for nginx.
	admin string
}

// rtbAcctRun is one bidder's figures in one round.
type rtbAcctRun struct {
	Wrk        wrkResult
	CPUPerReq  time.Duration // over the wrk run
	Answered   rtbCount      // over the wrk run
	Fixed      vegetaResult
	LuaMax     float64       // the Lua bidder's throughput under vegeta at its fastest, which Fixed.Rate is a share of
	GCs        int64         // Tsubame: collections over the round
	GCPause    time.Duration // and their stop-the-world pauses, summed
	GCPauseMax time.Duration // the longest pause since start (Tsubame)
}

func runRTBAccount(ctx context.Context, bin string, port, rounds int, d time.Duration, out string) error {
	root, err := os.MkdirTemp("", "tsubame-rtb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if err := writeStatic(root); err != nil {
		return err
	}
	b, err := json.Marshal(rtbAccountSet())
	if err != nil {
		return err
	}
	campaigns, script := filepath.Join(root, "campaigns.json"), filepath.Join(root, "rtb.lua")
	if err := os.WriteFile(campaigns, b, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(script, []byte(rtbScript()), 0o600); err != nil {
		return err
	}
	addrs := make([]string, 7) // tsubame json, its admin, tsubame ltsv, its admin, tsubame json procs0, its admin, nginx + Lua
	for i := range addrs {
		addrs[i] = "127.0.0.1:" + strconv.Itoa(port+i)
		if err := portFree(addrs[i]); err != nil {
			return err
		}
	}
	var p procs
	defer p.stop()
	var bidders []rtbBidder
	for i, format := range []string{"json", "ltsv", "json"} {
		name := format
		if i == 2 {
			name += "-procs0"
		}
		dir := filepath.Join(root, "tsubame-"+name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		conf := filepath.Join(dir, "rtb.yaml")
		if err := os.WriteFile(conf, []byte(rtbAccountConfig(format)), 0o600); err != nil {
			return err
		}
		if err := importCampaigns(ctx, bin, dir, campaigns); err != nil {
			return err
		}
		addr, admin := addrs[2*i], addrs[2*i+1]
		env := []string{"TSUBAME_CONFIG=" + conf}
		if i == 2 { // without the default's extra run queue
			env = append(env, "TSUBAME_SERVER_EXTRA_PROCS=0")
		}
		cmd, err := startTsubame(ctx, &p, bin, dir, addr, admin, "http://127.0.0.1:9", env...)
		if err != nil {
			return err
		}
		pid := cmd.Process.Pid
		bidders = append(bidders, rtbBidder{Name: "tsubame-" + name, addr: addr, admin: admin,
			cpu: func() time.Duration { return procCPU(pid) }, count: func() (rtbCount, error) { return scrapeRTB(admin) }})
	}
	luaDir := filepath.Join(root, "nginx-lua")
	conf, err := luaAccountBidderConf()
	if err != nil {
		return err
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so"); err != nil {
		return fmt.Errorf("the nginx + Lua bidder needs lua-cjson (Debian's lua-cjson): %w", err)
	}
	master, err := runNginx(ctx, &p, luaDir, addrs[6], fmt.Appendf(nil, conf, cores(), luaDir, addrs[6], campaigns))
	if err != nil {
		return err
	}
	luaLog := filepath.Join(luaDir, "rtb-lua.log")
	var luaOffset int64
	var luaTotal rtbCount
	bidders = append(bidders, rtbBidder{Name: "nginx-lua", addr: addrs[6],
		cpu: func() time.Duration { return childrenCPU(master) },
		count: func() (rtbCount, error) {
			time.Sleep(300 * time.Millisecond) // the log's buffer is flushed every 100 ms
			c, off, err := countLuaJSONBids(luaLog, luaOffset)
			luaOffset = off
			luaTotal.Requests += c.Requests
			luaTotal.Bids += c.Bids
			return luaTotal, err
		}})
	if err := waitRTB(ctx, addrs[0], addrs[2], addrs[6]); err != nil {
		return err
	}
	// Warm up: the connections, the index, the budgets' first leases.
	for _, bd := range bidders {
		if _, err := runWrk(ctx, "http://"+bd.addr+"/rtb/bench", 2, rtbConns, 2*time.Second, script); err != nil {
			return err
		}
	}
	res := make([][]rtbAcctRun, len(bidders)) // by bidder, then round
	for r := range rounds {
		fmt.Fprintf(os.Stderr, "rtb account: round %d\n", r+1)
		runs := make([]rtbAcctRun, len(bidders))
		gc0 := make([]gcStats, len(bidders))
		order := rtbAcctOrder(r)
		for _, i := range order {
			bd := bidders[i]
			if bd.admin != "" {
				if gc0[i], err = scrapeGC(bd.admin); err != nil {
					return err
				}
			}
			before, err := bd.count()
			if err != nil {
				return err
			}
			cpu0 := bd.cpu()
			if runs[i].Wrk, err = runWrk(ctx, "http://"+bd.addr+"/rtb/bench", 2, rtbConns, d, script); err != nil {
				return err
			}
			cpu := bd.cpu() - cpu0
			after, err := bd.count()
			if err != nil {
				return err
			}
			runs[i].Answered = rtbCount{Who: bd.Name, Requests: after.Requests - before.Requests, Bids: after.Bids - before.Bids}
			if n := runs[i].Answered.Requests; n > 0 {
				runs[i].CPUPerReq = cpu / time.Duration(n)
			}
		}
		// The fixed rate is a share of the Lua bidder's maximum under
		// vegeta itself (64 workers, as many connections), which costs the
		// shared cores more per request than wrk does.
		luaMax, err := runVegetaTarget(ctx, rtbTarget(bidders[len(bidders)-1].addr), 0, d)
		if err != nil {
			return err
		}
		rate := int(rtbAcctRateShare * luaMax.Throughput)
		if rate < 100 {
			return fmt.Errorf("the nginx + Lua bidder answered vegeta %.0f req/s: too few for a fixed rate", luaMax.Throughput)
		}
		for _, i := range order {
			bd := bidders[i]
			if runs[i].Fixed, err = runVegetaTarget(ctx, rtbTarget(bd.addr), rate, d); err != nil {
				return err
			}
			runs[i].LuaMax = luaMax.Throughput
			if bd.admin != "" {
				gc, err := scrapeGC(bd.admin)
				if err != nil {
					return err
				}
				runs[i].GCs, runs[i].GCPause, runs[i].GCPauseMax = gc.count-gc0[i].count, gc.sum-gc0[i].sum, gc.max
			}
		}
		for i := range bidders {
			res[i] = append(res[i], runs[i])
		}
	}
	return writeRTBAccountSection(out, d, bidders, res)
}

// childrenCPU is the user and system time of pid's child processes
// (nginx's workers).
func childrenCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			sum += procCPU(c)
		}
	}
	return sum
}

// gcStats is a Go server's collections so far, from go_gc_duration_seconds.
type gcStats struct {
	count    int64
	sum, max time.Duration
}

func scrapeGC(admin string) (gcStats, error) {
	body, err := httpGet("http://" + admin + "/metrics")
	if err != nil {
		return gcStats{}, err
	}
	var g gcStats
	found := false
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_gc_duration_seconds_count":
			g.count, found = int64(v), true
		case "go_gc_duration_seconds_sum":
			g.sum = time.Duration(v * 1e9)
		case `go_gc_duration_seconds{quantile="1"}`:
			g.max = time.Duration(v * 1e9)
		}
	}
	if err := sc.Err(); err != nil {
		return gcStats{}, err
	}
	if !found {
		return gcStats{}, errors.New(admin + "/metrics has no go_gc_duration_seconds")
	}
	return g, nil
}

// rtbTarget is the scenario's request to the bidder on addr, for vegeta.
func rtbTarget(addr string) vegeta.Target {
	return vegeta.Target{Method: "POST", URL: "http://" + addr + "/rtb/bench", Body: []byte(rtbExample),
		Header: http.Header{"Content-Type": {"application/json"}, "X-Exchange-Token": {rtbToken}}}
}

// runVegetaTarget sends rate requests a second to t for d, open loop, and
// returns the latencies; a rate of 0 is as fast as 64 workers go.
func runVegetaTarget(ctx context.Context, t vegeta.Target, rate int, d time.Duration) (vegetaResult, error) {
	opts := []func(*vegeta.Attacker){vegeta.Connections(64), vegeta.Timeout(5 * time.Second)}
	if rate == 0 {
		opts = append(opts, vegeta.Workers(64), vegeta.MaxWorkers(64), vegeta.MaxConnections(64))
	} else {
		// Bounded: unbounded, vegeta meets a server's pause with new
		// workers on new connections, a storm it never recovers from on
		// shared cores; 128 in flight is a 128 ms pause at 1,000/s.
		opts = append(opts, vegeta.MaxWorkers(128), vegeta.MaxConnections(128))
	}
	att := vegeta.NewAttacker(opts...)
	var m vegeta.Metrics
	for r := range att.Attack(vegeta.NewStaticTargeter(t), vegeta.Rate{Freq: rate, Per: time.Second}, d, "bench") {
		if ctx.Err() != nil {
			att.Stop()
		}
		m.Add(r)
	}
	m.Close()
	if ctx.Err() != nil {
		return vegetaResult{}, ctx.Err()
	}
	if m.Requests == 0 {
		return vegetaResult{}, errors.New("vegeta sent nothing")
	}
	return vegetaResult{Rate: rate, P50: m.Latencies.P50, P99: m.Latencies.P99, Max: m.Latencies.Max, Requests: m.Requests,
		Success: m.Success, Throughput: m.Throughput}, nil
}

func writeRTBAccountSection(file string, d time.Duration, bidders []rtbBidder, res [][]rtbAcctRun) error {
	var md strings.Builder
	fmt.Fprintf(&md, "%s\n## The bidder on a real account (`make bench-rtb`, also run by `make bench`)\n\n", rtbAcctBegin)
	fmt.Fprintf(&md, "OpenRTB 2.6 example 6.2.3 posted to four bidders over one account (`bench/rtbaccount.go`, fixed seed: %d line items of %d advertisers in %d campaigns, "+
		"every campaign with a daily budget and every other one a total, about half the line items on the example's app), measured %s on this machine's %d cores beside the load tools. "+
		"Each round runs, for each bidder in turn (tsubame-ltsv, tsubame-json, nginx-lua, tsubame-json-procs0, and every other round the reverse: each ratio's two bidders run back to back, neither always first), wrk at c=%d for %v, then vegeta (open loop) at %.0f %% of what the nginx + Lua bidder answered it at its fastest in that round (vegeta with 64 workers, for %v; vegeta costs the shared cores more per request than wrk), for %v. "+
		"**tsubame-json** is Tsubame with its access log in JSON lines, **tsubame-ltsv** the same server with LTSV, both on their shipped defaults; **tsubame-json-procs0** is tsubame-json with `server.extra_procs: 0` (GOMAXPROCS as many as the cores, Go's default, where the shipped default adds one); "+
		"**nginx-lua** is nginx with its Lua module doing the same work: lua-cjson decoding and encoding, the same matching, each bid's price taken from its campaign's budget in a `lua_shared_dict`, "+
		"the win, billing, loss and click URLs signed with HMAC, a JSON line (`escape=json`) in a buffered access log. "+
		"CPU per request is the server's user and system time (nginx: its workers') over the requests it answered during the wrk run; GC is Tsubame's collections and their summed pauses over the round (`go_gc_duration_seconds`).\n\n",
		rtbAcctLineItems, rtbAcctAdvertisers, rtbAcctCampaigns, time.Now().UTC().Format("2006-01-02 15:04 UTC"), cores(), rtbConns, d, 100*rtbAcctRateShare, d, d)
	fmt.Fprintln(&md, "| round | bidder | c=64 req/s | bids | p50 / p99 ms | CPU per request | vegeta rate (the Lua bidder's fastest) | vegeta p50 / p99 / max ms | GCs, pauses (max since start) |")
	fmt.Fprintln(&md, "|---|---|---:|---:|---|---:|---:|---|---|")
	for r := range res[0] {
		for i, bd := range bidders {
			x := res[i][r]
			gc := "–"
			if bd.admin != "" {
				gc = fmt.Sprintf("%d, %.1f ms (%.2f ms)", x.GCs, ms64(x.GCPause), ms64(x.GCPauseMax))
			}
			fmt.Fprintf(&md, "| %d | %s | %s | %s | %.2f / %.2f | %.1f µs | %d/s (%s/s) | %.2f / %.2f / %.1f (%.1f %% ok) | %s |\n",
				r+1, bd.Name, num(x.Wrk.OKRate()), num(float64(x.Answered.Bids)), ms64(x.Wrk.P50), ms64(x.Wrk.P99),
				float64(x.CPUPerReq)/1e3, x.Fixed.Rate, num(x.LuaMax), ms64(x.Fixed.P50), ms64(x.Fixed.P99), ms64(x.Fixed.Max), 100*x.Fixed.Success, gc)
		}
	}
	json, ltsv, lua := res[0], res[1], res[len(res)-1]
	rps := func(x rtbAcctRun) float64 { return x.Wrk.OKRate() }
	p99 := func(x rtbAcctRun) float64 { return ms64(x.Wrk.P99) }
	fixed := func(x rtbAcctRun) float64 { return ms64(x.Fixed.P99) }
	cpu := func(x rtbAcctRun) float64 { return float64(x.CPUPerReq) / 1e3 }
	fmt.Fprintf(&md, "\nOver %d rounds. Each ratio is the median of the rounds' own ratios: a round's bidders run back to back, "+
		"while this shared box's speed drifts between rounds (the same bidder's throughput above varies by as much as the ratios). "+
		"The figures after it are each bidder's median over the rounds, and their ratio.\n\n| goal | measured | met |\n|---|---|---|\n", len(json))
	goal := func(what string, a, b []rtbAcctRun, f func(rtbAcctRun) float64, limit float64, atLeast bool, unit string) {
		v := pairedRatio(a, b, f)
		met := v >= limit
		if !atLeast {
			met = v <= limit
		}
		yes := "**no**"
		if met {
			yes = "yes"
		}
		ma, mb := median(a, f), median(b, f)
		fmt.Fprintf(&md, "| %s | %.3f× (medians %s / %s %s: %.3f×) | %s |\n", what, v, fig(ma), fig(mb), unit, ma/mb, yes)
	}
	goal("throughput ≥ 2× the nginx + Lua bidder (JSON log)", json, lua, rps, 2, true, "req/s")
	goal("p99 at a fixed rate ≤ the nginx + Lua bidder's", json, lua, fixed, 1, false, "ms")
	goal("p99 at c=64 ≤ 2× the nginx + Lua bidder's", json, lua, p99, 2, false, "ms")
	goal("the JSON log within 10 % of LTSV: throughput ≥ 0.9× LTSV's", json, ltsv, rps, 0.9, true, "req/s")
	procs0 := res[2]
	fmt.Fprintf(&md, "| c=64 with `server.extra_procs: 0` (no target): throughput, p99 over the default's | %.3f×, %.3f× (medians %.2f / %.2f ms) | – |\n",
		pairedRatio(procs0, json, rps), pairedRatio(procs0, json, p99), median(procs0, p99), median(json, p99))
	fmt.Fprintf(&md, "| CPU per request: Tsubame (JSON log) over the nginx + Lua bidder's (no target) | %.3f× (medians %.1f / %.1f µs) | – |\n",
		pairedRatio(json, lua, cpu), median(json, cpu), median(lua, cpu))
	fmt.Fprintf(&md, "\n%s\n", rtbAcctEnd)
	return replaceSection(file, rtbAcctBegin, rtbAcctEnd, md.String())
}

// pairedRatio is the median over rounds of f(a)/f(b) in each round (of
// the two middle ones, their mean); a round where b measured nothing (a
// failed run) is left out rather than counted as infinite, and none left
// is NaN, which the table prints as such.
func pairedRatio(a, b []rtbAcctRun, f func(rtbAcctRun) float64) float64 {
	var r []float64
	for i := range min(len(a), len(b)) {
		if d := f(b[i]); d > 0 {
			r = append(r, f(a[i])/d)
		}
	}
	if len(r) == 0 {
		return math.NaN()
	}
	slices.Sort(r)
	if n := len(r); n%2 == 0 {
		return (r[n/2-1] + r[n/2]) / 2
	}
	return r[len(r)/2]
}

// fig writes a median for the goals' table: whole numbers of requests,
// two places of milliseconds.
func fig(v float64) string {
	if v >= 1000 {
		return num(v)
	}
	return fmt.Sprintf("%.2f", v)
}

// replaceSection writes section (from begin to end) into file in place
// of the one there, or at its end, and prints it.
func replaceSection(file, begin, end, section string) error {
	old, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	text := string(old)
	if i, j := strings.Index(text, begin), strings.Index(text, end); i >= 0 && j > i {
		text = text[:i] + section + strings.TrimPrefix(text[j+len(end):], "\n")
	} else {
		text = strings.TrimRight(text, "\n") + "\n\n" + section
	}
	fmt.Print(section)
	return os.WriteFile(file, []byte(text), 0o644)
}
