package server

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"tsubame/internal/framing"
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

// framingError says why a request's framing is refused: the rules are
// internal/framing's, shared with the admin listener.
type framingError = framing.Error

var http10 = []byte("HTTP/1.0")

// checkFraming returns why the request head h is refused, or "": the
// field lines by framing.Fields (which also checks every Host value), the
// request target's authority by framing.Target.
func checkFraming(h *fasthttp.RequestHeader) framingError {
	if !h.IsHTTP11() && !bytes.Equal(h.Protocol(), http10) {
		return framing.ErrVersion // fasthttp reads any HTTP/d.d as 1.0
	}
	var head framing.Head
	if why := framing.Fields(h.RawHeaders(), &head); why != "" {
		return why
	}
	return framing.Target(h.RequestURI())
}

// refuseFraming answers a request whose framing is refused: 400 (505 for
// an HTTP version it does not speak), and the connection closed after it.
func (s *Server) refuseFraming(ctx *fasthttp.RequestCtx, why framingError) {
	s.counters.framing.Add(1)
	ctx.SetConnectionClose()
	status := fasthttp.StatusBadRequest
	if why == framing.ErrVersion {
		status = fasthttp.StatusHTTPVersionNotSupported
	}
	plain(ctx, status, "bad request: "+string(why))
}

// checkFramingIf is checkFraming, unless the benchmark's comparison build
// left it out (edgeChecks).
func checkFramingIf(h *fasthttp.RequestHeader) framingError {
	if !edgeChecks {
		return ""
	}
	return checkFraming(h)
}
