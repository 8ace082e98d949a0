// Command bench measures Tsubame the way the published write-ups did, with wrk,
// against a reference peer (nginx answering the same URLs with a fixed body
// and a buffered access log) started by the same run and measured
// interleaved: Tsubame, nginx, Tsubame, nginx... for each scenario and
// round. It writes BENCHMARKS.md and a chart, and prints the same table.
//
//	go run ./bench -bin bin/tsubame [-duration 10s] [-connections 100] [-rounds 3]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tsubame/internal/h2call/fakeapi"
	"tsubame/internal/kafkatest"
)

const wantBody = `Example.process({"urls":["http://ad1.example.com/tag.js","http://ad2.example.com/tag.js"]});`

// scenario is one load: a path on both servers, and what was published for it.
type scenario struct {
	Name         string
	Path         string
	Conns        int           // 0: the -connections flag
	Duration     time.Duration // 0: the -duration flag
	What         string
	Published    string // the published figure for the same scenario
	PublishedRPS float64
	// Webhook scenarios POST the LINE-bot write-up's ten-message body; the fake external
	// API answers after a delay drawn from [Delay[0], Delay[1]].
	Webhook bool
	Delay   [2]time.Duration
	// Redis scenarios run against a second Tsubame whose store is Redis.
	Redis bool
	// Peers also measures, interleaved, the servers a user would weigh
	// Tsubame against (peers), each doing sample3's job.
	Peers bool
	// Variant runs against a pair of fresh Tsubames, interleaved: the one
	// measured and a variant of it (see variant).
	Variant *variant
	// Ship measures the access log's Kafka shipper alone: shipLines lines
	// from closed files to a broker on this box (no wrk).
	Ship bool
	// Restart runs wrk against Tsubames of its own that replace themselves
	// restartHandovers times during each run, and against nginx reloaded as
	// often, at each of restartConns (restart.go).
	Restart bool
	// Decide runs against a Tsubame of its own, loaded with decideSet
	// before it starts, and cycles wrk through decideRequests (decide.go);
	// Path is only the first of them.
	Decide bool
	// RTB posts a bid request to a Tsubame bidder of its own and, as the
	// reference, to an nginx + Lua bidder doing the same matching (rtb.go).
	RTB bool
	// Memory ("rtb" or "decide") runs wrk for -memory-duration, once,
	// against a fresh Tsubame of its own whose every bid or decision holds
	// money, and samples its RSS (memory.go).
	Memory string
	// OptIn scenarios run only when -scenarios names them.
	OptIn bool
}

// peers are the alternatives measured beside Tsubame in the Peers scenarios,
// each on its own port (offset from -port).
var peers = []struct {
	Name, What string
	Port       int
}{
	{"nginx-lua", "nginx + Lua shared dict (OpenResty's module, seed 004's stack), no log", 6},
	{"fasthttp", "a bare fasthttp server (Tsubame's engine, nothing else), no log", 7},
	{"gnet", "gnet event loops with fasthttp's parser (engine candidate), no log", 8},
}

