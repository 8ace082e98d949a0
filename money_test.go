package tsubame_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"tsubame"
)

func TestParseMoney(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want tsubame.Money
		out  string // String() of the result
	}{
		{"0", 0, "0"},
		{"-0", 0, "0"},
		{"1.25", 1_250_000, "1.25"},
		{"0.000001", 1, "0.000001"},
		{"40", 40_000_000, "40"},
		{"007.10", 7_100_000, "7.1"},
		{"-0.5", -500_000, "-0.5"},
		{"1.000000", 1_000_000, "1"},
		{"9007199254.740993", 9_007_199_254_740_993, "9007199254.740993"}, // beyond a float64's exact integers
		{"9223372036854.775807", math.MaxInt64, "9223372036854.775807"},
		{"-9223372036854.775808", math.MinInt64, "-9223372036854.775808"},
	} {
		got, err := tsubame.ParseMoney(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseMoney(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			continue
		}
		if s := got.String(); s != tc.out {
			t.Errorf("Money(%d).String() = %q, want %q", got, s, tc.out)
		}
	}
	for _, in := range []string{"", "-", ".5", "1.", "1.0000001", "0.0000000", "1e3", "1E-2", "1.5e2", " 1", "1 ", "+1",
		"1,5", "1..2", "--1", "0x10", "NaN", "Inf", "１", "9223372036854.775808", "-9223372036854.775809",
		"99999999999999999999", "18446744073709551616"} {
		if got, err := tsubame.ParseMoney(in); err == nil || tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("ParseMoney(%q) = %d, %v; want an EINVALID error", in, got, err)
		}
	}
	if _, err := tsubame.ParseMoney("2.5e3"); err == nil || !strings.Contains(err.Error(), "exponent") {
		t.Errorf("an exponent is refused saying so: %v", err)
	}
	if _, err := tsubame.ParseMoney("0.1234567"); err == nil || !strings.Contains(err.Error(), "more than 6 decimals") {
		t.Errorf("seven decimals are refused saying so: %v", err)
	}
}

func FuzzMoneyRoundTrip(f *testing.F) {
	for _, s := range []string{"0", "1.25", "-0.000001", "9223372036854.775807", "-9223372036854.775808", "12.5e1", "1.0000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := tsubame.ParseMoney(s)
		if err != nil {
			return
		}
		back, err := tsubame.ParseMoney(m.String())
		if err != nil || back != m {
			t.Fatalf("%q parsed as %d, printed as %q, read back as %d (%v)", s, m, m.String(), back, err)
		}
		var j tsubame.Money
		if err := json.Unmarshal([]byte(s), &j); err == nil && j != m {
			t.Fatalf("%q as a JSON number read as %d, as a string %d", s, j, m)
		}
	})
}

func TestMoneyJSON(t *testing.T) {
	type doc struct {
		CPM tsubame.Money `json:"cpm"`
	}
	b, err := json.Marshal(doc{CPM: 1_250_000})
	if err != nil || string(b) != `{"cpm":"1.25"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	for in, want := range map[string]tsubame.Money{
		`{"cpm":"1.25"}`:              1_250_000,
		`{"cpm":1.25}`:                1_250_000,
		`{"cpm":0.1}`:                 100_000,
		`{"cpm":9007199254.740993}`:   9_007_199_254_740_993, // a float64 would round this
		`{"cpm":"9007199254.740993"}`: 9_007_199_254_740_993,
		`{"cpm":-3}`:                  -3_000_000,
		`{"cpm":null}`:                7, // null leaves the value
	} {
		d := doc{CPM: 7}
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.CPM != want {
			t.Errorf("Unmarshal(%s) = %d, %v; want %d", in, d.CPM, err, want)
		}
	}
	for _, in := range []string{`{"cpm":1e2}`, `{"cpm":"1e2"}`, `{"cpm":1.0000001}`, `{"cpm":"1.2.3"}`, `{"cpm":true}`, `{"cpm":"１"}`, `{"cpm":99999999999999999999}`} {
		var d doc
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("Unmarshal(%s) = %d, want an error", in, d.CPM)
		}
	}
}

func TestDurationText(t *testing.T) {
	for in, want := range map[string]string{"24h": "24h", "1h30m": "1h30m", "90s": "1m30s", "30m": "30m", "1h0m5s": "1h5s"} {
		var d tsubame.Duration
		if err := d.UnmarshalText([]byte(in)); err != nil || d.String() != want {
			t.Errorf("%q read as %v (%v), want %q", in, d, err, want)
		}
	}
	var d tsubame.Duration
	if err := json.Unmarshal([]byte(`"24h"`), &d); err != nil || time.Duration(d) != 24*time.Hour {
		t.Fatalf("JSON \"24h\" = %v, %v", d, err)
	}
	for _, in := range []string{`3600`, `"1d"`, `"soon"`} {
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("JSON %s read as %v, want an error", in, d)
		}
	}
	if b, _ := json.Marshal(tsubame.Duration(time.Hour)); string(b) != `"1h"` {
		t.Fatalf("Marshal(1h) = %s", b)
	}
}
