// Package privacytest makes IAB TCF v2 TC strings for tests: the core
// segment of a consent a test describes, encoded as a CMP would.
package privacytest

import "slices"

// Consent is what a TC string's core segment says, of what privacy reads.
type Consent struct {
	// Version is the string's version; 0 is 2.
	Version int
	// Purposes are the purposes consented to (1 is storing and reading
	// on a device).
	Purposes []int
	// Vendors are the vendor ids consented to.
	Vendors []int
	// MaxVendor is MaxVendorId; 0 takes the greatest of Vendors.
	MaxVendor int
	// Ranges encodes the vendors as ranges (runs of consecutive ids as
	// one entry), not as a bitfield.
	Ranges bool
}

// String is c's core segment, base64url without padding.
func (c Consent) String() string {
	var w writer
	version := c.Version
	if version == 0 {
		version = 2
	}
	w.put(6, version)
	w.put(36, 17_000_000_000)  // Created, deciseconds: late 2023
	w.put(36, 17_000_000_000)  // LastUpdated
	w.put(12, 300)             // CmpId
	w.put(12, 2)               // CmpVersion
	w.put(6, 1)                // ConsentScreen
	w.put(12, 4<<6|13)         // ConsentLanguage "EN"
	w.put(12, 200)             // VendorListVersion
	w.put(6, 4)                // TcfPolicyVersion (TCF 2.2)
	w.put(2, 0)                // IsServiceSpecific, UseNonStandardTexts
	w.put(12, 0)               // SpecialFeatureOptIns
	for p := 1; p <= 24; p++ { // PurposesConsent
		w.flag(slices.Contains(c.Purposes, p))
	}
	w.put(24, 0)       // PurposesLITransparency
	w.put(1, 0)        // PurposeOneTreatment
	w.put(12, 5<<6|17) // PublisherCC "FR"
	maxVendor := c.MaxVendor
	if maxVendor == 0 && len(c.Vendors) > 0 {
		maxVendor = slices.Max(c.Vendors)
	}
	w.put(16, maxVendor)
	w.flag(c.Ranges)
	if !c.Ranges {
		for v := 1; v <= maxVendor; v++ {
			w.flag(slices.Contains(c.Vendors, v))
		}
	} else {
		vs := slices.Sorted(slices.Values(c.Vendors))
		vs = slices.Compact(vs)
		var runs [][2]int
		for _, v := range vs {
			if n := len(runs); n > 0 && runs[n-1][1] == v-1 {
				runs[n-1][1] = v
			} else {
				runs = append(runs, [2]int{v, v})
			}
		}
		w.put(12, len(runs))
		for _, r := range runs {
			w.flag(r[0] != r[1])
			w.put(16, r[0])
			if r[0] != r[1] {
				w.put(16, r[1])
			}
		}
	}
	// The legitimate interest section: none, as a bitfield.
	w.put(16, 0)
	w.put(1, 0)
	w.put(12, 0) // NumPubRestrictions
	return w.String()
}

type writer struct{ bits []bool }

func (w *writer) put(n, v int) {
	for i := n - 1; i >= 0; i-- {
		w.bits = append(w.bits, v>>i&1 == 1)
	}
}

func (w *writer) flag(b bool) { w.bits = append(w.bits, b) }

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func (w *writer) String() string {
	out := make([]byte, 0, (len(w.bits)+5)/6)
	for i := 0; i < len(w.bits); i += 6 {
		c := 0
		for j := i; j < i+6; j++ {
			c <<= 1
			if j < len(w.bits) && w.bits[j] {
				c |= 1
			}
		}
		out = append(out, alphabet[c])
	}
	return string(out)
}
