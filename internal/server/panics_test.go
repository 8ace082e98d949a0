package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame/internal/accesslog"
	"tsubame/internal/render"
	"tsubame/internal/server"
)

// panicky is a Source that panics on the id "boom".
type panicky struct{}

func (panicky) Payload(_ context.Context, _ render.Encoding, id, _ []byte) ([]byte, bool, error) {
	if string(id) == "boom" {
		panic("placement decoder blew up")
	}
	return []byte(`{"urls":[]}`), true, nil
}

// syncBuffer is a process log the test can read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A panic in a public handler answers 500, is counted and logged with its
// stack, still gets its access-log record, frees its in-flight slot, and
// the server goes on serving.
func TestHandlerPanicAnswers500(t *testing.T) {
	sink := &lineSink{}
	alog := accesslog.New(sink, accesslog.Options{})
	var plog syncBuffer
	srv, addr := startWith(t, server.Options{MaxInFlightAds: 1, Logger: slog.New(slog.NewTextHandler(&plog, nil))},
		server.Endpoint{Name: "e", Source: panicky{}, Log: alog})
	for i := range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		code, body := rawGet(t, c, "/api/e.json?id=boom")
		c.Close()
		if code != 500 || body != "internal error\n" {
			t.Fatalf("panic %d answered %d %q, want 500", i, code, body)
		}
	}
	// The slot of MaxInFlightAds: 1 was given back three times over.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if code, body := rawGet(t, c, "/api/e.json?id=1"); code != 200 {
		t.Fatalf("after the panics: %d %q", code, body)
	}
	if n := srv.Stats().Panics; n != 3 {
		t.Fatalf("Panics = %d, want 3", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := alog.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	lines := append([]string(nil), sink.lines...)
	sink.mu.Unlock()
	if len(lines) != 4 {
		t.Fatalf("access log has %d lines, want 4:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	var panicked int
	for _, l := range lines { // records of different connections may come in any order
		if strings.Contains(l, "\tstatus:500\t") && strings.Contains(l, "\tid:boom\t") {
			panicked++
		}
	}
	if panicked != 3 {
		t.Fatalf("%d records of the panics, want 3:\n%s", panicked, strings.Join(lines, "\n"))
	}
	// Each panic is logged at most once, with its stack (how many lines a
	// burst makes is panicLog's, tested without a clock).
	out := plog.String()
	if n := strings.Count(out, "public handler panicked"); n < 1 || n > 3 {
		t.Fatalf("%d panic lines in the process log, want 1 to 3:\n%s", n, out)
	}
	if !strings.Contains(out, "placement decoder blew up") || !strings.Contains(out, "panicky.Payload") {
		t.Fatalf("the panic line lacks its value or stack:\n%s", out)
	}
}
