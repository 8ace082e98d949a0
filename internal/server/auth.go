package server

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/valyala/fasthttp"

	"tsubame"
)

const hdrAuthorizationName = "Authorization"

var (
	hdrAuthorization = []byte("Authorization")
	// errTwoAuthorizations answers a request with two Authorization fields.
	errTwoAuthorizations = tsubame.Errorf(tsubame.EINVALID, "more than one Authorization header")
	schemeBearer         = []byte("bearer")
	hdrWWWAuthenticate   = []byte("WWW-Authenticate")
	valBearerChallenge   = []byte(`Bearer realm="tsubame"`)
)

// authorized reports whether the request carries the bearer token whose
// SHA-256 is key (RFC 6750 §2.1; the scheme in any case), or answers 401
// and counts it. Comparing digests in constant time keeps both the token
// and its length from leaking through timing.
//
// A request with two Authorization fields is a 400: which one a front
// proxy checked, logged or stripped is anyone's guess.
func (s *Server) authorized(ctx *fasthttp.RequestCtx, key *[sha256.Size]byte) bool {
	switch bearer(&ctx.Request.Header, key) {
	case bearerOK:
		return true
	case bearerTwice:
		s.counters.callbackAuth.Add(1)
		s.fail(ctx, errTwoAuthorizations)
	default:
		s.counters.callbackAuth.Add(1)
		ctx.Response.Header.SetCanonical(hdrWWWAuthenticate, valBearerChallenge)
		s.fail(ctx, errUnauthorized)
	}
	return false
}

// What a request's Authorization says about a bearer token.
const (
	bearerOK = iota
	bearerWrong
	bearerTwice
)

func bearer(h *fasthttp.RequestHeader, key *[sha256.Size]byte) int {
	if len(h.PeekAll(hdrAuthorizationName)) > 1 {
		return bearerTwice
	}
	v := h.PeekBytes(hdrAuthorization)
	if len(v) > len(schemeBearer) && bytes.EqualFold(v[:len(schemeBearer)], schemeBearer) && v[len(schemeBearer)] == ' ' {
		token := bytes.TrimLeft(v[len(schemeBearer):], " ")
		got := sha256.Sum256(token)
		if subtle.ConstantTimeCompare(got[:], key[:]) == 1 {
			return bearerOK
		}
	}
	return bearerWrong
}

// headerReceived runs when a request's head has been read, before its
// body. A POST /callback without its token gets a body bound of one byte:
// fasthttp then refuses a declared body without reading it, and
// errorHandler answers 401 (refusedCallback), so a caller without the
// token cannot hold a worker by trickling a body until read_timeout.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if s.unauthorizedCallback(h) {
		return fasthttp.RequestConfig{MaxRequestBodySize: 1}
	}
	return fasthttp.RequestConfig{}
}

// unauthorizedCallback reports whether h is a POST /callback (served) whose
// Authorization does not carry the token.
func (s *Server) unauthorizedCallback(h *fasthttp.RequestHeader) bool {
	if !h.IsPost() {
		return false
	}
	uri := h.RequestURI()
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	if !bytes.Equal(uri, callbackPath) {
		return false
	}
	key := s.routes.Load().callbackKey
	return key != nil && bearer(h, key) != bearerOK
}
