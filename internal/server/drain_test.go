package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"tsubame/internal/server"
)

// drainServer runs a Server named name with the given drain grace on
// 127.0.0.1:0 and returns it with its address.
func drainServer(t *testing.T, name string, grace time.Duration) (*server.Server, string, chan error) {
	t.Helper()
	srv, err := server.New(server.Options{Name: name, DrainGrace: grace, Logger: slog.New(slog.DiscardHandler)},
		[]server.Endpoint{{Name: "e", Source: server.Fixed(`{"urls":[]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return srv, ln.Addr().String(), done
}

// handoffPair is a predecessor's Handoff and a successor's Adopt listener
// on one socket pair.
func handoffPair(t *testing.T) (*server.Handoff, net.Listener) {
	t.Helper()
	keep, give, err := server.HandoffPair()
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.NewHandoff(keep)
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := server.Adopt(give)
	if err != nil {
		t.Fatal(err)
	}
	return h, adopted
}

// keepAliveGet sends one keep-alive request on c and reads its answer.
func keepAliveGet(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	return keepAliveGetID(t, c, br, "1")
}

func keepAliveGetID(t *testing.T, c net.Conn, br *bufio.Reader, id string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, get(id)); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("body: %v", err)
	}
	resp.Body.Close()
	return resp
}

func dialKeep(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return c, bufio.NewReader(c)
}

// waitRefused waits until addr no longer accepts: the drain has begun.
func waitRefused(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting after Shutdown began")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A keep-alive connection idle when the stop begins is not closed under
// its client: its next request is answered, with Connection: close, and
// only then does the connection end (a client that does not retry would
// otherwise see its request fail).
func TestDrainAnswersTheNextRequest(t *testing.T) {
	srv, addr, done := drainServer(t, "a", time.Hour) // the grace never runs out here
	c, br := dialKeep(t, addr)
	if resp := keepAliveGet(t, c, br); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("before the stop: %s close=%v", resp.Status, resp.Close)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Shutdown(context.Background()) }()
	waitRefused(t, addr)
	resp := keepAliveGet(t, c, br)
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("during the stop: %s close=%v, want 200 with Connection: close", resp.Status, resp.Close)
	}
	if n, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the last answer: %v %v, want EOF", n, err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// A connection that stays idle through the stop is closed once the grace
// has passed, without a byte, and the stop then ends.
func TestDrainClosesIdleAfterGrace(t *testing.T) {
	srv, addr, done := drainServer(t, "a", 100*time.Millisecond)
	c, br := dialKeep(t, addr)
	keepAliveGet(t, c, br)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if b, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection after the stop: %q %v, want EOF", b, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// A stop that runs out of time says so, rather than hanging.
func TestDrainEndsWithItsContext(t *testing.T) {
	srv, addr, _ := drainServer(t, "a", time.Hour)
	c, br := dialKeep(t, addr)
	keepAliveGet(t, c, br)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Shutdown with an idle connection inside its grace: %v, want %v", err, context.DeadlineExceeded)
	}
}

// With a successor, an idle connection passes to it at once, socket and
// all: the client's next request, sent before the successor serves at
// all, is answered by the successor on the same connection.
func TestHandoffPassesIdleConnections(t *testing.T) {
	old, addr, done := drainServer(t, "old", time.Hour)
	h, adopted := handoffPair(t)
	var conns [3]net.Conn
	var readers [3]*bufio.Reader
	for i := range conns {
		conns[i], readers[i] = dialKeep(t, addr)
		if resp := keepAliveGet(t, conns[i], readers[i]); resp.Header.Get("Server") != "old" {
			t.Fatalf("first answer from %q", resp.Header.Get("Server"))
		}
	}
	old.SetHandoff(h)
	if err := old.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if n, err := h.Close(); n != len(conns) || err != nil {
		t.Fatalf("handed over %d (%v), want %d", n, err, len(conns))
	}
	// The next requests wait in the sockets until the successor serves.
	for _, c := range conns {
		if _, err := io.WriteString(c, "GET /api/e.json?id=1 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("write after the handover: %v", err)
		}
	}
	next, err := server.New(server.Options{Name: "new", Logger: slog.New(slog.DiscardHandler)},
		[]server.Endpoint{{Name: "e", Source: server.Fixed(`{"urls":[]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	next.ServeAdopted(adopted)
	for i := range conns {
		resp, err := http.ReadResponse(readers[i], nil)
		if err != nil {
			t.Fatalf("connection %d after the handover: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Server") != "new" || resp.Close {
			t.Fatalf("connection %d after the handover: %s from %q close=%v", i, resp.Status, resp.Header.Get("Server"), resp.Close)
		}
	}
	for i := range conns {
		conns[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := next.Shutdown(ctx); err != nil {
		t.Fatalf("successor's Shutdown: %v", err)
	}
}

// A connection that came through the PROXY protocol is handed over once its
// header has been read (after its first answer), and the successor logs
// the client address that header named, beside the proxy's.
func TestHandoffKeepsProxiedClientAddress(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	old, addr := startWith(t, server.Options{Name: "old", TrustedProxies: trusted, ProxyProtocol: true, DrainGrace: time.Hour},
		server.Endpoint{Name: "e", Source: server.Fixed(`{"urls":[]}`)})
	h, adopted := handoffPair(t)
	c, br := dialKeep(t, addr)
	if _, err := io.WriteString(c, "PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n"+get("1")); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("through the proxy: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	old.SetHandoff(h)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := old.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n, _ := h.Close(); n != 1 {
		t.Fatalf("handed over %d connections, want 1", n)
	}
	alog, lines := memoryLog(t)
	next, err := server.New(testDefaults(server.Options{Name: "new", TrustedProxies: trusted, ProxyProtocol: true}),
		[]server.Endpoint{{Name: "e", Source: server.Fixed(`{"urls":[]}`), Log: alog}})
	if err != nil {
		t.Fatal(err)
	}
	next.ServeAdopted(adopted)
	resp := keepAliveGetID(t, c, br, "2")
	if resp.StatusCode != 200 || resp.Header.Get("Server") != "new" {
		t.Fatalf("after the handover: %s from %q", resp.Status, resp.Header.Get("Server"))
	}
	c.Close()
	if err := next.Shutdown(ctx); err != nil {
		t.Fatalf("successor's Shutdown: %v", err)
	}
	checkHosts(t, lines(), map[string][2]string{"2": {"203.0.113.7", "127.0.0.1"}})
}

// A connection handed over twice (its client idle throughout), and one
// that had not sent a byte when it was handed over, are answered by the
// last process, with nothing unasked before the answer: for fasthttp an
// adopted connection is a new one, but its wait may not end in a 408.
func TestHandoffTwiceAndFresh(t *testing.T) {
	first, addr, done := drainServer(t, "first", time.Hour)
	idle, idleR := dialKeep(t, addr)
	keepAliveGet(t, idle, idleR)
	fresh, freshR := dialKeep(t, addr)
	srv := first
	var adopted net.Listener
	for _, name := range []string{"second", "third"} {
		h, next := handoffPair(t)
		srv.SetHandoff(h)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatalf("%s's predecessor: Shutdown: %v", name, err)
		}
		cancel()
		if n, _ := h.Close(); n != 2 {
			t.Fatalf("handed to %s: %d connections, want 2", name, n)
		}
		if adopted != nil {
			adopted.Close()
		}
		adopted = next
		var err error
		if srv, err = server.New(server.Options{Name: name, Logger: slog.New(slog.DiscardHandler)},
			[]server.Endpoint{{Name: "e", Source: server.Fixed(`{"urls":[]}`)}}); err != nil {
			t.Fatal(err)
		}
		srv.ServeAdopted(next)
	}
	if err := <-done; err != nil {
		t.Fatalf("first Serve: %v", err)
	}
	for what, cr := range map[string]struct {
		c  net.Conn
		br *bufio.Reader
	}{"idle": {idle, idleR}, "fresh": {fresh, freshR}} {
		resp := keepAliveGet(t, cr.c, cr.br)
		if resp.StatusCode != 200 || resp.Header.Get("Server") != "third" {
			t.Errorf("%s connection: %s from %q, want 200 from third", what, resp.Status, resp.Header.Get("Server"))
		}
	}
	idle.Close()
	fresh.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("third: Shutdown: %v", err)
	}
}

// A successor that does not take what is sent (stalled, or gone) does not
// hold the drain: a send gives up after its timeout, and the idle
// connections left are closed after the grace as without a successor. One
// gone before the drain is seen at its start: no connection is cut, and
// the next request on an idle one is answered.
func TestHandoffToAStalledSuccessor(t *testing.T) {
	for _, gone := range []bool{false, true} {
		grace := 200 * time.Millisecond
		if gone {
			grace = time.Hour // the clients end the drain below
		}
		srv, addr, done := drainServer(t, "old", grace)
		keep, give, err := server.HandoffPair()
		if err != nil {
			t.Fatal(err)
		}
		h, err := server.NewHandoff(keep)
		if err != nil {
			t.Fatal(err)
		}
		if gone {
			give.Close()
		} else {
			defer give.Close() // open, never read: the socket's buffer fills
		}
		conns := make([]net.Conn, 400)
		for i := range conns {
			c, br := dialKeep(t, addr)
			keepAliveGet(t, c, br)
			conns[i] = c
		}
		srv.SetHandoff(h)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		stopped := make(chan error, 1)
		go func() { stopped <- srv.Shutdown(ctx) }()
		if gone {
			// Within the grace: answered, with Connection: close.
			waitRefused(t, addr)
			br := bufio.NewReader(conns[0])
			if resp := keepAliveGet(t, conns[0], br); resp.StatusCode != 200 || !resp.Close {
				t.Errorf("gone: next request %s close=%v", resp.Status, resp.Close)
			}
			for _, c := range conns {
				c.Close()
			}
		}
		if err := <-stopped; err != nil {
			t.Fatalf("gone=%v: Shutdown: %v", gone, err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Serve: %v", err)
		}
		n, err := h.Close()
		if gone && n != 0 {
			t.Errorf("gone: %d handed over", n)
		}
		if err == nil || !h.Failed() {
			t.Errorf("gone=%v: %d handed over, Close: %v, Failed %v; want a failure", gone, n, err, h.Failed())
		}
		t.Logf("gone=%v: %d of %d handed over before the successor stopped taking them", gone, n, len(conns))
	}
}

// A TLS connection that shook hands and sent nothing (a preconnect) is idle
// for the drain: it is closed after the grace, not held until read_timeout.
func TestDrainClosesTLSPreconnectAfterGrace(t *testing.T) {
	f := startTLS(t, server.Options{ReadTimeout: time.Hour, DrainGrace: 100 * time.Millisecond})
	c, err := tls.Dial("tcp", f.tls, &tls.Config{RootCAs: f.ca.Pool(), ServerName: "ads.example"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a TLS preconnect: %v", err)
	}
}
