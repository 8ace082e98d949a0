package openrtb

import (
	"bytes"

	"tsubame"
)

// ClearingPrice reads the clearing price an exchange substituted for
// ${AUCTION_PRICE} in a notice URL: a decimal of any number of places,
// with an exponent or not (1.59, 1.590000000001, 1.5900, 159e-2, .5, +2),
// quoted or not, rounded down to the micro-unit. Down, where a floor is
// rounded up (Price): what is counted as paid is then never above what the
// exchange wrote, and a price a rounding digit above a bid (1.590000000001
// on 1.59) reads as the bid. ok is false for anything else: empty, null,
// the macro left unsubstituted, a negative amount, one beyond the range of
// micro-units, text.
func ClearingPrice(b []byte) (price tsubame.Money, ok bool) {
	b = unquote(bytes.TrimSpace(b))
	if len(b) > 0 && b[0] == '+' {
		b = b[1:]
	}
	if len(b) > 0 && b[0] == '.' {
		b = append([]byte{'0'}, b...) // a notice's, not the hot path
	}
	if len(b) == 0 || b[0] == '-' && !zero(b[1:]) {
		return 0, false
	}
	m, ok := parseDecimal(b, 6)
	if !ok || m.whole < 0 {
		return 0, false
	}
	return tsubame.Money(m.whole), true // m.frac, below the micro-unit, dropped
}

// zero reports whether b is a number's digits that are all zero (-0, -0.0).
func zero(b []byte) bool {
	m, ok := parseDecimal(b, 6)
	return ok && m.whole == 0 && m.frac == 0
}