var scenarios = []scenario{
	{Name: "sample1", Path: "/api/sample1.js?id=1&callback=Example.process", What: "fixed value",
		Published: "12,636 req/s, 8.36 ms avg, σ 5.75 ms", PublishedRPS: 12636.18},
	{Name: "sample2", Path: "/api/sample2.js?id=1&callback=Example.process", What: "embedded store read per request, no cache",
		Published: "8,064 req/s, 12.42 ms, σ 3.10 ms (HBase)", PublishedRPS: 8063.61},
	{Name: "sample3", Path: "/api/sample3.js?id=1&callback=Example.process", What: "store + in-process cache",
		Published: "11,556 req/s, 9.07 ms, σ 5.91 ms", PublishedRPS: 11556.05},
	{Name: "sample4", Path: "/api/sample4.js?id=1&callback=Example.process", What: "+ lossless file access log",
		Published: "2,884 req/s, 34.70 ms, σ 4.96 ms", PublishedRPS: 2883.61},
	// Right after sample4: the cost of deciding an ad over serving a
	// stored one, both with the file access log.
	{Name: "decide", Path: decideRequests(1)[0].Path(), Decide: true,
		What: "/api/decide among 10,000 line items, targeting on: 4,096 distinct requests, a decision event line and two signed tracking URLs each"},
	{Name: "sample5", Path: "/api/sample5.js?id=1&callback=Example.process", What: "+ access log into the store, batched",
		Published: "93 req/s, 1,070 ms, σ 129.72 ms", PublishedRPS: 93.14},
	{Name: "json", Path: "/json", What: `{"message":"Hello, World!"}`,
		Published: "Zotonic chapter (c=3000, 4 cores): Zotonic 5,500 req/s with access log, Elli 38,000"},
	{Name: "static", Path: "/lib/app.js", What: "a 20 KB script from static.root (nginx: the same file)",
		Published: "Zotonic chapter: static files served without a caching proxy"},
	// sample3 once more beside the peers, apart from sample3 itself so that
	// sample4 runs right after sample3 (their ratio is the logging cost).
	{Name: "sample3-peers", Path: "/api/sample3.js?id=1&callback=Example.process", Peers: true,
		What: "sample3 again, measured beside the peers"},
	{Name: "sample4-edge", Path: "/api/sample4.js?id=1&callback=Example.process", Variant: &edgeVariant,
		What: "sample4 behind a trusted proxy (X-Forwarded-For), beside the build without the edge checks"},
	{Name: "sample4-buffered", Path: "/api/sample4.js?id=1&callback=Example.process", Variant: &bufferedVariant,
		What: "sample4 with the mapped access log (durability: process), beside the buffered one (async)"},
	{Name: "sample4-kafka", Path: "/api/sample4.js?id=1&callback=Example.process", Variant: &kafkaVariant,
		What: "sample4 with its access log shipped to Kafka, beside sample4 without the shipper"},
	{Name: "kafka-ship", Ship: true, What: "the Kafka shipper alone: 1,000,000 lines from closed files, produced and acknowledged"},
	{Name: "sample2-redis", Path: "/api/sample2.js?id=1&callback=Example.process", Redis: true,
		What: "Redis read per request, no cache", Published: "8,064 req/s (HBase read per request)"},
	{Name: "sample3-redis", Path: "/api/sample3.js?id=1&callback=Example.process", Redis: true,
		What: "Redis store + in-process cache", Published: "11,556 req/s"},
	{Name: "sample4-c3000", Path: "/api/sample4.js?id=1&callback=Example.process", Conns: 3000, What: "sample4 with 3000 connections", Peers: true,
		Published: "Zotonic chapter runs wrk -c 3000 (on /json)"},
	// The LINE-bot write-up ran wrk -c 8 -d 30: 30 s also lets a run with a
	// 2–3 s API spend most of its time past the first answers.
	{Name: "webhook", Path: "/callback", Conns: 8, Duration: 30 * time.Second, Webhook: true, What: "POST /callback, 10 messages, external API answers at once",
		Published: "LINE-bot write-up: 4,800 req/s (8 vCPU, wrk -c 8)", PublishedRPS: 4800},
	{Name: "webhook-2-3s", Path: "/callback", Conns: 8, Duration: 30 * time.Second, Webhook: true, Delay: [2]time.Duration{2 * time.Second, 3 * time.Second},
		What: "the same, external API answers after 2–3 s", Published: "LINE-bot write-up: 750 req/s, all cores at 100 %", PublishedRPS: 750},
	{Name: "rtb", Path: "/rtb/bench", Conns: rtbConns, RTB: true,
		What: "POST /rtb/bench: OpenRTB 2.6 example 6.2.3 among 1,000 line items, a bid with signed notice URLs and an event line; the reference is an nginx + Lua (lua-cjson) bidder doing the same matching"},
	// 12 s: five restarts 2 s apart, the last well before the run ends.
	{Name: "restart", Path: "/api/sample4.js?id=1&callback=Example.process", Duration: 12 * time.Second, Restart: true,
		What: "sample4 while Tsubame replaces itself 5 times (SIGUSR2), nginx reloads 5 times (SIGHUP)"},
	// Opt-in: each takes -memory-duration (10 minutes) of its own.
	{Name: "rtb-memory", Path: "/rtb/bench", Conns: rtbConns, Memory: "rtb", OptIn: true,
		What: "POST /rtb/bench at full speed for -memory-duration, every bid holding money for the default reservation, no notices: memory growth ≤ 64 MiB"},
	{Name: "decide-memory", Path: decideRequests(1)[0].Path(), Memory: "decide", OptIn: true,
		What: "/api/decide at full speed for -memory-duration, every decision holding money for the default reservation, no impressions: memory growth ≤ 64 MiB"},
}

