package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/store/redis/redistest"
)

// reportRow is a row of `tsubame report -format json`.
type reportRow struct {
	LineItem           string `json:"line_item"`
	Currency           string `json:"currency"`
	Impressions        int64  `json:"impressions"`
	Clicks             int64  `json:"clicks"`
	CTR                string `json:"ctr"`
	Spend              string `json:"spend"`
	Requests           int64  `json:"requests"`
	Decisions          int64  `json:"decisions"`
	InvalidImpressions int64  `json:"invalid_impressions"`
	InvalidClicks      int64  `json:"invalid_clicks"`
	Rejected           int64  `json:"rejected"`
}

// reportTraffic is what a test sent and what the reports must say of it.
type reportTraffic struct {
	decisions, imps, impRepeats, clicks, clickRepeats, rejected map[string]int64 // by line item ("" for rejected)
	requests                                                    int64            // slots asked: one per ad request
	urls                                                        []struct{ li, imp, click string }
}

func newReportTraffic() *reportTraffic {
	return &reportTraffic{decisions: map[string]int64{}, imps: map[string]int64{}, impRepeats: map[string]int64{},
		clicks: map[string]int64{}, clickRepeats: map[string]int64{}, rejected: map[string]int64{}}
}

// send asks n ads of placement 1 as a browser and fetches their URLs: every
// impression once, every third twice (a repeat), every fourth click, every
// eighth click twice, and a tampered impression URL every fifth.
func (tr *reportTraffic) send(t *testing.T, base string, n int) {
	t.Helper()
	for i := range n {
		code, body := browserGet(t, fmt.Sprintf("%s/api/decide?placement=1&uid=u-%d", base, i%17))
		if code != http.StatusOK {
			t.Fatalf("decide: %d %s", code, body)
		}
		tr.requests++
		var a adsAnswer
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatal(err)
		}
		for _, d := range a.Decisions {
			tr.decisions[d.LineItem]++
			tr.urls = append(tr.urls, struct{ li, imp, click string }{d.LineItem, d.ImpressionURL, d.ClickURL})
		}
	}
	for i, u := range tr.urls[len(tr.urls)-n:] {
		fetch := func(url string, want int) {
			t.Helper()
			if code, body := browserGet(t, url); code != want {
				t.Fatalf("%s: %d %s, want %d", url, code, body, want)
			}
		}
		fetch(u.imp, http.StatusOK)
		tr.imps[u.li]++
		if i%3 == 0 {
			fetch(u.imp, http.StatusOK)
			tr.impRepeats[u.li]++
		}
		if i%4 == 0 {
			fetch(u.click, http.StatusFound)
			tr.clicks[u.li]++
		}
		if i%8 == 0 {
			fetch(u.click, http.StatusFound)
			tr.clickRepeats[u.li]++
		}
		if i%5 == 0 {
			k := strings.LastIndexByte(u.imp, '/') + 10 // inside the token
			c := byte('A')
			if u.imp[k] == 'A' {
				c = 'B'
			}
			fetch(u.imp[:k]+string(c)+u.imp[k+1:], http.StatusBadRequest)
			tr.rejected[""]++
		}
	}
}

// check compares a report by line item with what was sent.
func (tr *reportTraffic) check(t *testing.T, rows []reportRow) {
	t.Helper()
	for _, d := range tr.diff(t, rows) {
		t.Error(d)
	}
}

