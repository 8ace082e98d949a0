package tsubame

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Money is an amount of the account currency in micro-units (a millionth of
// the unit: 1250000 is 1.25). Amounts are integers so that spend adds up
// exactly (a line item's spend is the sum of cpm/1000 per impression); a
// float never holds money here, not even while parsing.
type Money int64

// MicrosPerUnit is the number of micro-units in one unit of currency.
const MicrosPerUnit = 1_000_000

// moneyDecimals is the number of decimal places a Money holds.
const moneyDecimals = 6

// ParseMoney parses a decimal amount such as "1.25", "-0.000001" or "40":
// an optional minus sign, digits, and optionally a point followed by 1 to 6
// digits. More decimals than a micro-unit holds, an exponent, spaces, a
// leading plus or an amount beyond the range of Money are errors, never
// rounded.
func ParseMoney(s string) (Money, error) {
	m, err := parseMoney(s)
	if err != nil {
		return 0, Errorf(EINVALID, "amount %q: %s", clip(s, 40), err)
	}
	return m, nil
}

type moneyError string

func (e moneyError) Error() string { return string(e) }

func parseMoney(s string) (Money, error) {
	neg := false
	if len(s) > 0 && s[0] == '-' {
		neg, s = true, s[1:]
	}
	whole, frac, dot := s, "", false
	if i := indexByte(s, '.'); i >= 0 {
		whole, frac, dot = s[:i], s[i+1:], true
	}
	if whole == "" || dot && frac == "" {
		return 0, moneyError("not a decimal number (digits, optionally a point and up to 6 decimals)")
	}
	var u uint64 // micro-units; up to math.MaxInt64+1 for the negative bound
	for i := 0; i < len(whole); i++ {
		c := whole[i]
		if c < '0' || c > '9' {
			if c == 'e' || c == 'E' {
				return 0, moneyError("exponents are not allowed: write the amount as a plain decimal")
			}
			return 0, moneyError("not a decimal number (digits, optionally a point and up to 6 decimals)")
		}
		if u > (math.MaxUint64-9)/10 {
			return 0, moneyError("out of range")
		}
		u = u*10 + uint64(c-'0')
	}
	for i := 0; i < len(frac); i++ {
		if c := frac[i]; c < '0' || c > '9' {
			if c == 'e' || c == 'E' {
				return 0, moneyError("exponents are not allowed: write the amount as a plain decimal")
			}
			return 0, moneyError("not a decimal number (digits, optionally a point and up to 6 decimals)")
		}
	}
	if len(frac) > moneyDecimals {
		return 0, moneyError("more than 6 decimals (the smallest amount is 0.000001)")
	}
	const limit = uint64(math.MaxInt64) + 1
	if u > limit/MicrosPerUnit {
		return 0, moneyError("out of range")
	}
	u *= MicrosPerUnit
	scale := uint64(MicrosPerUnit)
	for i := 0; i < len(frac); i++ {
		scale /= 10
		u += uint64(frac[i]-'0') * scale
	}
	if u > limit || !neg && u == limit {
		return 0, moneyError("out of range")
	}
	if neg {
		return Money(-int64(u-1) - 1), nil // -(limit) without overflowing
	}
	return Money(u), nil
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// String formats m as a decimal without trailing zeros: "1.25", "40",
// "-0.000001". ParseMoney(m.String()) == m for every m.
func (m Money) String() string { return string(m.AppendText(nil)) }

// AppendText appends m as String formats it.
func (m Money) AppendText(b []byte) []byte {
	u := uint64(m)
	if m < 0 {
		b = append(b, '-')
		u = -u
	}
	b = strconv.AppendUint(b, u/MicrosPerUnit, 10)
	frac := u % MicrosPerUnit
	if frac == 0 {
		return b
	}
	var d [moneyDecimals]byte
	for i := moneyDecimals - 1; i >= 0; i-- {
		d[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := moneyDecimals
	for d[n-1] == '0' {
		n--
	}
	b = append(b, '.')
	return append(b, d[:n]...)
}

// MarshalText writes m as a decimal (for YAML, CSV and map keys).
func (m Money) MarshalText() ([]byte, error) { return m.AppendText(nil), nil }

// UnmarshalText parses a decimal as ParseMoney does.
func (m *Money) UnmarshalText(b []byte) error {
	v, err := ParseMoney(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// MarshalJSON writes m as a JSON string holding the decimal ("1.25"): a
// string, because a JSON number is read as a float by many decoders.
func (m Money) MarshalJSON() ([]byte, error) {
	b := append(make([]byte, 0, 24), '"')
	b = m.AppendText(b)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts a decimal string ("1.25") or a JSON number (1.25),
// whose text is parsed as the string would be: never through a float.
func (m *Money) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return m.UnmarshalText([]byte(s))
	}
	return m.UnmarshalText(bytes.TrimSpace(b))
}

// Duration is a time span written as Go writes durations ("1h", "24h",
// "90m", "1h30m"), for frequency-cap windows.
type Duration time.Duration

// String formats d without zero parts: "24h", "1h30m", "90s".
func (d Duration) String() string {
	t := time.Duration(d)
	if t <= 0 || t%time.Second != 0 {
		return t.String()
	}
	h, m, s := t/time.Hour, t%time.Hour/time.Minute, t%time.Minute/time.Second
	var b []byte
	if h > 0 {
		b = strconv.AppendInt(b, int64(h), 10)
		b = append(b, 'h')
	}
	if m > 0 {
		b = strconv.AppendInt(b, int64(m), 10)
		b = append(b, 'm')
	}
	if s > 0 {
		b = strconv.AppendInt(b, int64(s), 10)
		b = append(b, 's')
	}
	return string(b)
}

// MarshalText writes d as String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses a Go duration ("24h").
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return Errorf(EINVALID, "duration %q: write it as 30m, 1h or 24h", clip(string(b), 40))
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes d as a JSON string ("24h").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a JSON string ("24h").
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"24h\"")
	}
	return d.UnmarshalText([]byte(s))
}
