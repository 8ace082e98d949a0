package admin

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"tsubame/internal/framing"
)

// Strict framing on the admin listener.
//
// net/http frames Content-Length beside Transfer-Encoding by the chunked
// body and keeps the connection (after deleting Content-Length, so no
// handler can tell), and it accepts obsolete line folding, bare LF line
// ends and Transfer-Encoding on HTTP/1.0 framed by Content-Length: the
// shapes request smuggling feeds on. The public listener refuses them
// (internal/server/framing.go); so does this one, with the same rules
// (internal/framing).
//
// strictConn sits between the connection and net/http and holds back
// each request head until it has all of it: a head that passes is handed
// on, followed by exactly the body its framing gives; a head that fails
// is never handed on. net/http then reads end of stream, finishes what it
// was answering and closes the connection, and the close writes the 400
// (505 for another HTTP version) first. So a refused request gets one
// answer and nothing sent after it on the socket is read.

// maxHead bounds a head held back: net/http's own bound
// (MaxHeaderBytes plus its 4 KiB of slack) and the request line. Past it
// the bytes go on unchecked, and net/http refuses them (431) and closes.
const maxHead = adminMaxHeaderBytes + 4096 + 8192

// adminMaxHeaderBytes is the listener's http.Server.MaxHeaderBytes.
const adminMaxHeaderBytes = 16 << 10

// strictListener wraps each accepted connection in a strictConn.
type strictListener struct {
	net.Listener
	log *slog.Logger
}

func (l strictListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &strictConn{Conn: c, log: l.log}, nil
}

type bodyState uint8

const (
	inHead      bodyState = iota
	inBody                // remain bytes of a Content-Length body
	inChunkLine           // a chunk-size line
	inChunkData           // remain bytes of chunk data, then CRLF
	inTrailer             // trailer lines up to the blank one
	unchecked             // an over-long head went on as is
)

// strictConn is read by net/http's connection goroutine alone; mu guards
// what Close reads, which net/http (and Shutdown) may call from another.
type strictConn struct {
	net.Conn
	log     *slog.Logger
	buf     [4096]byte
	pending []byte // read, not yet checked
	ready   []byte // checked, not yet handed on
	state   bodyState
	remain  int64

	mu      sync.Mutex
	refused framing.Error
	answer  bool // Close answers the refusal
	closed  bool
}

func (c *strictConn) Read(b []byte) (int, error) {
	for len(c.ready) == 0 {
		c.mu.Lock()
		refused := c.refused != ""
		c.mu.Unlock()
		if refused {
			return 0, io.EOF
		}
		n, err := c.Conn.Read(c.buf[:])
		c.pending = append(c.pending, c.buf[:n]...)
		c.advance()
		if err != nil {
			var ne net.Error
			c.mu.Lock()
			if c.refused == "" && !(errors.As(err, &ne) && ne.Timeout()) {
				// The stream ends with an unfinished head or body:
				// net/http gets it and the error, as without this check.
				// (A timeout is not the end: net/http sets one to stop
				// its background read, and reads on.)
				c.ready, c.pending = append(c.ready, c.pending...), nil
			}
			c.mu.Unlock()
			m := copy(b, c.ready)
			c.ready = c.ready[m:]
			return m, err
		}
	}
	n := copy(b, c.ready)
	c.ready = c.ready[n:]
	return n, nil
}

// advance moves checked bytes from pending to ready, as far as they go.
func (c *strictConn) advance() {
	for len(c.pending) > 0 {
		switch c.state {
		case unchecked:
			c.pass(len(c.pending))
		case inHead:
			end := headEnd(c.pending)
			if end < 0 {
				if len(c.pending) > maxHead {
					c.state = unchecked
					continue
				}
				return
			}
			var h framing.Head
			if why := framing.Request(c.pending[:end], &h); why != "" {
				c.refuse(why)
				return
			}
			c.pass(end)
			switch {
			case h.Chunked:
				c.state = inChunkLine
			case h.ContentLength > 0:
				c.state, c.remain = inBody, h.ContentLength
			}
		case inBody, inChunkData:
			if c.remain == 0 { // chunk data done: its CRLF
				if len(c.pending) < 2 {
					return
				}
				if c.pending[0] != '\r' || c.pending[1] != '\n' {
					c.refuse(errChunk)
					return
				}
				c.pass(2)
				c.state = inChunkLine
				continue
			}
			n := int(min(c.remain, int64(len(c.pending))))
			c.pass(n)
			c.remain -= int64(n)
			if c.remain == 0 && c.state == inBody {
				c.state = inHead
			}
		case inChunkLine, inTrailer:
			nl := bytes.IndexByte(c.pending, '\n')
			if nl < 0 {
				if len(c.pending) > maxHead {
					c.refuse(errChunk)
				}
				return
			}
			if nl == 0 || c.pending[nl-1] != '\r' {
				c.refuse(framing.ErrBareLF)
				return
			}
			line := c.pending[:nl-1]
			if c.state == inTrailer {
				if len(line) == 0 {
					c.state = inHead
				}
				c.pass(nl + 1)
				continue
			}
			size, ok := chunkSize(line)
			if !ok {
				c.refuse(errChunk)
				return
			}
			c.pass(nl + 1)
			if size == 0 {
				c.state = inTrailer
			} else {
				c.state, c.remain = inChunkData, size
			}
		}
	}
}

// errChunk refuses a chunked body net/http might frame otherwise.
const errChunk framing.Error = "malformed chunked body"

func (c *strictConn) pass(n int) {
	c.ready = append(c.ready, c.pending[:n]...)
	c.pending = c.pending[n:]
}

// refuse ends the stream before the refused bytes. Close answers a
// refused head; a body refused half way has its handler's answer (its
// body ended early) and nothing more.
func (c *strictConn) refuse(why framing.Error) {
	c.mu.Lock()
	c.refused, c.answer = why, c.state == inHead
	c.mu.Unlock()
	c.pending = nil
	c.log.Debug("admin listener refused a request", "remote", c.RemoteAddr().String(), "why", string(why))
}

// Close writes the answer to a refused request, after everything net/http
// has written, and closes.
func (c *strictConn) Close() error {
	c.mu.Lock()
	why, answer, closed := c.refused, c.answer, c.closed
	c.closed = true
	c.mu.Unlock()
	if answer && !closed {
		status, text := 400, "Bad Request"
		if why == framing.ErrVersion {
			status, text = 505, "HTTP Version Not Supported"
		}
		body := "bad request: " + string(why) + "\n"
		_ = c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c.Conn, "HTTP/1.1 "+strconv.Itoa(status)+" "+text+"\r\nContent-Type: text/plain; charset=utf-8\r\n"+
			"X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: "+
			strconv.Itoa(len(body))+"\r\n\r\n"+body)
	}
	return c.Conn.Close()
}

// headEnd returns the length of the head at the start of b, through the
// blank line that ends it (with a bare LF too, for framing.Request to
// refuse), or -1 while it is unfinished.
func headEnd(b []byte) int {
	for i := 0; ; {
		nl := bytes.IndexByte(b[i:], '\n')
		if nl < 0 {
			return -1
		}
		i += nl + 1
		if i < len(b) && b[i] == '\n' {
			return i + 1
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return i + 2
		}
		if i >= len(b)-1 {
			return -1
		}
	}
}

// chunkSize reads a chunk-size line (hex, then optional extensions), as
// net/http does; false for anything else.
func chunkSize(line []byte) (int64, bool) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}