// diff lists how a report by line item differs from what was sent.
func (tr *reportTraffic) diff(t *testing.T, rows []reportRow) []string {
	t.Helper()
	var out []string
	cpm := map[string]tsubame.Money{}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(demoCampaigns, &set); err != nil {
		t.Fatal(err)
	}
	for _, l := range set.LineItems {
		cpm[l.ID] = l.CPM
	}
	seen := map[string]bool{}
	requests := false
	for _, r := range rows {
		seen[r.LineItem] = true
		if r.LineItem == "" && r.Currency != "" {
			// The ad requests' slots: they have no line item.
			requests = true
			if want := (reportRow{Currency: "USD", Requests: tr.requests, CTR: r.CTR, Spend: "0.00"}); r != want {
				out = append(out, fmt.Sprintf("the row of ad requests:\n got %+v\nwant %+v", r, want))
			}
			continue
		}
		if r.LineItem == "" {
			if r.Rejected != tr.rejected[""] || r.Impressions != 0 || r.Requests != 0 || r.Currency != "" {
				out = append(out, fmt.Sprintf("the row of refused URLs: %+v, want %d rejected", r, tr.rejected[""]))
			}
			continue
		}
		li := r.LineItem
		spend := int64(cpm[li]) * tr.imps[li] // thousandths of a micro-unit
		want := reportRow{LineItem: li, Currency: "USD", Impressions: tr.imps[li], Clicks: tr.clicks[li], Decisions: tr.decisions[li],
			InvalidImpressions: tr.impRepeats[li], InvalidClicks: tr.clickRepeats[li], Spend: reportAmount(spend), CTR: r.CTR}
		if r != want {
			out = append(out, fmt.Sprintf("line item %s:\n got %+v\nwant %+v", li, r, want))
		}
	}
	for li := range tr.decisions {
		if !seen[li] {
			out = append(out, "no row for line item "+li)
		}
	}
	if tr.requests > 0 && !requests {
		out = append(out, fmt.Sprintf("no row of ad requests (%d sent)", tr.requests))
	}
	return out
}

// TestReportsEndToEnd: the real binary serves known traffic (repeats and
// tampered URLs included), is killed with SIGKILL half-way and started
// again on the same directories, and stopped; the reports equal what was
// sent, line item by line item, through the running server's control
// socket and from the files after it stopped, and verify finds the files
// and the rollups equal.
func TestReportsEndToEnd(t *testing.T) {
	dataDir, logDir := t.TempDir(), t.TempDir()
	env := []string{"TSUBAME_DATA_DIR=" + dataDir, "TSUBAME_ACCESS_LOG_DIR=" + logDir, "TSUBAME_REPORT_INTERVAL=50ms", "TSUBAME_REPORT_COMMIT_EVERY=50ms"}
	cliEnv := append([]string{"TSUBAME_ADMIN_LISTEN="}, env...)
	tr := newReportTraffic()

	p := startWrapped(t, nil, env...)
	tr.send(t, p.base, 40)
	waitReport(t, cliEnv, tr) // rolled up by the running server
	if code, out, errOut := runCmd(t, cliEnv, "", "report", "verify"); code != 0 || !strings.Contains(out, "the rollups equal the files") ||
		!strings.Contains(errOut, "the reports are held by the running server") {
		t.Fatalf("verify through the running server: %d\n%s%s", code, out, errOut)
	}
	tr.send(t, p.base, 20)
	if err := p.cmd.Process.Kill(); err != nil { // SIGKILL: no goodbye
		t.Fatal(err)
	}
	_ = p.wait(t)

	p = startWrapped(t, nil, env...)
	tr.send(t, p.base, 40)
	waitReport(t, cliEnv, tr)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.logs)
	}

	// No server: the command reads the rollups itself.
	code, out, errOut := runCmd(t, cliEnv, "", "report", "-by", "line_item", "-format", "json")
	if code != 0 {
		t.Fatalf("report: %d %s", code, errOut)
	}
	tr.check(t, decodeRows(t, out))
	code, out, errOut = runCmd(t, cliEnv, "", "report", "verify")
	if code != 0 || !strings.Contains(out, "the rollups equal the files") {
		t.Fatalf("verify: %d\n%s%s", code, out, errOut)
	}
	// Rebuilt from the files: the same.
	if code, _, errOut = runCmd(t, cliEnv, "", "report", "rebuild"); code != 0 {
		t.Fatalf("rebuild: %d %s", code, errOut)
	}
	_, out, _ = runCmd(t, cliEnv, "", "report", "-by", "line_item", "-format", "json")
	tr.check(t, decodeRows(t, out))
	// By day in two zones: the same totals.
	for _, tz := range []string{"Asia/Tokyo", "America/New_York"} {
		_, out, _ = runCmd(t, cliEnv, "", "report", "-by", "day", "-tz", tz, "-format", "json")
		var imps int64
		for _, r := range decodeRows(t, out) {
			imps += r.Impressions
		}
		var want int64
		for _, n := range tr.imps {
			want += n
		}
		if imps != want {
			t.Errorf("by day in %s: %d impressions, want %d", tz, imps, want)
		}
	}
}

