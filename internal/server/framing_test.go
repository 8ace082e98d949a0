package server_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"tsubame/internal/server"
)

// A request that follows each case on the same connection: if a refused
// request's connection stayed open, this would be answered, and on a real
// front proxy it would be somebody else's request.
// It asks for the connection to close, so every exchange ends.
const smuggled = "GET /json?smuggled HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"

// framingCase is one request head (and body) sent raw to the listener.
type framingCase struct {
	name string
	raw  string
	// status is the first answer's status. A refused case (400, 505)
	// must then see its connection closed with nothing more answered; an
	// accepted one must answer the smuggled request too, proving its body
	// was framed where it ends.
	status int
	reason string // the refusal counter that must move: "framing" or "malformed"
}

var framingCases = []framingCase{
	// Accepted shapes, each framed right.
	{name: "plain GET", raw: "GET /json HTTP/1.1\r\nHost: x\r\n\r\n", status: 200},
	{name: "POST with Content-Length", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", status: 405},
	{name: "POST chunked", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", status: 405},
	{name: "chunk extensions", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;name=value;flag\r\nhello\r\n0;last\r\n\r\n", status: 405},
	{name: "chunked with trailer", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: 1\r\n\r\n", status: 405},
	{name: "Transfer-Encoding in upper case", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTRANSFER-ENCODING: CHUNKED\r\n\r\n0\r\n\r\n", status: 405},
	{name: "optional whitespace around values", raw: "GET /json HTTP/1.1\r\nHost:x\r\nX-A: \t a \t\r\nContent-Length:  0 \r\n\r\n", status: 200},
	{name: "every tchar in a field name", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX-!#$%&'*+-.^_`|~09az: v\r\n\r\n", status: 200},
	{name: "empty field value", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX-Empty:\r\n\r\n", status: 200},
	{name: "request line ended by a bare LF (RFC 9112 §2.2 lets a recipient accept it)", raw: "GET /json HTTP/1.1\nHost: x\r\n\r\n", status: 200},

	// Content-Length beside Transfer-Encoding: the classic CL.TE / TE.CL shapes.
	{name: "CL then TE", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, reason: "framing"},
	{name: "TE then CL", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n", status: 400, reason: "framing"},
	{name: "CL and TE in other cases", raw: "POST /json HTTP/1.1\r\nHost: x\r\ncontent-length: 5\r\ntransfer-encoding: Chunked\r\n\r\n0\r\n\r\n", status: 400, reason: "framing"},
	{name: "CL and TE with padded value", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding:  chunked \r\n\r\n0\r\n\r\n", status: 400, reason: "framing"},
	{name: "CL 0 and TE", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, reason: "framing"},

	// Transfer-Encoding values and repeats.
	{name: "TE identity", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 0\r\n\r\n", status: 400, reason: "framing"},
	{name: "TE identity alone", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n", status: 400, reason: "framing"},
	{name: "TE gzip, chunked", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", status: 400, reason: "malformed"},
	{name: "TE chunked, identity", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", status: 400, reason: "malformed"},
	{name: "TE xchunked", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", status: 400, reason: "malformed"},
	{name: "TE twice", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, reason: "malformed"},
	{name: "TE on HTTP/1.0", raw: "POST /json HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400, reason: "malformed"},
	{name: "TE with a space before the colon", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", status: 400, reason: "malformed"},
	{name: "TE with a tab before the colon", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n", status: 400, reason: "malformed"},
	{name: "TE value folded onto the next line", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", status: 400, reason: "framing"},

	// Content-Length values and repeats.
	{name: "CL twice, same value", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", status: 400, reason: "malformed"},
	{name: "CL twice, different values", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", status: 400, reason: "malformed"},
	{name: "CL as a list", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello", status: 400, reason: "malformed"},
	{name: "CL with a plus sign", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello", status: 400, reason: "malformed"},
	{name: "CL negative", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", status: 400, reason: "malformed"},
	{name: "CL in hex", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\nhello", status: 400, reason: "malformed"},
	{name: "CL with a space inside", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\nhello", status: 400, reason: "malformed"},
	{name: "CL overflowing", raw: "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n", status: 400, reason: "malformed"},

	// Field syntax.
	{name: "obs-fold", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", status: 400, reason: "framing"},
	{name: "obs-fold with a tab", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n", status: 400, reason: "framing"},
	{name: "first field line starting with a space", raw: "GET /json HTTP/1.1\r\n Host: x\r\n\r\n", status: 400, reason: "malformed"},
	{name: "space inside a field name", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX Forwarded: y\r\n\r\n", status: 400, reason: "framing"},
	{name: "quote in a field name", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX\"A: y\r\n\r\n", status: 400, reason: "malformed"},
	{name: "parenthesis in a field name", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX(A): y\r\n\r\n", status: 400, reason: "malformed"},
	{name: "empty field name", raw: "GET /json HTTP/1.1\r\nHost: x\r\n: y\r\n\r\n", status: 400, reason: "malformed"},
	{name: "field line without a colon", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX-A y\r\n\r\n", status: 400, reason: "malformed"},
	{name: "bare LF ending a field line", raw: "GET /json HTTP/1.1\r\nHost: x\nX-A: y\r\n\r\n", status: 400, reason: "framing"},
	{name: "bare LFs throughout", raw: "GET /json HTTP/1.1\nHost: x\n\n", status: 400, reason: "framing"},
	{name: "bare CR inside a value", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", status: 400, reason: "malformed"},
	{name: "NUL inside a value", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", status: 400, reason: "malformed"},
	{name: "DEL inside a value", raw: "GET /json HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n", status: 400, reason: "malformed"},

	// Host.
	{name: "HTTP/1.1 without Host", raw: "GET /json HTTP/1.1\r\n\r\n", status: 400, reason: "malformed"},
	{name: "Host twice", raw: "GET /json HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", status: 400, reason: "malformed"},

	// The request line.
	{name: "unknown method token", raw: "G(T /json HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, reason: "malformed"},
	{name: "two spaces after the method", raw: "GET  /json HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, reason: "malformed"},
	{name: "a word after the version", raw: "GET /json HTTP/1.1 extra\r\nHost: x\r\n\r\n", status: 400, reason: "malformed"},
	{name: "lower-case version", raw: "GET /json http/1.1\r\nHost: x\r\n\r\n", status: 400, reason: "malformed"},
	{name: "HTTP/2.0 version on HTTP/1 framing", raw: "GET /json HTTP/2.0\r\nHost: x\r\n\r\n", status: 505, reason: "framing"},
	{name: "HTTP/1.2", raw: "GET /json HTTP/1.2\r\nHost: x\r\n\r\n", status: 505, reason: "framing"},
	{name: "HTTP/0.9 style version", raw: "GET /json HTTP/0.9\r\nHost: x\r\n\r\n", status: 505, reason: "framing"},
	{name: "HTTP/1.0 without Host", raw: "GET /json HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", status: 200},
	{name: "control byte in the target", raw: "GET /js\x01on HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, reason: "malformed"},
	{name: "target not starting with a slash", raw: "GET json HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, reason: "malformed"},

	// Chunked bodies.
	{name: "chunk size not hex", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", status: 400, reason: "malformed"},
	{name: "chunk data longer than its size", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n", status: 400, reason: "malformed"},
	{name: "chunk size overflowing", raw: "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n", status: 400, reason: "malformed"},
}

// TestFramingTable sends each case, then a second request, on one raw
// connection to the real listener.
func TestFramingTable(t *testing.T) {
	if len(framingCases) < 40 {
		t.Fatalf("only %d framing cases", len(framingCases))
	}
	srv, addr := startWith(t, server.Options{HelloJSON: true, MaxBodyBytes: 1 << 20})
	for _, tc := range framingCases {
		t.Run(tc.name, func(t *testing.T) {
			before := srv.Stats().Refused
			statuses, closed := exchange(t, addr, tc.raw+smuggled)
			if len(statuses) == 0 || statuses[0] != tc.status {
				t.Fatalf("answered %v, want %d first", statuses, tc.status)
			}
			after := srv.Stats().Refused
			if tc.reason == "" {
				if len(statuses) != 2 || statuses[1] != 200 {
					t.Fatalf("answers %v: the request after an accepted one was not framed where the first ended", statuses)
				}
				if after[server.ReasonFraming] != before[server.ReasonFraming] || after[server.ReasonMalformed] != before[server.ReasonMalformed] {
					t.Fatalf("an accepted request moved a refusal counter: %v -> %v", before, after)
				}
				return
			}
			if len(statuses) != 1 || !closed {
				t.Fatalf("answers %v (closed %v): a refused request's connection must close with nothing more answered", statuses, closed)
			}
			if after[tc.reason] != before[tc.reason]+1 {
				t.Fatalf("refused_total{reason=%q} %d -> %d, want one more (all: %v -> %v)", tc.reason, before[tc.reason], after[tc.reason], before, after)
			}
		})
	}
}

// exchange writes raw on a new connection, half-closes it, and reads every
// answer until the server closes; closed reports a clean close (EOF or a
// reset after the last answer) rather than a read that gave up.
func exchange(t *testing.T, addr, raw string) (statuses []int, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	// A generous bound so that a server waiting for more bytes fails the
	// test instead of hanging it; no case should come near it.
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return statuses, false
			}
			return statuses, true
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		if resp.Close || strings.EqualFold(resp.Header.Get("Connection"), "close") {
			_, err := br.ReadByte()
			return statuses, err != nil
		}
	}
}
