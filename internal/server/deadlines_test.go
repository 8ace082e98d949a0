package server

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// swept returns a connected pair: the server side accepted through a
// limitListener whose deadlines are swept every tick, and the client side.
func swept(t *testing.T, tick time.Duration) (*countedConn, net.Conn, *deadlines) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dl := newDeadlines(tick)
	ll := &limitListener{Listener: ln, open: &atomic.Int64{}, refused: &atomic.Uint64{}, dl: dl}
	t.Cleanup(func() { ln.Close(); dl.close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := ll.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); client.Close() })
	return c.(*countedConn), client, dl
}

// waitSweptPast waits until the sweep has ticked at least twice after at.
func waitSweptPast(t *testing.T, dl *deadlines, at time.Time) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	for dl.now.Load() < at.Add(2*dl.every).UnixNano() {
		if time.Now().After(limit) {
			t.Fatal("the sweep did not tick")
		}
		time.Sleep(dl.every / 2)
	}
}

func TestSweptReadDeadlineExpires(t *testing.T) {
	c, client, dl := swept(t, 5*time.Millisecond)
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var buf [1]byte
	_, err := c.Read(buf[:])
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	// A new deadline after an expiry clears the expired one.
	if err := c.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	waitSweptPast(t, dl, time.Now())
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(buf[:]); err != nil {
		t.Fatalf("read under a new deadline after an expiry: %v", err)
	}
}

func TestSweptDeadlineRenewedDoesNotFire(t *testing.T) {
	c, client, dl := swept(t, 5*time.Millisecond)
	first := time.Now().Add(30 * time.Millisecond)
	if err := c.SetReadDeadline(first); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		var buf [5]byte
		_, err := io.ReadFull(c, buf[:])
		if err == nil && string(buf[:]) != "hello" {
			err = errors.New("read " + string(buf[:]))
		}
		got <- err
	}()
	waitSweptPast(t, dl, first)
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("read under a renewed deadline: %v", err)
	}
}

func TestNearDeadlineSetDirectlyAndCleared(t *testing.T) {
	c, client, dl := swept(t, 50*time.Millisecond)
	// Closer than two ticks: set on the connection itself.
	if err := c.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var buf [1]byte
	if _, err := c.Read(buf[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past a near deadline: %v, want a timeout", err)
	}
	// Clearing it lets reads wait again.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := c.Read(buf[:]); got <- err }()
	waitSweptPast(t, dl, time.Now())
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("read after the deadline was cleared: %v", err)
	}
}

func TestSweptWriteDeadlineExpires(t *testing.T) {
	c, _, _ := swept(t, 5*time.Millisecond)
	if err := c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// The client never reads: the socket buffers fill and the write blocks
	// until the sweep expires it.
	chunk := make([]byte, 1<<20)
	for {
		if _, err := c.Write(chunk); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write past its deadline: %v, want a timeout", err)
			}
			return
		}
	}
}

// TestSweptDeadlinesRace sets deadlines from several goroutines while the
// sweep expires them, then checks that a connection with a far deadline
// reads normally: no expiry outlives a later deadline.
func TestSweptDeadlinesRace(t *testing.T) {
	c, client, dl := swept(t, time.Millisecond)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				d := time.Now().Add(time.Duration(i%7) * time.Millisecond)
				if g%2 == 0 {
					_ = c.SetReadDeadline(d)
				} else {
					_ = c.SetWriteDeadline(d)
				}
			}
		})
	}
	wg.Wait()
	far := time.Now().Add(time.Hour)
	if err := c.SetDeadline(far); err != nil {
		t.Fatal(err)
	}
	waitSweptPast(t, dl, time.Now().Add(10*time.Millisecond))
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	var buf [1]byte
	if _, err := c.Read(buf[:]); err != nil {
		t.Fatalf("read under a far deadline after the race: %v", err)
	}
	if _, err := c.Write([]byte("y")); err != nil {
		t.Fatalf("write under a far deadline after the race: %v", err)
	}
}

// A closed connection refuses deadlines, as a net.Conn does: fasthttp relies
// on that to drop a request read on a connection Shutdown closed under it.
func TestDeadlineOnClosedConnection(t *testing.T) {
	c, _, _ := swept(t, 5*time.Millisecond)
	if err := c.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	for _, set := range []func(time.Time) error{c.SetReadDeadline, c.SetWriteDeadline, c.SetDeadline} {
		if err := set(time.Now().Add(time.Hour)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("deadline on a closed connection: %v, want net.ErrClosed", err)
		}
	}
}

// BenchmarkSetDeadlines is what fasthttp does to a keep-alive connection on
// every request: an idle, a read and a write deadline.
func BenchmarkSetDeadlines(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	dl := newDeadlines(100 * time.Millisecond)
	defer dl.close()
	ll := &limitListener{Listener: ln, open: &atomic.Int64{}, refused: &atomic.Uint64{}, dl: dl}
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	c, err := ll.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.Run("swept", func(b *testing.B) { setDeadlines(b, c) })
	b.Run("runtime-timer", func(b *testing.B) { setDeadlines(b, c.(*countedConn).Conn) })
}

func setDeadlines(b *testing.B, c net.Conn) {
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		_ = c.SetReadDeadline(now.Add(time.Minute))
		_ = c.SetReadDeadline(now.Add(5 * time.Second))
		_ = c.SetWriteDeadline(now.Add(5 * time.Second))
	}
}
