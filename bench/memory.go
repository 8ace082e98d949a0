package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"tsubame"
)

// The memory scenarios: wrk at full speed for -memory-duration (10
// minutes by default) against a fresh Tsubame whose every decision or bid
// holds money — each line item has an impression limit, total and daily,
// each campaign a budget, total and daily, paced asap and far above what
// the run can spend — with the default ads.reservation (10 minutes) and
// no notice, impression or click ever called: every hold stays open until
// the reservation ends, the most a node can be made to hold. Its RSS and
// the ledger's hold gauges are sampled every memorySampleEvery. The goal
// (issue 47, DESIGN.md §3): RSS grows by at most 64 MiB, whatever the
// request rate, since held money is kept per line item and second, not
// per bid.
//
// decide-memory is the decide scenario's account and requests (decide.go);
// rtb-memory the rtb scenario's account (rtb.go) bid on by
// memoryRTBRequests, spread over its apps and sites so that most of its
// line items bid. They are opt-in (scenario.OptIn): each takes
// -memory-duration, once, whatever -rounds says.

// memoryGrowthLimit is the goal: RSS growth under the load.
const memoryGrowthLimit = 64 << 20

// memorySampleEvery is how often the RSS and the gauges are read.
const memorySampleEvery = 2 * time.Second

// memoryRTBRequests is how many distinct bid requests wrk cycles through.
const memoryRTBRequests = 4096

// The limits of every line item and campaign of the memory scenarios:
// far more than 10 minutes at 100,000 decisions a second can take.
const (
	memoryImpressions = 1_000_000_000
	memoryBudget      = tsubame.Money(1_000_000_000) * tsubame.MicrosPerUnit
)

// limitAll gives every campaign of set a budget and every line item an
// impression limit, total and daily, paced asap: every decision of a line
// item then holds money in four accounts, the most a reservation takes.
func limitAll(set *tsubame.CampaignSet) *tsubame.CampaignSet {
	for _, c := range set.Campaigns {
		c.Budget = tsubame.Budget{Total: memoryBudget, Daily: memoryBudget}
		c.Pacing = tsubame.Pacing{Mode: tsubame.PacingASAP}
	}
	for _, l := range set.LineItems {
		l.Limits.Impressions = tsubame.ImpressionLimits{Total: memoryImpressions, Daily: memoryImpressions}
	}
	return set
}

// memoryRTBConfig is rtbConfig with the default reservation and win
// window: no win notice ever comes, so a bid holds until its reservation.
func memoryRTBConfig() string { return rtbAccountConfig("ltsv") } // the default log format

// memoryRTBBodies are the bid requests of rtb-memory: example 6.2.3's
// shape, each with its own id, for one of rtbSet's apps or sites, a
// banner of one of its sizes and a floor of 0.10 to 0.50.
func memoryRTBBodies() []string {
	r := rand.New(rand.NewPCG(47, 5))
	sizes := [][2]int{{728, 90}, {300, 250}, {320, 50}}
	out := make([]string, memoryRTBRequests)
	for i := range out {
		sz := sizes[r.IntN(len(sizes))]
		floor := fmt.Sprintf("%.2f", 0.1+0.1*float64(r.IntN(5)))
		var where string
		if r.IntN(2) == 0 {
			where = fmt.Sprintf(`"app":{"id":"a%d","bundle":%q,"publisher":{"id":"p1"}}`, i, rtbApp(r.IntN(rtbApps)))
		} else {
			d := rtbSite(r.IntN(rtbSites))
			where = fmt.Sprintf(`"site":{"id":"s%d","domain":%q,"page":"https://%s/","publisher":{"id":"p1"}}`, i, d, d)
		}
		out[i] = fmt.Sprintf(`{"id":"mem-%d","at":2,"cur":["USD"],"imp":[{"id":"1","bidfloor":%s,"banner":{"w":%d,"h":%d}}],%s,`+
			`"device":{"ua":%q,"ip":"203.0.113.%d"},"user":{"id":"u%d"}}`,
			i, floor, sz[0], sz[1], where, browserUA, 1+r.IntN(254), r.IntN(100_000))
	}
	return out
}

// memoryRTBScript is wrk's script for rtb-memory: each thread cycles
// through the bodies from its own starting point, formatted once in init.
func memoryRTBScript(bodies []string) string {
	var b strings.Builder
	b.WriteString("local bodies = {\n")
	for _, body := range bodies {
		fmt.Fprintf(&b, "  [=[%s]=],\n", body)
	}
	b.WriteString(`}
local threads = 0
function setup(thread)
  thread:set("first", threads * 1031)
  threads = threads + 1
end
local formatted = {}
local i = 0
function init(args)
  local h = {}
  for k, v in pairs(wrk.headers) do h[k] = v end
  h["Content-Type"] = "application/json"
  h["X-Exchange-Token"] = "` + rtbToken + `"
  for n, body in ipairs(bodies) do
    formatted[n] = wrk.format("POST", "/rtb/bench", h, body)
  end
  i = (first or 0) % #formatted
end
function request()
  i = i % #formatted + 1
  return formatted[i]
end
`)
	return b.String()
}

