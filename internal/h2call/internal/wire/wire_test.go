package wire

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// What one end writes, as the other end reads it: the preface and
// settings first, then, for DATA read, the stream's credit at once while
// it stays open and the connection's in one WINDOW_UPDATE per 512 KiB.
func TestOpenAndCredit(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var mu sync.Mutex
	c := New(a, &mu, 0)
	peer := http2.NewFramer(b, bufio.NewReader(b))

	opened := make(chan error, 1)
	go func() {
		opened <- c.Open(http2.ClientPreface, 10*time.Second, http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	}()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(b, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("preface %q: %v", preface, err)
	}
	f, err := peer.ReadFrame()
	if s, ok := f.(*http2.SettingsFrame); err != nil || !ok || s.NumSettings() != 1 || s.Setting(0).ID != http2.SettingEnablePush {
		t.Fatalf("first frame %v: %v", f, err)
	}
	f, err = peer.ReadFrame()
	if w, ok := f.(*http2.WindowUpdateFrame); err != nil || !ok || w.StreamID != 0 || w.Increment != Window-65535 {
		t.Fatalf("second frame %v: %v", f, err)
	}
	if err := <-opened; err != nil {
		t.Fatal(err)
	}

	flushed := make(chan error, 1)
	go func() { flushed <- c.FlushLoop() }()
	// The peer sends 40 frames of 16 KiB on stream 1 (the last ends it)
	// and reads back the credit given.
	const frames, size = 40, 16 << 10
	go func() {
		for i := range frames {
			_ = peer.WriteData(1, i == frames-1, make([]byte, size))
		}
	}()
	type update struct {
		w   *http2.WindowUpdateFrame
		err error
	}
	updates := make(chan update, 2*frames)
	go func() { // net.Pipe is synchronous: the credit is read while DATA is
		for {
			f, err := peer.ReadFrame()
			if err != nil {
				updates <- update{err: err}
				return
			}
			w := *f.(*http2.WindowUpdateFrame) // a copy: the framer reuses its frames
			updates <- update{w: &w}
		}
	}()
	for i := range frames {
		f, err := c.Fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		d := f.(*http2.DataFrame)
		mu.Lock()
		err = c.Received(d, !d.StreamEnded())
		mu.Unlock()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		c.Kick()
	}
	var stream, conn, n uint32
	for stream < (frames-1)*size || conn < 512<<10 {
		u := <-updates
		if u.err != nil {
			t.Fatal(u.err)
		}
		n++
		if u.w.StreamID == 1 {
			stream += u.w.Increment
		} else {
			conn += u.w.Increment
		}
	}
	// 39 stream updates (not for the frame that ended it) and one for the
	// connection, at 32 frames.
	if stream != (frames-1)*size || conn != 32*size || n != frames {
		t.Fatalf("stream credit %d, connection credit %d in %d updates", stream, conn, n)
	}
	mu.Lock()
	if !c.CloseLocked() || c.CloseLocked() || !c.Closed() {
		t.Fatal("CloseLocked is not once")
	}
	mu.Unlock()
	c.Shut()
	if err := <-flushed; err != nil {
		t.Fatalf("the flusher ended with %v after Shut", err)
	}
}
