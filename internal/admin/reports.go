package admin

import (
	"context"
	"net/http"

	"tsubame"
	"tsubame/internal/report"
)

// Reports are the delivery and billing reports the API answers from
// (internal/report's Roller).
type Reports interface {
	Query(q report.Query) (*report.Result, error)
	Verify(q report.Query) (*report.Verification, error)
	Rebuild(ctx context.Context) error
}

var errNoReports = tsubame.Errorf(tsubame.ENOTFOUND,
	"this server keeps no reports (report.enabled is off, or no endpoint writes the file access log)")

func (s *Server) reportRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/reports", s.requireRole(RoleViewer, s.reports))
	mux.HandleFunc("GET /api/v1/reports/verify", s.requireRole(RoleViewer, s.verifyReports))
	mux.HandleFunc("POST /api/v1/reports/rebuild", s.requireRole(RoleAdmin, s.rebuildReports))
	mux.HandleFunc("GET /api/v1/forecast", s.requireRole(RoleViewer, s.forecast))
}

// reportQuery reads a report's parameters: from, to, by, tz.
func (s *Server) reportQuery(w http.ResponseWriter, r *http.Request) (report.Query, bool) {
	if s.opt.Reports == nil {
		s.writeStoreError(w, errNoReports)
		return report.Query{}, false
	}
	v := r.URL.Query()
	q, err := report.ParseQuery(v.Get("from"), v.Get("to"), v.Get("by"), v.Get("tz"), s.opt.ReportLocation)
	if err != nil {
		s.writeStoreError(w, err) // EINVALID: a 400 with the reason
		return report.Query{}, false
	}
	return q, true
}

// reports answers GET /api/v1/reports: the rows of the query, as JSON
// ({"rows":[...]}, the report command's -format json) or, with
// format=csv, as a CSV download (format=table: the command's table).
func (s *Server) reports(w http.ResponseWriter, r *http.Request) {
	q, ok := s.reportQuery(w, r)
	if !ok {
		return
	}
	format := r.URL.Query().Get("format")
	if format == "" {
		format = report.FormatJSON
	}
	if format != report.FormatJSON && format != report.FormatCSV && format != report.FormatTable {
		writeError(w, http.StatusBadRequest, "format: json, csv or table")
		return
	}
	res, err := s.opt.Reports.Query(q)
	if err != nil {
		s.writeStoreError(w, err) // a bad bound is EINVALID, the store's trouble its own kind
		return
	}
	switch format {
	case report.FormatCSV:
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="tsubame-report.csv"`)
	case report.FormatTable:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	default:
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	_ = res.Write(w, format)
}

// verifyReports answers GET /api/v1/reports/verify: the files recounted
// and compared with the rollups.
func (s *Server) verifyReports(w http.ResponseWriter, r *http.Request) {
	q, ok := s.reportQuery(w, r)
	if !ok {
		return
	}
	v, err := s.opt.Reports.Verify(q)
	if err != nil {
		s.writeStoreError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v.Report())
}

// rebuildReports answers POST /api/v1/reports/rebuild: the rollups counted
// again from the files kept. Audited.
func (s *Server) rebuildReports(w http.ResponseWriter, r *http.Request) {
	if s.opt.Reports == nil {
		s.writeStoreError(w, errNoReports)
		return
	}
	err := s.opt.Reports.Rebuild(r.Context())
	if !s.done(w, r, "reports.rebuild", "reports", err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"rebuilt": true})
}
