package privacy_test

import (
	"strings"
	"testing"

	"tsubame/internal/privacy"
	"tsubame/internal/privacy/privacytest"
)

// Published TC strings (made with the IAB's encoder, decoded by other
// libraries' tests), each with what its core segment says.
const (
	// Purposes 1, 3, 4, 7; vendors 2, 37 and 61 as ranges (MaxVendorId
	// 61); publisher restrictions after them.
	publishedRanges = "COvzTO5OvzTO5BRAAAENAPCoALIAADgAAAAAAewAwABAAlAB6ABBFADBQAQA9hAAAcAA"
	// No purpose; vendors 2, 6, 8, ... 720 as a bitfield.
	publishedNoPurpose = "COvzTO5OvzTO5BZAFMENAPCgAAAAAAAAAAwIFoEUQQgAIQwgIwQABAEAAAAOIAACAIAAAAQAIAgEAACEAAAAAgAQBAAAAAAAGBAAgAAAAAAAFAAECAAAgAAQARAEQAAAAAJAAIAAgAAAYQEAAAQmAgBC3ZAYzUwLQIoghAAQhhARggACAIAAAAcQAAEAQAAAAgAQBAIAAEIAAAABAAgCAAAAAAAMCABAAAAAAAAKAAIEAABAAAgAiAIgAAAAASAAQABAAAAwgIAAAhMBACFuyAxmpgAA"
	// TCF 2.2: purpose 1; vendor 1 as a bitfield (MaxVendorId 1); the
	// disclosed and allowed vendors segments after the core.
	publishedBitfield = "COvzTO5OvzTO5B7ABCENAPEYAIAAAIAAAIqIAAoAAoAA.QAAo.IAAo"
	// Purposes 1, 3, 6, 7, 8, 10; vendors 12, 23, 163, 707 as ranges;
	// three more segments.
	publishedSegments = "COvzTO5OvzTO5B7ABCENAPCYAKdAADkAAIqIFhwBAAGAAXAFGAsMAhYAgAMAAegBYAEKAAA.IFoEUQQgAIQwgIwQABAEAAAAOIAACAIAAAAQAIAgEAACEAAAAAgAQBAAAAAAAGBAAgAAAAAAAFAAECAAAgAAQARAEQAAAAAJAAIAAgAAAYQEAAAQmAgBC3ZAYzUw.QE5QAwCvgHyATkA"
)

