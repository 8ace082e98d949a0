package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tsubame/internal/accesslog"
	"tsubame/internal/render"
	"tsubame/internal/server"
)

// slow is a Source that blocks until released: requests pile up in flight.
type slow struct{ release chan struct{} }

func (s slow) Payload(context.Context, render.Encoding, []byte, []byte) ([]byte, bool, error) {
	<-s.release
	return []byte(`{"urls":[]}`), true, nil
}

func startWith(t *testing.T, opt server.Options, eps ...server.Endpoint) (*server.Server, string) {
	t.Helper()
	srv, err := server.New(testDefaults(opt), eps)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv, ln.Addr().String()
}

// testDefaults fills in what the tests' servers leave unset.
func testDefaults(opt server.Options) server.Options {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opt.MaxHeaderBytes == 0 {
		opt.MaxHeaderBytes = 4096
	}
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = 5 * time.Second
	}
	return opt
}

func rawGet(t *testing.T, c net.Conn, path string) (int, string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// waitUntil polls cond until it holds, failing the test after a generous
// deadline.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMaxConnsAnswers503(t *testing.T) {
	srv, addr := startWith(t, server.Options{MaxConns: 5, HelloJSON: true})
	var held []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if code, _ := rawGet(t, c, "/json"); code != 200 {
			t.Fatalf("connection within the bound: %d", code)
		}
		held = append(held, c)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The refusal comes unasked, while the five held connections stay open:
	// a server that queued the connection instead would never answer (the
	// deadline only ends such a test).
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("6th connection: %v %v", resp, err)
	}
	if n := srv.Stats().Refused[server.ReasonConns]; n != 1 {
		t.Fatalf("refused %d", n)
	}
	held[0].Close()
	// Once the server has seen the close, a new connection is served.
	waitUntil(t, func() bool { return srv.Stats().Conns < 5 })
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if code, _ := rawGet(t, c2, "/json"); code != 200 {
		t.Fatalf("after a connection closed: %d", code)
	}
}

func TestInFlightBoundAnswers503(t *testing.T) {
	release := make(chan struct{})
	srv, addr := startWith(t, server.Options{MaxConns: 100, MaxInFlightAds: 2, LimitWait: 20 * time.Millisecond},
		server.Endpoint{Name: "s", Source: slow{release}})
	url := "http://" + addr + "/api/s.json?id=1"
	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	for range 6 {
		wg.Go(func() {
			resp, err := http.Get(url)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				ok.Add(1)
			case 503:
				refused.Add(1)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	close(release)
	wg.Wait()
	if ok.Load() != 2 || refused.Load() != 4 || srv.Stats().Refused[server.ReasonInFlightAds] != 4 {
		t.Fatalf("%d ok, %d refused, stats %v", ok.Load(), refused.Load(), srv.Stats().Refused)
	}
}

func TestOversizedRequestsCounted(t *testing.T) {
	srv, addr := startWith(t, server.Options{MaxConns: 100, MaxBodyBytes: 1024, HelloJSON: true})
	req, _ := http.NewRequest("GET", "http://"+addr+"/json", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 8192))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 431 {
			t.Fatalf("big head: %d", resp.StatusCode)
		}
	}
	resp, err := http.Post("http://"+addr+"/json", "text/plain", strings.NewReader(strings.Repeat("b", 4096)))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Fatalf("big body: %d", resp.StatusCode)
		}
	}
	st := srv.Stats().Refused
	if st[server.ReasonHeader] != 1 || st[server.ReasonBody] != 1 {
		t.Fatalf("stats %v", st)
	}
}

// Slowloris: many connections trickling a request head are cut at
// read_timeout and do not starve normal clients meanwhile.
// slowConns opens n connections to addr that each send part of a request
// head and then trickle a header byte every 100 ms, as slowloris does, until
// the test ends.
func slowConns(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET /json HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, c := range conns {
				_, _ = io.WriteString(c, "X")
			}
		}
	}()
	return conns
}

