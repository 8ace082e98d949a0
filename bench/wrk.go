package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wrkResult is what one wrk run printed.
type wrkResult struct {
	RPS      float64
	Avg      time.Duration
	Stdev    time.Duration
	P50      time.Duration
	P99      time.Duration
	Max      time.Duration // the longest request
	Requests int64
	Seconds  float64 // how long the run lasted
	Errors   int64   // socket errors plus non-2xx/3xx responses
	// Errors by kind, as wrk counts them: socket errors (connect, read,
	// write, timeout) and responses that were not 2xx or 3xx.
	Connect, Read, Write, Timeout, Non2xx int64
	Command                               string
	// CPU is the server's user and system time over the run (serverCPU),
	// 0 when not measured.
	CPU time.Duration
}

// OKRate is the rate of successful (2xx/3xx, no socket error) responses.
func (r wrkResult) OKRate() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(max(r.Requests-r.Errors, 0)) / r.Seconds
}

var (
	reLatency  = regexp.MustCompile(`^\s*Latency\s+(\S+)\s+(\S+)\s+(\S+)`)
	rePct      = regexp.MustCompile(`^\s*(50|99)%\s+(\S+)`)
	reRPS      = regexp.MustCompile(`^Requests/sec:\s+([\d.]+)`)
	reRequests = regexp.MustCompile(`^\s*(\d+) requests in (\S+),`)
	reSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	reNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// runWrk runs wrk against url and parses its report. Each header ("Name:
// value") is sent with every request.
func runWrk(ctx context.Context, url string, threads, conns int, d time.Duration, script string, header ...string) (wrkResult, error) {
	// In whole seconds: wrk reads "600s", not Go's "10m0s".
	args := []string{"-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns), "-d" + strconv.FormatInt(int64(d/time.Second), 10) + "s", "--timeout", "5s", "--latency"}
	for _, h := range header {
		args = append(args, "-H", h)
	}
	if script != "" {
		args = append(args, "-s", script)
	}
	args = append(args, url)
	cmd := exec.CommandContext(ctx, "wrk", args...)
	out, err := cmd.CombinedOutput()
	res := wrkResult{Command: "wrk " + showArgs(args, script)}
	if err != nil {
		return res, fmt.Errorf("%s: %v\n%s", res.Command, err, out)
	}
	if err := parseWrk(string(out), &res); err != nil {
		return res, fmt.Errorf("%s: %v\n%s", res.Command, err, out)
	}
	return res, nil
}

// showArgs writes wrk's arguments as a shell would take them: quoted where
// they hold spaces, the script (in a temporary directory) by its name only.
func showArgs(args []string, script string) string {
	shown := make([]string, len(args))
	for i, a := range args {
		switch {
		case script != "" && a == script:
			a = filepath.Base(a)
		case strings.ContainsAny(a, " ;()&?*"):
			a = "'" + a + "'"
		}
		shown[i] = a
	}
	return strings.Join(shown, " ")
}

func parseWrk(out string, res *wrkResult) error {
	sc := bufio.NewScanner(strings.NewReader(out))
	seen := 0
	for sc.Scan() {
		line := sc.Text()
		if m := reLatency.FindStringSubmatch(line); m != nil {
			res.Avg, res.Stdev, res.Max = parseDur(m[1]), parseDur(m[2]), parseDur(m[3])
			seen++
		} else if m := rePct.FindStringSubmatch(line); m != nil {
			if m[1] == "50" {
				res.P50 = parseDur(m[2])
			} else {
				res.P99 = parseDur(m[2])
			}
		} else if m := reRPS.FindStringSubmatch(line); m != nil {
			res.RPS, _ = strconv.ParseFloat(m[1], 64)
			seen++
		} else if m := reRequests.FindStringSubmatch(line); m != nil {
			res.Requests, _ = strconv.ParseInt(m[1], 10, 64)
			res.Seconds = parseDur(m[2]).Seconds()
		} else if m := reSocket.FindStringSubmatch(line); m != nil {
			for i, into := range []*int64{&res.Connect, &res.Read, &res.Write, &res.Timeout} {
				*into, _ = strconv.ParseInt(m[1+i], 10, 64)
				res.Errors += *into
			}
		} else if m := reNon2xx.FindStringSubmatch(line); m != nil {
			res.Non2xx, _ = strconv.ParseInt(m[1], 10, 64)
			res.Errors += res.Non2xx
		}
	}
	if seen < 2 {
		return fmt.Errorf("cannot read wrk's report")
	}
	return nil
}

// parseDur reads wrk's durations: 620.14us, 1.23ms, 2.01s, 1.00m.
func parseDur(s string) time.Duration {
	units := []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"m", time.Minute}, {"s", time.Second}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0
			}
			return time.Duration(f * float64(u.unit))
		}
	}
	return 0
}