// Where GDPR applies, a TC string keeps the visitor only if it grants
// purpose 1 and consent to our vendor id, in either vendor encoding; a
// malformed string, another version, or no vendor id grants nothing.
func TestTCFConsent(t *testing.T) {
	const us = 755
	granted := privacytest.Consent{Purposes: []int{1, 2, 3}, Vendors: []int{10, us, 900}}
	grantedRanges := granted
	grantedRanges.Ranges = true
	noPurpose := granted
	noPurpose.Purposes = []int{2, 3, 4}
	noVendor := privacytest.Consent{Purposes: []int{1}, Vendors: []int{10, us - 1, us + 1, 900}}
	noVendorRanges := noVendor
	noVendorRanges.Ranges = true
	beforeMax := privacytest.Consent{Purposes: []int{1}, Vendors: []int{10}, MaxVendor: 80}
	run := privacytest.Consent{Purposes: []int{1}, Vendors: []int{700, 701, 702, 750, 751, 752, 753, 754, 755, 756}, Ranges: true}
	v1 := granted
	v1.Version = 1
	cut := granted.String()
	cut = cut[:len(cut)-20]

	for _, tc := range []struct {
		name   string
		tc     string
		vendor int
		want   bool
	}{
		{"granted, bitfield", granted.String(), us, true},
		{"granted, ranges", grantedRanges.String(), us, true},
		{"granted within a range", run.String(), us, true},
		{"granted, another vendor", granted.String(), 900, true},
		{"purpose 1 missing", noPurpose.String(), us, false},
		{"vendor missing, bitfield", noVendor.String(), us, false},
		{"vendor missing, ranges", noVendorRanges.String(), us, false},
		{"vendor past MaxVendorId", beforeMax.String(), us, false},
		{"no vendor id", granted.String(), 0, false},
		{"vendor id out of range", granted.String(), privacy.MaxVendorID + 1, false},
		{"version 1", v1.String(), us, false},
		{"cut short", cut, us, false},
		{"padded", granted.String() + "==", us, true},
		{"another segment after", granted.String() + ".IAAo", us, true},
		{"standard base64", strings.ReplaceAll(granted.String(), "A", "+"), us, false},
		{"a space", " " + granted.String(), us, false},
		{"empty", "", us, false},
		{"garbage", "garbage", us, false},
		{"a dot", ".", us, false},

		{"published ranges: vendor 37", publishedRanges, 37, true},
		{"published ranges: vendor 2", publishedRanges, 2, true},
		{"published ranges: vendor 38", publishedRanges, 38, false},
		{"published ranges: vendor 62", publishedRanges, 62, false},
		{"published, no purpose: vendor 2", publishedNoPurpose, 2, false},
		{"published bitfield: vendor 1", publishedBitfield, 1, true},
		{"published bitfield: vendor 2", publishedBitfield, 2, false},
		{"published segments: vendor 707", publishedSegments, 707, true},
		{"published segments: vendor 163", publishedSegments, 163, true},
		{"published segments: vendor 164", publishedSegments, 164, false},
	} {
		if got := privacy.TCFConsent(tc.tc, tc.vendor); got != tc.want {
			t.Errorf("%s: TCFConsent(%q, %d) = %v, want %v", tc.name, tc.tc, tc.vendor, got, tc.want)
		}
	}
}

// A range whose end is before its start, or past MaxVendorId, or a range
// list cut short makes the whole string unreadable: nothing granted.
func TestTCFConsentMalformedRanges(t *testing.T) {
	good := privacytest.Consent{Purposes: []int{1}, Vendors: []int{5, 6, 7}, Ranges: true}.String()
	if !privacy.TCFConsent(good, 6) {
		t.Fatalf("the well-formed string grants nothing")
	}
	// The entry is one range 5-7 at bits 242-274: IsARange, start, end.
	for name, edit := range map[string]func(b []bool){
		"end before start": func(b []bool) { setBits(b, 259, 16, 4) },
		"end past max":     func(b []bool) { setBits(b, 259, 16, 8) },
		"start 0":          func(b []bool) { setBits(b, 243, 16, 0) },
		"more entries":     func(b []bool) { setBits(b, 230, 12, 4000) },
	} {
		b := bitsOf(good)
		edit(b)
		if s := stringOf(b); privacy.TCFConsent(s, 6) {
			t.Errorf("%s: %q grants vendor 6", name, s)
		}
	}
}

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func bitsOf(s string) []bool {
	var b []bool
	for i := range len(s) {
		v := strings.IndexByte(alphabet, s[i])
		for j := 5; j >= 0; j-- {
			b = append(b, v>>j&1 == 1)
		}
	}
	return b
}

func setBits(b []bool, at, n, v int) {
	for i := range n {
		b[at+i] = v>>(n-1-i)&1 == 1
	}
}

func stringOf(b []bool) string {
	var out []byte
	for i := 0; i < len(b); i += 6 {
		v := 0
		for j := i; j < i+6; j++ {
			v <<= 1
			if j < len(b) && b[j] {
				v |= 1
			}
		}
		out = append(out, alphabet[v])
	}
	return string(out)
}

func TestTCFConsentAllocatesNothing(t *testing.T) {
	s := privacytest.Consent{Purposes: []int{1}, Vendors: []int{3, 755, 756, 900}, Ranges: true}.String()
	if n := testing.AllocsPerRun(100, func() { _ = privacy.TCFConsent(s, 755) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
