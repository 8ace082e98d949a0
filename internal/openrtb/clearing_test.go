package openrtb_test

import (
	"testing"

	"tsubame"
	"tsubame/internal/openrtb"
)

// A clearing price is read as exchanges write it, rounded down to the
// micro-unit: never counted above what the exchange wrote.
func TestClearingPrice(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want tsubame.Money
		ok   bool
	}{
		{"1.59", 1_590_000, true},
		{"1.590000000001", 1_590_000, true},
		{"1.5899999999", 1_589_999, true},
		{"1.5900", 1_590_000, true},
		{"159e-2", 1_590_000, true},
		{"1.59E+00", 1_590_000, true},
		{"1.0E-4", 100, true},
		{".5", 500_000, true},
		{"+2", 2_000_000, true},
		{"0", 0, true},
		{"-0", 0, true},
		{`"1.25"`, 1_250_000, true},
		{" 1.25 ", 1_250_000, true},
		{"0.0000009", 0, true},
		{"", 0, false},
		{`""`, 0, false},
		{"null", 0, false},
		{"${AUCTION_PRICE}", 0, false},
		{"AUDIT", 0, false},
		{"-1.5", 0, false},
		{"-0.0000001", 0, false},
		{"1,59", 0, false},
		{"1.", 0, false},
		{"cheap", 0, false},
		{"1e400", 0, false},
		{"99999999999999999999", 0, false},
	} {
		got, ok := openrtb.ClearingPrice([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
