package ads

import (
	"time"
	"unsafe"

	"tsubame"
	"tsubame/internal/privacy"
	"tsubame/internal/server"
	"tsubame/internal/track"
)

// Privacy is how a site meets its visitors' privacy signals.
type Privacy uint8

const (
	// PrivacySignals sets and reads the visitor cookie, and takes a uid,
	// unless the request carries a privacy signal.
	PrivacySignals Privacy = iota
	// PrivacyNoCookies never sets or reads the cookie; a uid is still
	// taken unless the request carries a privacy signal.
	PrivacyNoCookies
)

// ParsePrivacy maps a configured mode ("signals", "no_cookies").
func ParsePrivacy(s string) (Privacy, bool) {
	switch s {
	case "signals":
		return PrivacySignals, true
	case "no_cookies":
		return PrivacyNoCookies, true
	}
	return 0, false
}

// visitor is who a request is for.
type visitor struct {
	uid string // "" when unknown or ruled out
	// private: a privacy signal rules per-visitor caps and targeting out.
	private bool
	// newCookie: uid was made for this request and is set as the cookie.
	newCookie bool
}

var errBadUID = tsubame.Errorf(tsubame.EINVALID, "uid must be 1 to 64 characters of letters, digits and -_.:@")

// identify picks the visitor of r: none when a privacy signal rules it out;
// else the uid parameter, else (unless the site takes no cookies) the
// cookie, made anew when missing or not one of ours. The uid is kept in a
// (answer.keep): valid until a is released.
func (s *Service) identify(r server.Request, mode Privacy, a *answer) (visitor, error) {
	if private(r, s.opt.TCFVendorID) {
		return visitor{private: true}, nil
	}
	if uid := r.Query("uid"); uid != nil {
		if !validUID(uid) {
			return visitor{}, errBadUID
		}
		return visitor{uid: a.keep(uid)}, nil
	}
	if mode == PrivacyNoCookies {
		return visitor{}, nil
	}
	// Only an id this server makes: a cookie someone else set on the
	// domain cannot put anything in the log.
	if c := r.Cookie(s.opt.CookieName); track.ValidID(c) {
		return visitor{uid: a.keep(c)}, nil
	}
	return visitor{uid: a.newID(time.Now()), newCookie: true}, nil
}

// setCookie sets the visitor cookie made for v: HttpOnly (no script of
// the page reads it), and over TLS Secure with SameSite=None, which an ad
// server on its own domain needs for the browser to send it back from the
// publisher's page.
func (s *Service) setCookie(w server.Response, r server.Request, v visitor) {
	if !v.newCookie {
		return
	}
	tls := r.TLS()
	w.Cookie(server.Cookie{Name: s.opt.CookieName, Value: v.uid, MaxAge: s.opt.CookieMaxAge,
		HTTPOnly: true, Secure: tls, SameSiteNone: tls})
}

// private reports whether r's privacy signals rule its visitor out, by
// the rule the bidder applies too (internal/privacy): query parameters
// coppa, gdpr (with gdpr_consent, a TCF v2 string that must grant purpose
// 1 and consent to vendor), us_privacy, gpp and gpp_sid, and the headers
// DNT and Sec-GPC. Every occurrence of a parameter is read, the stricter
// counting, and a value that cannot be read (coppa=yes, gdpr=, two
// different consent strings, a malformed us_privacy) is read as the
// strictest it could be.
func private(r server.Request, vendor int) bool {
	sg := signals(r)
	return sg.Private(vendor)
}

// signals reads r's privacy signals as private does.
func signals(r server.Request) privacy.Signals {
	var sg privacy.Signals
	r.QueryEach(func(k, v []byte) {
		switch string(k) {
		case "coppa":
			sg.COPPA = max(sg.COPPA, privacy.ParseFlag(v))
		case "gdpr":
			sg.GDPR = max(sg.GDPR, privacy.ParseFlag(v))
		case "gdpr_consent":
			sg.Consent = sg.Consent.Merge(privacy.Text{Value: view(v)})
		case "us_privacy":
			sg.USPrivacy = sg.USPrivacy.Merge(privacy.Text{Value: view(v)})
		case "gpp":
			sg.GPP = sg.GPP.Merge(privacy.Text{Value: view(v)})
		case "gpp_sid":
			sg.GPPSections = max(sg.GPPSections, privacy.ParseSections(v))
		}
	})
	sg.DNT = privacy.ParseDNT(r.Header("DNT"))
	if gpc := r.Header("Sec-GPC"); len(gpc) > 0 {
		sg.GPC = privacy.ParseFlag(gpc)
	}
	return sg
}

// view is b as a string for a call that only reads it, while the request
// lasts: the signals' strings are read and dropped within private.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func validUID(b []byte) bool {
	if len(b) == 0 || len(b) > track.MaxIDLen {
		return false
	}
	for _, c := range b {
		if !tsubame.IDChar(c) {
			return false
		}
	}
	return true
}
