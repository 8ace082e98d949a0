package forecast

import (
	"slices"
	"strings"
	"time"

	"tsubame"
)

// Bounds of a forecast's selection.
const (
	maxValues   = 64  // values per list
	maxValueLen = 253 // bytes of one (a domain's longest)
)

// Params are a forecast's text form: the forecast command's flags and the
// admin API's parameters.
type Params struct {
	// From and To: RFC 3339 times on a whole hour, or dates (2026-12-01:
	// its midnight in the zone; To is excluded, so -to 2026-12-08 ends
	// with the 7th). From defaults to the current hour, To to a day after
	// From.
	From, To string
	// TZ is an IANA zone (empty: the default).
	TZ string
	// Comma-separated lists; empty: any.
	Placements, Sites, Countries, Devices string
}

// Parse reads p into a Request: def is the zone when p names none, now
// the clock.
func (p Params) Parse(def *time.Location, now time.Time) (Request, error) {
	req := Request{Location: def}
	if p.TZ != "" {
		loc, err := time.LoadLocation(p.TZ)
		if err != nil || p.TZ == "Local" {
			return Request{}, tsubame.Errorf(tsubame.EINVALID, "tz: %q is not an IANA time zone such as Asia/Tokyo or UTC", p.TZ)
		}
		req.Location = loc
	}
	if req.Location == nil {
		req.Location = time.UTC
	}
	var err error
	if req.From, err = parseTime("from", p.From, req.Location); err != nil {
		return Request{}, err
	}
	if req.From.IsZero() {
		req.From = hourStart(now.In(req.Location))
	}
	if req.To, err = parseTime("to", p.To, req.Location); err != nil {
		return Request{}, err
	}
	if req.To.IsZero() {
		req.To = req.From.AddDate(0, 0, 1)
	}
	f := &req.Filter
	for _, l := range []struct {
		name, text string
		dst        *[]string
		check      func(string) (string, bool)
		want       string
	}{
		{"placement", p.Placements, &f.Placements, plain, "an id of printable characters"},
		{"site", p.Sites, &f.Sites, domain, "a domain such as example.com"},
		{"country", p.Countries, &f.Countries, country, "an ISO 3166-1 alpha-2 code such as JP"},
		{"device", p.Devices, &f.Devices, device, "one of " + strings.Join(tsubame.Devices, ", ")},
	} {
		if strings.TrimSpace(l.text) == "" {
			continue
		}
		for _, v := range strings.Split(l.text, ",") {
			v = strings.TrimSpace(v)
			c, ok := l.check(v)
			if !ok || len(v) > maxValueLen {
				return Request{}, tsubame.Errorf(tsubame.EINVALID, "%s: %q is not %s", l.name, v, l.want)
			}
			if !slices.Contains(*l.dst, c) {
				*l.dst = append(*l.dst, c)
			}
		}
		if len(*l.dst) > maxValues {
			return Request{}, tsubame.Errorf(tsubame.EINVALID, "%s: at most %d values", l.name, maxValues)
		}
	}
	return req, nil
}

func parseTime(name, s string, loc *time.Location) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.In(loc), nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t, nil
	}
	return time.Time{}, tsubame.Errorf(tsubame.EINVALID, "%s: %q is neither a date such as 2026-12-01 nor an RFC 3339 time such as 2026-12-01T09:00:00+09:00", name, s)
}

func plain(v string) (string, bool) {
	if v == "" {
		return "", false
	}
	for i := range len(v) {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return "", false
		}
	}
	return v, true
}

func domain(v string) (string, bool) {
	v = strings.ToLower(v)
	if v == "" || v[0] == '.' || v[len(v)-1] == '.' || strings.Contains(v, "..") {
		return "", false
	}
	for i := range len(v) {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return "", false
		}
	}
	return v, true
}

func country(v string) (string, bool) {
	v = strings.ToUpper(v)
	return v, len(v) == 2 && v[0] >= 'A' && v[0] <= 'Z' && v[1] >= 'A' && v[1] <= 'Z'
}

func device(v string) (string, bool) {
	v = strings.ToLower(v)
	return v, slices.Contains(tsubame.Devices, v)
}
