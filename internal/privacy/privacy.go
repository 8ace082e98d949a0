// Package privacy decides whether a request's privacy signals let a
// visitor id be used: one rule for /api/decide (query parameters and
// headers) and the OpenRTB bidder (a bid request's fields). Each reads its
// transport's forms into Signals; Signals.Private says whether they rule
// the visitor out.
//
// A signal that cannot be read (a flag of "yes", two different strings
// for one signal, a consent string that does not decode) is read as the
// strictest it could be: it rules the visitor out. Where GDPR applies, the
// visitor is kept only with an IAB TCF v2 consent string that grants
// purpose 1 (storing and reading on a device) and consent to the
// operator's vendor id (tcf.go); with no vendor id, never.
//
// It imports nothing of ours, so that the wire packages (openrtb) and the
// services (ads, bidder) can all reach it (arch_test.go).
package privacy

import "bytes"

// Flag is a privacy flag's reading: COPPA, GDPR, Do Not Track, Global
// Privacy Control, Limit Ad Tracking, GPP sections. Readings are ordered,
// the stricter the greater: where a signal is sent twice, max of the two
// counts.
type Flag uint8

// Readings of a Flag.
const (
	// Absent: not sent (for GDPR: unknown, and no consent is asked).
	Absent Flag = iota
	// Off: sent, and not in force.
	Off
	// On: in force.
	On
	// Unreadable: sent in a form that says neither, such as "yes", "" or
	// 2: it may be in force.
	Unreadable
)

// Raised reports whether f is On or Unreadable: the signal is in force,
// or may be.
func (f Flag) Raised() bool { return f >= On }

// ParseFlag reads a flag sent as text (a query parameter, a header): "1"
// and "true" are On, "0" and "false" Off, anything else (an empty value
// too) Unreadable. A flag not sent at all is Absent: the caller knows.
func ParseFlag(b []byte) Flag {
	switch string(b) {
	case "1", "true":
		return On
	case "0", "false":
		return Off
	}
	return Unreadable
}

// ParseDNT reads a DNT header (W3C Tracking Preference Expression:
// "1" or "0", then optional extension characters): empty is Absent, a
// value that is not of that grammar Unreadable.
func ParseDNT(b []byte) Flag {
	if len(b) == 0 {
		return Absent
	}
	for _, c := range b[1:] {
		// DNT-extension: %x21 / %x23-2B / %x2D-5B / %x5D-7E
		if c < 0x21 || c > 0x7e || c == '"' || c == ',' || c == '\\' {
			return Unreadable
		}
	}
	switch b[0] {
	case '1':
		return On
	case '0':
		return Off
	}
	return Unreadable
}

// ParseSections reads GPP section ids sent as text ("2,6"; a query
// parameter gpp_sid): empty is Absent, -1 alone (GPP's "none applies")
// Off, a list naming a section On, anything else Unreadable.
func ParseSections(b []byte) Flag {
	if len(b) == 0 {
		return Absent
	}
	f := Off
	for len(b) > 0 {
		item := b
		if i := bytes.IndexByte(b, ','); i >= 0 {
			item, b = b[:i], b[i+1:]
			if len(b) == 0 {
				return Unreadable // a trailing comma
			}
		} else {
			b = nil
		}
		switch {
		case string(item) == "-1":
		case len(item) == 0 || len(item) > 5:
			return Unreadable
		default:
			for _, c := range item {
				if c < '0' || c > '9' {
					return Unreadable
				}
			}
			f = On
		}
	}
	return f
}

// Text is a privacy string: us_privacy, gpp, a TCF consent string.
type Text struct {
	// Value is the string sent; "" when not sent, empty or Unreadable.
	Value string
	// Unreadable says a value was sent that is not one string (a number
	// where a string belongs, two different strings).
	Unreadable bool
}

// Merge is what t and u, one signal sent twice, say together: the one
// that was sent, or Unreadable when they differ.
func (t Text) Merge(u Text) Text {
	switch {
	case t.Unreadable || u.Unreadable:
		return Text{Unreadable: true}
	case u.Value == "" || u.Value == t.Value:
		return t
	case t.Value == "":
		return u
	}
	return Text{Unreadable: true}
}

// Signals are a request's privacy signals, each as its transport sent it
// (the stricter of two places or repeats).
type Signals struct {
	COPPA Flag
	// GDPR is whether the GDPR applies; Consent the TCF v2 consent
	// string, read only where it does.
	GDPR    Flag
	Consent Text
	// USPrivacy is the IAB's CCPA string.
	USPrivacy Text
	// GPP is a Global Privacy Platform string; GPPSections the sections
	// in force.
	GPP         Text
	GPPSections Flag
	// DNT is Do Not Track, GPC Global Privacy Control (Sec-GPC), LMT a
	// device's Limit Ad Tracking.
	DNT, GPC, LMT Flag
}

// MaxVendorID is the greatest IAB TCF vendor id (16 bits).
const MaxVendorID = 1<<16 - 1

// Private reports whether s rules the visitor out for the operator whose
// IAB TCF vendor id is vendor (0: none): COPPA, Do Not Track, Global
// Privacy Control or Limit Ad Tracking raised; GDPR applying without a TCF
// v2 consent string that grants purpose 1 and consent to vendor; a US
// opt-out of sale; any GPP string or section in force; or any of them
// unreadable.
func (s *Signals) Private(vendor int) bool {
	if s.COPPA.Raised() || s.DNT.Raised() || s.GPC.Raised() || s.LMT.Raised() || s.GPPSections.Raised() {
		return true
	}
	if s.GPP.Unreadable || s.GPP.Value != "" || USOptOut(s.USPrivacy) {
		return true
	}
	switch s.GDPR {
	case Unreadable:
		return true
	case On:
		return s.Consent.Unreadable || !TCFConsent(s.Consent.Value, vendor)
	}
	return false
}

// USOptOut reports whether a us_privacy string (the IAB's CCPA string,
// version 1: the version, then Y, N or - for notice given, opted out of
// sale, and LSPA covered) opts out of sale or is not such a string. One
// not sent says nothing.
func USOptOut(t Text) bool {
	s := t.Value
	switch {
	case t.Unreadable:
		return true
	case s == "":
		return false
	case len(s) != 4 || s[0] != '1':
		return true
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; c != 'Y' && c != 'N' && c != '-' {
			return true
		}
	}
	return s[2] == 'Y'
}
