package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"tsubame/internal/openrtb"
)

// The sell side's measurement (make bench-ssp): a placement sold to four
// demand partners in the bench process answering in 5, 10, 15 and 20 ms
// (each a bid with nurl and lurl), its auction at c=64 with wrk, and,
// interleaved in each round, the same server's direct /api/decide of a
// placement without an auction (the cost of the auction beside a
// decision's); then a fixed rate with vegeta (a Go load generator, open
// loop) for the p99, whose goal is the slowest partner plus 10 ms; and a
// placement whose fifth partner never answers, tmax 100 ms, at c=64
// (goal: p99 at most 110 ms). CPU per auction is the server's user and
// system time over the requests it answered. No peer runs beside it: no
// seller in the reference stacks holds an auction.
const (
	sspBegin   = "<!-- bench-ssp:begin -->"
	sspEnd     = "<!-- bench-ssp:end -->"
	sspConns   = 64
	sspLowRate = 100 // vegeta's auctions a second, the first run
	sspRate    = 300 // and the second
	sspSlowest = 20 * time.Millisecond
)

// sspPartnerDelays are the four partners' answer times.
var sspPartnerDelays = [4]time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond}

type sspRound struct {
	Auction, Direct, Hung wrkResult
	CPUPerAuction         time.Duration
	Fixed                 [2]vegetaResult // at sspLowRate, at sspRate
}

type vegetaResult struct {
	Rate          int
	P50, P99, Max time.Duration
	Requests      uint64
	Success       float64
	Throughput    float64 // successful answers a second
}

// sspPartner answers bid requests after delay with a bid of price
// (never, when hang).
func sspPartner(delay time.Duration, price string, hang bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return // a notice
		}
		body, _ := io.ReadAll(r.Body)
		req, err := openrtb.Decode(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if hang {
			<-r.Context().Done()
			return
		}
		time.Sleep(delay)
		base := "http://" + r.Host
		fmt.Fprintf(w, `{"id":%q,"cur":"USD","seatbid":[{"bid":[{"id":"b","impid":"1","price":%s,"adm":"<div>ad</div>",`+
			`"adomain":["brand.example"],"w":300,"h":250,"nurl":"%s/win?p=${AUCTION_PRICE}","lurl":"%s/loss?c=${AUCTION_LOSS}"}]}]}`,
			req.ID, price, base, base)
	})
}

func runSSP(ctx context.Context, bin string, port, rounds int, d time.Duration, out string) error {
	root, err := os.MkdirTemp("", "tsubame-ssp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if err := writeStatic(root); err != nil {
		return err
	}
	dir := filepath.Join(root, "tsubame")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var urls []string
	for i, delay := range append(sspPartnerDelays[:], 0) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: sspPartner(delay, fmt.Sprintf("%d.%02d", 1+i, 10*i), i == len(sspPartnerDelays))}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		urls = append(urls, "http://"+ln.Addr().String())
	}
	conf := filepath.Join(dir, "ssp.yaml")
	var demand strings.Builder
	for i, u := range urls {
		fmt.Fprintf(&demand, "    p%d: {url: %s}\n", i, u)
	}
	if err := os.WriteFile(conf, []byte(`ads:
  currency: USD
ssp:
  seller: {domain: ssp.example}
  tmax: 200ms
  notices: {allow_private: true, workers: 32}
  publishers:
    pub: {seller_id: pub-1, domain: bench.example}
  placements:
    auction: {publisher: pub, floor: "0.50", sizes: ["300x250"], partners: [p0, p1, p2, p3]}
    hung: {publisher: pub, floor: "0.50", sizes: ["300x250"], tmax: 100ms}
  demand:
`+demand.String()), 0o600); err != nil {
		return err
	}
	addr, admin := "127.0.0.1:"+strconv.Itoa(port), "127.0.0.1:"+strconv.Itoa(port+1)
	for _, a := range []string{addr, admin} {
		if err := portFree(a); err != nil {
			return err
		}
	}
	var p procs
	defer p.stop()
	cmd, err := startTsubame(ctx, &p, bin, dir, addr, admin, "http://127.0.0.1:9", "TSUBAME_CONFIG="+conf,
		"TSUBAME_ADS_ENABLED=true")
	if err != nil {
		return err
	}
	base := "http://" + addr
	auction := base + "/api/decide?placement=auction&site=bench.example&w=300&h=250"
	hung := base + "/api/decide?placement=hung&site=bench.example&w=300&h=250"
	direct := base + "/api/decide?placement=top&site=bench.example"
	ua := "User-Agent: " + browserUA // a crawler is answered nothing
	// Warm up: connections to the partners, the index.
	if _, err := runWrk(ctx, auction, 2, sspConns, 2*time.Second, "", ua); err != nil {
		return err
	}
	var res []sspRound
	for r := range rounds {
		fmt.Fprintf(os.Stderr, "ssp: round %d\n", r+1)
		var rd sspRound
		cpu0 := procCPU(cmd.Process.Pid)
		if rd.Auction, err = runWrk(ctx, auction, 2, sspConns, d, "", ua); err != nil {
			return err
		}
		if n := rd.Auction.Requests; n > 0 {
			rd.CPUPerAuction = (procCPU(cmd.Process.Pid) - cpu0) / time.Duration(n)
		}
		if rd.Direct, err = runWrk(ctx, direct, 2, sspConns, d, "", ua); err != nil {
			return err
		}
		for i, rate := range [2]int{sspLowRate, sspRate} {
			if rd.Fixed[i], err = runVegeta(ctx, auction, rate, d); err != nil {
				return err
			}
		}
		if rd.Hung, err = runWrk(ctx, hung, 2, sspConns, d, "", ua); err != nil {
			return err
		}
		res = append(res, rd)
	}
	return writeSSPSection(out, d, res)
}

