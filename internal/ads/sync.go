package ads

import (
	"encoding/base64"
	"sort"
	"strings"

	json "github.com/goccy/go-json"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/render"
	"tsubame/internal/server"
)

// The sell side's public routes: the seller's sellers.json, and the user
// syncs that let demand partners know the visitor (their ids for it are
// kept in a cookie of the visitor's, consent permitting).
const (
	RouteSellers    = "sellers_json"
	RouteCookieSync = "cookie_sync"
	RouteSetUID     = "setuid"

	PathSellers    = "/sellers.json"
	PathCookieSync = "/cookie_sync"
	PathSetUID     = "/setuid"
)

// Bounds of the partners' ids a visitor's uids cookie keeps.
const (
	maxUIDs   = 32  // partners
	maxUIDLen = 128 // bytes of one id
)

var (
	errUnknownPartner = tsubame.Errorf(tsubame.EINVALID, "partner must name a demand partner with a user sync")
	errBadPartnerUID  = tsubame.Errorf(tsubame.EINVALID, "uid must be 1 to 128 printable characters without spaces, ';', ',' or quotes")
	errNoSellers      = tsubame.Errorf(tsubame.ENOTFOUND, "this server lists no sellers (ssp.publishers)")
)

// uidsCookie names the cookie of the partners' ids: the visitor cookie's
// name and "_uids".
func (s *Service) uidsCookie() string { return s.opt.CookieName + "_uids" }

// sellRoutes are the sell side's routes, when the service sells.
func (s *Service) sellRoutes(log *accesslog.Logger) []server.Route {
	if s.opt.Auction == nil {
		return nil
	}
	get := []string{"GET"}
	return []server.Route{
		{Name: RouteSellers, Path: PathSellers, Methods: get, Handler: server.HandlerFunc(s.serveSellers), Log: log, Limit: server.LimitTracking},
		{Name: RouteCookieSync, Path: PathCookieSync, Methods: get, Handler: server.HandlerFunc(s.serveCookieSync), Log: log, Limit: server.LimitTracking,
			CORS: s.cors},
		{Name: RouteSetUID, Path: PathSetUID, Methods: get, Handler: server.HandlerFunc(s.serveSetUID), Log: log, Limit: server.LimitTracking},
	}
}

// serveSellers answers /sellers.json: the seller's publishers (a 404
// without any).
func (s *Service) serveSellers(w server.Response, _ server.Request) error {
	b := s.opt.Auction.SellersJSON()
	if b == nil {
		return errNoSellers
	}
	w.Header("Cache-Control", "public, max-age=3600")
	w.Header("Access-Control-Allow-Origin", "*") // a public file crawlers and tools read from anywhere
	w.Body(render.ContentTypeJSON, b)
	return nil
}

// serveCookieSync answers /cookie_sync with the user syncs a page should
// fire: {"status":"ok","syncs":[{"partner":..,"url":..,"type":"redirect"}]},
// the partners whose id for the visitor this server does not hold yet.
// Where the visitor's privacy signals rule it out, none:
// {"status":"no_consent","syncs":[]}.
func (s *Service) serveCookieSync(w server.Response, r server.Request) error {
	w.Header("Cache-Control", "no-store")
	if private(r, s.opt.TCFVendorID) {
		w.Body(render.ContentTypeJSON, []byte(`{"status":"no_consent","syncs":[]}`))
		return nil
	}
	have := s.partnerUIDs(r)
	base := string(s.trackingBase(r, nil))
	out := []byte(`{"status":"ok","syncs":[`)
	n := 0
	sg := signals(r)
	for _, sy := range s.opt.Auction.Syncs(&sg, func(p string) string { return base + PathSetUID + "?partner=" + p + "&uid=" }) {
		if have[sy.Partner] != "" {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, `{"partner":`...)
		out = render.AppendJSONString(out, sy.Partner)
		out = append(out, `,"url":`...)
		out = render.AppendJSONString(out, sy.URL)
		out = append(out, `,"type":"redirect"}`...)
	}
	w.Body(render.ContentTypeJSON, append(out, "]}"...))
	return nil
}

// serveSetUID answers /setuid?partner=P&uid=U (a partner's sync redirect)
// with a 1×1 GIF, keeping U as the visitor's id for P in the uids cookie,
// unless the visitor's privacy signals rule that out (then nothing is
// kept, and an id kept before is forgotten) or the site takes no cookies.
func (s *Service) serveSetUID(w server.Response, r server.Request) error {
	partner := string(r.Query("partner"))
	if !s.opt.Auction.HasSync(partner) {
		return errUnknownPartner
	}
	uid := r.Query("uid")
	if !validPartnerUID(uid) {
		return errBadPartnerUID
	}
	uids := s.partnerUIDs(r)
	sg := signals(r)
	if private(r, s.opt.TCFVendorID) || s.privacyOf(r.Site()) == PrivacyNoCookies || s.opt.Auction.Refused(partner, &sg) {
		delete(uids, partner)
	} else {
		if uids == nil {
			uids = map[string]string{}
		}
		if _, ok := uids[partner]; !ok && len(uids) >= maxUIDs {
			return tsubame.Errorf(tsubame.EINVALID, "the visitor has ids of %d partners already", maxUIDs)
		}
		uids[partner] = string(uid)
	}
	tls := r.TLS()
	w.Cookie(server.Cookie{Name: s.uidsCookie(), Value: encodeUIDs(uids), MaxAge: s.opt.CookieMaxAge, HTTPOnly: true,
		Secure: tls, SameSiteNone: tls})
	w.Header("Cache-Control", "no-store")
	w.Body("image/gif", pixel)
	return nil
}

// partnerUIDs reads the visitor's uids cookie: nil when absent or not one
// this server wrote (every id checked again: the cookie is the
// visitor's to change).
func (s *Service) partnerUIDs(r server.Request) map[string]string {
	c := r.Cookie(s.uidsCookie())
	if len(c) == 0 || len(c) > 8<<10 {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(string(c))
	if err != nil {
		return nil
	}
	var m map[string]string
	if json.Unmarshal(raw, &m) != nil || len(m) > maxUIDs {
		return nil
	}
	for p, u := range m {
		if !s.opt.Auction.HasSync(p) || !validPartnerUID([]byte(u)) {
			delete(m, p)
		}
	}
	return m
}

// encodeUIDs writes the uids cookie's value: base64url of the JSON
// object, its keys sorted ("" when empty, which clears it).
func encodeUIDs(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(render.AppendJSONString(nil, k))
		b.WriteByte(':')
		b.Write(render.AppendJSONString(nil, m[k]))
	}
	b.WriteByte('}')
	return base64.RawURLEncoding.EncodeToString([]byte(b.String()))
}

// validPartnerUID admits a partner's id for a visitor: printable ASCII
// without spaces, quotes, ';' or ',' (it travels in a cookie and in the
// bid request), at most maxUIDLen bytes.
func validPartnerUID(b []byte) bool {
	if len(b) == 0 || len(b) > maxUIDLen {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == ';' || c == ',' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
