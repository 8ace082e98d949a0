package admin

import (
	"slices"
	"strings"
	"testing"

	"tsubame"
)

// An editor archives a campaign and an advertiser (a viewer may not);
// the lists leave them out unless ?status= asks for them; a resume makes
// them active again. Each verb is audited and in the object's history,
// and a status the model does not know is refused on a put, naming it.
func TestCampaignAndAdvertiserArchive(t *testing.T) {
	h, cs, auth := campaignHarness(t)
	ed, view := auth[RoleEditor], auth[RoleViewer]
	if r := importFile(t, h, ed, "", campaignFile); r.status != 200 {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/api/v1/campaigns/camp-a/archive", "/api/v1/advertisers/adv-b/archive", "/api/v1/advertisers/adv-b/resume"} {
		if r := h.do("POST", path, nil, view...); r.status != 403 {
			t.Errorf("%s as a viewer: %d, want 403", path, r.status)
		}
	}
	r := h.do("POST", "/api/v1/campaigns/camp-a/archive", nil, ed...)
	if r.status != 200 || r.json(t)["status"] != "archived" || r.json(t)["advertiser"] != "adv-a" {
		t.Fatalf("archive the campaign: %d %s", r.status, r.body)
	}
	if got, err := tsubame.GetCampaignObject[*tsubame.Campaign](t.Context(), cs, "camp-a"); err != nil || !got.Archived() {
		t.Fatalf("stored: %+v, %v", got, err)
	}
	r = h.do("POST", "/api/v1/advertisers/adv-b/archive", nil, ed...)
	if r.status != 200 || r.json(t)["status"] != "archived" || r.json(t)["name"] != "Kaze Travel" {
		t.Fatalf("archive the advertiser: %d %s", r.status, r.body)
	}
	if got, err := tsubame.GetCampaignObject[*tsubame.Advertiser](t.Context(), cs, "adv-b"); err != nil || !got.Archived() {
		t.Fatalf("stored: %+v, %v", got, err)
	}
	// Their line items keep their own status; the campaign under the
	// archived advertiser keeps its own too.
	if li, _ := tsubame.GetCampaignObject[*tsubame.LineItem](t.Context(), cs, "li-a"); li.Status != "" {
		t.Errorf("the campaign's archive changed its line item: %+v", li)
	}
	if c, _ := tsubame.GetCampaignObject[*tsubame.Campaign](t.Context(), cs, "camp-b"); c.Status != "" {
		t.Errorf("the advertiser's archive changed its campaign: %+v", c)
	}
	for path, want := range map[string][]string{
		"/api/v1/campaigns":                   {"camp-b"},
		"/api/v1/campaigns?status=archived":   {"camp-a"},
		"/api/v1/campaigns?status=all":        {"camp-a", "camp-b"},
		"/api/v1/campaigns?status=active":     {"camp-b"},
		"/api/v1/advertisers":                 {"adv-a"},
		"/api/v1/advertisers?status=archived": {"adv-b"},
		"/api/v1/advertisers?status=all":      {"adv-a", "adv-b"},
		"/api/v1/advertisers?status=active":   {"adv-a"},
		"/api/v1/line-items":                  {"li-a", "li-b"}, // their own status is active
	} {
		plural := strings.Split(strings.TrimPrefix(path, "/api/v1/"), "?")[0]
		plural = strings.ReplaceAll(plural, "-", "_")
		if got := listIDs(t, h.do("GET", path, nil, view...), plural); !slices.Equal(got, want) {
			t.Errorf("GET %s: %v, want %v", path, got, want)
		}
	}
	// Read one by one, the archived are there; so in the campaign file.
	if r := h.do("GET", "/api/v1/advertisers/adv-b", nil, view...); r.status != 200 || r.json(t)["status"] != "archived" {
		t.Errorf("GET adv-b: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/api/v1/campaigns/export", nil, view...); strings.Count(string(r.body), `"status": "archived"`) != 2 {
		t.Errorf("the export: %s", r.body)
	}

	if r := h.do("POST", "/api/v1/campaigns/camp-a/resume", nil, ed...); r.status != 200 || r.json(t)["status"] != nil {
		t.Fatalf("resume the campaign: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/api/v1/advertisers/adv-b/resume", nil, ed...); r.status != 200 || r.json(t)["status"] != nil {
		t.Fatalf("resume the advertiser: %d %s", r.status, r.body)
	}
	if got := listIDs(t, h.do("GET", "/api/v1/advertisers", nil, view...), "advertisers"); !slices.Equal(got, []string{"adv-a", "adv-b"}) {
		t.Errorf("advertisers after the resume: %v", got)
	}
	for path, want := range map[string]int{
		"/api/v1/advertisers/adv-x/archive": 404,
		"/api/v1/advertisers/a%20b/resume":  400,
		"/api/v1/campaigns/camp-x/archive":  404,
		"/api/v1/advertisers/adv-a/pause":   404, // an advertiser is never paused
	} {
		if r := h.do("POST", path, nil, ed...); r.status != want {
			t.Errorf("POST %s: %d %s, want %d", path, r.status, r.body, want)
		}
	}
	// A put validates the status.
	for path, body := range map[string]string{
		"/api/v1/advertisers/adv-a": `{"name": "Sakura Coffee", "status": "paused"}`,
		"/api/v1/campaigns/camp-a":  `{"advertiser": "adv-a", "status": "done"}`,
	} {
		r := h.do("PUT", path, body, ed...)
		if r.status != 400 || !strings.Contains(string(r.body), `.status: \"`) || !strings.Contains(string(r.body), "is not one of active, ") {
			t.Errorf("PUT %s %s: %d %s, want 400 naming the status", path, body, r.status, r.body)
		}
	}
	if r := h.do("PUT", "/api/v1/advertisers/adv-c", `{"name": "Done", "status": "archived"}`, ed...); r.status != 200 || r.json(t)["status"] != "archived" {
		t.Errorf("put an archived advertiser: %d %s", r.status, r.body)
	}

	audited := auditedActions(t, h)
	for _, want := range []string{"campaign.archive camp-a ok", "campaign.resume camp-a ok", "advertiser.archive adv-b ok",
		"advertiser.resume adv-b ok", "advertiser.archive adv-x invalid", "campaign.archive camp-x invalid"} {
		if !slices.Contains(audited, want) {
			t.Errorf("no audit line %q in:\n%s", want, strings.Join(audited, "\n"))
		}
	}
	if got := historyLines(t, h, view, "/api/v1/campaigns/camp-a"); !slices.Equal(got, []string{"campaign.resume: ", "campaign.archive: "}) {
		t.Errorf("camp-a's history: %q", got)
	}
	if got := historyLines(t, h, view, "/api/v1/advertisers/adv-b"); !slices.Equal(got, []string{"advertiser.resume: ", "advertiser.archive: "}) {
		t.Errorf("adv-b's history: %q", got)
	}
}
