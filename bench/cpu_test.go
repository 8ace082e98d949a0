package main

import (
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// TestListenerPIDs finds this process behind a socket it listens on, and
// nothing behind a port it closed.
func TestListenerPIDs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if pids := listenerPIDs(addr); !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("listenerPIDs(%s) = %v, want it to hold %d", addr, pids, os.Getpid())
	}
	ln.Close()
	if pids := listenerPIDs(addr); slices.Contains(pids, os.Getpid()) {
		t.Fatalf("listenerPIDs(%s) = %v after the listener closed", addr, pids)
	}
	if pids := listenerPIDs("not an address"); pids != nil {
		t.Fatalf("listenerPIDs of a bad address = %v", pids)
	}
}

// TestServerCPU measures the CPU this process spends while it listens.
func TestServerCPU(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	m := startServerCPU(ln.Addr().String())
	// Spin until the kernel's clock ticks (USER_HZ) have counted some
	// time: a deadline on CPU used, not on the wall clock.
	x := 0
	for selfCPU() < m.at+60*time.Millisecond {
		for j := range 1_000_000 {
			x += j
		}
	}
	_ = x
	if got := m.stop(); got <= 0 {
		t.Fatalf("the CPU measured over a busy loop is %v", got)
	}
}

func TestCPUPerReq(t *testing.T) {
	for _, c := range []struct {
		r    wrkResult
		want time.Duration
	}{
		{wrkResult{CPU: time.Second, Requests: 100_000}, 10 * time.Microsecond},
		{wrkResult{CPU: time.Second, Requests: 100_010, Errors: 10}, 10 * time.Microsecond}, // per successful response
		{wrkResult{CPU: 0, Requests: 100}, 0},                                               // not measured
		{wrkResult{CPU: time.Second, Requests: 5, Errors: 5}, 0},                            // nothing answered
	} {
		if got := c.r.CPUPerReq(); got != c.want {
			t.Errorf("%+v: CPUPerReq = %v, want %v", c.r, got, c.want)
		}
	}
	if us(0) != "–" || us(12345*time.Nanosecond) != "12.35" {
		t.Errorf("us: %q, %q", us(0), us(12345*time.Nanosecond))
	}
}
