package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"tsubame"
	"tsubame/internal/bulk"
	"tsubame/internal/campaigngen"
	"tsubame/internal/store/redis"
)

// The scale measurement (-scale N, make bench-scale): a generated account
// of N line items (internal/campaigngen's mix) on one Redis and three
// Tsubame nodes, from outside, as an operator would meet it: the CLI's
// import (time and peak memory), each node's start to /readyz, the
// commands an idle node sends, how long a change to one line item takes
// to reach the three indexes, /api/decide at a fixed rate (open loop, so
// that a slow answer delays the ones scheduled behind it, as on a real
// site), and Redis's slow log above 10 ms. It writes its section of
// BENCHMARKS.md between scaleBegin and scaleEnd.
const (
	scaleBegin = "<!-- scale: written by make bench-scale -->"
	scaleEnd   = "<!-- end of scale -->"
)

// scaleResult is what one measurement found.
type scaleResult struct {
	Lines                 int
	FileBytes             int64
	Import                time.Duration
	ImportRSS             int64
	RedisMemory           string
	Starts                []time.Duration
	RSS                   []int64
	IdleCommands          float64 // a node's in the idle minute (the three nodes' mean)
	IdleTop               string  // the commands they were
	Visible               []time.Duration
	Deletes               []time.Duration // an unused campaign's, checked on a held copy
	Refused               []time.Duration // a used campaign's
	Rate                  int
	Sent, OK, NoFill, Bad int
	P50, P99, Max         time.Duration
	Slow                  []string // SLOWLOG entries over 10 ms: command and µs
}

