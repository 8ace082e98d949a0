package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"

	"tsubame"
)

// demoCampaigns are the campaigns serve -demo loads into a store that has
// never held any: two advertisers whose line items fill placements 1 to 3
// (a key-value target among them: kv.section=sports) and a video for
// placement preroll, so that /api/decide answers at once.
//
//go:embed demo_campaigns.json
var demoCampaigns []byte

// loadDemoCampaigns fills a campaign store never written with demoCampaigns.
func loadDemoCampaigns(ctx context.Context, cs tsubame.CampaignStore, log *slog.Logger) error {
	v, err := cs.CampaignsVersion(ctx)
	if err != nil {
		return err
	}
	if v != 0 {
		log.Info("campaign store is not empty: demo campaigns not loaded")
		return nil
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(demoCampaigns, &set); err != nil {
		return err
	}
	// At version 0: another server loading them at the same time (Redis)
	// loads them once.
	if err := cs.ReplaceAllAt(ctx, &set, 0); err != nil {
		if tsubame.ErrorCode(err) == tsubame.ECONFLICT {
			log.Info("campaign store is not empty: demo campaigns not loaded")
			return nil
		}
		return err
	}
	log.Info("demo campaigns loaded", "line_items", len(set.LineItems))
	return nil
}

// loadDemo fills an empty store with the demo placements (serve -demo,
// make run): ids 1..1000, id n serving http://ad{2n-1}.example.com/tag.js
// and http://ad{2n}.example.com/tag.js. A store that holds anything is left
// alone.
func loadDemo(ctx context.Context, s tsubame.Store, log *slog.Logger) error {
	page, err := s.List(ctx, "", 1)
	if err != nil {
		return err
	}
	if len(page) > 0 {
		log.Info("store is not empty: demo placements not loaded")
		return nil
	}
	ps := make([]*tsubame.Placement, 0, DemoPlacements)
	for n := 1; n <= DemoPlacements; n++ {
		ps = append(ps, &tsubame.Placement{
			ID:   fmt.Sprint(n),
			Name: fmt.Sprintf("demo %d", n),
			URLs: []string{fmt.Sprintf("http://ad%d.example.com/tag.js", 2*n-1), fmt.Sprintf("http://ad%d.example.com/tag.js", 2*n)},
		})
	}
	if err := s.PutMany(ctx, ps); err != nil {
		return err
	}
	log.Info("demo placements loaded", "count", DemoPlacements)
	return nil
}
