package admin

import (
	"net/http"
	"time"

	"tsubame"
	"tsubame/internal/forecast"
)

var errNoForecast = tsubame.Errorf(tsubame.ENOTFOUND,
	"this server makes no forecasts: they are made from the reports (report.enabled is off, or no endpoint writes the file access log)")

// forecast answers GET /api/v1/forecast: the impressions a selection of
// traffic (placement, site, country, device: comma-separated lists) is
// forecast to offer over [from, to), hour by hour, what booked line items
// take of them and what is left to sell (internal/forecast).
func (s *Server) forecast(w http.ResponseWriter, r *http.Request) {
	if s.opt.Forecast == nil {
		s.writeStoreError(w, errNoForecast)
		return
	}
	v := r.URL.Query()
	p := forecast.Params{From: v.Get("from"), To: v.Get("to"), TZ: v.Get("tz"),
		Placements: v.Get("placement"), Sites: v.Get("site"), Countries: v.Get("country"), Devices: v.Get("device")}
	req, err := p.Parse(s.opt.ReportLocation, time.Now())
	if err != nil {
		s.writeStoreError(w, err)
		return
	}
	res, err := s.opt.Forecast(req)
	if err != nil {
		s.writeStoreError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, res)
}