func decodeRows(t *testing.T, out string) []reportRow {
	t.Helper()
	var res struct {
		Rows []reportRow `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return res.Rows
}

// waitReport waits until the running server's reports (through its
// control socket) count every impression sent, then checks them whole.
func waitReport(t *testing.T, env []string, tr *reportTraffic) {
	t.Helper()
	var want int64
	for _, n := range tr.imps {
		want += n
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, out, errOut := runCmd(t, env, "", "report", "-by", "line_item", "-format", "json")
		if code != 0 {
			t.Fatalf("report through the server: %d %s", code, errOut)
		}
		rows := decodeRows(t, out)
		var got int64
		for _, r := range rows {
			got += r.Impressions
		}
		// Every count, not the impressions alone: a repeat's line comes
		// after its impression's, and a commit may fall between them.
		diff := tr.diff(t, rows)
		if got == want && len(diff) == 0 {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("%d impressions reported, want %d; %s", got, want, strings.Join(diff, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reportAmount is report.Amount, written again so that the test does not
// check the code with itself: units with at least two decimals.
func reportAmount(v int64) string {
	s := fmt.Sprintf("%d.%09d", v/1e9, v%1e9)
	s = strings.TrimRight(s, "0")
	for len(s)-strings.IndexByte(s, '.')-1 < 2 {
		s += "0"
	}
	return s
}

// Three servers on one Redis roll their own access logs up into the
// store: known traffic sent to all three is reported whole through any
// one of them (the command going through its control socket), and by
// node as each sent it.
func TestReportsAcrossNodes(t *testing.T) {
	redistest.Require(t)
	addr := redistest.Start(t).Addr
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	var nodes []*Main
	var envs [][]string
	for i := range 3 {
		env := append(testEnv(t), "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+addr, "TSUBAME_STORE_REDIS_KEY_PREFIX="+prefix,
			fmt.Sprintf("TSUBAME_REPORT_NODE=n%d", i), "TSUBAME_REPORT_INTERVAL=50ms", "TSUBAME_REPORT_COMMIT_EVERY=50ms")
		envs = append(envs, env)
		nodes = append(nodes, openMain(t, env, true))
	}
	tr := newReportTraffic()
	imps := map[string]int64{}
	for i, m := range nodes {
		before := int64(len(tr.urls))
		tr.send(t, "http://"+m.PublicAddr(), 10+5*i)
		imps[fmt.Sprintf("n%d", i)] = int64(len(tr.urls)) - before
	}
	for i := range nodes {
		waitReport(t, envs[i], tr) // the same whole, asked of each node
	}
	code, out, errOut := runCmd(t, envs[1], "", "report", "-by", "node", "-format", "json")
	if code != 0 {
		t.Fatalf("report -by node: %d %s", code, errOut)
	}
	var res struct {
		Rows []struct {
			Node        string `json:"node"`
			Currency    string `json:"currency"`
			Impressions int64  `json:"impressions"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range res.Rows {
		got[r.Node] += r.Impressions
	}
	for node, n := range imps {
		if got[node] != n {
			t.Errorf("node %s: %d impressions reported, %d sent (%s)", node, got[node], n, out)
		}
	}
}

// SIGKILL at random moments under load, five times on the same data and
// log directories, with the rollups committing every 20 ms and the log
// rotating every second (kills land in commits and rotations): after a
// last clean start and stop, the report per line item equals the valid
// impression lines the files hold, counted here line by line, and verify
// finds the rollups equal to the files.
func TestReportsSurviveKill9(t *testing.T) {
	dataDir, logDir := t.TempDir(), t.TempDir()
	env := []string{"TSUBAME_DATA_DIR=" + dataDir, "TSUBAME_ACCESS_LOG_DIR=" + logDir, "TSUBAME_REPORT_INTERVAL=20ms", "TSUBAME_REPORT_COMMIT_EVERY=20ms",
		"TSUBAME_ACCESS_LOG_ROTATE_EVERY=1s"}
	for kill := range 5 {
		p := startWrapped(t, nil, env...)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := range 2 {
			wg.Go(func() {
				client := &http.Client{Timeout: 5 * time.Second}
				for n := 0; n < 5000; n++ {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/decide?placement=1&uid=k%d-c%d-%d", p.base, kill, c, n%13), nil)
					req.Header.Set("User-Agent", browserUA)
					resp, err := client.Do(req)
					if err != nil {
						return // killed
					}
					var a adsAnswer
					err = json.NewDecoder(resp.Body).Decode(&a)
					resp.Body.Close()
					if err != nil || len(a.Decisions) == 0 {
						continue
					}
					for range 1 + n%2 { // every other impression twice: a repeat
						req, _ := http.NewRequest("GET", a.Decisions[0].ImpressionURL, nil)
						req.Header.Set("User-Agent", browserUA)
						if resp, err := client.Do(req); err == nil {
							resp.Body.Close()
						}
					}
				}
			})
		}
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = p.wait(t)
		close(stop)
		wg.Wait()
	}
	p := startWrapped(t, nil, env...)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, p.logs)
	}

	want, total, files := impressionsInFiles(t, logDir)
	checkReportEqualsFiles(t, env, want, "after 5 kills")
	t.Logf("%d impressions over %d files, reported exactly after 5 kills", total, files)
}