// runScale measures an account of n line items; see the comment above.
func runScale(ctx context.Context, bin string, n, port, rate int, out string) error {
	for _, tool := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (make bench-tools installs it)", tool)
		}
	}
	dir, err := os.MkdirTemp("", "tsubame-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var rp, p procs
	defer rp.stop() // Redis last: the nodes give their leases back at their stop
	defer p.stop()
	redisAddr := "127.0.0.1:" + strconv.Itoa(port)
	nodeAddr := func(i int) (string, string) {
		return "127.0.0.1:" + strconv.Itoa(port+1+2*i), "127.0.0.1:" + strconv.Itoa(port+2+2*i)
	}
	for i := range 3 {
		a, b := nodeAddr(i)
		for _, x := range []string{a, b} {
			if err := portFree(x); err != nil {
				return err
			}
		}
	}
	if err := portFree(redisAddr); err != nil {
		return err
	}
	if err := startRedis(ctx, &rp, filepath.Join(dir, "redis"), redisAddr); err != nil {
		return err
	}
	cli := func(args ...string) (string, error) {
		host, rport, _ := net.SplitHostPort(redisAddr)
		b, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", rport}, args...)...).Output()
		return string(b), err
	}
	if _, err := cli("CONFIG", "SET", "slowlog-log-slower-than", "10000"); err != nil {
		return err
	}
	if _, err := cli("CONFIG", "SET", "slowlog-max-len", "1024"); err != nil {
		return err
	}
	res := scaleResult{Lines: n, Rate: rate}

	fmt.Fprintf(os.Stderr, "scale: generating %d line items\n", n)
	now := time.Now()
	size := campaigngen.Size{LineItems: n}
	set := campaigngen.Set(1, size, now)
	file := filepath.Join(dir, "campaigns.json")
	if err := writeSet(file, set); err != nil {
		return err
	}
	if fi, err := os.Stat(file); err == nil {
		res.FileBytes = fi.Size()
	}
	env := append(os.Environ(), "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+redisAddr, "TSUBAME_LOG_LEVEL=warn")

	fmt.Fprintln(os.Stderr, "scale: importing")
	imp := exec.CommandContext(ctx, bin, "campaigns", "import", "-replace", file)
	imp.Env, imp.Stderr = env, os.Stderr
	t0 := time.Now()
	if err := imp.Run(); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	res.Import = time.Since(t0)
	if ru, ok := imp.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.ImportRSS = ru.Maxrss << 10
	}
	set = nil // the nodes read the store
	if info, err := cli("INFO", "memory"); err == nil {
		res.RedisMemory = infoField(info, "used_memory_human")
	}

	var pids []int
	for i := range 3 {
		addr, admin := nodeAddr(i)
		fmt.Fprintf(os.Stderr, "scale: starting node %d\n", i)
		cmd := exec.Command(bin, "serve")
		cmd.Env = append(env,
			"TSUBAME_LISTEN="+addr, "TSUBAME_ADMIN_LISTEN="+admin,
			"TSUBAME_DATA_DIR="+filepath.Join(dir, fmt.Sprint("node", i), "data"),
			"TSUBAME_ACCESS_LOG_DIR="+filepath.Join(dir, fmt.Sprint("node", i), "logs"),
			"TSUBAME_ADMIN_METRICS_PUBLIC=true",
			// So that the idle minute measured below comes after it (10m by
			// default): what an idle node sends once its leases went back.
			"TSUBAME_ADS_BUDGET_IDLE=20s")
		cmd.Stderr = os.Stderr
		t0 := time.Now()
		if err := p.start(cmd); err != nil {
			return err
		}
		if err := waitStatus(ctx, "http://"+addr+"/readyz", http.StatusOK, 10*time.Minute); err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		res.Starts = append(res.Starts, time.Since(t0))
		pids = append(pids, cmd.Process.Pid)
	}
	for _, pid := range pids {
		res.RSS = append(res.RSS, readRSS(pid))
	}

	fmt.Fprintln(os.Stderr, "scale: an idle minute")
	sleep(ctx, 45*time.Second) // past ads.budget.idle and the first history round
	before, err := commandStats(cli)
	if err != nil {
		return err
	}
	sleep(ctx, time.Minute)
	after, err := commandStats(cli)
	if err != nil {
		return err
	}
	total := 0.0
	var top []string
	for name, calls := range after {
		if d := calls - before[name]; d > 0 {
			total += float64(d)
			top = append(top, fmt.Sprintf("%s %d", name, d))
		}
	}
	slices.Sort(top)
	res.IdleTop = strings.Join(top, ", ")
	res.IdleCommands = total / 3

	fmt.Fprintln(os.Stderr, "scale: changes")
	if res.Visible, err = changeVisibility(ctx, redisAddr, nodeAddr, 20); err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "scale: /api/decide at %d a second\n", rate)
	addr, _ := nodeAddr(0)
	if err := fixedRate(ctx, "http://"+addr, campaigngen.Requests(2, size, 4096, now), rate, 20*time.Second, &res); err != nil {
		return err
	}
	// Last: the harness's own read of the whole set (for the copy the
	// deletes are checked on) must not share the decisions' minute.
	fmt.Fprintln(os.Stderr, "scale: campaign deletes")
	if res.Deletes, res.Refused, err = campaignDeletes(ctx, redisAddr, 5); err != nil {
		return err
	}
	if slow, err := cli("--json", "SLOWLOG", "GET", "1024"); err == nil {
		res.Slow = slowEntries(slow)
	}
	return writeScaleSection(out, res)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// writeSet writes set as a campaign file.
func writeSet(file string, set *tsubame.CampaignSet) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := bulk.WriteCampaigns(w, set, bulk.CampaignsJSON); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// waitStatus polls url until it answers status.
func waitStatus(ctx context.Context, url string, status int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == status {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer %d within %v", url, status, within)
}

func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return ""
}

// commandStats returns Redis's calls per command so far.
func commandStats(cli func(...string) (string, error)) (map[string]int64, error) {
	info, err := cli("INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || name == "config" || name == "slowlog" {
			continue // this measurement's own
		}
		out[name] = n
	}
	return out, nil
}

