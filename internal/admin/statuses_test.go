package admin

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"tsubame"
)

// pendingCreative is a creative of adv-a waiting for review.
const pendingCreative = `{"advertiser": "adv-a", "format": "banner", "w": 300, "h": 250,
	"image": "https://cdn.a.example/new.png", "click": "https://a.example/new"}`

// listIDs lists the ids of a campaign list's answer.
func listIDs(t *testing.T, r response, plural string) []string {
	t.Helper()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &body); err != nil || r.status != 200 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var objs []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body[plural], &objs); err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, o := range objs {
		ids = append(ids, o.ID)
	}
	return ids
}

// reviewsAudited returns the creatives' audit lines as "ACTION TARGET
// RESULT", checking that each names its token.
func reviewsAudited(t *testing.T, h *harness) []string {
	t.Helper()
	h.s.auditLog.flush(true)
	var out []string
	for _, rec := range h.auditLines() {
		if !strings.HasPrefix(rec.Action, "creative.") {
			continue
		}
		if !strings.HasPrefix(rec.Actor, "token:") {
			t.Errorf("audit line without its actor: %+v", rec)
		}
		out = append(out, rec.Action+" "+rec.Target+" "+rec.Result)
	}
	return out
}

// historyLines lists an object's history as "ACTION: DETAIL", newest first.
func historyLines(t *testing.T, h *harness, auth []string, path string) []string {
	t.Helper()
	r := h.do("GET", path+"/history", nil, auth...)
	var out struct {
		Changes []struct{ Action, Detail string }
	}
	if err := json.Unmarshal(r.body, &out); err != nil || r.status != 200 {
		t.Fatalf("history of %s: %d %s", path, r.status, r.body)
	}
	var lines []string
	for _, c := range out.Changes {
		lines = append(lines, c.Action+": "+c.Detail)
	}
	return lines
}

