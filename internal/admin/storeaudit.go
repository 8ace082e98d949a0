package admin

import (
	"net/http"

	"tsubame"
)

var errNoAudit = tsubame.Errorf(tsubame.ENOTFOUND, "this server's store cannot tell what it keeps (store.type memory: it is this process's)")

// storeAudit answers GET /api/v1/store/audit (admins): what the store
// keeps, by family, with its size and how much never expires; and POST,
// the same after giving the past days' budget keys still kept their drop
// time (audited).
func (s *Server) storeAudit(w http.ResponseWriter, r *http.Request) {
	if s.opt.StoreAudit == nil {
		s.writeStoreError(w, errNoAudit)
		return
	}
	expire := r.Method == http.MethodPost
	a, err := s.opt.StoreAudit(r.Context(), expire)
	if expire && !s.done(w, r, "store.expire_past_days", "quota", err) {
		return
	}
	if err != nil {
		s.writeStoreError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, a)
}