type run struct {
	tsubame, ref []wrkResult
	peers        map[string][]wrkResult // Peers scenarios: by peer name
	checks       []webhookCheck         // webhook scenarios: per Tsubame round
	ships        []shipResult           // the shipping scenario: per round
	fills        []fill                 // the decide scenario: Tsubame's answers per round
	restarts     []restartRun           // the restart scenario: per round and target
	bids         []rtbCount             // the rtb scenario: per round and target
	memory       []memoryRun            // the memory scenarios: their one run
}

func main() {
	if spec := os.Getenv(idleEnv); spec != "" {
		if err := idleClient(spec); err != nil {
			fmt.Fprintln(os.Stderr, "bench idle helper:", err)
			os.Exit(1)
		}
		return
	}
	var (
		bin      = flag.String("bin", "bin/tsubame", "the tsubame binary to measure")
		duration = flag.Duration("duration", 10*time.Second, "length of each wrk run (scenarios with their own keep it)")
		conns    = flag.Int("connections", 100, "wrk connections (scenarios with their own count keep it)")
		threads  = flag.Int("threads", 2, "wrk threads")
		rounds   = flag.Int("rounds", 3, "interleaved rounds per scenario")
		port     = flag.Int("port", 18080, "first of the loopback ports: tsubame, its admin listener, nginx, tsubame on redis, its admin listener, redis, the peers nginx-lua, fasthttp, gnet, then four for each variant pair, then four for the restart scenario, then two for the decide scenario, then three for the rtb scenario (Tsubame, its admin listener, the nginx + Lua bidder), then two for each memory scenario")
		idle     = flag.Int("idle", 19900, "idle keep-alive connections to hold open against Tsubame while its RSS is read (0: skip)")
		only     = flag.String("scenarios", "", "comma-separated scenario names to run (default all but the opt-in ones: rtb-memory, decide-memory)")
		out      = flag.String("out", "BENCHMARKS.md", "report to write")
		chart    = flag.String("chart", "bench/results.png", "chart to write")
		baseline = flag.String("baseline", "", "a git revision to measure this build against, on Redis (adds the *-baseline scenarios)")
		cpuProf  = flag.String("cpuprofile", "", "write the bench process's CPU profile (the kafka-ship scenario's shipper runs in it)")
		memDur   = flag.Duration("memory-duration", 10*time.Minute, "length of each memory scenario's one run (rtb-memory, decide-memory: opt-in, named in -scenarios)")
		scale    = flag.Int("scale", 0, "instead of the scenarios, measure an account of this many generated line items on Redis and three nodes (make bench-scale), from -port on")
		rate     = flag.Int("scale-rate", 1000, "the scale measurement's /api/decide requests a second")
		sell     = flag.Bool("ssp", false, "instead of the scenarios, measure the sell side's auction (make bench-ssp), from -port on")
		acctDir  = flag.String("rtb-account-files", "", "write the rtb account's campaign file, Tsubame's configurations, the Lua bidder's nginx.conf and wrk's script into this directory and exit (to run them by hand)")
		account  = flag.Bool("rtb-account", false, "instead of the scenarios, measure the bidder on a real account against an nginx + Lua bidder (make bench-rtb), from -port on")
	)
	flag.Parse()
	if *acctDir != "" {
		if err := writeRTBAccountFiles(*acctDir, *port); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *sell || *account {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		run := runSSP
		if *account {
			run = runRTBAccount
		}
		err := run(ctx, *bin, *port, *rounds, *duration, *out)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *scale > 0 {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := runScale(ctx, *bin, *scale, *port, *rate, *out)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *baseline != "" {
		v := baselineVariant(*baseline)
		scenarios = append(scenarios,
			scenario{Name: "sample3-redis-baseline", Path: "/api/sample3.js?id=1&callback=Example.process", Variant: v,
				What: "Redis store + in-process cache, against " + *baseline},
			scenario{Name: "sample2-redis-baseline", Path: "/api/sample2.js?id=1&callback=Example.process", Variant: v,
				What: "Redis read per request, against " + *baseline})
	}
	if err := runBench(*bin, *duration, *memDur, *conns, *threads, *rounds, *port, *idle, *only, *out, *chart); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func runBench(bin string, duration, memDur time.Duration, conns, threads, rounds, port, idle int, only, out, chart string) error {
	for _, tool := range []string{"wrk", "nginx", "redis-server"} {
		if _, err := lookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (make bench installs it with apt-get)", tool)
		}
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("binary %s: %w (run make build)", bin, err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	admin := "127.0.0.1:" + strconv.Itoa(port+1)
	ref := "127.0.0.1:" + strconv.Itoa(port+2)
	raddr := "127.0.0.1:" + strconv.Itoa(port+3)
	radmin := "127.0.0.1:" + strconv.Itoa(port+4)
	redisAddr := "127.0.0.1:" + strconv.Itoa(port+5)
	peerAddr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(port+peers[i].Port) }
	for _, a := range []string{addr, admin, ref, raddr, radmin, redisAddr, peerAddr(0), peerAddr(1), peerAddr(2)} {
		if err := portFree(a); err != nil {
			return err
		}
	}
	var selected []scenario
	for _, s := range scenarios {
		if !s.OptIn {
			selected = append(selected, s)
		}
	}
	if only != "" {
		selected = nil
		for _, s := range scenarios {
			if slices.Contains(strings.Split(only, ","), s.Name) {
				selected = append(selected, s)
			}
		}
		if len(selected) == 0 {
			return fmt.Errorf("no scenario matches %q", only)
		}
	}
	raiseFileLimit()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var p procs
	defer p.stop()
	dir, err := os.MkdirTemp("", "tsubame-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // nginx's workers (an unprivileged user) read the static file
		return err
	}
	// The fake API stands in for a service on another machine; a lazier
	// GC keeps it (in this process) off the cores being measured.
	debug.SetGCPercent(400)
	api, err := fakeapi.Start(fakeapi.Options{})
	if err != nil {
		return err
	}
	defer api.Close()
	token := newCallbackToken()
	cbEnv := "TSUBAME_WEBHOOK_CALLBACK_TOKEN=" + token
	script, err := writeScript(dir, token)
	if err != nil {
		return err
	}
	if err := writeStatic(dir); err != nil {
		return err
	}
	tsubame, err := startTsubame(ctx, &p, bin, dir+"/embedded", addr, admin, api.URL, cbEnv)
	if err != nil {
		return err
	}
	needRedis := false
	for _, s := range selected {
		needRedis = needRedis || s.Redis || s.Variant != nil && s.Variant.Redis || s.Restart
	}
	if needRedis {
		if err := startRedis(ctx, &p, dir+"/redis", redisAddr); err != nil {
			return err
		}
		if _, err := startTsubame(ctx, &p, bin, dir+"/redis-node", raddr, radmin, api.URL,
			"TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+redisAddr, cbEnv); err != nil {
			return err
		}
		if err := checkBodies(raddr); err != nil {
			return err
		}
	}
	refPID, err := startNginx(ctx, &p, dir+"/nginx", ref, runtime.NumCPU())
	if err != nil {
		return err
	}
	if err := checkBodies(addr, ref); err != nil {
		return err
	}
	needPeers := false
	for _, s := range selected {
		needPeers = needPeers || s.Peers
	}
	if needPeers {
		if err := startNginxLua(ctx, &p, dir+"/nginx-lua", peerAddr(0), runtime.NumCPU()); err != nil {
			return err
		}
		for i, engine := range []string{"fasthttp", "gnet"} {
			if err := startPeer(ctx, &p, dir, engine, peerAddr(i+1)); err != nil {
				return err
			}
		}
		if err := checkBodies(peerAddr(0), peerAddr(1), peerAddr(2)); err != nil {
			return err
		}
	}

	var broker *kafkatest.Broker
	for _, s := range selected {
		if broker == nil && (s.Ship || s.Variant != nil && s.Variant.Kafka) {
			if broker, err = startKafka(ctx, filepath.Join(dir, "kafka")); err != nil {
				return err
			}
			defer broker.Stop()
			if err := writeShipFiles(filepath.Join(dir, "ship-src")); err != nil {
				return err
			}
		}
	}
	kafkaAddr := ""
	if broker != nil {
		kafkaAddr = broker.Addr
	}
	pairs := map[*variant]*pair{}
	for _, s := range selected {
		if v := s.Variant; v != nil && pairs[v] == nil {
			pr, err := startPair(ctx, &p, v, bin, dir, port+9+4*len(pairs), api.URL, cbEnv, redisAddr, kafkaAddr)
			if err != nil {
				return err
			}
			pairs[v] = pr
		}
	}
	var restartNodes []*restartNode
	if slices.ContainsFunc(selected, func(s scenario) bool { return s.Restart }) {
		// Their successors are no processes p started: they are stopped by
		// their pid files, on every exit path.
		defer func() { stopRestartNodes(restartNodes) }()
		restartNodes, err = startRestartNodes(ctx, &p, bin, dir, port+9+4*len(pairs), api.URL, cbEnv, redisAddr)
		if err != nil {
			return err
		}
	}

	// The decide scenario's Tsubame: the same binary and settings as the
	// first, its store loaded with decideSet before it starts. A node of
	// its own keeps the index's memory (tens of MiB) out of what the other
	// scenarios measure, the idle connections' RSS above all.
	var decideAddr, decideAdmin, decideScript string
	if slices.ContainsFunc(selected, func(s scenario) bool { return s.Decide }) {
		first := port + 9 + 4*len(pairs) + 4 // after the variant pairs and the restart scenario's four
		decideAddr, decideAdmin = "127.0.0.1:"+strconv.Itoa(first), "127.0.0.1:"+strconv.Itoa(first+1)
		for _, a := range []string{decideAddr, decideAdmin} {
			if err := portFree(a); err != nil {
				return err
			}
		}
		campaigns, sc, err := writeDecideFiles(dir)
		if err != nil {
			return err
		}
		if err := importCampaigns(ctx, bin, filepath.Join(dir, "decide"), campaigns); err != nil {
			return err
		}
		if _, err := startTsubame(ctx, &p, bin, filepath.Join(dir, "decide"), decideAddr, decideAdmin, api.URL, cbEnv); err != nil {
			return err
		}
		if err := checkBodies(decideAddr); err != nil {
			return err
		}
		decideScript = sc
	}

	// The rtb scenario's bidders: a Tsubame of its own (its store loaded
	// with rtbSet, one exchange configured) and the nginx + Lua bidder
	// reading the same campaign file, both checked to bid on the request.
	var rtbAddr, rtbAdmin, rtbLua, rtbScriptPath, rtbLuaLog string
	var rtbLuaOffset int64
	if slices.ContainsFunc(selected, func(s scenario) bool { return s.RTB }) {
		first := port + 9 + 4*len(pairs) + 4 + 2 // after the decide scenario's two
		rtbAddr, rtbLua = "127.0.0.1:"+strconv.Itoa(first), "127.0.0.1:"+strconv.Itoa(first+2)
		rtbAdmin = "127.0.0.1:" + strconv.Itoa(first+1)
		for _, a := range []string{rtbAddr, rtbAdmin, rtbLua} {
			if err := portFree(a); err != nil {
				return err
			}
		}
		campaigns, conf, sc, err := writeRTBFiles(dir)
		if err != nil {
			return err
		}
		if err := importCampaigns(ctx, bin, filepath.Join(dir, "rtb"), campaigns); err != nil {
			return err
		}
		if _, err := startTsubame(ctx, &p, bin, filepath.Join(dir, "rtb"), rtbAddr, rtbAdmin, api.URL, cbEnv, "TSUBAME_CONFIG="+conf); err != nil {
			return err
		}
		if err := startLuaBidder(ctx, &p, filepath.Join(dir, "rtb-lua"), rtbLua, campaigns, runtime.NumCPU()); err != nil {
			return err
		}
		if err := waitRTB(ctx, rtbAddr, rtbLua); err != nil {
			return err
		}
		rtbScriptPath, rtbLuaLog = sc, filepath.Join(dir, "rtb-lua", "rtb-lua.log")
		time.Sleep(200 * time.Millisecond) // the checks' lines flushed
		if _, rtbLuaOffset, err = countLuaBids(rtbLuaLog, 0); err != nil {
			return err
		}
	}

	// Idle connections first, while Tsubame's memory is what serving, not
	// the webhook runs' queues, made it.
	var held *idleResult
	if idle > 0 {
		r, err := holdIdle(ctx, addr, tsubame.Process.Pid, idle)
		if err != nil {
			return fmt.Errorf("idle connections: %w", err)
		}
		held = &r
		fmt.Fprintf(os.Stderr, "idle: %d keep-alive connections held, Tsubame RSS %d MiB (%d MiB before)\n",
			r.Conns, r.RSS>>20, r.Before>>20)
	}

	// The memory scenarios' Tsubames, each started for its run: after the
	// rtb scenario's three ports, two each.
	memoryPort := map[string]int{}
	for _, s := range selected {
		if s.Memory != "" {
			memoryPort[s.Name] = port + 9 + 4*len(pairs) + 4 + 2 + 3 + 2*len(memoryPort)
		}
	}

	results := make([]run, len(selected))
	for round := range rounds {
		for i, s := range selected {
			if s.Memory != "" {
				if round > 0 {
					continue // one run, however long
				}
				c := s.Conns
				if c == 0 {
					c = conns
				}
				first := memoryPort[s.Name]
				fmt.Fprintf(os.Stderr, "%-14s wrk -c%d for %v, no notices\n", s.Name, c, memDur)
				m, err := memoryRound(ctx, bin, filepath.Join(dir, s.Name), "127.0.0.1:"+strconv.Itoa(first), "127.0.0.1:"+strconv.Itoa(first+1),
					api.URL, cbEnv, s, threads, c, memDur)
				if err != nil {
					return err
				}
				results[i].memory = append(results[i].memory, m)
				fmt.Fprintf(os.Stderr, "%-14s %10.0f req/s  RSS %d MiB idle, %d MiB max, %d MiB at the end; anon growth %+d MiB for %s more holds (%.1f B a hold); %s holds in %s buckets\n",
					s.Name, m.Wrk.OKRate(), m.Idle.RSS>>20, m.MaxRSS()>>20, m.End().RSS>>20, m.Growth()>>20, num(float64(m.Held())), m.PerHold(),
					num(float64(m.End().Holds)), num(float64(m.End().Buckets)))
				continue
			}
			if s.Ship {
				r, err := shipRound(ctx, broker, filepath.Join(dir, "ship-src"), dir, round)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "round %d/%d %-14s %10.0f lines/s  shipper CPU %.0f %%  broker CPU %.0f %%\n",
					round+1, rounds, s.Name, r.rate(), r.ShipperCPU, r.BrokerCPU)
				results[i].ships = append(results[i].ships, r)
				continue
			}
			if s.Restart {
				rs, err := restartRound(ctx, s, restartNodes, ref, refPID, threads, round, rounds)
				results[i].restarts = append(results[i].restarts, rs...)
				if err != nil {
					return err
				}
				continue
			}
			c := s.Conns
			if c == 0 {
				c = conns
			}
			own := addr
			switch {
			case s.Redis:
				own = raddr
			case s.Variant != nil:
				own = pairs[s.Variant].base
			case s.Decide:
				own = decideAddr
			case s.RTB:
				own = rtbAddr
			}
			type target struct {
				addr, who string
				into      *[]wrkResult
			}
			targets := []target{{own, "tsubame", &results[i].tsubame}, {ref, "nginx", &results[i].ref}}
			if s.RTB {
				targets[1] = target{rtbLua, "nginx-lua", &results[i].ref}
			}
			if s.Peers {
				if results[i].peers == nil {
					results[i].peers = map[string][]wrkResult{}
				}
				for k, pr := range peers {
					rs := results[i].peers[pr.Name]
					results[i].peers[pr.Name] = rs
					targets = append(targets, target{peerAddr(k), pr.Name, nil})
				}
			}
			if s.Variant != nil {
				if results[i].peers == nil {
					results[i].peers = map[string][]wrkResult{}
				}
				targets = append(targets, target{pairs[s.Variant].other, s.Variant.Name, nil})
				if round%2 == 1 {
					// Alternate which build runs first: a drift within a
					// round must not always favour the same one.
					slices.Reverse(targets)
				}
			}
			for _, target := range targets {
				if err := ctx.Err(); err != nil {
					return err
				}
				sc := ""
				if s.Webhook {
					sc = script
					api.SetDelay(s.Delay[0], s.Delay[1])
				}
				if s.Variant != nil {
					sc = pairs[s.Variant].script // nginx ignores what it adds
				}
				if s.Decide {
					sc = decideScript // nginx answers every /api/ path alike
				}
				if s.RTB {
					sc = rtbScriptPath
				}
				var header []string
				if !s.Webhook && !s.RTB {
					header = []string{"User-Agent: " + browserUA}
				}
				var rtbBefore rtbCount
				if s.RTB && target.addr == own {
					if rtbBefore, err = scrapeRTB(rtbAdmin); err != nil {
						return err
					}
				}
				var filled fill
				if s.Decide && target.addr == own {
					if filled, err = scrapeDecide(decideAdmin); err != nil {
						return err
					}
				}
				var before int64
				var rss *rssSampler
				if s.Webhook && target.addr == addr {
					if before, _, _, err = scrape(admin); err != nil {
						return err
					}
					rss = sampleRSS(tsubame.Process.Pid)
				}
				if rss != nil {
					// Tsubame drained the last run: every key from here on is this run's.
					api.ResetKeys()
				}
				d := duration
				if s.Duration > 0 {
					d = s.Duration
				}
				// A webhook run's messages are processed after wrk ends:
				// its CPU is not the requests'.
				var cpu *serverCPU
				if !s.Webhook {
					cpu = startServerCPU(target.addr)
				}
				r, err := runWrk(ctx, "http://"+target.addr+s.Path, threads, c, d, sc, header...)
				if err != nil {
					return err
				}
				if cpu != nil {
					r.CPU = cpu.stop()
				}
				if target.addr == ref {
					// What nginx logged is the reference's cost, not a
					// record anyone reads: emptied after each run, or a
					// whole make bench writes some 16 GB of it (nginx
					// appends, O_APPEND, at the new end).
					if err := os.Truncate(filepath.Join(dir, "nginx", "access.log"), 0); err != nil {
						return err
					}
				}
				fmt.Fprintf(os.Stderr, "round %d/%d %-14s %-9s %10.0f req/s (%.0f ok)  p99 %8v  errors %d  CPU %s µs/req\n",
					round+1, rounds, s.Name, target.who, r.RPS, r.OKRate(), r.P99.Round(time.Microsecond), r.Errors, us(r.CPUPerReq()))
				if s.Decide && target.addr == own {
					after, err := scrapeDecide(decideAdmin)
					if err != nil {
						return err
					}
					f := after.sub(filled)
					results[i].fills = append(results[i].fills, f)
					fmt.Fprintf(os.Stderr, "    %d answered with a decision (200), %d without (204), %d otherwise: %.1f %% filled\n",
						f.Filled, f.Empty, f.Other, 100*f.Rate())
				}
				if s.RTB {
					var c rtbCount
					if target.addr == own {
						if c, err = scrapeRTB(rtbAdmin); err == nil {
							c.Requests, c.Bids = c.Requests-rtbBefore.Requests, c.Bids-rtbBefore.Bids
						}
					} else {
						time.Sleep(200 * time.Millisecond) // nginx's log buffer flushed
						c, rtbLuaOffset, err = countLuaBids(rtbLuaLog, rtbLuaOffset)
					}
					if err != nil {
						return err
					}
					results[i].bids = append(results[i].bids, c)
					fmt.Fprintf(os.Stderr, "    %d bid requests answered, %d with a bid\n", c.Requests, c.Bids)
				}
				if target.into != nil {
					*target.into = append(*target.into, r)
				} else {
					results[i].peers[target.who] = append(results[i].peers[target.who], r)
				}
				if rss != nil {
					drain, err := waitDrained(admin, 5*time.Minute)
					if err != nil {
						return err
					}
					after, _, _, err := scrape(admin)
					if err != nil {
						return err
					}
					keysAfter, maxAttempts := api.Keys()
					chk := webhookCheck{Accepted: after - before, Delivered: int64(keysAfter),
						MaxAttempts: maxAttempts, PeakRSS: rss.Stop(), Drain: drain}
					results[i].checks = append(results[i].checks, chk)
					fmt.Fprintf(os.Stderr, "    %d messages accepted, %d delivered to the API (max %d attempts), peak RSS %d MiB, drained in %v\n",
						chk.Accepted, chk.Delivered, chk.MaxAttempts, chk.PeakRSS>>20, drain.Round(time.Millisecond))
				}
			}
		}
	}
	stopRestartNodes(restartNodes)
	p.stop()

	env := describeMachine(bin)
	report := buildReport(selected, results, held, env, duration, conns, threads, rounds, chart)
	fmt.Print(report.table)
	if err := writeChart(chart, selected, results); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	old, err := os.ReadFile(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(out, []byte(report.markdown()+keptSections(string(old))), 0o644)
}

// keptSections are the sections of the other measurements (make
// bench-scale, bench-ssp, bench-rtb) in text, BENCHMARKS.md as it was,
// which a run of the scenarios keeps.
func keptSections(text string) string {
	var kept strings.Builder
	for _, m := range [][2]string{{scaleBegin, scaleEnd}, {rtbAcctBegin, rtbAcctEnd}, {sspBegin, sspEnd}} {
		if i, j := strings.Index(text, m[0]), strings.Index(text, m[1]); i >= 0 && j > i {
			kept.WriteString("\n" + text[i:j+len(m[1])] + "\n")
		}
	}
	return kept.String()
}

// checkBodies makes sure both servers answer the sample URL with the same
// body before anything is measured.
func checkBodies(addrs ...string) error {
	for _, a := range addrs {
		body, err := httpGet("http://" + a + scenarios[2].Path)
		if err != nil {
			return err
		}
		if body != wantBody {
			return fmt.Errorf("%s answers %q, want %q", a, body, wantBody)
		}
	}
	return nil
}
