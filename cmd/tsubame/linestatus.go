package main

import (
	"context"
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
		var spent []budget.Usage
		if q != nil {
			us, err := budgetUsages(ctx, engine, ledger, cs, q, max)
			if err != nil {
				return nil, err
			}
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
				rs = append(rs, admin.StatusReason{Reason: w.String(), Detail: w.Text()})
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
			out[i] = admin.LineStatus{Serving: len(rs) == 0, Reasons: rs}
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
