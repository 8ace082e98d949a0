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
	if len(ctx.Request.Header.PeekAll(hdrAuthorizationName)) > 1 {
		s.counters.callbackAuth.Add(1)
		s.fail(ctx, errTwoAuthorizations)
		return false
	}
	v := ctx.Request.Header.PeekBytes(hdrAuthorization)
	if len(v) > len(schemeBearer) && bytes.EqualFold(v[:len(schemeBearer)], schemeBearer) && v[len(schemeBearer)] == ' ' {
		token := bytes.TrimLeft(v[len(schemeBearer):], " ")
		got := sha256.Sum256(token)
		if subtle.ConstantTimeCompare(got[:], key[:]) == 1 {
			return true
		}
	}
	s.counters.callbackAuth.Add(1)
	ctx.Response.Header.SetCanonical(hdrWWWAuthenticate, valBearerChallenge)
	s.fail(ctx, errUnauthorized)
	return false
}