// impressionsInFiles reads the access log's files in logDir line by line
// and returns their valid, in-time impressions by line item, their total
// and the files' count.
func impressionsInFiles(t *testing.T, logDir string) (map[string]int64, int64, int) {
	t.Helper()
	want := map[string]int64{}
	var total int64
	names, _ := filepath.Glob(filepath.Join(logDir, "access*.log*"))
	for _, name := range names {
		r, err := accesslog.OpenLines(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, "\tevent:imp\t") || !strings.Contains(line, "\tvalid:true") || strings.Contains(line, "\tlate:true") {
				continue
			}
			_, li, _ := strings.Cut(line, "\tline_item:")
			li, _, _ = strings.Cut(li, "\t")
			want[li]++
			total++
		}
		r.Close()
	}
	if total == 0 {
		t.Fatal("no impression was logged: the load did not run")
	}
	return want, total, len(names)
}

// checkReportEqualsFiles runs "tsubame report" by line item and "report
// verify" on the stopped server's data: its impressions must be want's.
func checkReportEqualsFiles(t *testing.T, env []string, want map[string]int64, after string) {
	t.Helper()
	code, out, errOut := runCmd(t, append([]string{"TSUBAME_ADMIN_LISTEN="}, env...), "", "report", "-by", "line_item", "-format", "json")
	if code != 0 {
		t.Fatalf("report: %d %s", code, errOut)
	}
	got := map[string]int64{}
	for _, r := range decodeRows(t, out) {
		if r.Impressions > 0 {
			got[r.LineItem] += r.Impressions
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: the report says %v, the files hold %v", after, got, want)
	}
	code, out, errOut = runCmd(t, append([]string{"TSUBAME_ADMIN_LISTEN="}, env...), "", "report", "verify")
	if code != 0 || !strings.Contains(out, "the rollups equal the files") {
		t.Fatalf("verify %s: %d\n%s%s", after, code, out, errOut)
	}
}

// A restart's predecessor leaves the count of its last lines to its
// successor (Roller.Leave), which serves first and counts them after, and
// hands it the campaigns it serves, which the successor decides with:
// across handovers under ad traffic, with commit_every longer than the
// test so that every predecessor leaves lines counted and not committed,
// the report equals the files exactly.
func TestReportsAcrossHandovers(t *testing.T) {
	dataDir, logDir := t.TempDir(), t.TempDir()
	env := []string{"TSUBAME_DATA_DIR=" + dataDir, "TSUBAME_ACCESS_LOG_DIR=" + logDir, "TSUBAME_REPORT_INTERVAL=20ms", "TSUBAME_REPORT_COMMIT_EVERY=1h"}
	p := startWrapped(t, nil, env...)
	pidFile := filepath.Join(dataDir, PIDFile)
	pid := waitPID(t, pidFile)
	pids := []int{pid}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var imps atomic.Int64
	for c := range 2 {
		wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/decide?placement=1&uid=h-c%d-%d", p.base, c, n%13), nil)
				req.Header.Set("User-Agent", browserUA)
				resp, err := client.Do(req)
				if err != nil {
					continue // a connection the handover closed: the next one is served
				}
				var a adsAnswer
				err = json.NewDecoder(resp.Body).Decode(&a)
				resp.Body.Close()
				if err != nil || len(a.Decisions) == 0 {
					continue
				}
				req, _ = http.NewRequest("GET", a.Decisions[0].ImpressionURL, nil)
				req.Header.Set("User-Agent", browserUA)
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
					imps.Add(1)
				}
			}
		})
	}
	waitImps := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for imps.Load() < n {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("%d impressions served, waited for %d\n%s", imps.Load(), n, p.logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cli := append([]string{"TSUBAME_ADMIN_LISTEN="}, env...)
	const handovers = 3
	for i := range handovers {
		waitImps(imps.Load() + 100) // each process serves and counts some
		if code, _, stderr := runCmd(t, cli, "", "restart", "-timeout", "60s"); code != 0 {
			close(stop)
			wg.Wait()
			t.Fatalf("restart %d: %d %s\n%s", i+1, code, stderr, p.logs)
		}
		next, err := readPID(pidFile)
		if err != nil || next == pid {
			close(stop)
			wg.Wait()
			t.Fatalf("restart %d: pid %d (%v) after %d", i+1, next, err, pid)
		}
		pid = next
		pids = append(pids, pid)
	}
	waitImps(imps.Load() + 100)
	close(stop)
	wg.Wait()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil { // returns once every process has closed its stderr
		t.Fatalf("stop: %v\n%s", err, p.logs)
	}
	if got := strings.Count(p.logs.String(), "took over from the previous process"); got != handovers {
		t.Fatalf("%d takeovers logged, want %d\n%s", got, handovers, p.logs)
	}
	// Each successor decided with the index it compiled from the campaigns
	// its predecessor handed over while serving (catalog.go).
	if got := strings.Count(p.logs.String(), "decision index compiled from the previous process's campaigns"); got != handovers {
		t.Fatalf("%d successors took the previous process's campaigns, want %d\n%s", got, handovers, p.logs)
	}
	// Each predecessor left its last lines, counted and not committed, to
	// its successor.
	leaves := regexp.MustCompile(`reports: the last lines are left to the next process"? lines=(\d+)`).FindAllStringSubmatch(p.logs.String(), -1)
	var left int
	for _, m := range leaves {
		n, _ := strconv.Atoi(m[1])
		left += n
	}
	if len(leaves) != handovers || left == 0 {
		t.Fatalf("%d predecessors left %d lines to their successors, want %d and some\n%s", len(leaves), left, handovers, p.logs)
	}
	want, total, files := impressionsInFiles(t, logDir)
	checkReportEqualsFiles(t, env, want, fmt.Sprintf("after %d handovers", handovers))
	t.Logf("%d impressions over %d files, reported exactly after %d handovers (%d lines left to successors)", total, files, handovers, left)
}

// A predecessor leaves its last lines to a successor only if the
// successor's configuration, as it reads it, rolls up the same files into
// the same reports.
func TestSameReports(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tsubame.yaml")
	environ := []string{"TSUBAME_DATA_DIR=" + dir, "TSUBAME_ACCESS_LOG_DIR=" + filepath.Join(dir, "logs")}
	write := func(yaml string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("report:\n  enabled: true\n")
	cur, _, err := loadConfigWarnings(path, environ)
	if err != nil {
		t.Fatal(err)
	}
	m := &Main{Config: cur}
	for _, c := range []struct {
		yaml    string
		environ []string
		same    bool
	}{
		{"report:\n  enabled: true\n", environ, true},
		{"report:\n  enabled: true\n  commit_every: 1m\n", environ, true}, // not where the counts go
		{"report:\n  enabled: false\n", environ, false},
		{"report:\n  enabled: true\n  node: other\n", environ, false},
		{"report:\n  enabled: true\n", append(slices.Clone(environ), "TSUBAME_ACCESS_LOG_DIR="+filepath.Join(dir, "elsewhere")), false},
		{"report:\n  enabled: true\n", []string{"TSUBAME_DATA_DIR=" + t.TempDir(), environ[1]}, false}, // another reports.db
		{"report: [", environ, false},                                                                  // the successor could not have read it: count here
	} {
		write(c.yaml)
		if got := m.sameReports(path, c.environ); got != c.same {
			t.Errorf("%q: sameReports = %v, want %v", c.yaml, got, c.same)
		}
	}
}
