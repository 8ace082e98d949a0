package openrtb

import "tsubame"

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
// MaxIDLength bytes, and an unreadable floor. It is a Decoder's Decode
// into memory of the request's own; a server decoding many reuses a
// Decoder instead.
func Decode(body []byte) (*BidRequest, error) {
	return new(Decoder).Decode(body)
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
