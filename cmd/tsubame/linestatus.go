package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"tsubame"
	"tsubame/internal/admin"
	"tsubame/internal/budget"
	"tsubame/internal/decision"
)

// lineItemStatus tells the admin API whether each line item serves now and
// why not, from what the decision uses: the index's state
// (decision.Index.Status: paused, no approved creative, flight not
// started or ended, ...), the budgets and impression limits as the store
// holds them (spent: settled at or past booked, for the line item or its
// campaign, in all or today) and country or region targeting while no geo
// database is in use. q nil: budgets are not read.
func (m *Main) lineItemStatus(cs tsubame.CampaignStore, q tsubame.Quotas, max int) func(context.Context, []*tsubame.LineItem) ([]admin.LineStatus, error) {
	engine, ledger := m.ads.engine, m.ads.ledger
	return func(ctx context.Context, items []*tsubame.LineItem) ([]admin.LineStatus, error) {
		now := time.Now()
		set, _ := engine.Set()
		sl := decision.NewSet(set)
		ix := engine.Index()
		var spent, all []budget.Usage
		if q != nil {
			us, err := budgetUsages(ctx, engine, ledger, cs, q, max)
			if err != nil {
				return nil, err
			}
			all = us
			for _, u := range us {
				if u.Booked > 0 && u.Settled >= u.Booked {
					spent = append(spent, u)
				}
			}
		}
		noGeo := m.ads.geo.Load() == nil
		out := make([]admin.LineStatus, len(items))
		for i, li := range items {
			var rs []admin.StatusReason
			for _, w := range ix.Status(sl, li, now) {
				rs = append(rs, admin.StatusReason{Reason: w.String(), Detail: sl.Detail(li, w)})
			}
			for _, u := range spent {
				if u.LineItem == li.ID || u.LineItem == "" && u.Campaign == li.Campaign {
					rs = append(rs, spentReason(u))
				}
			}
			if noGeo && decision.GeoTargeted(li) {
				rs = append(rs, admin.StatusReason{Reason: "no_geo_database",
					Detail: "it targets countries or regions, and no geo database is configured (geo.database): that targeting never matches"})
			}
			out[i] = admin.LineStatus{Serving: len(rs) == 0, Reasons: rs, Pacing: linePacing(pacedBy(all, li))}
		}
		return out, nil
	}
}

// spentReason says which budget or limit u is, spent.
func spentReason(u budget.Usage) admin.StatusReason {
	whose, when := "its", "total"
	if u.LineItem == "" {
		whose = "its campaign's"
	}
	if u.Date != "" {
		when = "daily"
	}
	if u.Kind == budget.KindImpressions {
		return admin.StatusReason{Reason: "limit_reached", Detail: whose + " " + when + " impression limit is reached"}
	}
	return admin.StatusReason{Reason: "budget_reached", Detail: whose + " " + when + " budget is spent"}
}

// pacedBy returns the usage that paces li: its own impression limit (the
// day's before the total), else its campaign's budget (likewise); nil when
// none is among us.
func pacedBy(us []budget.Usage, li *tsubame.LineItem) *budget.Usage {
	var best *budget.Usage
	rank := func(u *budget.Usage) int {
		r := 0
		if u.LineItem != "" {
			r += 2
		}
		if u.Date != "" {
			r++
		}
		return r
	}
	for i := range us {
		u := &us[i]
		if u.LineItem != li.ID && (u.LineItem != "" || u.Campaign != li.Campaign) {
			continue
		}
		if best == nil || rank(u) > rank(best) {
			best = u
		}
	}
	return best
}

// linePacing tells u's delivery against its plan (admin.LinePacing); nil
// for none, or before its plan has begun.
func linePacing(u *budget.Usage) *admin.LinePacing {
	if u == nil || u.Booked <= 0 || u.Target <= 0 {
		return nil
	}
	amount := func(n int64) json.RawMessage {
		if u.Kind == budget.KindSpend {
			return json.RawMessage(strconv.Quote(tsubame.Money(n).String()))
		}
		return json.RawMessage(strconv.FormatInt(n, 10))
	}
	text := func(n int64) string {
		if u.Kind == budget.KindSpend {
			return tsubame.Money(n).String()
		}
		return strconv.FormatInt(n, 10) + " impressions"
	}
	p := &admin.LinePacing{State: admin.PacingOnTrack, Budget: u.Key,
		Delivered: amount(u.Settled), Planned: amount(u.Target), Booked: amount(u.Booked)}
	switch {
	case u.Target < u.Booked && u.Settled+u.Reserved >= u.Target:
		p.State = admin.PacingAhead
	case u.Target < u.Booked && u.Settled < u.Target-u.Target/10: // asap, or no end: all is planned now, none is behind
		p.State = admin.PacingBehind
	}
	p.Detail = fmt.Sprintf("%s delivered of %s planned by now (%s booked, %s pacing)", text(u.Settled), text(u.Target), text(u.Booked), u.Pacing)
	if p.State == admin.PacingAhead {
		p.Detail += "; ahead: it serves again as the plan moves on"
	}
	return p
}
