package openrtb

import (
	"bytes"

	json "github.com/goccy/go-json"

	"tsubame"
)

// Bounds of what one bid request may carry; past them it is refused.
const (
	MaxImps     = 64  // impressions in one request
	MaxIDLength = 128 // bytes of the request's and each impression's id
)

// Decode reads a bid request: JSON as OpenRTB 2.6 describes it, tolerant
// as the specification asks (fields and enum values it does not know are
// ignored) and of the common deviations of exchanges (numbers as strings;
// regs.ext.gdpr, regs.ext.us_privacy, user.ext.consent and
// source.ext.schain, where OpenRTB 2.5 extensions put them; privacy
// signals in any type, read as privacy.go says). It refuses, with an
// EINVALID error, a body that is not one JSON object, a request without an
// id or without an impression, an impression without an id, two
// impressions with one id, more than MaxImps impressions, an id over
// MaxIDLength bytes, and an unreadable floor. The decoder is goccy/go-json,
// chosen by measurement (BenchmarkDecode).
func Decode(body []byte) (*BidRequest, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil, errNotObject
	}
	r := &BidRequest{}
	if err := json.Unmarshal(body, r); err != nil {
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "bid request: not OpenRTB JSON")
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	r.fromExt()
	return r, nil
}

var (
	errNotObject = tsubame.Errorf(tsubame.EINVALID, "bid request: not a JSON object")
	errNoID      = tsubame.Errorf(tsubame.EINVALID, "bid request: no id")
	errNoImp     = tsubame.Errorf(tsubame.EINVALID, "bid request: no imp")
	errTooMany   = tsubame.Errorf(tsubame.EINVALID, "bid request: more impressions than a request may offer")
	errLongID    = tsubame.Errorf(tsubame.EINVALID, "bid request: an id is too long")
	errImpNoID   = tsubame.Errorf(tsubame.EINVALID, "bid request: an imp without an id")
	errImpDup    = tsubame.Errorf(tsubame.EINVALID, "bid request: two imps with one id")
)

func (r *BidRequest) check() error {
	switch {
	case r.ID == "":
		return errNoID
	case len(r.ID) > MaxIDLength:
		return errLongID
	case len(r.Imp) == 0:
		return errNoImp
	case len(r.Imp) > MaxImps:
		return errTooMany
	}
	for i := range r.Imp {
		id := r.Imp[i].ID
		switch {
		case id == "":
			return errImpNoID
		case len(id) > MaxIDLength:
			return errLongID
		}
		for j := range i {
			if r.Imp[j].ID == id {
				return errImpDup
			}
		}
	}
	return nil
}

// fromExt reads the fields OpenRTB 2.5 extensions carried. A privacy
// signal is merged with its 2.6 field, the stricter counting (two that
// differ are unreadable), and an extension that is not an object makes
// every signal it could carry unreadable: it may have said anything.
// Other fields are read where the 2.6 field is absent, and a malformed
// extension is ignored for them: it is the exchange's own, and the request
// stands without it.
func (r *BidRequest) fromExt() {
	if g := r.Regs; g != nil && len(g.Ext) > 0 {
		var ext struct {
			GDPR      Flag     `json:"gdpr"`
			USPrivacy Text     `json:"us_privacy"`
			GPP       Text     `json:"gpp"`
			GPPSID    Sections `json:"gpp_sid"`
		}
		if json.Unmarshal(g.Ext, &ext) != nil {
			ext.GDPR, ext.GPPSID = FlagUnreadable, Sections{Flag: FlagUnreadable}
			ext.USPrivacy, ext.GPP = Text{Unreadable: true}, Text{Unreadable: true}
		}
		g.GDPR = max(g.GDPR, ext.GDPR)
		g.USPrivacy = g.USPrivacy.merge(ext.USPrivacy)
		g.GPP = g.GPP.merge(ext.GPP)
		g.GPPSID = g.GPPSID.merge(ext.GPPSID)
	}
	if u := r.User; u != nil && len(u.Ext) > 0 {
		var ext struct {
			Consent Text `json:"consent"`
		}
		if json.Unmarshal(u.Ext, &ext) != nil {
			ext.Consent = Text{Unreadable: true}
		}
		u.Consent = u.Consent.merge(ext.Consent)
	}
	if s := r.Source; s != nil && len(s.Ext) > 0 && s.SChain == nil {
		var ext struct {
			SChain *SupplyChain `json:"schain"`
		}
		if json.Unmarshal(s.Ext, &ext) == nil {
			s.SChain = ext.SChain
		}
	}
}
