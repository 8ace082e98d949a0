package track

import (
	"math/rand/v2"
	"strings"
	"time"
)

// IDLen is the length of a decision, visitor or bid id: 26 characters of
// Crockford's base32, 48 bits of milliseconds then 80 random bits (the
// ULID layout: ids sort by time, and two nodes never make the same one).
const IDLen = 26

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewID makes a decision, visitor or bid id. The runtime's random source
// is ChaCha8, seeded from the system: ids cannot be guessed from others.
func NewID(now time.Time) string {
	var b [IDLen]byte
	AppendID(b[:0], now)
	return string(b[:])
}

// AppendID appends a new id (NewID) to dst.
func AppendID(dst []byte, now time.Time) []byte {
	var b [IDLen]byte
	ms := uint64(now.UnixMilli())
	for i := 9; i >= 0; i-- { // 50 bits of time, the top 2 zero
		b[i] = crockford[ms&31]
		ms >>= 5
	}
	r := rand.Uint64()
	for i := 10; i < 22; i++ { // 60 random bits
		b[i] = crockford[r&31]
		r >>= 5
	}
	r = rand.Uint64()
	for i := 22; i < IDLen; i++ { // 20 more
		b[i] = crockford[r&31]
		r >>= 5
	}
	return append(dst, b[:]...)
}

// ValidID reports whether b is an id NewID could have made: a cookie set
// by someone else on the domain cannot put anything in the log.
func ValidID(b []byte) bool {
	if len(b) != IDLen {
		return false
	}
	for _, c := range b {
		if strings.IndexByte(crockford, c) < 0 {
			return false
		}
	}
	return true
}

// The paths of the tracking URLs the decisions' and the bids' markup
// carry, served by internal/ads.
const (
	PathImpression = "/t/i/"
	PathClick      = "/t/c/"
)
