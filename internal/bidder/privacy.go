package bidder

import (
	"strings"

	"tsubame"
	"tsubame/internal/openrtb"
	"tsubame/internal/privacy"
)

// visitor is the id frequency caps count: the buyer's id the exchange
// mapped (ours), else the device's advertising id; none when a privacy
// signal rules it out (private). Without one the request is bid on
// contextually: no cap can count it, so capped line items pass it over,
// and nothing it leaves (its event line, its notice and click tokens)
// names a visitor.
func visitor(req *openrtb.BidRequest, vendor int) string {
	if private(req, vendor) {
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
// by the rule /api/decide applies too (internal/privacy), for the
// operator whose TCF vendor id is vendor: COPPA, GDPR in force without a
// consent granting purpose 1 and vendor consent to vendor, a US opt-out
// of sale, any GPP string or section in force, DNT, and limited ad
// tracking (lmt: the device's id and the buyer's id made from it alike),
// or any of them unreadable (openrtb keeps a signal of a type or value no
// exchange means as "none" as unreadable). Decode has merged each
// signal's 2.5 extension into its 2.6 field, the stricter counting.
func private(req *openrtb.BidRequest, vendor int) bool {
	var sg privacy.Signals
	if d := req.Device; d != nil {
		sg.DNT, sg.LMT = flag(d.DNT), flag(d.LMT)
	}
	if g := req.Regs; g != nil {
		sg.COPPA, sg.GDPR, sg.GPPSections = flag(g.COPPA), flag(g.GDPR), flag(g.GPPSID.Flag)
		sg.USPrivacy, sg.GPP = text(g.USPrivacy), text(g.GPP)
	}
	if u := req.User; u != nil {
		sg.Consent = text(u.Consent)
	}
	return sg.Private(vendor)
}

// flag is an OpenRTB flag's reading as privacy reads it.
func flag(f openrtb.Flag) privacy.Flag {
	switch f {
	case openrtb.FlagAbsent:
		return privacy.Absent
	case openrtb.FlagOff:
		return privacy.Off
	case openrtb.FlagOn:
		return privacy.On
	}
	return privacy.Unreadable
}

func text(t openrtb.Text) privacy.Text {
	return privacy.Text{Value: t.Value, Unreadable: t.Unreadable}
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
