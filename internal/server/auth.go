package server

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

var (
	hdrAuthorization   = []byte("Authorization")
	schemeBearer       = []byte("bearer")
	hdrWWWAuthenticate = []byte("WWW-Authenticate")
	valBearerChallenge = []byte(`Bearer realm="tsubame"`)
)

// authorized reports whether the request carries the bearer token whose
// SHA-256 is key (RFC 6750 §2.1; the scheme in any case), or answers 401
// and counts it. Comparing digests in constant time keeps both the token
// and its length from leaking through timing.
func (s *Server) authorized(ctx *fasthttp.RequestCtx, key *[sha256.Size]byte) bool {
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
