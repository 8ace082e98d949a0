package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Through the real server: an archived campaign, and an archived
// advertiser, stop their line items serving (which keep their own status
// and say why in their reasons); a resume of either brings them back.
func TestArchiveCampaignAndAdvertiserServe(t *testing.T) {
	m := openMain(t, testEnv(t), false)
	putCampaigns(t, m, strings.Replace(reviewSet, `"click": "https://acme.example/spring"}`,
		`"click": "https://acme.example/spring", "status": "approved"}`, 1))
	token := adminToken(t, m)
	post := func(path string) {
		t.Helper()
		if code, out := postAdmin(t, m, token, path, ""); code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, code, out)
		}
	}
	// reasons waits for li-all's reasons to be want (the index takes a
	// change within a second).
	reasons := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body := getWith(t, "http://"+m.AdminAddr()+"/api/v1/line-items/li-all", token)
			var li struct {
				Status  string
				Reasons []struct{ Reason string }
			}
			if err := json.Unmarshal([]byte(body), &li); err != nil || code != http.StatusOK || li.Status != "" {
				t.Fatalf("li-all: %d %s", code, body)
			}
			var got []string
			for _, r := range li.Reasons {
				got = append(got, r.Reason)
			}
			if strings.Join(got, ",") == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("li-all's reasons: %q, want %q", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if a := decideFrom(t, m, "127.0.0.1"); a.Decisions[0].LineItem != "li-all" {
		t.Fatalf("before: %+v", a)
	}

	post("/api/v1/campaigns/spring/archive")
	decideNone(t, m, "an archived campaign")
	reasons("campaign_archived")
	if code, body := getWith(t, "http://"+m.AdminAddr()+"/api/v1/campaigns", token); code != http.StatusOK || strings.Contains(body, `"spring"`) {
		t.Errorf("the campaigns' list shows the archived: %d %s", code, body)
	}
	post("/api/v1/campaigns/spring/resume")
	if a := decideFrom(t, m, "127.0.0.1"); a.Decisions[0].LineItem != "li-all" {
		t.Fatalf("the campaign resumed: %+v", a)
	}
	reasons("")

	post("/api/v1/advertisers/acme/archive")
	decideNone(t, m, "an archived advertiser")
	reasons("advertiser_archived")
	if code, body := getWith(t, "http://"+m.AdminAddr()+"/api/v1/advertisers?status=archived", token); code != http.StatusOK || !strings.Contains(body, `"acme"`) {
		t.Errorf("the archived advertisers: %d %s", code, body)
	}
	post("/api/v1/advertisers/acme/resume")
	if a := decideFrom(t, m, "127.0.0.1"); a.Decisions[0].LineItem != "li-all" {
		t.Fatalf("the advertiser resumed: %+v", a)
	}
	reasons("")
}

// Through the real server: archiving a line item's only creative stops
// it serving (its reasons and the explain say no_approved_creative,
// naming the archived creative, which stays approved); restoring the
// creative serves it again.
func TestArchiveCreativeServe(t *testing.T) {
	m := openMain(t, testEnv(t), false)
	putCampaigns(t, m, strings.Replace(reviewSet, `"click": "https://acme.example/spring"}`,
		`"click": "https://acme.example/spring", "status": "approved"}`, 1))
	token := adminToken(t, m)
	post := func(path string) {
		t.Helper()
		if code, out := postAdmin(t, m, token, path, ""); code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, code, out)
		}
	}
	// reasons waits for li-all's reasons to be want (the index takes a
	// change within a second), and returns their details.
	reasons := func(want string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body := getWith(t, "http://"+m.AdminAddr()+"/api/v1/line-items/li-all", token)
			var li struct {
				Reasons []struct{ Reason, Detail string }
			}
			if err := json.Unmarshal([]byte(body), &li); err != nil || code != http.StatusOK {
				t.Fatalf("li-all: %d %s", code, body)
			}
			var got, details []string
			for _, r := range li.Reasons {
				got, details = append(got, r.Reason), append(details, r.Detail)
			}
			if strings.Join(got, ",") == want {
				return strings.Join(details, "; ")
			}
			if time.Now().After(deadline) {
				t.Fatalf("li-all's reasons: %q, want %q", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if a := decideFrom(t, m, "127.0.0.1"); a.Decisions[0].LineItem != "li-all" {
		t.Fatalf("before: %+v", a)
	}

	post("/api/v1/creatives/b1/archive")
	decideNone(t, m, "its only creative archived")
	if d := reasons("no_approved_creative"); !strings.Contains(d, "archived") || !strings.Contains(d, "b1") {
		t.Errorf("li-all's reason's detail %q, want it to say b1 is archived", d)
	}
	if code, body := getWith(t, "http://"+m.AdminAddr()+"/api/v1/creatives/b1", token); code != http.StatusOK ||
		!strings.Contains(body, `"archived":true`) || !strings.Contains(body, `"status":"approved"`) {
		t.Errorf("the archived creative: %d %s", code, body)
	}
	if code, body := getWith(t, "http://"+m.AdminAddr()+"/api/v1/creatives", token); code != http.StatusOK || strings.Contains(body, `"b1"`) {
		t.Errorf("the creatives' list shows the archived: %d %s", code, body)
	}
	// The explain names it too.
	if code, body := adminGet(t, m, token, "/api/v1/decide/explain?placement=top"); code != http.StatusOK ||
		!strings.Contains(string(body), `"reason":"no_approved_creative","detail":"its creatives are archived (b1): restore one to serve"`) {
		t.Errorf("the explain: %d %s", code, body)
	}

	post("/api/v1/creatives/b1/restore")
	if a := decideFrom(t, m, "127.0.0.1"); a.Decisions[0].LineItem != "li-all" {
		t.Fatalf("the creative restored: %+v", a)
	}
	reasons("")
}
