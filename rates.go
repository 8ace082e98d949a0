package tsubame

import (
	"math/bits"
	"sort"
	"strings"
)

// Rates are exchange rates against the account currency: how many units of
// a currency one unit of the account currency buys, kept exactly in
// micro-units (150.25 JPY per USD is 150250000). The account currency's
// own rate is one unit. Immutable once made; a reload makes new Rates.
type Rates struct {
	account string
	rate    map[string]int64
}

// NewRates checks rates (currency -> units per account unit, decimals of
// up to six places as the config writes them) and returns them with the
// account currency's own. Every code is three capital letters and every
// rate positive; the account currency's, if given, must be 1.
func NewRates(account string, rates map[string]string) (*Rates, error) {
	r := &Rates{account: account, rate: map[string]int64{account: MicrosPerUnit}}
	var problems []string
	for cur, s := range rates {
		m, err := ParseMoney(s)
		switch {
		case !ValidCurrency(cur):
			problems = append(problems, cur+": not an ISO 4217 code (three capital letters)")
		case err != nil || m <= 0:
			problems = append(problems, cur+": "+s+" is not a positive decimal of up to 6 places")
		case cur == account && m != MicrosPerUnit:
			problems = append(problems, cur+": the account currency's rate is 1")
		default:
			r.rate[cur] = int64(m)
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, Errorf(EINVALID, "rtb.rates: %s", strings.Join(problems, "; "))
	}
	return r, nil
}

// Has reports whether cur has a rate.
func (r *Rates) Has(cur string) bool { _, ok := r.rate[cur]; return ok }

// ToCurrency converts m micro-units of the account currency into cur,
// rounding down (a bid is never more than the line item's price), and
// reports whether cur has a rate.
func (r *Rates) ToCurrency(m Money, cur string) (Money, bool) {
	rate, ok := r.rate[cur]
	if !ok || m < 0 {
		return 0, false
	}
	return Money(mulDiv(uint64(m), uint64(rate), MicrosPerUnit, false)), true
}

// ToAccount converts m micro-units of cur into the account currency,
// rounding up (a floor is never read as less than it is).
func (r *Rates) ToAccount(m Money, cur string) (Money, bool) {
	rate, ok := r.rate[cur]
	if !ok || m < 0 {
		return 0, false
	}
	return Money(mulDiv(uint64(m), MicrosPerUnit, uint64(rate), true)), true
}

// ValueInAccount converts m micro-units of cur into the account
// currency, rounding down (a bid is never read as worth more than it is),
// and reports whether cur has a rate.
func (r *Rates) ValueInAccount(m Money, cur string) (Money, bool) {
	rate, ok := r.rate[cur]
	if !ok || m < 0 {
		return 0, false
	}
	return Money(mulDiv(uint64(m), MicrosPerUnit, uint64(rate), false)), true
}

// Convert converts m micro-units of from into to, rounding up (for floors).
func (r *Rates) Convert(m Money, from, to string) (Money, bool) {
	rf, ok1 := r.rate[from]
	rt, ok2 := r.rate[to]
	if !ok1 || !ok2 || m < 0 {
		return 0, false
	}
	return Money(mulDiv(uint64(m), uint64(rt), uint64(rf), true)), true
}

// mulDiv is a*b/c in 128 bits, rounded down or up, saturating at the
// largest Money.
func mulDiv(a, b, c uint64, up bool) int64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return 1<<63 - 1
	}
	q, rem := bits.Div64(hi, lo, c)
	if up && rem > 0 {
		q++
	}
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}

// ValidCurrency reports whether c is written as an ISO 4217 code: three
// capital letters.
func ValidCurrency(c string) bool {
	return len(c) == 3 && c[0] >= 'A' && c[0] <= 'Z' && c[1] >= 'A' && c[1] <= 'Z' && c[2] >= 'A' && c[2] <= 'Z'
}