// The approval queue is the pending creatives; an editor approves one (it
// leaves the queue) or rejects one with a reason, which the creative keeps
// and shows; a viewer can do neither. Each review is audited and is in the
// creative's history.
func TestCreativeReview(t *testing.T) {
	h, cs, auth := campaignHarness(t)
	ed, view := auth[RoleEditor], auth[RoleViewer]
	if r := importFile(t, h, ed, "", campaignFile); r.status != 200 {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	for _, id := range []string{"cr-new", "cr-bad"} {
		if r := h.do("PUT", "/api/v1/creatives/"+id, pendingCreative, ed...); r.status != 200 || r.json(t)["status"] != nil {
			t.Fatalf("put %s: %d %s", id, r.status, r.body)
		}
	}
	queue := func() []string {
		t.Helper()
		return listIDs(t, h.do("GET", "/api/v1/creatives?status=pending", nil, view...), "creatives")
	}
	if got := queue(); !slices.Equal(got, []string{"cr-bad", "cr-new"}) {
		t.Fatalf("the queue: %v", got)
	}

	// A viewer reads the queue, and may not review.
	for _, path := range []string{"/api/v1/creatives/cr-new/approve", "/api/v1/creatives/cr-bad/reject"} {
		if r := h.do("POST", path, `{"reason": "no"}`, view...); r.status != 403 {
			t.Errorf("%s as a viewer: %d, want 403", path, r.status)
		}
	}

	r := h.do("POST", "/api/v1/creatives/cr-new/approve", nil, ed...)
	if r.status != 200 || r.json(t)["status"] != "approved" {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if got, err := tsubame.GetCampaignObject[*tsubame.Creative](t.Context(), cs, "cr-new"); err != nil || got.Status != tsubame.StatusApproved {
		t.Fatalf("stored after the approval: %+v, %v", got, err)
	}
	if got := queue(); !slices.Equal(got, []string{"cr-bad"}) {
		t.Errorf("the queue after the approval: %v", got)
	}

	// A rejection needs its reason; a body that is not one is refused.
	for body, want := range map[string]string{
		"":                            "needs its reason",
		`{"reason": "  "}`:            "needs its reason",
		`{"reason": "x", "why": "y"}`: "unknown field",
		`{"reason": 3}`:               "request body",
		`{"reason": "` + strings.Repeat("x", tsubame.MaxReasonLength+1) + `"}`: "reason: must be at most",
	} {
		var b any
		if body != "" {
			b = body
		}
		if r := h.do("POST", "/api/v1/creatives/cr-bad/reject", b, ed...); r.status != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("reject with %.40q: %d %s, want 400 saying %q", body, r.status, r.body, want)
		}
	}
	const reason = "The landing page does not match the ad (brand policy 4.2)."
	r = h.do("POST", "/api/v1/creatives/cr-bad/reject", `{"reason": "`+reason+`"}`, ed...)
	if r.status != 200 || r.json(t)["status"] != "rejected" || r.json(t)["reason"] != reason {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/api/v1/creatives/cr-bad", nil, view...); r.json(t)["reason"] != reason {
		t.Errorf("the rejected creative: %s", r.body)
	}
	if got := queue(); len(got) != 0 {
		t.Errorf("the queue after the rejection: %v", got)
	}
	if got := listIDs(t, h.do("GET", "/api/v1/creatives?status=rejected", nil, view...), "creatives"); !slices.Equal(got, []string{"cr-bad"}) {
		t.Errorf("the rejected: %v", got)
	}
	if got := listIDs(t, h.do("GET", "/api/v1/creatives?status=approved", nil, view...), "creatives"); !slices.Equal(got, []string{"cr-a", "cr-b", "cr-new"}) {
		t.Errorf("the approved: %v", got)
	}
	// Approved after all: the reason goes.
	if r := h.do("POST", "/api/v1/creatives/cr-bad/approve", "", ed...); r.status != 200 || r.json(t)["reason"] != nil {
		t.Fatalf("approve the rejected: %d %s", r.status, r.body)
	}

	for path, want := range map[string]int{
		"/api/v1/creatives/cr-x/approve":   404,
		"/api/v1/creatives/a%20b/approve":  400,
		"/api/v1/advertisers/adv-a/reject": 404, // no such verb of an advertiser
	} {
		if r := h.do("POST", path, `{"reason": "r"}`, ed...); r.status != want {
			t.Errorf("POST %s: %d, want %d", path, r.status, want)
		}
	}
	for path, want := range map[string]string{
		"/api/v1/creatives?status=live":  "status must be one of pending, approved, rejected, archived, all",
		"/api/v1/line-items?status=on":   "status must be one of active, paused, archived, all",
		"/api/v1/advertisers?status=any": "status must be one of active, archived, all",
		"/api/v1/campaigns?status=done":  "status must be one of active, paused, archived, all",
	} {
		if r := h.do("GET", path, nil, view...); r.status != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("GET %s: %d %s, want 400 saying %q", path, r.status, r.body, want)
		}
	}

	audited := reviewsAudited(t, h)
	for _, want := range []string{"creative.approve cr-new ok", "creative.reject cr-bad invalid", "creative.reject cr-bad ok",
		"creative.approve cr-bad ok", "creative.approve cr-x invalid"} {
		if !slices.Contains(audited, want) {
			t.Errorf("no audit line %q in:\n%s", want, strings.Join(audited, "\n"))
		}
	}
	want := []string{
		"creative.approve: rejected → approved",
		"creative.reject: pending → rejected: " + reason,
		"creative.put: created",
	}
	if got := historyLines(t, h, view, "/api/v1/creatives/cr-bad"); !slices.Equal(got, want) {
		t.Errorf("cr-bad's history:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A campaign is paused and resumed by an editor, audited, in its history;
// its line items keep their own status.
func TestCampaignPauseAPI(t *testing.T) {
	h, cs, auth := campaignHarness(t)
	ed, view := auth[RoleEditor], auth[RoleViewer]
	if r := importFile(t, h, ed, "", campaignFile); r.status != 200 {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/api/v1/campaigns/camp-a/pause", "/api/v1/campaigns/camp-a/resume"} {
		if r := h.do("POST", path, nil, view...); r.status != 403 {
			t.Errorf("%s as a viewer: %d, want 403", path, r.status)
		}
	}
	r := h.do("POST", "/api/v1/campaigns/camp-a/pause", nil, ed...)
	if r.status != 200 || r.json(t)["status"] != "paused" || r.json(t)["advertiser"] != "adv-a" {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if got, err := tsubame.GetCampaignObject[*tsubame.Campaign](t.Context(), cs, "camp-a"); err != nil || !got.Paused() {
		t.Fatalf("stored: %+v, %v", got, err)
	}
	if li, _ := tsubame.GetCampaignObject[*tsubame.LineItem](t.Context(), cs, "li-a"); li.Paused() {
		t.Error("the campaign's pause paused its line item too")
	}
	if got := listIDs(t, h.do("GET", "/api/v1/campaigns?status=paused", nil, view...), "campaigns"); !slices.Equal(got, []string{"camp-a"}) {
		t.Errorf("paused campaigns: %v", got)
	}
	if got := listIDs(t, h.do("GET", "/api/v1/campaigns?status=active", nil, view...), "campaigns"); !slices.Equal(got, []string{"camp-b"}) {
		t.Errorf("active campaigns: %v", got)
	}
	if r := h.do("POST", "/api/v1/campaigns/camp-a/resume", nil, ed...); r.status != 200 || r.json(t)["status"] != nil {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/api/v1/campaigns/camp-x/pause", nil, ed...); r.status != 404 {
		t.Errorf("pause a missing campaign: %d", r.status)
	}
	audited := auditedActions(t, h)
	for _, want := range []string{"campaign.pause camp-a ok", "campaign.resume camp-a ok", "campaign.pause camp-x invalid"} {
		if !slices.Contains(audited, want) {
			t.Errorf("no audit line %q in:\n%s", want, strings.Join(audited, "\n"))
		}
	}
	if got := historyLines(t, h, view, "/api/v1/campaigns/camp-a"); !slices.Equal(got, []string{"campaign.resume: ", "campaign.pause: "}) {
		t.Errorf("camp-a's history: %q", got)
	}
}

// The creative previews widen the page's policy for images and media
// only: scripts, styles, connections and frames stay this listener's, and
// nothing inline runs.
func TestPreviewPolicy(t *testing.T) {
	h := newHarness(t, true, nil)
	got := h.do("GET", "/", nil).header.Get("Content-Security-Policy")
	directives := map[string]string{}
	for _, d := range strings.Split(got, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		directives[name] = value
	}
	for name, want := range map[string]string{
		"default-src": "'self'", "script-src": "'self'", "style-src": "'self'", "connect-src": "'self'",
		"img-src": "'self' data: http: https:", "media-src": "http: https:", "frame-ancestors": "'none'",
	} {
		if directives[name] != want {
			t.Errorf("%s: %q, want %q (policy %q)", name, directives[name], want, got)
		}
	}
	if _, ok := directives["frame-src"]; ok || strings.Contains(got, "unsafe") {
		t.Errorf("the policy lets frames or inline code in: %q", got)
	}
}

// An archived line item serves nothing and leaves the line items' list
// unless asked for; resumed, it is active again. Audited, in its history.
func TestLineItemArchive(t *testing.T) {
	h, cs, auth := campaignHarness(t)
	ed, view := auth[RoleEditor], auth[RoleViewer]
	if r := importFile(t, h, ed, "", campaignFile); r.status != 200 {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/api/v1/line-items/li-a/archive", nil, view...); r.status != 403 {
		t.Errorf("archive as a viewer: %d, want 403", r.status)
	}
	if r := h.do("POST", "/api/v1/line-items/li-a/archive", nil, ed...); r.status != 200 || r.json(t)["status"] != "archived" {
		t.Fatalf("archive: %d %s", r.status, r.body)
	}
	if li, err := tsubame.GetCampaignObject[*tsubame.LineItem](t.Context(), cs, "li-a"); err != nil || !li.Archived() {
		t.Fatalf("stored: %+v, %v", li, err)
	}
	for query, want := range map[string][]string{
		"": {"li-b"}, "?status=archived": {"li-a"}, "?status=all": {"li-a", "li-b"}, "?status=active": {"li-b"},
	} {
		if got := listIDs(t, h.do("GET", "/api/v1/line-items"+query, nil, view...), "line_items"); !slices.Equal(got, want) {
			t.Errorf("line items%s: %v, want %v", query, got, want)
		}
	}
	// The campaign file keeps it, archived.
	if r := h.do("GET", "/api/v1/campaigns/export", nil, view...); !strings.Contains(string(r.body), `"status": "archived"`) {
		t.Errorf("the export: %s", r.body)
	}
	if r := h.do("POST", "/api/v1/line-items/li-a/resume", nil, ed...); r.status != 200 || r.json(t)["status"] != nil {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if got := historyLines(t, h, view, "/api/v1/line-items/li-a"); !slices.Equal(got, []string{"line_item.resume: ", "line_item.archive: "}) {
		t.Errorf("li-a's history: %q", got)
	}
}

// A creative is archived and restored by an editor, audited, in its
// history, keeping its review: the list leaves it out unless asked for
// (archived, all), the approval queue too while it is archived, and an
// archived creative may still be reviewed, staying archived.
func TestCreativeArchive(t *testing.T) {
	h, cs, auth := campaignHarness(t)
	ed, view := auth[RoleEditor], auth[RoleViewer]
	if r := importFile(t, h, ed, "", campaignFile); r.status != 200 {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	if r := h.do("PUT", "/api/v1/creatives/cr-new", pendingCreative, ed...); r.status != 200 {
		t.Fatalf("put cr-new: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/api/v1/creatives/cr-a/archive", "/api/v1/creatives/cr-a/restore"} {
		if r := h.do("POST", path, nil, view...); r.status != 403 {
			t.Errorf("%s as a viewer: %d, want 403", path, r.status)
		}
	}
	for _, id := range []string{"cr-a", "cr-new"} {
		r := h.do("POST", "/api/v1/creatives/"+id+"/archive", nil, ed...)
		if r.status != 200 || r.json(t)["archived"] != true {
			t.Fatalf("archive %s: %d %s", id, r.status, r.body)
		}
	}
	if got, err := tsubame.GetCampaignObject[*tsubame.Creative](t.Context(), cs, "cr-a"); err != nil || !got.Archived || got.Status != tsubame.StatusApproved {
		t.Fatalf("stored: %+v, %v", got, err)
	}
	lists := func(when string, want map[string][]string) {
		t.Helper()
		for query, ids := range want {
			if got := listIDs(t, h.do("GET", "/api/v1/creatives"+query, nil, view...), "creatives"); !slices.Equal(got, ids) {
				t.Errorf("%s: creatives%s: %v, want %v", when, query, got, ids)
			}
		}
	}
	lists("archived", map[string][]string{
		"": {"cr-b"}, "?status=archived": {"cr-a", "cr-new"}, "?status=all": {"cr-a", "cr-b", "cr-new"},
		"?status=approved": {"cr-b"}, "?status=pending": {}, "?status=rejected": {},
	})
	// Reviewed while archived: it stays archived.
	r := h.do("POST", "/api/v1/creatives/cr-new/approve", nil, ed...)
	if r.status != 200 || r.json(t)["status"] != "approved" || r.json(t)["archived"] != true {
		t.Fatalf("approve the archived: %d %s", r.status, r.body)
	}
	// Archiving twice changes nothing; a missing or malformed id is refused.
	if r := h.do("POST", "/api/v1/creatives/cr-a/archive", nil, ed...); r.status != 200 || r.json(t)["archived"] != true {
		t.Errorf("archive again: %d %s", r.status, r.body)
	}
	for path, want := range map[string]int{"/api/v1/creatives/cr-x/archive": 404, "/api/v1/creatives/a%20b/restore": 400} {
		if r := h.do("POST", path, nil, ed...); r.status != want {
			t.Errorf("POST %s: %d, want %d", path, r.status, want)
		}
	}
	if r := h.do("POST", "/api/v1/creatives/cr-a/restore", nil, ed...); r.status != 200 || r.json(t)["archived"] != nil || r.json(t)["status"] != "approved" {
		t.Fatalf("restore: %d %s", r.status, r.body)
	}
	lists("restored", map[string][]string{
		"": {"cr-a", "cr-b"}, "?status=archived": {"cr-new"}, "?status=approved": {"cr-a", "cr-b"},
	})

	audited := reviewsAudited(t, h)
	for _, want := range []string{"creative.archive cr-a ok", "creative.archive cr-new ok", "creative.restore cr-a ok",
		"creative.archive cr-x invalid", "creative.restore a b invalid"} {
		if !slices.Contains(audited, want) {
			t.Errorf("no audit line %q in:\n%s", want, strings.Join(audited, "\n"))
		}
	}
	want := []string{"creative.restore: review approved", "creative.archive: review approved", "creative.archive: review approved"}
	if got := historyLines(t, h, view, "/api/v1/creatives/cr-a"); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("cr-a's history:\n%s\nwant it to begin\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
