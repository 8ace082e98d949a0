package main

import (
	"testing"
	"time"
)

const sampleWrk = `Running 4s test @ http://127.0.0.1:4000/api/sample3.js?id=1&callback=Example.process
  2 threads and 100 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   620.14us    1.23ms  31.42ms   95.13%
    Req/Sec    74.58k     5.43k   87.60k    73.75%
  Latency Distribution
     50%  371.00us
     75%  592.00us
     90%    1.01ms
     99%    5.96ms
  593456 requests in 4.00s, 99.05MB read
  Socket errors: connect 1, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 12
Requests/sec: 148289.18
Transfer/sec:     24.76MB
`

func TestParseWrk(t *testing.T) {
	var r wrkResult
	if err := parseWrk(sampleWrk, &r); err != nil {
		t.Fatal(err)
	}
	want := wrkResult{RPS: 148289.18, Avg: 620140 * time.Nanosecond, Stdev: 1230 * time.Microsecond,
		P50: 371 * time.Microsecond, P99: 5960 * time.Microsecond, Max: 31420 * time.Microsecond,
		Requests: 593456, Seconds: 4, Errors: 18, Connect: 1, Read: 2, Timeout: 3, Non2xx: 12}
	if r != want {
		t.Fatalf("parsed %+v\nwant   %+v", r, want)
	}
	if got := r.OKRate(); got != (593456-18)/4.0 {
		t.Fatalf("OKRate = %v", got)
	}
	if err := parseWrk("garbage", &r); err == nil {
		t.Fatal("garbage parsed")
	}
	if parseDur("2.00s") != 2*time.Second || parseDur("1.00m") != time.Minute {
		t.Fatal("units")
	}
}

// A handover stalls a few requests: the longest is read from the Latency
// line's Max column, whatever its unit.
func TestParseWrkMaxLatency(t *testing.T) {
	for _, c := range []struct {
		line string
		max  time.Duration
	}{
		{"    Latency     1.90ms    3.77ms  86.31ms   97.71%", 86310 * time.Microsecond},
		{"    Latency     6.30ms   18.97ms   1.02s    94.56%", 1020 * time.Millisecond},
		{"    Latency   410.00us  120.00us 900.00us   70.00%", 900 * time.Microsecond},
	} {
		var r wrkResult
		out := "  Thread Stats   Avg      Stdev     Max   +/- Stdev\n" + c.line + "\n  1000 requests in 1.00s, 1.00MB read\nRequests/sec:   1000.00\n"
		if err := parseWrk(out, &r); err != nil {
			t.Fatal(err)
		}
		if r.Max != c.max || r.Errors != 0 || r.Requests != 1000 {
			t.Errorf("%q: Max %v, errors %d, requests %d; want Max %v, no errors, 1000 requests", c.line, r.Max, r.Errors, r.Requests, c.max)
		}
	}
}

// The command the report shows can be pasted into a shell.
func TestShowArgs(t *testing.T) {
	args := []string{"-t2", "-H", "User-Agent: Mozilla/5.0 (X11; Linux) Chrome/131", "-s", "run/decide.lua", "http://127.0.0.1:1/a?b=1&c=2"}
	want := "-t2 -H 'User-Agent: Mozilla/5.0 (X11; Linux) Chrome/131' -s decide.lua 'http://127.0.0.1:1/a?b=1&c=2'"
	if got := showArgs(args, "run/decide.lua"); got != want {
		t.Fatalf("showArgs = %q\nwant        %q", got, want)
	}
}