// memoryTarget is what a memory scenario runs against: its account, its
// configuration (none: the defaults) and wrk's script.
type memoryTarget struct {
	set    *tsubame.CampaignSet
	config string
	script string
}

// memoryFiles writes the files of the memory scenario s (rtb or decide)
// into dir.
func memoryFiles(s scenario, dir string) (campaigns, config, script string, err error) {
	var t memoryTarget
	switch s.Memory {
	case "rtb":
		t = memoryTarget{set: limitAll(rtbSet()), config: memoryRTBConfig(), script: memoryRTBScript(memoryRTBBodies())}
	case "decide":
		t = memoryTarget{set: limitAll(decideSet()), script: decideScript(decideRequests(decideRequestCount))}
	default:
		return "", "", "", fmt.Errorf("scenario %s: no memory target %q", s.Name, s.Memory)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", "", err
	}
	b, err := json.Marshal(t.set)
	if err != nil {
		return "", "", "", err
	}
	campaigns, script = filepath.Join(dir, "campaigns.json"), filepath.Join(dir, "load.lua")
	files := []struct {
		path string
		body []byte
	}{{campaigns, b}, {script, []byte(t.script)}}
	if t.config != "" {
		config = filepath.Join(dir, "tsubame.yaml")
		files = append(files, struct {
			path string
			body []byte
		}{config, []byte(t.config)})
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.body, 0o600); err != nil {
			return "", "", "", err
		}
	}
	return campaigns, config, script, nil
}

// memorySample is one reading of the node under load.
type memorySample struct {
	At time.Duration // since the load started
	// RSS is the process's resident set (VmRSS): Anon, its own memory
	// (heap, stacks), and File, pages of files it maps, the mapped access
	// log's active segment above all (page cache, bounded by the
	// segment's size, let go at each rotation).
	RSS, Anon, File int64
	// The ledger's gauges: holds open, the buckets they are kept in and
	// their bytes, the oldest bucket's age; and the Go heap in use.
	Holds, Buckets, HoldBytes, HeapInuse int64
	Oldest                               time.Duration
}

// memoryRun is one run of a memory scenario.
type memoryRun struct {
	Idle    memorySample // after the node started and answered, before the load
	Samples []memorySample
	Wrk     wrkResult
	D       time.Duration // the load's length
}

// Window is the length of the warm-up and of the windows the growth is
// read over: a sixth of the run, at most a minute.
func (m memoryRun) Window() time.Duration { return min(time.Minute, m.D/6) }

// First and Last are the samples of the first window after the warm-up
// (the leases ramped up, the heap at its working size) and of the last
// window of the run.
func (m memoryRun) First() []memorySample {
	w := m.Window()
	return m.between(w, 2*w)
}

func (m memoryRun) Last() []memorySample { return m.between(m.D-m.Window(), m.D+time.Hour) }

func (m memoryRun) between(from, to time.Duration) []memorySample {
	var out []memorySample
	for _, s := range m.Samples {
		if s.At > from && s.At <= to {
			out = append(out, s)
		}
	}
	return out
}

// most is the largest value of f over ss.
func most(ss []memorySample, f func(memorySample) int64) int64 {
	var v int64
	for _, s := range ss {
		v = max(v, f(s))
	}
	return v
}

func anon(s memorySample) int64 { return s.Anon }
func rss(s memorySample) int64  { return s.RSS }

// Growth is what the goal judges: the process's own memory (RssAnon), the
// largest over the last window less the largest over the first. Both
// windows are equally long under the same load, so the heap's sawtooth
// and the runtime's headroom are in both: what is left is what grew
// with the holds. VmRSS also counts the mapped access log's active
// segment (page cache, up to access_log.max_size, 512 MiB, let go at
// each rotation): reported, not judged.
func (m memoryRun) Growth() int64 { return most(m.Last(), anon) - most(m.First(), anon) }

// Held is how many more holds were open at the end than at the end of
// the first window.
func (m memoryRun) Held() int64 {
	f := m.First()
	if len(f) == 0 {
		return 0
	}
	return m.End().Holds - f[len(f)-1].Holds
}

// PerHold is Growth per hold added: what the node keeps per decision or
// bid it holds money for.
func (m memoryRun) PerHold() float64 {
	if h := m.Held(); h > 0 {
		return float64(m.Growth()) / float64(h)
	}
	return 0
}

// MaxRSS is the largest VmRSS sampled under the load.
func (m memoryRun) MaxRSS() int64 { return most(m.Samples, rss) }

