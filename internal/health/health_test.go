package health_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tsubame/internal/health"
)

func TestReportReadyCountsRequiredChecksOnly(t *testing.T) {
	rep := health.Report{{Name: health.Serving, OK: true, Required: true}, {Name: health.Store, Detail: "dial tcp 10.0.0.7:6379: refused"}}
	if !rep.Ready() {
		t.Fatal("a failing check that is not required made the report not ready")
	}
	var pub, adm bytes.Buffer
	_ = rep.WriteVerbose(&pub, false)
	_ = rep.WriteVerbose(&adm, true)
	if want := "[+]serving ok\n[-]store failed (reported, not required)\nready\n"; pub.String() != want {
		t.Errorf("without details: %q, want %q", pub.String(), want)
	}
	if want := "[+]serving ok\n[-]store failed: dial tcp 10.0.0.7:6379: refused (reported, not required)\nready\n"; adm.String() != want {
		t.Errorf("with details: %q, want %q", adm.String(), want)
	}
	draining := rep.With(health.Check{Name: health.Serving, Required: true, Detail: "draining"})
	if draining.Ready() || !rep.Ready() || len(draining) != 2 {
		t.Fatalf("With: %v (the original %v must stay as it was)", draining, rep)
	}
	if c, ok := draining.Find(health.Store); !ok || c.OK {
		t.Fatalf("Find: %v %v", c, ok)
	}
}

// A probe keeps the last answer, says why and since when it fails, and
// logs each change of state once.
func TestProbeKeepsTheLastAnswer(t *testing.T) {
	var logs bytes.Buffer
	var failing atomic.Bool
	p := health.NewProbe(health.Store, func(context.Context) error {
		if failing.Load() {
			return errors.New("connection refused")
		}
		return nil
	}, time.Minute, slog.New(slog.NewTextHandler(&logs, nil)))
	if c := p.Result(false); c.OK || c.Detail != "not checked yet" {
		t.Fatalf("before the first check: %+v", c)
	}
	p.Check(t.Context())
	if c := p.Result(false); !c.OK || c.Detail != "" || !p.Up() {
		t.Fatalf("up: %+v", c)
	}
	failing.Store(true)
	p.Check(t.Context())
	p.Check(t.Context())
	if c := p.Result(false); c.OK || p.Up() || !strings.HasPrefix(c.Detail, "down for ") || !strings.HasSuffix(c.Detail, ": connection refused") {
		t.Fatalf("down: %+v", c)
	}
	failing.Store(false)
	p.Check(t.Context())
	if !p.Up() {
		t.Fatal("not up again")
	}
	if n := strings.Count(logs.String(), "store does not answer"); n != 1 {
		t.Errorf("%d warnings for one outage:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "store answers again"); n != 1 {
		t.Errorf("%d notes of the recovery:\n%s", n, logs.String())
	}
}

// A check that does not answer within the interval fails; Run keeps
// checking until its context ends.
func TestProbeRunBoundsEachCheck(t *testing.T) {
	var hang atomic.Bool
	var checks atomic.Int64
	p := health.NewProbe(health.Store, func(ctx context.Context) error {
		checks.Add(1)
		if hang.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, 10*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	waitFor(t, p.Up)
	hang.Store(true)
	waitFor(t, func() bool { return !p.Up() })
	if c := p.Result(false); !strings.Contains(c.Detail, "no answer within 10ms") {
		t.Errorf("a hung check: %+v", c)
	}
	cancel()
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