// changeVisibility writes n changes of one line item each through a store
// client of its own, and returns, per change, how long until all three
// nodes had patched (or compiled) their index with it
// (tsubame_decision_index_patches_total and _compiles_total moved).
func changeVisibility(ctx context.Context, redisAddr string, nodeAddr func(int) (string, string), n int) ([]time.Duration, error) {
	st, err := redis.Open(redis.Options{Addrs: []string{redisAddr}})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	lis, err := tsubame.ListCampaignObjects[*tsubame.LineItem](ctx, st)
	if err != nil {
		return nil, err
	}
	builds := func(i int) float64 {
		_, admin := nodeAddr(i)
		body, err := httpGet("http://" + admin + "/metrics")
		if err != nil {
			return -1
		}
		return metricValue(body, "tsubame_decision_index_patches_total") + metricValue(body, "tsubame_decision_index_compiles_total")
	}
	var out []time.Duration
	for k := range n {
		var was [3]float64
		for i := range 3 {
			was[i] = builds(i)
		}
		li := lis[(k*7919)%len(lis)]
		li.Weight = li.Weight%100 + 1
		t0 := time.Now()
		if err := st.PutObject(ctx, li); err != nil {
			return nil, err
		}
		for i := range 3 {
			for builds(i) <= was[i] {
				if time.Since(t0) > time.Minute {
					return nil, fmt.Errorf("node %d did not take a change within a minute", i)
				}
				time.Sleep(5 * time.Millisecond) // a scrape costs the node too
			}
		}
		out = append(out, time.Since(t0))
		sleep(ctx, 500*time.Millisecond)
	}
	return out, nil
}

// campaignDeletes times n deletes of a campaign nothing names, each made
// after its own write, and n refused deletes of a campaign a line item
// names, as a node's admin API makes them: checked against the set the
// process holds (tsubame.CampaignCopies), brought to the store's version
// with the log.
func campaignDeletes(ctx context.Context, redisAddr string, n int) (deletes, refused []time.Duration, err error) {
	st, err := redis.Open(redis.Options{Addrs: []string{redisAddr}})
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	held, v, err := st.Snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	st.UseCampaignCopy(func() (*tsubame.CampaignSet, uint64) { return held, v })
	used := held.LineItems[0].Campaign
	for k := range n {
		c := *held.Campaigns[0]
		c.ID = fmt.Sprintf("scale-unused-%d", k)
		if err := st.PutObject(ctx, &c); err != nil {
			return nil, nil, err
		}
		t0 := time.Now()
		if err := st.DeleteObject(ctx, tsubame.KindCampaign, c.ID); err != nil {
			return nil, nil, fmt.Errorf("delete of an unused campaign: %w", err)
		}
		deletes = append(deletes, time.Since(t0))
		t0 = time.Now()
		if err := st.DeleteObject(ctx, tsubame.KindCampaign, used); tsubame.ErrorCode(err) != tsubame.ECONFLICT {
			return nil, nil, fmt.Errorf("delete of a used campaign: %v, want a conflict", err)
		}
		refused = append(refused, time.Since(t0))
	}
	return deletes, refused, nil
}

func metricValue(body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// fixedRate sends /api/decide requests at rate a second for d, each at
// its scheduled time whatever the answers before it (64 senders), and
// records each latency from that time.
func fixedRate(ctx context.Context, base string, reqs []campaigngen.Request, rate int, d time.Duration, res *scaleResult) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	type job struct {
		at  time.Time
		url string
		ua  string
	}
	jobs := make(chan job, rate)
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for j := range jobs {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
				req.Header.Set("User-Agent", j.ua)
				r, err := client.Do(req)
				took := time.Since(j.at)
				mu.Lock()
				res.Sent++
				switch {
				case err != nil:
					res.Bad++
				case r.StatusCode == http.StatusOK:
					res.OK++
				case r.StatusCode == http.StatusNoContent:
					res.NoFill++
				default:
					res.Bad++
				}
				lat = append(lat, took)
				mu.Unlock()
				if err == nil {
					r.Body.Close()
				}
			}
		})
	}
	start := time.Now()
	every := time.Second / time.Duration(rate)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * every)
		if at.Sub(start) >= d || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Until(at))
		q := reqs[i%len(reqs)]
		v := []string{"placement=" + q.Placement}
		if q.Site != "" {
			v = append(v, "site="+q.Site)
		}
		for _, kv := range q.KeyValues {
			v = append(v, "kv."+kv[0]+"="+kv[1])
		}
		ua := browserUAs[0].UA
		if q.Device == "mobile" {
			ua = browserUAs[1].UA
		}
		jobs <- job{at, base + "/api/decide?" + strings.Join(v, "&"), ua}
	}
	close(jobs)
	wg.Wait()
	if len(lat) == 0 {
		return errors.New("no request answered")
	}
	slices.Sort(lat)
	res.P50, res.P99, res.Max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	return nil
}

