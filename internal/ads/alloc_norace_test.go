//go:build !race

package ads_test

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"tsubame/internal/ads"
)

// TestServeDecideAllocatesNothing: /api/decide, end to end on a real
// server and loopback connection (the access log, the signer, a budget's
// reservation under each decision's id), costs no allocation in steady
// state: the visitor, site, key-values, ids and tracking URLs are kept in
// the pooled answer (answer.keep). The client is a raw connection reading
// into one buffer, so that what is counted is the server's. (Not under
// -race, which empties sync.Pools at random.)
func TestServeDecideAllocatesNothing(t *testing.T) {
	f := newFixtureB(t)
	device := func([]byte) ads.Device { return ads.Device{Device: "desktop", OS: "windows", Browser: "chrome"} }
	n := f.start(t, nodeOpts{reservation: 10 * time.Minute, device: device})
	c, err := net.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET /api/decide?placement=side&uid=u-1&site=News.Example.com&kv.section=sports HTTP/1.1\r\n" +
		"Host: ads.example\r\nUser-Agent: Mozilla/5.0 Chrome/131\r\n\r\n")
	buf := make([]byte, 64<<10)
	var body []byte
	do := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		body = readResponse(t, c, buf)
	}
	do()
	if !bytes.Contains(body, []byte(`"line_item":"li-sports"`)) {
		t.Fatalf("answer %q, want li-sports (the key-value's line item)", body)
	}
	if n := testing.AllocsPerRun(500, do); n > 0 {
		t.Errorf("%v allocations a decision, want none", n)
	}
}

// readResponse reads one HTTP/1.1 response with a Content-Length from c
// into buf, without allocating, and returns its body; a status other than
// 200 fails t.
func readResponse(t *testing.T, c net.Conn, buf []byte) []byte {
	t.Helper()
	have, end, size := 0, -1, -1
	for end < 0 || have < end+size {
		k, err := c.Read(buf[have:])
		if err != nil {
			t.Fatal(err)
		}
		have += k
		if end >= 0 {
			continue
		}
		i := bytes.Index(buf[:have], []byte("\r\n\r\n"))
		if i < 0 {
			continue
		}
		end = i + 4
		if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 ")) {
			t.Fatalf("response %q", buf[:have])
		}
		j := bytes.Index(buf[:end], []byte("\r\nContent-Length: "))
		if j < 0 {
			t.Fatalf("no Content-Length in %q", buf[:end])
		}
		size = 0
		for _, d := range buf[j+len("\r\nContent-Length: "):] {
			if d < '0' || d > '9' {
				break
			}
			size = size*10 + int(d-'0')
		}
	}
	return buf[end : end+size]
}
