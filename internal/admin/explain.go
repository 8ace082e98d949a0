package admin

import (
	"net/http"

	"tsubame"
)

var errNoExplain = tsubame.Errorf(tsubame.ENOTFOUND, "this server makes no decisions to explain: it keeps no campaigns")

// explain answers GET /api/v1/decide/explain: what /api/decide would
// answer a request of the same query (and User-Agent, Referer) and why
// each candidate line item of its placement serves or does not
// (internal/ads, Service.Explain). Admins only: it reads every line
// item's targeting and the visitor's frequency caps. A read: it is not
// audited, as the admin's other reads are not.
func (s *Server) explain(w http.ResponseWriter, r *http.Request) {
	if s.opt.Explain == nil {
		s.writeStoreError(w, errNoExplain)
		return
	}
	res, err := s.opt.Explain(r.URL.Query(), r.Header)
	if err != nil {
		s.writeStoreError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, res)
}
