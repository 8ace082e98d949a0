package decision

import "strings"

// Traffic is what traffic counts know of a request: its placement, site,
// country and device (the dimensions the reports count ad requests by).
type Traffic struct {
	Placement, Site, Country, Device string
}

// Targets reports whether l's targeting admits requests of t. It reads
// only t's dimensions: a line item that also targets a region, an OS, a
// browser, an app or key-values is taken to admit t (what the counts do
// not tell is not held against it), and its flight, hours, weekdays and
// deals are not read. Forecasting asks it which booked line items take
// from which traffic (internal/forecast); a site matches as a request's
// does (a target example.com admits news.example.com).
func (ix *Index) Targets(l *Line, t Traffic) bool {
	type dimValue struct {
		d int
		v string
	}
	for _, dv := range [...]dimValue{{dimPlacement, t.Placement}, {dimCountry, t.Country}, {dimDevice, t.Device}} {
		d, v := dv.d, dv.v
		inc, exc := l.incl(d), l.excl(d)
		if len(inc) == 0 && len(exc) == 0 {
			continue
		}
		id := ix.dicts[d].id(v) // 0 when no line item names it
		if len(inc) > 0 && !has(inc, id) || len(exc) > 0 && has(exc, id) {
			return false
		}
	}
	inc, exc := l.incl(dimSite), l.excl(dimSite)
	if len(inc) == 0 && len(exc) == 0 {
		return true
	}
	in := false
	for d, n := t.Site, 0; d != "" && n < maxSiteIDs; n++ {
		if id := ix.dicts[dimSite].id(d); id != 0 {
			if has(exc, id) {
				return false
			}
			in = in || has(inc, id)
		}
		i := strings.IndexByte(d, '.')
		if i < 0 {
			break
		}
		d = d[i+1:]
	}
	return in || len(inc) == 0
}
