package openrtb

import (
	"math"

	"tsubame"
)

// Int is an integer field of a bid request. Exchanges send integers as
// JSON numbers and, often enough, as strings of one ("300"); both are read.
// A number written with a fraction or an exponent that is whole (1.0, 3e2)
// is that integer. null, "" and anything else that is not a whole number
// read as 0: a field the bidder cannot read is as good as absent, and one
// badly written flag must not cost the whole request.
type Int int64

// UnmarshalJSON reads a number, a string holding one, or null.
func (n *Int) UnmarshalJSON(b []byte) error {
	*n = 0
	b = unquote(b)
	m, ok := parseDecimal(b, 0)
	if ok && m.frac == 0 {
		*n = Int(m.whole)
	}
	return nil
}

// Price is an amount of a currency in micro-units (a millionth of the
// unit: 1250000 is 1.25), read from a JSON number or a string holding one,
// exactly: never through a float. A floor written with more than six
// decimals is rounded up to the micro-unit, so that a bid at the floor read
// is never below the floor written. null and "" are 0; a negative amount,
// or anything that is not a number, is an error (a request with an
// unreadable floor is refused rather than bid on below its floor).
type Price int64

// UnmarshalJSON reads a number, a string holding one, or null.
func (p *Price) UnmarshalJSON(b []byte) error {
	*p = 0
	b = unquote(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	m, ok := parseDecimal(b, 6)
	if !ok || m.neg && (m.whole != 0 || m.frac != 0) {
		return errPrice
	}
	v := m.whole
	if m.frac > 0 { // digits past the micro-unit: up
		if v == math.MaxInt64 {
			return errPrice
		}
		v++
	}
	*p = Price(v)
	return nil
}

// Money returns p as an amount of tsubame.Money.
func (p Price) Money() tsubame.Money { return tsubame.Money(p) }

var errPrice = tsubame.Errorf(tsubame.EINVALID, "a price is not a decimal number of at least 0")

// unquote strips the quotes of a JSON string, or returns b as it is.
func unquote(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return b[1 : len(b)-1]
	}
	return b
}

// decimal is a parsed number scaled by 10^scale: whole is the integer
// part of the scaled value, frac says whether anything was left below it.
type decimal struct {
	whole int64
	frac  int64 // non-zero when digits below 10^-scale were not zero
	neg   bool
}

// parseDecimal reads a JSON number (-? digits (. digits)? ([eE] [+-]? digits)?)
// scaled by 10^scale, exactly. It fails on anything else, and on a value
// beyond int64 (ok false).
func parseDecimal(b []byte, scale int) (decimal, bool) {
	var d decimal
	i := 0
	if i < len(b) && b[i] == '-' {
		d.neg = true
		i++
	}
	startInt := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	intDigits := b[startInt:i]
	var fracDigits []byte
	if i < len(b) && b[i] == '.' {
		i++
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		fracDigits = b[s:i]
		if len(fracDigits) == 0 {
			return d, false
		}
	}
	if len(intDigits) == 0 {
		return d, false
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if exp > 1000 {
				return d, false
			}
			exp = exp*10 + int(b[i]-'0')
			i++
		}
		if i == s {
			return d, false
		}
		if neg {
			exp = -exp
		}
	}
	if i != len(b) {
		return d, false
	}
	// The digits, and where the point falls among them after scaling.
	point := len(intDigits) + exp + scale
	n := len(intDigits) + len(fracDigits)
	digit := func(k int) byte {
		if k < len(intDigits) {
			return intDigits[k] - '0'
		}
		return fracDigits[k-len(intDigits)] - '0'
	}
	var v uint64
	for k := 0; k < n; k++ {
		c := digit(k)
		if k >= point {
			if c != 0 {
				d.frac = 1
			}
			continue
		}
		if v > (math.MaxInt64-uint64(c))/10 {
			return d, false
		}
		v = v*10 + uint64(c)
	}
	for k := n; k < point; k++ { // zeros the exponent and scale add
		if v > math.MaxInt64/10 {
			return d, false
		}
		v *= 10
	}
	d.whole = int64(v)
	if d.neg {
		d.whole = -d.whole
	}
	return d, true
}
