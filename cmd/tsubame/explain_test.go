package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tsubame/internal/admin"
	"tsubame/internal/geo"
	"tsubame/internal/geo/geotest"
)

// explainSet adds to adsSet's line items one paused, one whose only
// creative is pending, one for phones and one for another placement.
const explainSet = `{
  "advertisers": [{"id": "acme", "name": "Acme"}],
  "campaigns": [{"id": "spring", "advertiser": "acme"}],
  "creatives": [
    {"id": "b1", "advertiser": "acme", "format": "banner", "w": 300, "h": 250,
     "image": "https://cdn.acme.example/b1.png", "click": "https://acme.example/spring", "status": "approved"},
    {"id": "b2", "advertiser": "acme", "format": "banner", "w": 300, "h": 250,
     "image": "https://cdn.acme.example/b2.png", "click": "https://acme.example/spring", "status": "pending"}],
  "line_items": [
    {"id": "li-jp", "name": "Japan, top", "campaign": "spring", "priority": 2, "weight": 1, "cpm": "1.25", "creatives": ["b1"],
     "targeting": {"placements": ["top"], "countries": ["JP"], "regions": ["JP-13"]}},
    {"id": "li-all", "campaign": "spring", "priority": 5, "weight": 1, "cpm": "0.5", "creatives": ["b1"],
     "targeting": {"placements": ["top"]}},
    {"id": "li-paused", "campaign": "spring", "priority": 1, "weight": 1, "cpm": "1", "creatives": ["b1"], "status": "paused",
     "targeting": {"placements": ["top"]}},
    {"id": "li-pending", "campaign": "spring", "priority": 1, "weight": 1, "cpm": "1", "creatives": ["b2"],
     "targeting": {"placements": ["top"]}},
    {"id": "li-phone", "campaign": "spring", "priority": 1, "weight": 1, "cpm": "1", "creatives": ["b1"],
     "targeting": {"devices": ["mobile"]}},
    {"id": "li-side", "campaign": "spring", "priority": 1, "weight": 1, "cpm": "1", "creatives": ["b1"],
     "targeting": {"placements": ["side"]}}
  ]
}`

type explained struct {
	Request struct {
		Country, Region, Device string
	} `json:"request"`
	Decisions []struct{ ID, Name, Creative string } `json:"decisions"`
	Eligible  [][]string                            `json:"eligible"`
	LineItems []struct {
		ID, Name, Reason, Detail string
		Slot                     *int
	} `json:"line_items"`
}

