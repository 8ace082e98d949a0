package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/budget"
	"tsubame/internal/geo"
	"tsubame/internal/geo/geotest"
)

// adsSet is the campaigns of the end-to-end tests: a line item for
// placement top from Japan, and one for everyone else at a lower priority.
const adsSet = `{
  "advertisers": [{"id": "acme", "name": "Acme"}],
  "campaigns": [{"id": "spring", "advertiser": "acme"}],
  "creatives": [{"id": "b1", "advertiser": "acme", "format": "banner", "w": 300, "h": 250,
    "image": "https://cdn.acme.example/b1.png", "click": "https://acme.example/spring", "status": "approved"}],
  "line_items": [
    {"id": "li-jp", "campaign": "spring", "priority": 2, "weight": 1, "cpm": "1.25", "creatives": ["b1"],
     "targeting": {"placements": ["top"], "countries": ["JP"], "regions": ["JP-13"]}},
    {"id": "li-all", "campaign": "spring", "priority": 5, "weight": 1, "cpm": "0.5", "creatives": ["b1"],
     "targeting": {"placements": ["top"]}}
  ]
}`

func putCampaigns(t *testing.T, m *Main, text string) {
	t.Helper()
	var set tsubame.CampaignSet
	if err := json.Unmarshal([]byte(text), &set); err != nil {
		t.Fatal(err)
	}
	if err := m.backend.(tsubame.CampaignStore).ReplaceAll(t.Context(), &set); err != nil {
		t.Fatal(err)
	}
	m.ads.engine.Changed()
}

type adsAnswer struct {
	Decisions []struct {
		LineItem      string `json:"line_item"`
		ImpressionURL string `json:"impression_url"`
		ClickURL      string `json:"click_url"`
	} `json:"decisions"`
}

