package bidder

import (
	"strings"

	"tsubame"
	"tsubame/internal/ads"
	"tsubame/internal/openrtb"
)

// visitor is the id frequency caps count: the buyer's id the exchange
// mapped (ours), else the device's advertising id; none when a privacy
// signal rules it out (private). Without one the request is bid on
// contextually: no cap can count it, so capped line items pass it over,
// and nothing it leaves (its event line, its notice and click tokens)
// names a visitor.
func visitor(req *openrtb.BidRequest) string {
	if private(req) {
		return ""
	}
	if u := req.User; u != nil && validVisitor(u.BuyerUID) {
		return u.BuyerUID
	}
	if d := req.Device; d != nil && validVisitor(d.IFA) && strings.Trim(d.IFA, "0-") != "" {
		return d.IFA
	}
	return ""
}

// private reports whether a privacy signal of req rules its visitor out,
// as for /api/decide and stricter where a bid request says more: COPPA,
// GDPR in force without consent to store and read on the device, a US
// opt-out of sale, any GPP string or section in force, DNT, and limited ad
// tracking (lmt: the device's id and the buyer's id made from it alike). A
// signal that cannot be read (of a type or value no exchange means as
// "none"; openrtb keeps it as unreadable) is read as the strictest it
// could be: it rules the visitor out. Decode has merged each signal's 2.5
// extension into its 2.6 field, the stricter counting.
func private(req *openrtb.BidRequest) bool {
	if d := req.Device; d != nil && (d.DNT.Raised() || d.LMT.Raised()) {
		return true
	}
	g := req.Regs
	if g == nil {
		return false
	}
	if g.COPPA.Raised() || g.GPP.Unreadable || g.GPP.Value != "" || g.GPPSID.Raised() || usOptOut(g.USPrivacy) {
		return true
	}
	switch g.GDPR {
	case openrtb.FlagUnreadable:
		return true
	case openrtb.FlagOn:
		var consent openrtb.Text
		if req.User != nil {
			consent = req.User.Consent
		}
		return consent.Unreadable || !ads.StorageConsent([]byte(consent.Value))
	}
	return false
}

// usOptOut reports whether a us_privacy string (the IAB's CCPA string,
// version 1: the version, then Y, N or - for notice given, opted out of
// sale, and LSPA covered) opts out of sale or is not such a string.
func usOptOut(t openrtb.Text) bool {
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

func validVisitor(s string) bool {
	if s == "" || len(s) > tsubame.MaxObjectIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tsubame.IDChar(s[i]) {
			return false
		}
	}
	return true
}