// adminGet gets path of m's admin listener with token and the browser's
// User-Agent, and returns the status and body.
func adminGet(t *testing.T, m *Main, token, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+m.AdminAddr()+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("User-Agent", browserUA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// The admin's explain, on the real Main: the request's country and region
// from the geo database by ip, the device from the User-Agent, the winner
// /api/decide's, and each other candidate of the placement with the rule
// that excluded it; admins only.
func TestExplainEndToEnd(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "geo.mmdb")
	geotest.Write(t, dbPath, map[string]geo.Location{
		"203.0.113.0/24":  {Country: "JP", Region: "JP-13"},
		"198.51.100.0/24": {Country: "US", Region: "US-CA"},
	})
	env := append(testEnv(t), "TSUBAME_GEO_DATABASE="+dbPath, "TSUBAME_SERVER_TRUSTED_PROXIES=127.0.0.1")
	m := openMain(t, env, false)
	token := adminToken(t, m)
	putCampaigns(t, m, explainSet)

	for _, c := range []struct{ ip, won, country string }{{"203.0.113.7", "li-jp", "JP"}, {"198.51.100.7", "li-all", "US"}} {
		served := decideFrom(t, m, c.ip).Decisions[0].LineItem
		code, body := adminGet(t, m, token, "/api/v1/decide/explain?"+url.Values{"placement": {"top"}, "uid": {"u-1"}, "ip": {c.ip}}.Encode())
		if code != http.StatusOK {
			t.Fatalf("explain from %s: %d %s", c.ip, code, body)
		}
		var ex explained
		if err := json.Unmarshal(body, &ex); err != nil {
			t.Fatal(err)
		}
		if served != c.won || len(ex.Decisions) != 1 || ex.Decisions[0].ID != served || ex.Decisions[0].Creative != "b1" ||
			ex.Request.Country != c.country || ex.Request.Device != "desktop" {
			t.Fatalf("from %s: /api/decide served %s; explain %s", c.ip, served, body)
		}
		got := map[string]string{}
		for _, l := range ex.LineItems {
			got[l.ID] = l.Reason
		}
		want := map[string]string{"li-paused": "paused", "li-pending": "no_approved_creative", "li-phone": "device"}
		if c.won == "li-jp" {
			want["li-jp"], want["li-all"] = "won", "lower_priority"
		} else {
			want["li-jp"], want["li-all"] = "country", "won"
		}
		if len(got) != len(want) {
			t.Errorf("from %s: line items %v, want %v", c.ip, got, want)
		}
		for id, r := range want {
			if got[id] != r {
				t.Errorf("from %s: %s %q, want %q (%s)", c.ip, id, got[id], r, body)
			}
		}
		if wantName := map[string]string{"li-jp": "Japan, top"}[c.won]; ex.Decisions[0].Name != wantName || ex.LineItems[0].Name != wantName {
			t.Errorf("from %s: the winner's name %q, want %q", c.ip, ex.Decisions[0].Name, wantName)
		}
		if ex.LineItems[0].ID != c.won || ex.LineItems[0].Slot == nil || *ex.LineItems[0].Slot != 0 {
			t.Errorf("from %s: the winner is not listed first: %s", c.ip, body)
		}
	}

	// The request's own parameters, as /api/decide reads them.
	for q, want := range map[string]int{
		"placement=top&country=JP&region=JP-13": http.StatusOK,
		"":                                      http.StatusBadRequest,
		"placement=top&country=jp":              http.StatusBadRequest,
		"placement=top&ip=nowhere":              http.StatusBadRequest,
		"placement=top&kv.a%20b=c":              http.StatusBadRequest,
		"placement=top&w=0":                     http.StatusBadRequest,
		"placement=top&time=yesterday":          http.StatusBadRequest,
	} {
		if code, body := adminGet(t, m, token, "/api/v1/decide/explain?"+q); code != want {
			t.Errorf("explain?%s: %d %s, want %d", q, code, body, want)
		}
	}
	_, body := adminGet(t, m, token, "/api/v1/decide/explain?placement=top&country=JP&region=JP-13&time="+
		url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
	var ex explained
	if err := json.Unmarshal(body, &ex); err != nil || len(ex.Decisions) != 1 || ex.Decisions[0].ID != "li-jp" {
		t.Errorf("country and region given: %v %s", err, body)
	}

	// Admins only: an editor and a viewer are refused, and no one
	// unauthenticated.
	accounts, err := admin.OpenAccounts(m.Config.AdminDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []admin.Role{admin.RoleViewer, admin.RoleEditor} {
		name := "u-" + string(role)
		if err := accounts.CreateUserWithRole(name, "correct horse battery staple", "", role, admin.PasswordPolicy{MinLength: 12}); err != nil {
			t.Fatal(err)
		}
		tok, _, err := accounts.CreateToken(name, "test", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if code, body := adminGet(t, m, tok, "/api/v1/decide/explain?placement=top"); code != http.StatusForbidden {
			t.Errorf("a %s: %d %s", role, code, body)
		}
	}
	if code, _ := adminGet(t, m, "", "/api/v1/decide/explain?placement=top"); code != http.StatusUnauthorized {
		t.Errorf("unauthenticated: %d", code)
	}
}

// Real /api/decide requests left unfilled for two causes are counted by
// cause in /metrics.
func TestNoFillMetricEndToEnd(t *testing.T) {
	m := openMain(t, testEnv(t), false)
	token := adminToken(t, m)
	putCampaigns(t, m, adsSet)
	decideFrom(t, m, "198.51.100.7") // the index holds the set
	for path, n := range map[string]int{"placement=nowhere": 3, "placement=top&w=728&h=90": 2} {
		for range n {
			code, body := browserGet(t, "http://"+m.PublicAddr()+"/api/decide?uid=u-1&"+path)
			if code != http.StatusNoContent {
				t.Fatalf("%s: %d %s", path, code, body)
			}
		}
	}
	code, body := adminGet(t, m, token, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`tsubame_decide_nofill_total{cause="placement_unknown"} 3`,
		`tsubame_decide_nofill_total{cause="no_creative_fits"} 2`,
		`tsubame_decide_nofill_total{cause="targeting"} 0`,
		`tsubame_decide_nofill_total{cause="capped"} 0`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics has no %q:\n%s", want, grepLines(string(body), "nofill"))
		}
	}
}

// The admin API's line items tell whether each serves and why not, from
// the state the decision uses; and a server started with line items that
// target countries, and no geo database, warns once.
func TestLineItemStatusEndToEnd(t *testing.T) {
	env := append(testEnv(t), "TSUBAME_ADS_BUDGET_INTERVAL=20ms")
	later := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	set := strings.Replace(explainSet, `
  ]
}`, `,
    {"id": "li-later", "campaign": "spring", "priority": 1, "weight": 1, "cpm": "1", "creatives": ["b1"], "start": "`+later+`",
     "targeting": {"placements": ["top"]}},
    {"id": "li-limit", "campaign": "spring", "priority": 1, "weight": 1, "cpm": "1", "creatives": ["b1"],
     "limits": {"impressions": {"total": 1}}, "targeting": {"placements": ["lim"]}}
  ]
}`, 1)
	if code, _, stderr := runCmd(t, env, set, "campaigns", "import", "-"); code != 0 {
		t.Fatalf("import: %d %s", code, stderr)
	}
	cfg, err := loadConfig("", env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	m := &Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Console: io.Discard}
	if err := m.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if n := strings.Count(logs.String(), "no geo database is configured"); n != 1 ||
		!strings.Contains(logs.String(), "line_items=1 first=[li-jp]") {
		t.Errorf("%d geo warnings in:\n%s", n, logs.String())
	}
	token := adminToken(t, m)

	type status struct {
		ID      string `json:"id"`
		Serving *bool  `json:"serving"`
		Reasons []struct{ Reason, Detail string }
	}
	reasons := func(s status) string {
		var rs []string
		for _, r := range s.Reasons {
			rs = append(rs, r.Reason)
		}
		return strings.Join(rs, ",")
	}
	code, body := adminGet(t, m, token, "/api/v1/line-items")
	var list struct {
		LineItems []status `json:"line_items"`
		Total     int
	}
	if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil || list.Total != 8 {
		t.Fatalf("GET /line-items: %d %v %s", code, err, body)
	}
	want := map[string]string{"li-jp": "no_geo_database", "li-all": "", "li-paused": "paused", "li-pending": "no_approved_creative",
		"li-phone": "", "li-side": "", "li-later": "not_started", "li-limit": ""}
	for _, s := range list.LineItems {
		if s.Serving == nil || *s.Serving != (want[s.ID] == "") || reasons(s) != want[s.ID] {
			t.Errorf("%s: serving %v, reasons %q, want %q", s.ID, s.Serving, reasons(s), want[s.ID])
		}
	}
	// li-limit is paced by its limit: nothing delivered of the one
	// impression booked, all of it planned now (no end).
	if !strings.Contains(string(body), `"pacing":{"state":"on_track","budget":"`) || !strings.Contains(string(body), `"delivered":0,"planned":1,"booked":1,`) {
		t.Errorf("li-limit's pacing is not told: %s", body)
	}
	if !strings.Contains(string(body), `"targeting":{"placements":["top"],"countries":["JP"],"regions":["JP-13"]}`) {
		t.Errorf("the line items' own fields are not listed: %s", body)
	}

	// A line item read and put back whole is taken: its status is not
	// one of its fields.
	_, got := adminGet(t, m, token, "/api/v1/line-items/li-all")
	req, _ := http.NewRequest("PUT", "http://"+m.AdminAddr()+"/api/v1/line-items/li-all", strings.NewReader(string(got)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), `"serving":true,"reasons":[]`) {
		t.Errorf("PUT of the GET %s: %d %s", got, resp.StatusCode, msg)
	}

	// li-limit's one impression shown: its limit is reached.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := browserGet(t, "http://"+m.PublicAddr()+"/api/decide?placement=lim&uid=u-1")
		var a adsAnswer
		if code == http.StatusOK && json.Unmarshal([]byte(body), &a) == nil && len(a.Decisions) == 1 {
			if c, b := browserGet(t, a.Decisions[0].ImpressionURL); c != http.StatusOK {
				t.Fatalf("impression: %d %s", c, b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("li-limit never served: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitUntil(t, "li-limit's status to say its limit is reached", func() bool {
		code, body := adminGet(t, m, token, "/api/v1/line-items/li-limit")
		var s status
		return code == http.StatusOK && json.Unmarshal(body, &s) == nil && s.Serving != nil && !*s.Serving &&
			reasons(s) == "limit_reached" && s.Reasons[0].Detail == "its total impression limit is reached"
	})
}
