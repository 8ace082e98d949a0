package admin

import (
	"bytes"
	"context"
	"encoding/json"

	"tsubame"
)

// LineStatus is whether a line item serves and, when it does not, why:
// what GET /api/v1/line-items and /line-items/{id} add to each line item.
type LineStatus struct {
	Serving bool           `json:"serving"`
	Reasons []StatusReason `json:"reasons"`
	// Pacing is its delivery against its plan by now, from the limit or
	// budget that paces it; nil when none does, or when its plan has not
	// begun.
	Pacing *LinePacing `json:"pacing,omitempty"`
}

// LinePacing is a line item's delivery against its plan: what was
// delivered (impressions shown, or their price: the counters reports
// reconcile with), what its pacing planned by now and what is booked, of
// the budget or limit named (its own impression limit, else its
// campaign's budget; the day's where there is one). State is ahead (what
// is delivered and held for decisions in flight has reached the plan: the
// pacing gives no more until the plan moves on), behind (more than a
// tenth under the plan) or on_track.
type LinePacing struct {
	State     string          `json:"state"`
	Budget    string          `json:"budget"`
	Delivered json.RawMessage `json:"delivered"`
	Planned   json.RawMessage `json:"planned"`
	Booked    json.RawMessage `json:"booked"`
	Detail    string          `json:"detail"`
}

// Pacing states.
const (
	PacingAhead   = "ahead"
	PacingOnTrack = "on_track"
	PacingBehind  = "behind"
)

// StatusReason is one reason a line item does not serve: a code (paused,
// no_approved_creative, not_started, ended, budget_reached,
// limit_reached, no_geo_database, ...) and a sentence.
type StatusReason struct {
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// lineItemWithStatus is a line item as the API lists it: its fields, then
// serving and reasons.
type lineItemWithStatus struct {
	*tsubame.LineItem
	LineStatus
}

// MarshalJSON writes the line item's own fields and the status's side by
// side (an embedded type's marshaller would hide the other's fields).
func (l lineItemWithStatus) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(l.LineItem)
	if err != nil {
		return nil, err
	}
	st, err := json.Marshal(l.LineStatus)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || len(st) < 2 {
		return b, nil
	}
	if len(b) == 2 { // {}
		return st, nil
	}
	return append(append(b[:len(b)-1], ','), st[1:]...), nil
}

// withStatus returns objs, line items with their status (Options.LineItemStatus)
// when k is the line items' kind and the server tells it; the objects as they
// are otherwise, or when the status cannot be had (the process log says why).
func (s *Server) withStatus(ctx context.Context, k tsubame.CampaignKind, objs []tsubame.CampaignObject) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	if k != tsubame.KindLineItem || s.opt.LineItemStatus == nil || len(objs) == 0 {
		return out
	}
	items := make([]*tsubame.LineItem, 0, len(objs))
	for _, o := range objs {
		if li, ok := o.(*tsubame.LineItem); ok {
			items = append(items, li)
		}
	}
	sts, err := s.opt.LineItemStatus(ctx, items)
	if err != nil || len(sts) != len(items) {
		s.log.Warn("cannot tell the line items' status", "err", err)
		return out
	}
	for i, li := range items {
		st := sts[i]
		if st.Reasons == nil {
			st.Reasons = []StatusReason{}
		}
		out[i] = lineItemWithStatus{li, st}
	}
	return out
}

// withoutStatus returns a PUT's body without the serving, reasons and
// pacing a GET of a line item adds, which are not the line item's fields: a line item
// read, changed and put back whole is taken. A body with neither (or not a
// JSON object) is returned as it is, so that its problems keep their lines.
func withoutStatus(k tsubame.CampaignKind, body []byte) []byte {
	if k != tsubame.KindLineItem || !bytes.Contains(body, []byte(`"serving"`)) && !bytes.Contains(body, []byte(`"reasons"`)) &&
		!bytes.Contains(body, []byte(`"pacing"`)) {
		return body
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	_, s := m["serving"]
	_, r := m["reasons"]
	_, p := m["pacing"]
	if !s && !r && !p {
		return body
	}
	delete(m, "serving")
	delete(m, "reasons")
	delete(m, "pacing")
	b, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return b
}
