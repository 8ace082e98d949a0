package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The restart scenario: wrk on sample4's URL against a Tsubame that
// replaces itself restartHandovers times during the run (SIGUSR2,
// cmd/tsubame/restart.go), and against the reference nginx gracefully
// reloaded as often (SIGHUP) under the same load: what a client that never
// retries sees of a restart.

// restartHandovers is how many restarts each run of the scenario makes.
const restartHandovers = 5

// restartConns are the scenario's connection counts (it ignores -connections).
var restartConns = []int{100, 1000}

// restartPIDFile is where a Tsubame writes its pid in its data directory
// (cmd/tsubame's PIDFile), the successor once it serves.
const restartPIDFile = "tsubame.pid"

// restartNode is a Tsubame of the restart scenario's own: its pid changes
// at every handover, so it cannot be the shared instance, and its current
// process is the one its pid file names.
type restartNode struct {
	target  string // its label in the results
	addr    string
	pidFile string
	logs    string // its access log directory
	group   int    // its process group: the first process and every successor
}

// restartRun is one wrk run of the restart scenario.
type restartRun struct {
	Round  int // from 0
	Target string
	Conns  int
	Wrk    wrkResult
	// Restarts made during the run, how long each took: for Tsubame from
	// the signal until the pid file named the successor, for nginx until
	// the last old worker had exited.
	Restarts []time.Duration
	// Lines is how many lines the run added to Tsubame's access log (-1:
	// not counted, nginx).
	Lines int64
}

// logged reports whether the access log holds a line for each request wrk
// counted, and at most one per connection besides: wrk does not count the
// requests it leaves in flight when it stops, which the server answered.
func (r restartRun) logged() bool {
	d := r.Lines - r.Wrk.Requests
	return d >= 0 && d <= int64(r.Conns)
}

// startRestartNodes starts the scenario's two Tsubames, on the embedded
// store and on the bench's Redis, on four ports from first (each with its
// admin listener). They are returned as soon as they start, so that the
// caller stops them (stopRestartNodes) whatever fails after.
func startRestartNodes(ctx context.Context, p *procs, bin, dir string, first int, apiURL, cbEnv, redisAddr string) ([]*restartNode, error) {
	var nodes []*restartNode
	for i, n := range []struct {
		target, dir string
		env         []string
	}{
		{"tsubame", "restart", nil},
		{"tsubame-redis", "restart-redis", []string{"TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS=" + redisAddr}},
	} {
		addr, admin := "127.0.0.1:"+strconv.Itoa(first+2*i), "127.0.0.1:"+strconv.Itoa(first+2*i+1)
		for _, a := range []string{addr, admin} {
			if err := portFree(a); err != nil {
				return nodes, err
			}
		}
		d := filepath.Join(dir, n.dir)
		node := &restartNode{target: n.target, addr: addr, pidFile: filepath.Join(d, "data", restartPIDFile), logs: filepath.Join(d, "logs")}
		nodes = append(nodes, node)
		cmd, err := startTsubame(ctx, p, bin, d, addr, admin, apiURL, append([]string{cbEnv}, n.env...)...)
		if cmd != nil && cmd.Process != nil {
			node.group = cmd.Process.Pid
		}
		if err != nil {
			return nodes, err
		}
		if _, err := node.waitPID(ctx, 0); err != nil {
			return nodes, err
		}
		if err := checkBodies(addr); err != nil {
			return nodes, err
		}
	}
	return nodes, nil
}

// stopRestartNodes ends each node's current process, a successor that the
// procs tracker never started, and waits until it has gone; then any
// successor still starting (a restart under way when the bench stops).
func stopRestartNodes(nodes []*restartNode) {
	for _, n := range nodes {
		if pid, err := readPIDFile(n.pidFile); err == nil { // none: stopped already (it removes its pid file)
			_ = syscall.Kill(pid, syscall.SIGTERM)
			if !waitGone(pid, 20*time.Second) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				waitGone(pid, 5*time.Second)
			}
		}
		if n.group > 0 {
			_ = syscall.Kill(-n.group, syscall.SIGKILL)
		}
	}
}

