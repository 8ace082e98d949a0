package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The LINE-bot write-up's wrk.lua: ten messages per request, with the
// bearer token /callback requires.
const webhookScript = `wrk.method = "POST"
wrk.body = '{"messages":"1,2,3,4,5,6,7,8,9,10"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %s"
`

// newCallbackToken makes the run's webhook.callback_token.
func newCallbackToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

func writeScript(dir, token string) (string, error) {
	p := filepath.Join(dir, "webhook.lua")
	return p, os.WriteFile(p, fmt.Appendf(nil, webhookScript, token), 0o600)
}

// webhookCheck is what one webhook run did to the messages.
type webhookCheck struct {
	Accepted    int64 // messages Tsubame queued during the run
	Delivered   int64 // distinct messages the fake API received for them
	MaxAttempts int   // most API calls for one message (1 = exactly once)
	PeakRSS     int64 // bytes
	Drain       time.Duration
}

// scrape reads the webhook counters from Tsubame's /metrics.
func scrape(admin string) (accepted, queued, inflight int64, err error) {
	body, err := httpGet("http://" + admin + "/metrics")
	if err != nil {
		return 0, 0, 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, _ := strconv.ParseFloat(val, 64)
		switch name {
		case `tsubame_webhook_messages_total{outcome="accepted"}`:
			accepted = int64(v)
		case "tsubame_webhook_queue_length":
			queued = int64(v)
		case "tsubame_webhook_in_flight":
			inflight = int64(v)
		}
	}
	return accepted, queued, inflight, sc.Err()
}

// waitDrained polls until no message is queued or in flight.
func waitDrained(admin string, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < limit {
		_, q, f, err := scrape(admin)
		if err != nil {
			return 0, err
		}
		if q == 0 && f == 0 {
			return time.Since(start), nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("messages still queued or in flight after %v", limit)
}

// rssSampler records the largest resident set of pid until stopped.
type rssSampler struct {
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if v := readRSS(pid); v > s.peak.Load() {
				s.peak.Store(v)
			}
			select {
			case <-t.C:
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

func (s *rssSampler) Stop() int64 {
	close(s.stop)
	<-s.done
	return s.peak.Load()
}

func readRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