// Slow clients holding connections open do not keep normal requests from
// being served: with a read timeout longer than the test, a server that
// parked requests behind the slow connections would never answer them.
func TestSlowlorisDoesNotStarve(t *testing.T) {
	_, addr := startWith(t, server.Options{MaxConns: 1000, ReadTimeout: time.Minute, HelloJSON: true})
	slowConns(t, addr, 300)
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range 50 {
		resp, err := client.Get("http://" + addr + "/json")
		if err != nil {
			t.Fatalf("normal request %d during slowloris: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("normal request %d: %d", i, resp.StatusCode)
		}
	}
}

// A request head still arriving after read_timeout gets a 408 and its
// connection is closed, and each is counted.
func TestSlowlorisCutAtReadTimeout(t *testing.T) {
	srv, addr := startWith(t, server.Options{MaxConns: 1000, ReadTimeout: 500 * time.Millisecond, HelloJSON: true})
	const n = 300
	conns := slowConns(t, addr, n)
	for i, c := range conns {
		// Wait for the server to answer and close; the deadline only ends
		// a test whose server never does.
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		b, err := io.ReadAll(c)
		// The trickle may reach the closed socket first: a reset then ends
		// the read instead of EOF, both after the 408.
		if (err != nil && !errors.Is(err, syscall.ECONNRESET)) || !strings.HasPrefix(string(b), "HTTP/1.1 408 ") {
			t.Fatalf("slow connection %d: %q, %v; want a 408 and a close", i, b, err)
		}
	}
	if got := srv.Stats().Refused[server.ReasonTimeout]; got != n {
		t.Fatalf("%d read timeouts counted, want %d: %v", got, n, srv.Stats().Refused)
	}
}

// lineSink keeps the access-log lines written to it.
type lineSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *lineSink) Write(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, strings.Split(strings.TrimSuffix(string(p), "\n"), "\n")...)
	return nil
}
func (s *lineSink) Sync() error                 { return nil }
func (s *lineSink) Tick(time.Time) error        { return nil }
func (s *lineSink) Boundary() time.Time         { return time.Time{} }
func (s *lineSink) Reopen() error               { return nil }
func (s *lineSink) Recover() error              { return nil }
func (s *lineSink) Close(context.Context) error { return nil }

// TestAccessLogRemoteAddress: the access log records the address the
// connection came from, read once when it was accepted.
func TestAccessLogRemoteAddress(t *testing.T) {
	sink := &lineSink{}
	log := accesslog.New(sink, accesslog.Options{})
	_, addr := startWith(t, server.Options{}, server.Endpoint{Name: "e", Source: server.Fixed(`{"urls":[]}`), Log: log})
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if code, body := rawGet(t, c, "/api/e.json?id=1"); code != 200 {
		t.Fatalf("got %d %q", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := log.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.lines) != 1 || !strings.Contains(sink.lines[0], "\thost:127.0.0.3\t") {
		t.Fatalf("log lines = %q, want one with host:127.0.0.3", sink.lines)
	}
}

// A response whose record the log refuses (it has closed: the request
// outlived the shutdown deadline) becomes a 503 that closes its connection,
// and that 503 is recorded in the log's fallback file.
func TestClosedLogAnswers503AndRecordsIt(t *testing.T) {
	fallback := t.TempDir()
	log := accesslog.New(&lineSink{}, accesslog.Options{FallbackDir: fallback,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	_, addr := startWith(t, server.Options{}, server.Endpoint{Name: "e", Source: server.Fixed(`{"urls":["https://ad.example/t.js"]}`), Log: log})
	if err := log.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /api/e.json?id=7 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || strings.Contains(string(body), "ad.example") || !resp.Close {
		t.Fatalf("%d %q close=%v: want a 503 without the ad, closing the connection", resp.StatusCode, body, resp.Close)
	}
	entries, err := os.ReadDir(fallback)
	if err != nil || len(entries) != 1 {
		t.Fatalf("fallback dir: %v %v", entries, err)
	}
	b, _ := os.ReadFile(filepath.Join(fallback, entries[0].Name()))
	if !strings.Contains(string(b), "\tid:7\t") || !strings.Contains(string(b), "\tstatus:503\t") || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("fallback file holds %q, want the one 503", b)
	}
}
