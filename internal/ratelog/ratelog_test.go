package ratelog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a manual clock for the handler.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the lines written so far and forgets them.
func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := strings.Split(strings.TrimSpace(s.b.String()), "\n")
	s.b.Reset()
	if len(out) == 1 && out[0] == "" {
		return nil
	}
	return out
}

func newTest(interval time.Duration) (*Handler, *slog.Logger, *syncBuffer, *clock) {
	buf := &syncBuffer{}
	next := slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	c := &clock{t: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)}
	h := New(next, interval)
	h.st.now = c.now
	return h, slog.New(h), buf, c
}

func TestRepeatsAreCountedNotWritten(t *testing.T) {
	h, log, buf, c := newTest(10 * time.Second)
	for i := range 1000 {
		log.Error("store read failed", "err", errors.New("connection refused"), "n", i)
	}
	lines := buf.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], `msg="store read failed"`) || !strings.Contains(lines[0], "n=0") ||
		strings.Contains(lines[0], "repeated") {
		t.Fatalf("first of a kind: %q", lines)
	}
	h.Flush(false)
	if got := buf.lines(); got != nil {
		t.Fatalf("flushed before the interval ended: %q", got)
	}
	c.advance(10 * time.Second)
	h.Flush(false)
	lines = buf.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "n=999") || !strings.Contains(lines[0], "repeated=999") {
		t.Fatalf("after the interval, the last left out with its count: %q", lines)
	}
	// Quiet for an interval: the kind is forgotten, and the next is first again.
	c.advance(10 * time.Second)
	h.Flush(false)
	if got := buf.lines(); got != nil || len(h.st.kinds) != 0 {
		t.Fatalf("a quiet kind: %q, %d kinds kept", got, len(h.st.kinds))
	}
	log.Error("store read failed", "n", "again")
	if lines := buf.lines(); len(lines) != 1 || strings.Contains(lines[0], "repeated") {
		t.Fatalf("after a quiet interval: %q", lines)
	}
}

func TestOneLinePerIntervalUnderSteadyFailure(t *testing.T) {
	_, log, buf, c := newTest(10 * time.Second)
	// 100 failures a second for a minute: one line per interval.
	for range 60 {
		for range 100 {
			log.Warn("refresh failed")
		}
		c.advance(time.Second)
	}
	lines := buf.lines()
	if len(lines) != 6 {
		t.Fatalf("%d lines for a minute of failures, want 6:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	total := 0
	for i, l := range lines {
		if i == 0 {
			total++
			continue
		}
		if !strings.Contains(l, "repeated=999") {
			t.Errorf("line %d: %s", i, l)
		}
		total += 1000
	}
	if total != 5001 {
		t.Fatalf("lines account for %d failures", total)
	}
}

func TestKindsLevelsAndAttrs(t *testing.T) {
	h, log, buf, c := newTest(time.Minute)
	for range 5 {
		log.Info("request served") // below Warn: every one
		log.Warn("a")
		log.Error("a") // another level, another kind
		log.Error("b")
	}
	lines := buf.lines()
	if len(lines) != 5+3 {
		t.Fatalf("%d lines: %q", len(lines), lines)
	}
	// Derived loggers share the counts; the flushed line is the last one's.
	shard := log.With("shard", "127.0.0.1:7001")
	shard.Error("b")
	c.advance(time.Minute)
	h.Flush(false)
	var flushed []string
	for _, l := range buf.lines() {
		if strings.Contains(l, "msg=b") {
			flushed = append(flushed, l)
		}
	}
	if len(flushed) != 1 || !strings.Contains(flushed[0], "shard=127.0.0.1:7001") || !strings.Contains(flushed[0], "repeated=5") {
		t.Fatalf("flushed: %q", flushed)
	}
}

func TestDisabledAndExit(t *testing.T) {
	_, log, buf, _ := newTest(0)
	for range 3 {
		log.Error("x")
	}
	if n := len(buf.lines()); n != 3 {
		t.Fatalf("disabled: %d lines", n)
	}
	h, log, buf, _ := newTest(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	for range 3 {
		log.Error("x")
	}
	cancel()
	<-done
	lines := buf.lines()
	if len(lines) != 2 || !strings.Contains(lines[1], "repeated=2") {
		t.Fatalf("at exit the counts are written: %q", lines)
	}
}

func TestConcurrentUse(t *testing.T) {
	h, log, buf, c := newTest(time.Second)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				log.Error("e", "g", g, "i", i)
				if i%100 == 0 {
					c.advance(100 * time.Millisecond)
					h.Flush(false)
				}
			}
		})
	}
	wg.Wait()
	c.advance(time.Hour)
	h.Flush(true)
	// Every record is accounted for: written alone, or counted in a line
	// with repeated=N, which stands for N others and (when it was written by
	// Handle rather than Flush) itself.
	low, high := 0, 0
	for _, l := range buf.lines() {
		i := strings.Index(l, "repeated=")
		if i < 0 {
			low++
			high++
			continue
		}
		n, err := parseInt(l[i+len("repeated="):])
		if err != nil || !strings.Contains(l, " i=") {
			t.Fatalf("%v: %s", err, l)
		}
		low += n
		high += n + 1
	}
	if low > 8000 || high < 8000 {
		t.Fatalf("lines account for %d..%d records, want 8000", low, high)
	}
}

func parseInt(s string) (int, error) {
	n := 0
	for i, r := range s {
		if r < '0' || r > '9' {
			if i == 0 {
				return 0, errors.New("no number")
			}
			break
		}
		n = n*10 + int(r-'0')
	}
	return n, nil
}