// End is the last sample.
func (m memoryRun) End() memorySample {
	if len(m.Samples) == 0 {
		return m.Idle
	}
	return m.Samples[len(m.Samples)-1]
}

// readMemory reads a sample of pid and of its admin listener's /metrics.
func readMemory(pid int, admin string) (memorySample, error) {
	var s memorySample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.Lines(string(status)) {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			s.RSS = kb << 10
		case "RssAnon":
			s.Anon = kb << 10
		case "RssFile":
			s.File = kb << 10
		}
	}
	body, err := httpGet("http://" + admin + "/metrics")
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(val, 64)
		switch name {
		case "tsubame_budget_reservations_open":
			s.Holds = int64(v)
		case "tsubame_budget_hold_buckets":
			s.Buckets = int64(v)
		case "tsubame_budget_hold_bytes":
			s.HoldBytes = int64(v)
		case "tsubame_budget_oldest_hold_seconds":
			s.Oldest = time.Duration(v * float64(time.Second))
		case "go_memstats_heap_inuse_bytes":
			s.HeapInuse = int64(v)
		}
	}
	return s, sc.Err()
}

// memoryRound starts the scenario's Tsubame on addr and admin, its store
// loaded with the scenario's account, waits until it decides or bids,
// runs wrk against it for d while sampling it, and stops it.
func memoryRound(ctx context.Context, bin, dir, addr, admin, apiURL, cbEnv string, s scenario, threads, conns int, d time.Duration) (memoryRun, error) {
	var run memoryRun
	for _, a := range []string{addr, admin} {
		if err := portFree(a); err != nil {
			return run, err
		}
	}
	campaigns, config, script, err := memoryFiles(s, filepath.Join(dir, "files"))
	if err != nil {
		return run, err
	}
	if err := importCampaigns(ctx, bin, dir, campaigns); err != nil {
		return run, err
	}
	env := []string{cbEnv}
	if config != "" {
		env = append(env, "TSUBAME_CONFIG="+config)
	}
	var p procs // a node of its own, stopped when its run ends
	defer p.stop()
	cmd, err := startTsubame(ctx, &p, bin, dir, addr, admin, apiURL, env...)
	if err != nil {
		return run, err
	}
	pid := cmd.Process.Pid
	// Ready: the account compiled, and a request of the load holds money.
	first := s.Path
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		if s.Memory == "rtb" {
			_, err = httpPost("http://"+addr+first, memoryRTBBodies()[0], "X-Exchange-Token", rtbToken)
		} else {
			err = getAsBrowser("http://" + addr + first)
		}
		m, merr := readMemory(pid, admin)
		if err == nil && merr == nil && m.Holds > 0 {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return run, fmt.Errorf("%s: no hold after its first requests (%v, %v)", s.Name, err, merr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if run.Idle, err = readMemory(pid, admin); err != nil {
		return run, err
	}
	start := time.Now()
	stop := make(chan struct{})
	sampled := make(chan []memorySample)
	go func() {
		var out []memorySample
		t := time.NewTicker(memorySampleEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				sampled <- out
				return
			case <-t.C:
				if m, err := readMemory(pid, admin); err == nil {
					m.At = time.Since(start).Round(time.Second)
					out = append(out, m)
					if len(out)%5 != 0 {
						continue
					}
					fmt.Fprintf(os.Stderr, "    %s %6v RSS %4d MiB (anon %4d, file %4d)  heap %4d MiB  holds %9s  buckets %7s (%d MiB)\n", s.Name, m.At,
						m.RSS>>20, m.Anon>>20, m.File>>20, m.HeapInuse>>20, num(float64(m.Holds)), num(float64(m.Buckets)), m.HoldBytes>>20)
				}
			}
		}
	}()
	run.D = d
	run.Wrk, err = runWrk(ctx, "http://"+addr+s.Path, threads, conns, d, script)
	close(stop)
	run.Samples = <-sampled
	if err != nil {
		return run, err
	}
	// The last reading, unless the ticker's was just now: the load just
	// ended, nothing given back yet.
	if m, err := readMemory(pid, admin); err == nil {
		m.At = time.Since(start).Round(time.Second)
		if n := len(run.Samples); n == 0 || m.At-run.Samples[n-1].At >= time.Second {
			run.Samples = append(run.Samples, m)
		}
	}
	return run, nil
}

// getAsBrowser gets url with a browser's User-Agent (a bot's, or Go's,
// gets no decision).
func getAsBrowser(url string) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", browserUA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// writeMemorySection describes the memory scenarios and their runs.
func writeMemorySection(md *strings.Builder, sc []scenario, results []run) {
	var rows, samples strings.Builder
	for i, s := range sc {
		for _, m := range results[i].memory {
			e := m.End()
			mark := "yes"
			if m.Growth() > memoryGrowthLimit {
				mark = "**no**"
			}
			fmt.Fprintf(&rows, "| %s | %.0f | %s | %s | %d / %d / %d MiB | %d / %d / %d MiB | **%+d MiB** | %s | %.1f B | %s | %s | %.1f MiB | %v | %s |\n",
				s.Name, m.Wrk.Seconds, num(float64(m.Wrk.Requests)), num(m.Wrk.OKRate()),
				m.Idle.RSS>>20, m.MaxRSS()>>20, e.RSS>>20, most(m.First(), anon)>>20, most(m.Last(), anon)>>20, e.Anon>>20,
				m.Growth()>>20, num(float64(m.Held())), m.PerHold(),
				num(float64(e.Holds)), num(float64(e.Buckets)), float64(e.HoldBytes)/(1<<20), e.Oldest.Round(time.Second), mark)
			every := max(len(m.Samples)/12, 1)
			for k, x := range m.Samples {
				if k%every != every-1 && k != len(m.Samples)-1 {
					continue
				}
				fmt.Fprintf(&samples, "| %s | %v | %d MiB | %d MiB | %d MiB | %d MiB | %s | %s | %.1f MiB | %v |\n", s.Name, x.At,
					x.RSS>>20, x.Anon>>20, x.File>>20, x.HeapInuse>>20,
					num(float64(x.Holds)), num(float64(x.Buckets)), float64(x.HoldBytes)/(1<<20), x.Oldest.Round(time.Second))
			}
		}
	}
	if rows.Len() == 0 {
		return
	}
	fmt.Fprintf(md, "\n## Memory under load\n\nThe memory scenarios (opt-in: `BENCH_SCENARIOS=rtb-memory,decide-memory make bench`, each run once for\n")
	fmt.Fprintf(md, "`BENCH_MEMORY_DURATION`, 10 minutes by default) run wrk at full speed against a fresh Tsubame whose every decision or bid holds\n")
	fmt.Fprintf(md, "money: every line item of the account has an impression limit and every campaign a budget, total and daily, paced `asap`,\n")
	fmt.Fprintf(md, "far above what the run spends. The reservation is the default (`ads.reservation`, 10 minutes) and no notice, impression\n")
	fmt.Fprintf(md, "or click is ever called, so every hold stays open until its reservation ends: the most a node can be made to hold.\n")
	fmt.Fprintf(md, "`decide-memory` is the decide scenario's account and requests (%s line items); `rtb-memory` the rtb scenario's\n", num(decideLineItems))
	fmt.Fprintf(md, "account (%s line items) bid on by %s distinct requests over its apps and sites (`bench/memory.go`).\n\n", num(rtbLineItems), num(memoryRTBRequests))
	fmt.Fprintf(md, "Every %v the process's memory is read from `/proc` and the ledger's gauges from `/metrics` (`tsubame_budget_reservations_open`,\n", memorySampleEvery)
	fmt.Fprintf(md, "`tsubame_budget_hold_buckets`, `tsubame_budget_hold_bytes`, `tsubame_budget_oldest_hold_seconds`). *RSS* is VmRSS: once the node\n")
	fmt.Fprintf(md, "answered its first request (idle), its largest under the load, at the end. It counts the pages of the mapped access log's\n")
	fmt.Fprintf(md, "active segment (*file*: page cache, up to `access_log.max_size`, 512 MiB, let go at each rotation), so it swings by hundreds\n")
	fmt.Fprintf(md, "of MiB with the log whatever is held. *Anon* (RssAnon) is the process's own memory: the heap, stacks and the runtime's\n")
	fmt.Fprintf(md, "headroom. *Growth*, what the goal judges, is the largest anon over the last window of the run less the largest over the\n")
	fmt.Fprintf(md, "first window after a warm-up (the leases ramping up, the heap reaching its working size), each window a sixth of the run\n")
	fmt.Fprintf(md, "and at most a minute: both under the same load, so the heap's sawtooth is in both and what is left grew with the holds;\n")
	fmt.Fprintf(md, "*per hold* is that growth over the holds opened in between. Goal: growth ≤ %d MiB. The binary before holds were\n", memoryGrowthLimit>>20)
	fmt.Fprintf(md, "counted per line item and second kept 300 to 400 bytes of its own memory per hold (`TestMemoryFlatWhileHoldsStayOpen`).\n\n")
	fmt.Fprintf(md, "| scenario | seconds | requests | req/s | RSS idle / max / end | anon first / last window / end | growth | holds added | per hold | holds open | buckets | hold bytes | oldest | ≤ %d MiB |\n", memoryGrowthLimit>>20)
	fmt.Fprintf(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	md.WriteString(rows.String())
	fmt.Fprintf(md, "\n| scenario | at | RSS | anon | file | heap in use | holds open | buckets | hold bytes | oldest |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	md.WriteString(samples.String())
}
