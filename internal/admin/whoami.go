package admin

import "net/http"

// Features are the dashboard's optional sections this server has, so that
// the page asks only for what exists (a browser logs every 404 as an
// error).
type Features struct {
	Stats     bool `json:"stats"`     // the live figures (/api/v1/stats)
	Endpoints bool `json:"endpoints"` // their per-endpoint view: needs the metrics registry
	Campaigns bool `json:"campaigns"` // /api/v1/campaigns and the other kinds
	Budgets   bool `json:"budgets"`   // /api/v1/budgets
	Reports   bool `json:"reports"`   // /api/v1/reports
	Forecast  bool `json:"forecast"`  // /api/v1/forecast
	Explain   bool `json:"explain"`   // /api/v1/decide/explain (admins)
}

func (s *Server) features() Features {
	return Features{Stats: s.stats != nil, Endpoints: s.stats != nil && s.opt.Metrics != nil,
		Campaigns: s.opt.Campaigns != nil, Budgets: s.opt.Campaigns != nil && s.opt.Budgets != nil, Reports: s.opt.Reports != nil,
		Forecast: s.opt.Forecast != nil, Explain: s.opt.Explain != nil}
}

// whoami says who the request's credentials name, with their CSRF token
// and the dashboard's features, and answers 200 whether or not they name
// anyone: the page asks on every load, and a browser logs a 401 as an
// error. Without valid credentials it says {"user":null} and nothing more,
// which anyone may learn, and grants nothing. GET /api/v1/session keeps
// its 401 for the clients that read it.
//
// A session cookie that names no live session (the server restarted, the
// session ended) is a browser's leftover: it is cleared, not audited. A
// bearer token that fails is audited as everywhere else.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	id, presented := s.authenticate(r)
	switch {
	case id == nil && presented && r.Header.Get("Authorization") != "":
		s.audit(r, "", "auth", r.URL.Path, "denied", "invalid or expired credentials")
	case id == nil && presented:
		s.setSessionCookie(w, "", -1)
	}
	if id == nil || id.scope == ScopeMetrics { // a token for /metrics reads nothing here
		writeJSON(w, http.StatusOK, map[string]any{"user": nil})
		return
	}
	out := map[string]any{"user": id.user, "role": id.role, "features": s.features()}
	if id.sess != nil {
		out["csrf_token"] = id.sess.csrf
	}
	writeJSON(w, http.StatusOK, out)
}