// slowEntries reads SLOWLOG GET's reply (redis-cli --json): each
// entry's command, its first arguments and how long it ran.
func slowEntries(reply string) []string {
	var entries [][]any
	if err := json.Unmarshal([]byte(reply), &entries); err != nil {
		return []string{"unreadable: " + err.Error()}
	}
	var out []string
	for _, e := range entries {
		if len(e) < 4 {
			continue
		}
		us, _ := e[2].(float64)
		args, _ := e[3].([]any)
		var words []string
		for i, a := range args {
			if i == 3 {
				words = append(words, fmt.Sprintf("… %d arguments", len(args)))
				break
			}
			w := fmt.Sprint(a)
			if len(w) > 40 {
				w = w[:40] + "…"
			}
			words = append(words, w)
		}
		out = append(out, fmt.Sprintf("`%s` %.1f ms", strings.Join(words, " "), us/1000))
	}
	return out
}

// writeScaleSection puts the result between scaleBegin and scaleEnd in
// file (at its end when they are not there yet).
func writeScaleSection(file string, r scaleResult) error {
	var md strings.Builder
	fmt.Fprintf(&md, "%s\n## A million line items (`make bench-scale`)\n\n", scaleBegin)
	fmt.Fprintf(&md, "%d line items generated by `internal/campaigngen` (a %.0f MB JSON file), one Redis and three Tsubame nodes on this machine's %d cores, measured %s. No peer runs beside it: the figures are the goals' (issue: a node starts in under 30 s, a change is on three nodes within 1 s, no Redis command over 10 ms, an idle node's commands do not grow with the account).\n\n",
		r.Lines, float64(r.FileBytes)/1e6, cores(), time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintln(&md, "| | |\n|---|---|")
	fmt.Fprintf(&md, "| the CLI's import with `-replace` | %.1f s, %d MB peak resident |\n", r.Import.Seconds(), r.ImportRSS>>20)
	fmt.Fprintf(&md, "| Redis's memory for the set | %s |\n", r.RedisMemory)
	for i, s := range r.Starts {
		fmt.Fprintf(&md, "| node %d: start to `/readyz` 200 | %.1f s, %d MB resident |\n", i, s.Seconds(), r.RSS[i]>>20)
	}
	fmt.Fprintf(&md, "| an idle node's Redis commands (`ads.budget.idle` 20 s, so that the minute measured is past it) | %.0f a minute a node (the three nodes' by command: %s) |\n", r.IdleCommands, r.IdleTop)
	v := slices.Clone(r.Visible)
	slices.Sort(v)
	fmt.Fprintf(&md, "| a change to one line item on all three nodes (%d changes) | median %.0f ms, slowest %.0f ms |\n", len(v), ms64(v[len(v)/2]), ms64(v[len(v)-1]))
	fmt.Fprintf(&md, "| a campaign's delete, checked against the set a node holds and the log (%d, each after a write) | %s; refused for a used campaign: %s |\n",
		len(r.Deletes), msList(r.Deletes), msList(r.Refused))
	fmt.Fprintf(&md, "| `/api/decide` at %d a second for 20 s (open loop) | p50 %.2f ms, p99 %.2f ms, max %.2f ms; %d sent, %d filled, %d no fill, %d errors |\n",
		r.Rate, ms64(r.P50), ms64(r.P99), ms64(r.Max), r.Sent, r.OK, r.NoFill, r.Bad)
	slow := "none"
	if len(r.Slow) > 0 {
		slow = strings.Join(r.Slow, "; ")
	}
	fmt.Fprintf(&md, "| Redis commands over 10 ms (`SLOWLOG`, the whole run) | %s |\n\n%s\n", slow, scaleEnd)

	return replaceSection(file, scaleBegin, scaleEnd, md.String())
}

func ms64(d time.Duration) float64 { return float64(d) / 1e6 }

// msList is ds in milliseconds, in the order taken.
func msList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%.1f", ms64(d)))
	}
	return strings.Join(s, ", ") + " ms"
}

func cores() int { return cmp.Or(runtime.NumCPU(), 1) }