// decideFrom asks /api/decide as a client at addr (through the trusted
// proxy's X-Forwarded-For), waiting for the index to hold line items.
func decideFrom(t *testing.T, m *Main, client string) adsAnswer {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+m.PublicAddr()+"/api/decide?placement=top&uid=u-1", nil)
		req.Header.Set("X-Forwarded-For", client)
		req.Header.Set("User-Agent", browserUA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			var a adsAnswer
			if err := json.Unmarshal(body, &a); err != nil || len(a.Decisions) != 1 {
				t.Fatalf("%v: %s", err, body)
			}
			return a
		}
		if resp.StatusCode != http.StatusNoContent || time.Now().After(deadline) {
			t.Fatalf("decide: %d %s", resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The real Main: campaigns written to the embedded store reach the index,
// the client's country and region come from a MaxMind-format database
// behind a trusted proxy, the tracking keys file is made at first start
// (owner-only) and a rotation by reload keeps URLs already out working.
func TestAdsEndToEnd(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "geo.mmdb")
	geotest.Write(t, dbPath, map[string]geo.Location{
		"203.0.113.0/24":  {Country: "JP", Region: "JP-13"},
		"198.51.100.0/24": {Country: "US", Region: "US-CA"},
	})
	env := append(testEnv(t), "TSUBAME_GEO_DATABASE="+dbPath, "TSUBAME_SERVER_TRUSTED_PROXIES=127.0.0.1")
	m := openMain(t, env, false)
	putCampaigns(t, m, adsSet)

	if a := decideFrom(t, m, "203.0.113.7"); a.Decisions[0].LineItem != "li-jp" {
		t.Errorf("from Tokyo: %s", a.Decisions[0].LineItem)
	}
	if a := decideFrom(t, m, "198.51.100.7"); a.Decisions[0].LineItem != "li-all" {
		t.Errorf("from California: %s", a.Decisions[0].LineItem)
	}

	keys := m.Config.TrackingKeysPath()
	fi, err := os.Stat(keys)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("tracking keys file: %v %v", fi, err)
	}
	old := decideFrom(t, m, "203.0.113.7").Decisions[0]
	body, _ := os.ReadFile(keys)
	var oldLine string
	for _, l := range strings.Split(string(body), "\n") {
		if l != "" && l[0] != '#' {
			oldLine = l
		}
	}
	rotated := "k2 " + strings.Repeat("n", 40) + "\n" + oldLine + "\n"
	if err := os.WriteFile(keys, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	reload := func() {
		t.Helper()
		cfg, err := loadConfig("", env, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if restart, err := m.Reload(cfg); err != nil || len(restart) != 0 {
			t.Fatalf("Reload: %v, needs restart %v", err, restart)
		}
	}
	reload()
	status := func(url string) int {
		t.Helper()
		code, _ := browserGet(t, url)
		return code
	}
	if s := status(old.ClickURL); s != http.StatusFound {
		t.Errorf("a click URL signed before the rotation: %d", s)
	}
	fresh := decideFrom(t, m, "203.0.113.7").Decisions[0]
	if s := status(fresh.ImpressionURL); s != http.StatusOK {
		t.Errorf("an impression URL signed after the rotation: %d", s)
	}
	// The old key dropped: its URLs are refused, the new ones still work.
	if err := os.WriteFile(keys, []byte("k2 "+strings.Repeat("n", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reload()
	if s := status(old.ImpressionURL); s != http.StatusBadRequest {
		t.Errorf("a URL of a dropped key: %d, want 400", s)
	}
	if s := status(fresh.ClickURL); s != http.StatusFound {
		t.Errorf("a URL of the current key: %d", s)
	}
	// A broken keys file fails the reload and keeps the keys in use.
	if err := os.WriteFile(keys, []byte("k3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _ := loadConfig("", env, io.Discard)
	if _, err := m.Reload(cfg); err == nil {
		t.Errorf("a broken keys file: %v", err)
	}
	if s := status(fresh.ClickURL); s != http.StatusFound {
		t.Errorf("after a failed reload: %d", s)
	}
}

var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// browserUA is a browser's User-Agent: Go's own is a crawler's, and a
// crawler gets no ad.
const browserUA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"

// browserGet is get as a browser, not following redirects.
func browserGet(t *testing.T, url string) (int, string) {
	t.Helper()
	return getAs(t, noFollow, url, browserUA)
}

// A store that cannot keep campaigns is refused at start with the key to
// change; ads.enabled: false starts without the ads routes.
func TestAdsDisabled(t *testing.T) {
	m := openMain(t, append(testEnv(t), "TSUBAME_ADS_ENABLED=false"), false)
	if code, _ := get(t, "http://"+m.PublicAddr()+"/api/decide?placement=top"); code != http.StatusNotFound {
		t.Errorf("/api/decide with ads off: %d", code)
	}
}

// serve -demo (make run) loads demo campaigns into a campaign store never
// written, so /api/decide and a source: decide endpoint answer at once;
// a store that holds campaigns keeps its own.
func TestDemoCampaigns(t *testing.T) {
	env := testEnv(t)
	m := openMain(t, env, true)
	code, body := browserGet(t, "http://"+m.PublicAddr()+"/api/decide?placement=1&uid=u&kv.section=sports")
	if code != http.StatusOK || !strings.Contains(body, `"line_item":"demo-coffee-sports"`) {
		t.Fatalf("demo decide: %d %s", code, body)
	}
	code, body = browserGet(t, "http://"+m.PublicAddr()+"/api/decide?placement=preroll&uid=u")
	if code, _ := get(t, "http://"+m.PublicAddr()+"/api/decide?placement=1&uid=u"); code != http.StatusNoContent {
		t.Errorf("Go's HTTP client, a crawler: %d, want 204", code)
	}
	if code != http.StatusOK || !strings.Contains(body, `"format":"video"`) {
		t.Fatalf("demo video: %d %s", code, body)
	}
	putCampaigns(t, m, adsSet)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = openMain(t, env, true)
	if _, err := m.ads.engine.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := m.ads.engine.Index().Len(); n != 2 {
		t.Errorf("after a restart with -demo: %d line items, want the store's 2", n)
	}
}

// A reload applies a new release of the geo database, and a site's
// privacy mode, without a restart.
func TestAdsReloadGeoAndPrivacy(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "geo.mmdb")
	geotest.Write(t, dbPath, map[string]geo.Location{"203.0.113.0/24": {Country: "US", Region: "US-CA"}})
	env := append(testEnv(t), "TSUBAME_GEO_DATABASE="+dbPath, "TSUBAME_SERVER_TRUSTED_PROXIES=127.0.0.1")
	m := openMain(t, env, false)
	putCampaigns(t, m, adsSet)
	if a := decideFrom(t, m, "203.0.113.7"); a.Decisions[0].LineItem != "li-all" {
		t.Fatalf("before: %s", a.Decisions[0].LineItem)
	}
	geotest.Write(t, dbPath, map[string]geo.Location{"203.0.113.0/24": {Country: "JP", Region: "JP-13"}})
	cfg, err := loadConfig("", append(env, "TSUBAME_ADS_PRIVACY=no_cookies"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if restart, err := m.Reload(cfg); err != nil || len(restart) != 0 {
		t.Fatalf("Reload: %v, needs restart %v", err, restart)
	}
	if a := decideFrom(t, m, "203.0.113.7"); a.Decisions[0].LineItem != "li-jp" {
		t.Errorf("after the database's new release: %s", a.Decisions[0].LineItem)
	}
	req, _ := http.NewRequest("GET", "http://"+m.PublicAddr()+"/api/decide?placement=top", nil)
	req.Header.Set("User-Agent", browserUA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("ads.privacy: no_cookies after the reload: %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	// A database that does not open fails the reload; the one in use stays.
	if err := os.WriteFile(dbPath+".bad", []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _ = loadConfig("", append(env, "TSUBAME_GEO_DATABASE="+dbPath+".bad"), io.Discard)
	if _, err := m.Reload(cfg); err == nil {
		t.Error("a reload with a broken geo database succeeded")
	}
	if a := decideFrom(t, m, "203.0.113.7"); a.Decisions[0].LineItem != "li-jp" {
		t.Errorf("after the failed reload: %s", a.Decisions[0].LineItem)
	}
}

// A write through the admin API is served by this process at once, not at
// the next refresh tick (an hour here).
func TestAdminWriteReachesTheIndex(t *testing.T) {
	m := openMain(t, append(testEnv(t), "TSUBAME_ADS_REFRESH=1h"), false)
	token := adminToken(t, m)
	putCampaigns(t, m, adsSet) // and the engine told, as a test
	if a := decideFrom(t, m, "198.51.100.7"); a.Decisions[0].LineItem != "li-all" {
		t.Fatalf("before: %s", a.Decisions[0].LineItem)
	}
	body := `{"id": "li-all", "campaign": "spring", "priority": 5, "weight": 1, "cpm": "0.5", "creatives": ["b1"],
	  "targeting": {"placements": ["top"]}, "status": "paused"}`
	req, _ := http.NewRequest("PUT", "http://"+m.AdminAddr()+"/api/v1/line-items/li-all", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %d %s", resp.StatusCode, msg)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := browserGet(t, "http://"+m.PublicAddr()+"/api/decide?placement=top&uid=u")
		if code == http.StatusNoContent {
			break // the paused line item left the index
		}
		if time.Now().After(deadline) {
			t.Fatalf("the paused line item still serves: %d", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The real Main on its embedded store keeps a line item's impression limit:
// li-jp (a limit of 5) serves exactly 5 shown impressions, then li-all
// serves; the store's committed count is 5, and /metrics counts the
// reservations billed by their impressions, none left open.
func TestImpressionLimitEndToEnd(t *testing.T) {
	env := append(testEnv(t), "TSUBAME_ADS_BUDGET_INTERVAL=20ms", "TSUBAME_ADMIN_METRICS_PUBLIC=true", "TSUBAME_ADS_BUDGET_HISTORY_EVERY=1s")
	m := openMain(t, env, false)
	putCampaigns(t, m, strings.Replace(adsSet, `"targeting": {"placements": ["top"], "countries": ["JP"], "regions": ["JP-13"]}`,
		`"targeting": {"placements": ["top"]}, "limits": {"impressions": {"total": 5}}`, 1))
	// The first decisions pass li-jp over while its lease is taken (in the
	// background: no decision waits for the store); then it serves 5, and
	// nothing more however long it is asked.
	shown, quietSince := 0, time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for time.Since(quietSince) < 2*time.Second && time.Now().Before(deadline) {
		d := decideFrom(t, m, "203.0.113.7").Decisions[0]
		if d.LineItem != "li-jp" {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		quietSince = time.Now()
		if code, body := browserGet(t, d.ImpressionURL); code != http.StatusOK {
			t.Fatalf("impression: %d %s", code, body)
		}
		shown++
	}
	if shown != 5 {
		t.Fatalf("%d impressions of li-jp shown on a limit of 5", shown)
	}
	s, o, err := m.backend.(tsubame.Quotas).Committed(t.Context(), "li/li-jp/imp")
	if err != nil || s+o != 5 {
		t.Fatalf("the store commits %d + %d (%v), want 5", s, o, err)
	}
	// The dashboard's history recorded the line item's delivery.
	waitUntil(t, "the history to record 5 committed", func() bool {
		us := []budget.Usage{{Key: "li/li-jp/imp"}}
		m.ads.history.Fill(us)
		c := us[0].Committed
		return len(c) > 0 && c[len(c)-1].Value == 5
	})
	// Each impression billed its decision at once: nothing is held.
	waitUntil(t, "/metrics to count 5 billed and none held", func() bool {
		code, body := get(t, "http://"+m.AdminAddr()+"/metrics")
		return code == http.StatusOK && strings.Contains(body, "tsubame_budget_reservations_billed_total 5\n") &&
			strings.Contains(body, "tsubame_budget_reservations_open 0\n")
	})
	// And the decision index its line items and compiles.
	code, body := get(t, "http://"+m.AdminAddr()+"/metrics")
	if want := fmt.Sprintf("tsubame_decision_index_line_items %d\n", m.ads.engine.Index().Len()); code != http.StatusOK ||
		!strings.Contains(body, want) || strings.Contains(body, "tsubame_decision_index_compiles_total 0\n") {
		t.Fatalf("/metrics: %d, want %q and a compile in:\n%s", code, want, grepLines(body, "decision_index"))
	}
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