// runVegeta sends rate GETs a second to url for d, open loop, and returns
// the latencies.
func runVegeta(ctx context.Context, url string, rate int, d time.Duration) (vegetaResult, error) {
	return runVegetaTarget(ctx, vegeta.Target{Method: "GET", URL: url, Header: http.Header{"User-Agent": {browserUA}}}, rate, d)
}

func writeSSPSection(file string, d time.Duration, rs []sspRound) error {
	var md strings.Builder
	fmt.Fprintf(&md, "%s\n## The sell side's auction (`make bench-ssp`)\n\n", sspBegin)
	fmt.Fprintf(&md, "A placement sold to four demand partners answering in 5, 10, 15 and 20 ms (in the bench process, each a bid with `nurl` and `lurl`), on this machine's %d cores beside wrk and the partners, measured %s; each round runs the auction at c=%d for %v with wrk, the same server's direct `/api/decide` (no auction) right after it, %d and then %d auctions a second with vegeta (open loop), and a placement whose fifth partner never answers (`tmax` 100 ms) at c=%d. No peer: the reference stacks hold no auction. Goals: vegeta's p99 at most the slowest partner + 10 ms (%v); the hung partner's placement p99 at most 110 ms.\n\n",
		cores(), time.Now().UTC().Format("2006-01-02"), sspConns, d, sspLowRate, sspRate, sspConns, sspSlowest+10*time.Millisecond)
	fmt.Fprintf(&md, "| round | auctions c=64 | p99 | direct decide c=64 | auction ÷ direct | CPU per auction | vegeta %d/s p50 / p99 / max | vegeta %d/s p50 / p99 / max | hung partner: req/s, p99, max |\n", sspLowRate, sspRate)
	fmt.Fprintln(&md, "|---|---|---|---|---|---|---|---|---|")
	for i, r := range rs {
		ratio := 0.0
		if r.Direct.RPS > 0 {
			ratio = r.Auction.RPS / r.Direct.RPS
		}
		fmt.Fprintf(&md, "| %d | %.0f req/s (%d errors) | %.1f ms | %.0f req/s | %.3f | %.0f µs | %s | %s | %.0f req/s, %.1f ms, %.1f ms |\n",
			i+1, r.Auction.RPS, r.Auction.Errors, ms64(r.Auction.P99), r.Direct.RPS, ratio, float64(r.CPUPerAuction)/1e3,
			r.Fixed[0].cell(), r.Fixed[1].cell(), r.Hung.RPS, ms64(r.Hung.P99), ms64(r.Hung.Max))
	}
	fmt.Fprintf(&md, "\n%s\n", sspEnd)
	return replaceSection(file, sspBegin, sspEnd, md.String())
}

func (v vegetaResult) cell() string {
	return fmt.Sprintf("%.1f / %.1f / %.1f ms (%.1f %% ok)", ms64(v.P50), ms64(v.P99), ms64(v.Max), 100*v.Success)
}
