package server

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// Strict framing on top of fasthttp's parser.
//
// fasthttp frames a request correctly by RFC 9112 but accepts some shapes a
// front proxy may frame differently, which is what request smuggling feeds
// on: Content-Length beside Transfer-Encoding (fasthttp frames by the chunked
// body and keeps the connection), obsolete line folding (joined into the
// previous field), field names with spaces inside, header lines ended by a
// bare LF, and "Transfer-Encoding: identity". The request line, the field
// values, duplicate or non-numeric lengths, several Transfer-Encoding or Host
// fields, a missing Host and Transfer-Encoding on HTTP/1.0 are already
// refused by fasthttp
// (see framing_test.go for the whole table).
//
// checkFraming reads the raw header block fasthttp keeps for each request, so
// the parsing stays fasthttp's: this is a second, stricter look at bytes it
// already accepted, in one pass and without allocating. A refused request
// gets a 400 and its connection is closed, so nothing after it on the socket
// is read as another request.

// framingError says why a request's framing is refused.
type framingError string

const (
	errBareLF     framingError = "a header line ends in a bare LF"
	errBareCR     framingError = "a bare CR in the request head"
	errObsFold    framingError = "obsolete line folding"
	errFieldName  framingError = "invalid header field name"
	errCLAndTE    framingError = "both Content-Length and Transfer-Encoding"
	errTEValue    framingError = "Transfer-Encoding other than chunked"
	errVersion    framingError = "HTTP version other than 1.0 and 1.1"
	errUnfinished framingError = "unterminated header block"
)

var (
	hdrContentLength    = []byte("content-length")
	hdrTransferEncoding = []byte("transfer-encoding")
	http10              = []byte("HTTP/1.0")
	valChunked          = []byte("chunked")
)

// tchar marks the bytes allowed in a field name (RFC 9110 §5.6.2).
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// checkFraming returns why the request head h is refused, or "".
func checkFraming(h *fasthttp.RequestHeader) framingError {
	raw := h.RawHeaders()
	if !h.IsHTTP11() && !bytes.Equal(h.Protocol(), http10) {
		return errVersion // fasthttp reads any HTTP/d.d as 1.0
	}
	var cl, te bool
	for len(raw) > 0 {
		nl := bytes.IndexByte(raw, '\n')
		if nl < 0 {
			return errUnfinished
		}
		if nl == 0 || raw[nl-1] != '\r' {
			return errBareLF
		}
		line := raw[:nl-1]
		raw = raw[nl+1:]
		if len(line) == 0 {
			break // the blank line that ends the head
		}
		if line[0] == ' ' || line[0] == '\t' {
			return errObsFold
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return errFieldName
		}
		name, value := line[:colon], line[colon+1:]
		for _, c := range name {
			if !tchar[c] {
				return errFieldName
			}
		}
		if bytes.IndexByte(value, '\r') >= 0 {
			return errBareCR
		}
		switch len(name) {
		case len(hdrContentLength):
			cl = cl || bytes.EqualFold(name, hdrContentLength)
		case len(hdrTransferEncoding):
			if bytes.EqualFold(name, hdrTransferEncoding) {
				te = true
				if !bytes.EqualFold(bytes.Trim(value, " \t"), valChunked) {
					return errTEValue
				}
			}
		}
	}
	if cl && te {
		return errCLAndTE
	}
	return ""
}

// refuseFraming answers a request whose framing is refused: 400 (505 for
// an HTTP version it does not speak), and the connection closed after it.
func (s *Server) refuseFraming(ctx *fasthttp.RequestCtx, why framingError) {
	s.counters.framing.Add(1)
	ctx.SetConnectionClose()
	status := fasthttp.StatusBadRequest
	if why == errVersion {
		status = fasthttp.StatusHTTPVersionNotSupported
	}
	plain(ctx, status, "bad request framing: "+string(why))
}

// checkFramingIf is checkFraming, unless the benchmark's comparison build
// left it out (edgeChecks).
func checkFramingIf(h *fasthttp.RequestHeader) framingError {
	if !edgeChecks {
		return ""
	}
	return checkFraming(h)
}
