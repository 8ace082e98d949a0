package ads

import (
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/track"
)

// upperLetters reports whether b is all A-Z.
func upperLetters(b []byte) bool {
	for _, c := range b {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// upperAlnum reports whether b is all A-Z and 0-9.
func upperAlnum(b []byte) bool {
	for _, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// MaxExplained bounds the line items an explanation lists (the winners
// first): a placement that a run-of-network set shares with thousands is
// told in part, with how many were left out.
const MaxExplained = 1000

// Explained is the answer of the admin's explain (GET
// /api/v1/decide/explain): what /api/decide would make of a request, and
// why each candidate line item of its placement serves or does not.
type Explained struct {
	Request   ExplainedRequest   `json:"request"`
	Sold      bool               `json:"sold,omitempty"` // the placement is sold in an auction first (ssp)
	Decisions []ExplainedLine    `json:"decisions"`
	Eligible  [][]string         `json:"eligible"`
	LineItems []ExplainedLine    `json:"line_items"`
	More      int                `json:"more,omitempty"` // candidates past MaxExplained, not listed
	Reasons   []ExplainedReasons `json:"reasons"`        // how many candidates each reason excluded
}

// ExplainedRequest is the request as the decision read it: the parameters
// parsed, the geo and device found.
type ExplainedRequest struct {
	Placement string              `json:"placement"`
	Site      string              `json:"site,omitempty"`
	User      string              `json:"uid,omitempty"`
	Country   string              `json:"country,omitempty"`
	Region    string              `json:"region,omitempty"`
	Device    string              `json:"device,omitempty"`
	OS        string              `json:"os,omitempty"`
	Browser   string              `json:"browser,omitempty"`
	KeyValues map[string][]string `json:"key_values,omitempty"`
	Count     int                 `json:"count"`
	Format    string              `json:"format,omitempty"`
	W         int                 `json:"w,omitempty"`
	H         int                 `json:"h,omitempty"`
	Time      time.Time           `json:"time"`
	Bot       bool                `json:"bot,omitempty"` // /api/decide answers a crawler nothing
}

// ExplainedLine is one candidate line item and what the decision made of it.
type ExplainedLine struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Campaign string `json:"campaign"`
	Priority int    `json:"priority"`
	Creative string `json:"creative,omitempty"` // a winner's
	Reason   string `json:"reason"`             // a decision.Why's code: won, country, capped, ...
	Detail   string `json:"detail"`
	Slot     *int   `json:"slot,omitempty"` // the slot a winner fills
}

// ExplainedReasons counts the candidates of one reason.
type ExplainedReasons struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// urlParams reads a net/http request's query and headers as parseParams
// reads a server.Request's.
type urlParams struct {
	q url.Values
	h http.Header
}

func (p urlParams) Query(name string) []byte {
	if vs, ok := p.q[name]; ok && len(vs) > 0 {
		return []byte(vs[0])
	}
	return nil
}

func (p urlParams) Header(name string) []byte {
	if v := p.h.Get(name); v != "" {
		return []byte(v)
	}
	return nil
}

var (
	errBadIP      = tsubame.Errorf(tsubame.EINVALID, "ip must be an IPv4 or IPv6 address")
	errBadCountry = tsubame.Errorf(tsubame.EINVALID, "country must be an ISO 3166-1 alpha-2 code such as JP")
	errBadRegion  = tsubame.Errorf(tsubame.EINVALID, "region must be an ISO 3166-2 code such as JP-13")
	errBadTime    = tsubame.Errorf(tsubame.EINVALID, "time must be an RFC 3339 time such as 2026-11-30T09:00:00Z")
	errBadUA      = tsubame.Errorf(tsubame.EINVALID, "ua must be at most 1024 printable bytes")
)

// Explain tells what /api/decide would answer a request of the query q and
// headers h (the same parameters: placement, site or Referer, kv.KEY,
// count, format, w, h, uid; the User-Agent header, or ua), and why each
// candidate line item of the placement serves or does not, traced by the
// decision's own code (decision.Index.Explain). Explain-only parameters:
// ip (the client address geo reads; none: no country), country and region
// (set them directly), time (RFC 3339; now when absent). It takes nothing
// from budgets or caps (a check, as an auction's bid makes before it
// wins), and logs nothing. The draw's random source is the request path's,
// so where several line items of a priority are eligible the winner is one
// draw among them: Eligible lists them all.
func (s *Service) Explain(q url.Values, h http.Header) (*Explained, error) {
	p := urlParams{q, h}
	placement := p.Query("placement")
	if len(placement) == 0 {
		return nil, errNoPlacement
	}
	if len(placement) > track.MaxIDLen {
		return nil, errLongPlacement
	}
	a := new(answer)
	now := time.Now()
	if b := p.Query("time"); b != nil {
		t, err := time.Parse(time.RFC3339, string(b))
		if err != nil {
			return nil, errBadTime
		}
		now = t
	}
	req := &a.req
	*req = decision.Request{Placement: string(placement), Time: now, Count: 1, Check: true, Frequency: &a.freq}
	if uid := p.Query("uid"); uid != nil {
		if !validUID(uid) {
			return nil, errBadUID
		}
		req.User = string(uid)
	}
	var bad error
	kvs := a.kvs[:0]
	for k, vs := range q {
		for _, v := range vs {
			kvs, bad = appendKV(a, kvs, []byte(k), []byte(v), bad)
		}
	}
	req.KeyValues = kvs
	if err := parseParams(p, a, bad); err != nil {
		return nil, err
	}
	ua := p.Header("User-Agent")
	if b := p.Query("ua"); b != nil {
		if len(b) > 1024 || !printable(b) {
			return nil, errBadUA
		}
		ua = b
	}
	var dev Device
	if s.opt.Device != nil && ua != nil {
		dev = s.opt.Device(ua)
	}
	req.Device, req.OS, req.Browser = dev.Device, dev.OS, dev.Browser
	if b := p.Query("ip"); b != nil {
		ip, err := netip.ParseAddr(string(b))
		if err != nil {
			return nil, errBadIP
		}
		if s.opt.Geo != nil {
			req.Country, req.Region = s.opt.Geo(ip)
		}
	}
	if b := p.Query("country"); b != nil {
		if len(b) != 2 || !upperLetters(b) {
			return nil, errBadCountry
		}
		req.Country = string(b)
	}
	if b := p.Query("region"); b != nil {
		if len(b) < 4 || len(b) > 6 || b[2] != '-' || !upperLetters(b[:2]) || !upperAlnum(b[3:]) {
			return nil, errBadRegion
		}
		req.Region = string(b)
	}

	set, _ := s.opt.Engine.Set()
	ex := s.opt.Engine.Index().Explain(set, req, nil)
	res := &Explained{Request: ExplainedRequest{Placement: req.Placement, Site: req.Site, User: req.User,
		Country: req.Country, Region: req.Region, Device: req.Device, OS: req.OS, Browser: req.Browser,
		Count: max(req.Count, 1), Format: req.Format, W: req.W, H: req.H, Time: now, Bot: dev.Bot},
		Decisions: []ExplainedLine{}, Eligible: ex.Eligible, LineItems: []ExplainedLine{}}
	if res.Eligible == nil {
		res.Eligible = [][]string{}
	}
	for _, kv := range req.KeyValues {
		if res.Request.KeyValues == nil {
			res.Request.KeyValues = map[string][]string{}
		}
		res.Request.KeyValues[kv.Key] = append(res.Request.KeyValues[kv.Key], kv.Value)
	}
	if au := s.opt.Auction; au != nil && au.Sells(req.Placement) {
		res.Sold = true
	}
	names := map[string]string{}
	for _, l := range ex.Lines {
		if l.Why == decision.WhyWon && l.Name != "" {
			names[l.ID] = l.Name
		}
	}
	for k, d := range ex.Decisions {
		res.Decisions = append(res.Decisions, ExplainedLine{ID: d.Line.ID, Name: names[d.Line.ID], Campaign: d.Line.Campaign, Priority: d.Line.Priority,
			Creative: d.Creative.ID, Reason: decision.WhyWon.String(), Detail: decision.WhyWon.Text(), Slot: &k})
	}
	counts := map[decision.Why]int{}
	var sl *decision.Set // made when a line item has no approved creative
	for _, l := range ex.Lines {
		counts[l.Why]++
		if len(res.LineItems) == MaxExplained {
			res.More++
			continue
		}
		e := ExplainedLine{ID: l.ID, Name: l.Name, Campaign: l.Campaign, Priority: l.Priority, Reason: l.Why.String(), Detail: l.Why.Text()}
		if l.Why == decision.WhyNoApprovedCreative { // say which of its creatives are archived, if any
			if li, ok := set.Object(tsubame.KindLineItem, l.ID).(*tsubame.LineItem); ok && li != nil {
				if sl == nil {
					sl = decision.NewSet(set)
				}
				e.Detail = sl.Detail(li, l.Why)
			}
		}
		if l.Why == decision.WhyWon {
			sl := l.Slot
			e.Slot, e.Creative = &sl, ex.Decisions[sl].Creative.ID
		}
		res.LineItems = append(res.LineItems, e)
	}
	res.Reasons = []ExplainedReasons{}
	for w := range decision.WhyWon + 1 {
		if n := counts[w]; n > 0 {
			res.Reasons = append(res.Reasons, ExplainedReasons{Reason: w.String(), Count: n})
		}
	}
	return res, nil
}
