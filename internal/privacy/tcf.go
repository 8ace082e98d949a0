package privacy

import "strings"

// Bit offsets of a TCF v2 TC string's core segment, as the IAB's
// "Consent string and vendor list formats v2" lays it out: Version (6
// bits), Created and LastUpdated (36 each), CmpId and CmpVersion (12
// each), ConsentScreen (6), ConsentLanguage (12), VendorListVersion (12),
// TcfPolicyVersion (6), IsServiceSpecific and UseNonStandardTexts (1
// each), SpecialFeatureOptIns (12), then the fields read here.
const (
	// PurposesConsent, 24 bits, purpose 1 first.
	tcfPurposesAt = 152
	// After PurposesLITransparency (24), PurposeOneTreatment (1) and
	// PublisherCC (12): the vendor consent section's MaxVendorId (16
	// bits), IsRangeEncoding (1), then a BitField of MaxVendorId bits
	// (vendor 1 first) or NumEntries (12) and its entries: IsARange (1),
	// StartOrOnlyVendorId (16), and EndVendorId (16) for a range.
	tcfMaxVendorAt = 213
	tcfRangeAt     = 229
	tcfVendorsAt   = 230
)

// TCFConsent reports whether tc, an IAB TCF v2 TC string, grants consent
// to purpose 1 (storing and reading information on a device) and vendor
// consent to vendor, in its core segment (the part before the first '.').
// A string that is not one (not base64url, another version, cut short, a
// vendor range out of order or past MaxVendorId) grants nothing, and no
// string grants anything to vendor 0. PurposeOneTreatment is not read:
// purpose 1 needs its consent wherever the string was made. It allocates
// nothing: the bits are read from the text.
func TCFConsent(tc string, vendor int) bool {
	if vendor < 1 || vendor > MaxVendorID {
		return false
	}
	core, _, _ := strings.Cut(tc, ".")
	core = strings.TrimRight(core, "=") // base64url has none, but a padded one means the same
	for i := range len(core) {
		if base64URL[core[i]] > 63 {
			return false
		}
	}
	b := bitString(core)
	if b.len() < tcfVendorsAt || b.uint(0, 6) != 2 || b.uint(tcfPurposesAt, 1) != 1 {
		return false
	}
	maxVendor := b.uint(tcfMaxVendorAt, 16)
	if b.uint(tcfRangeAt, 1) == 0 {
		return b.len() >= tcfVendorsAt+maxVendor && vendor <= maxVendor && b.uint(tcfVendorsAt+vendor-1, 1) == 1
	}
	at := tcfVendorsAt + 12
	if b.len() < at {
		return false
	}
	granted := false
	for range b.uint(tcfVendorsAt, 12) {
		if b.len() < at+17 {
			return false
		}
		isRange := b.uint(at, 1) == 1
		start := b.uint(at+1, 16)
		end := start
		at += 17
		if isRange {
			if b.len() < at+16 {
				return false
			}
			end = b.uint(at, 16)
			at += 16
		}
		if start < 1 || end < start || end > maxVendor {
			return false
		}
		granted = granted || start <= vendor && vendor <= end
	}
	return granted
}

// bitString is base64url text read as the bits it encodes, six a
// character, most significant first. Its characters must be valid.
type bitString string

func (b bitString) len() int { return 6 * len(b) }

// uint is the n bits (at most 16) from bit at, which must be within b.
func (b bitString) uint(at, n int) int {
	v := 0
	for i := at; i < at+n; i++ {
		v = v<<1 | int(base64URL[b[i/6]]>>(5-i%6)&1)
	}
	return v
}

// base64URL maps a base64url character to its 6 bits; others to 0xff.
var base64URL = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range len(alphabet) {
		t[alphabet[i]] = byte(i)
	}
	return t
}()