// handover replaces the node's process: SIGUSR2 to the pid its pid file
// names, then a wait until the file names the successor. It returns how
// long that took.
func (n *restartNode) handover(ctx context.Context) (time.Duration, error) {
	old, err := readPIDFile(n.pidFile)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		return 0, fmt.Errorf("cannot signal %s (pid %d): %w", n.target, old, err)
	}
	if _, err := n.waitPID(ctx, old); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// waitPID waits until the pid file names a process other than old.
func (n *restartNode) waitPID(ctx context.Context, old int) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if pid, err := readPIDFile(n.pidFile); err == nil && pid != old {
			return pid, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("%s: %s did not name a new process within 30 s", n.target, n.pidFile)
}

func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s does not hold a process id", path)
	}
	return pid, nil
}

// waitGone waits until process pid has exited, reporting whether it did
// within d. A zombie has exited: an old Tsubame is a child of the bench or
// of its predecessor, neither of which reaps it at once.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && len(b) > i+2 && b[i+2] == 'Z' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reloadNginx gracefully reloads the nginx whose master is pid (SIGHUP:
// new workers start, the old ones close their idle keep-alive connections
// and quit once their requests are answered) and waits until every old
// worker has exited. It returns how long that took.
func reloadNginx(ctx context.Context, master int) (time.Duration, error) {
	old, err := childPIDs(master)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := syscall.Kill(master, syscall.SIGHUP); err != nil {
		return 0, fmt.Errorf("cannot signal nginx (pid %d): %w", master, err)
	}
	deadline := start.Add(30 * time.Second)
	for {
		now, err := childPIDs(master)
		if err != nil {
			return 0, err
		}
		if len(now) > 0 && !overlap(old, now) {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("nginx's old workers %v still run 30 s after a reload", old)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// childPIDs lists the children of pid, a single-threaded process (nginx's
// master).
func childPIDs(pid int) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

func overlap(a, b []int) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// spaced calls restart n times during a run of length d that began at
// start, evenly spaced (at d/(n+1), 2d/(n+1), ...), each once the one
// before has finished; one that would begin after the run is not made. It
// returns how long each took.
func spaced(ctx context.Context, start time.Time, d time.Duration, n int, restart func(context.Context) (time.Duration, error)) ([]time.Duration, error) {
	var took []time.Duration
	for i := range n {
		select {
		case <-ctx.Done():
			return took, ctx.Err()
		case <-time.After(time.Until(start.Add(d * time.Duration(i+1) / time.Duration(n+1)))):
		}
		if time.Since(start) >= d {
			break
		}
		t, err := restart(ctx)
		if err != nil {
			return took, err
		}
		took = append(took, t)
	}
	return took, nil
}

// longest is the longest restart of the run.
func (r restartRun) longest() time.Duration {
	var l time.Duration
	for _, t := range r.Restarts {
		l = max(l, t)
	}
	return l
}

// restartRound runs one round of the restart scenario: at each connection
// count, Tsubame on the embedded store, nginx (whose master is pid
// master, on ref), then Tsubame on Redis, each restarted
// restartHandovers times while wrk runs.
func restartRound(ctx context.Context, s scenario, nodes []*restartNode, ref string, master, threads, round, rounds int) ([]restartRun, error) {
	// The bench's own keep-alive connections (its checks before the
	// rounds) would sit idle through the run: measure wrk's alone.
	http.DefaultClient.CloseIdleConnections()
	var out []restartRun
	for _, c := range restartConns {
		targets := []*restartNode{nodes[0], {target: "nginx", addr: ref}, nodes[1]}
		for _, t := range targets {
			r := restartRun{Round: round, Target: t.target, Conns: c, Lines: -1}
			restart := func(ctx context.Context) (time.Duration, error) { return reloadNginx(ctx, master) }
			var before int64
			if t.pidFile != "" {
				restart = t.handover
				var err error
				if before, err = countLines(t.logs); err != nil {
					return out, err
				}
			}
			type made struct {
				took []time.Duration
				err  error
			}
			done := make(chan made, 1)
			rctx, cancel := context.WithCancel(ctx)
			start := time.Now()
			go func() {
				took, err := spaced(rctx, start, s.Duration, restartHandovers, restart)
				done <- made{took, err}
			}()
			w, err := runWrk(ctx, "http://"+t.addr+s.Path, threads, c, s.Duration, "", "User-Agent: "+browserUA)
			if err != nil {
				cancel()
				<-done
				return out, err
			}
			m := <-done
			cancel()
			if m.err != nil {
				return out, fmt.Errorf("restarting %s: %w", t.target, m.err)
			}
			r.Wrk, r.Restarts = w, m.took
			if t.pidFile != "" {
				after, err := countLines(t.logs)
				if err != nil {
					return out, err
				}
				r.Lines = after - before
				if err := removeClosed(t.logs); err != nil {
					return out, err
				}
			}
			out = append(out, r)
			logged := ""
			if r.Lines >= 0 {
				logged = fmt.Sprintf("  log lines − requests %+d", r.Lines-w.Requests)
			}
			took := make([]string, len(r.Restarts))
			for k, t := range r.Restarts {
				took[k] = t.Round(time.Millisecond).String()
			}
			fmt.Fprintf(os.Stderr, "round %d/%d %-14s %-13s c=%-4d %8.0f req/s  %d requests  errors connect %d read %d write %d timeout %d non-2xx %d  max %v  restarts %s%s\n",
				round+1, rounds, s.Name, t.target, c, w.OKRate(), w.Requests, w.Connect, w.Read, w.Write, w.Timeout, w.Non2xx,
				w.Max.Round(100*time.Microsecond), strings.Join(took, " "), logged)
		}
	}
	return out, nil
}

// countLines counts the access-log lines in dir (closed files, the active
// file and any segment), once two counts a little apart agree: a file
// renamed between reading the directory and reading the file would be
// counted twice or not at all. Tsubame writes each line whole before it
// answers (the mapped writer: the unused tail of the active file is
// zeros), so an idle instance's count is final.
func countLines(dir string) (int64, error) {
	last := int64(-1)
	for range 20 {
		n, err := countLinesOnce(dir)
		if err != nil {
			return 0, err
		}
		if n == last {
			return n, nil
		}
		last = n
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("the access log in %s kept changing while no request came", dir)
}

func countLinesOnce(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	buf := make([]byte, 1<<20)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if strings.HasSuffix(e.Name(), ".gz") {
			return 0, fmt.Errorf("%s: compressed access log files are not counted (the bench runs with gzip off)", e.Name())
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // renamed meanwhile: the next count agrees or not
		} else if err != nil {
			return 0, err
		}
		for {
			k, err := f.Read(buf)
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			if err == io.EOF {
				break
			} else if err != nil {
				f.Close()
				return 0, err
			}
		}
		f.Close()
	}
	return n, nil
}

// removeClosed deletes the closed access-log files in dir, once counted:
// each run writes hundreds of megabytes of them.
func removeClosed(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "access.*.log"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	return nil
}

// restartRuns returns the restart scenario's runs, and for each the ok
// req/s of nginx's run in the same round at the same connection count.
func restartRuns(sc []scenario, results []run) (runs []restartRun, ref []float64) {
	for i, s := range sc {
		if !s.Restart {
			continue
		}
		for _, r := range results[i].restarts {
			runs = append(runs, r)
			var rps float64
			for _, n := range results[i].restarts {
				if n.Target == "nginx" && n.Round == r.Round && n.Conns == r.Conns {
					rps = n.Wrk.OKRate()
				}
			}
			ref = append(ref, rps)
		}
	}
	return runs, ref
}

func (r restartRun) loggedText() string {
	if r.Lines < 0 {
		return "–"
	}
	return fmt.Sprintf("%+d", r.Lines-r.Wrk.Requests)
}

// writeRestartTable adds the restart scenario's runs to the printed table.
func writeRestartTable(t *strings.Builder, sc []scenario, results []run) {
	runs, ref := restartRuns(sc, results)
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(t, "\n%-5s %-13s %5s %10s %7s %9s %7s %5s %5s %7s %7s %8s %8s %10s %10s\n", "round", "restart", "c", "ok r/s", "ratio",
		"requests", "connect", "read", "write", "timeout", "non-2xx", "max ms", "restarts", "longest ms", "log − req")
	for k, r := range runs {
		w := r.Wrk
		fmt.Fprintf(t, "%-5d %-13s %5d %10.0f %7.2f %9d %7d %5d %5d %7d %7d %8s %8d %10s %10s\n", r.Round+1, r.Target, r.Conns,
			w.OKRate(), w.OKRate()/ref[k], w.Requests, w.Connect, w.Read, w.Write, w.Timeout, w.Non2xx, ms(w.Max),
			len(r.Restarts), ms(r.longest()), r.loggedText())
	}
}

// writeRestartTargets adds the restart scenario's rows to the targets.
func writeRestartTargets(md *strings.Builder, sc []scenario, results []run) {
	runs, _ := restartRuns(sc, results)
	var n, errs, non2xx, short, logged int
	var longest time.Duration
	for _, r := range runs {
		if r.Target == "nginx" {
			continue
		}
		n++
		errs += int(r.Wrk.Errors - r.Wrk.Non2xx)
		non2xx += int(r.Wrk.Non2xx)
		if len(r.Restarts) < restartHandovers {
			short++
		}
		if r.logged() {
			logged++
		}
		if r.Conns == 100 {
			longest = max(longest, r.Wrk.Max)
		}
	}
	if n == 0 {
		return
	}
	mark := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	fmt.Fprintf(md, "| restart: Tsubame answers every request through %d handovers a run (no socket error, no non-2xx) | %d socket errors, %d non-2xx in %d runs (%d with fewer handovers) | %s |\n",
		restartHandovers, errs, non2xx, n, short, mark(errs == 0 && non2xx == 0 && short == 0))
	fmt.Fprintf(md, "| restart at c=100: Tsubame's longest request < 100 ms | %s ms | %s |\n", ms(longest), mark(longest < 100*time.Millisecond))
	fmt.Fprintf(md, "| restart: an access-log line for every request wrk counted | %d of %d runs | %s |\n", logged, n, mark(logged == n))
}

// writeRestartSection writes the restart scenario's section.
func writeRestartSection(md *strings.Builder, sc []scenario, results []run) {
	runs, ref := restartRuns(sc, results)
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(md, "\n## Restarts\n\nEach run is `wrk -t2 -d12s` on sample4's URL (keep-alive, no retries) at c=100 and c=1000 while the server is\n")
	fmt.Fprintf(md, "replaced %d times, evenly spaced. Tsubame gets SIGUSR2: its successor inherits the listening sockets, the old process\n", restartHandovers)
	fmt.Fprintf(md, "stops accepting, answers each connection's next request with `Connection: close`, hands its idle keep-alive\n")
	fmt.Fprintf(md, "connections to the successor, drains and exits ([docs/operations.md](docs/operations.md)); the next restart waits\n")
	fmt.Fprintf(md, "until the pid file names the successor (the time to that is *longest restart*). These are Tsubames of the scenario's\n")
	fmt.Fprintf(md, "own, on the embedded store and on the bench's Redis, with the built-in defaults. nginx (the reference configuration)\n")
	fmt.Fprintf(md, "gets SIGHUP, the graceful reload that an nginx-based stack does on a configuration change or binary upgrade; the next\n")
	fmt.Fprintf(md, "waits until the old workers have exited. nginx's old workers close their idle keep-alive connections at once, so a\n")
	fmt.Fprintf(md, "request sent on one at that moment fails: wrk counts a read error. Errors are wrk's socket errors and non-2xx answers;\n")
	fmt.Fprintf(md, "*× nginx* compares successful requests per second with nginx's run of the same round and connection count.\n")
	fmt.Fprintf(md, "*Access log*: the lines the run added to Tsubame's log directory (closed files and the active one, counted while idle\n")
	fmt.Fprintf(md, "before and after) less wrk's request count. wrk does not count the requests it leaves in flight when it stops, which\n")
	fmt.Fprintf(md, "the server answered and logged, so a line for every request shows as a difference from 0 to c.\n\n")
	fmt.Fprintf(md, "| round | server | c | requests | ok req/s | × nginx | socket errors (connect / read / write / timeout) | non-2xx | longest request ms | restarts (longest ms) | access-log lines − requests |\n")
	fmt.Fprintf(md, "|---:|---|---:|---:|---:|---:|---|---:|---:|---|---:|\n")
	for k, r := range runs {
		w := r.Wrk
		fmt.Fprintf(md, "| %d | %s | %d | %s | %s | %.2f× | %d / %d / %d / %d | %d | %s | %d (%s) | %s |\n", r.Round+1, r.Target, r.Conns,
			num(float64(w.Requests)), num(w.OKRate()), w.OKRate()/ref[k], w.Connect, w.Read, w.Write, w.Timeout, w.Non2xx,
			ms(w.Max), len(r.Restarts), ms(r.longest()), r.loggedText())
	}
}
