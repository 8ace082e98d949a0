package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// reviewSet is adsSet's line item for everyone, its creative waiting for
// review.
const reviewSet = `{
  "advertisers": [{"id": "acme", "name": "Acme"}],
  "campaigns": [{"id": "spring", "advertiser": "acme"}],
  "creatives": [{"id": "b1", "advertiser": "acme", "format": "banner", "w": 300, "h": 250,
    "image": "https://cdn.acme.example/b1.png", "click": "https://acme.example/spring"}],
  "line_items": [{"id": "li-all", "campaign": "spring", "priority": 5, "weight": 1, "cpm": "0.5", "creatives": ["b1"],
    "targeting": {"placements": ["top"]}}]
}`

// postAdmin posts body (none when empty) to the admin API with token.
func postAdmin(t *testing.T, m *Main, token, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest("POST", "http://"+m.AdminAddr()+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// decideNone waits for /api/decide to answer 204 (no ad) for placement
// top, failing the test when it still fills after a generous deadline.
func decideNone(t *testing.T, m *Main, why string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := browserGet(t, "http://"+m.PublicAddr()+"/api/decide?placement=top&uid=u-1")
		if code == http.StatusNoContent {
			return
		}
		if code != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("%s: decide still answers %d %s, want 204", why, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Through the real server: a pending creative serves nowhere; approved
// through the admin API it serves; rejected it stops; a paused campaign's
// line items stop serving though their own status stays active, and serve
// again when it is resumed.
func TestReviewAndCampaignPauseServe(t *testing.T) {
	m := openMain(t, testEnv(t), false)
	putCampaigns(t, m, reviewSet)
	token := adminToken(t, m)
	post := func(path, body string) {
		t.Helper()
		if code, out := postAdmin(t, m, token, path, body); code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, code, out)
		}
	}
	decideNone(t, m, "a pending creative")

	post("/api/v1/creatives/b1/approve", "")
	if a := decideFrom(t, m, "127.0.0.1"); a.Decisions[0].LineItem != "li-all" {
		t.Fatalf("approved: %+v", a)
	}
	post("/api/v1/creatives/b1/reject", `{"reason": "the image is not the brand's"}`)
	decideNone(t, m, "a rejected creative")
	post("/api/v1/creatives/b1/approve", "")
	decideFrom(t, m, "127.0.0.1")

	post("/api/v1/campaigns/spring/pause", "")
	decideNone(t, m, "a paused campaign")
	code, body := getWith(t, "http://"+m.AdminAddr()+"/api/v1/line-items/li-all", token)
	var li struct{ Status string }
	if err := json.Unmarshal([]byte(body), &li); err != nil || code != 200 || li.Status != "" {
		t.Fatalf("the paused campaign's line item: %d %s", code, body)
	}
	post("/api/v1/campaigns/spring/resume", "")
	if a := decideFrom(t, m, "127.0.0.1"); a.Decisions[0].LineItem != "li-all" {
		t.Fatalf("resumed: %+v", a)
	}
}
