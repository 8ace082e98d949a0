package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/store/redis/redistest"
)

const exampleCampaigns = "testdata/campaigns.yaml"

// exportJSON runs `campaigns export` to standard output and returns it.
func exportJSON(t *testing.T, env []string) string {
	t.Helper()
	code, out, stderr := runCmd(t, env, "", "campaigns", "export")
	if code != 0 {
		t.Fatalf("export: %d %s", code, stderr)
	}
	return out
}

func TestCampaignsCLI(t *testing.T) {
	env := testEnv(t)
	dir := t.TempDir()
	code, _, stderr := runCmd(t, env, "", "campaigns", "import", exampleCampaigns)
	if code != 0 || !strings.Contains(stderr, "imported testdata/campaigns.yaml (merge): 2 advertisers, 2 campaigns, 3 creatives, 3 line_items") {
		t.Fatalf("import: %d %s", code, stderr)
	}
	out := exportJSON(t, env)
	var set tsubame.CampaignSet
	if err := json.Unmarshal([]byte(out), &set); err != nil {
		t.Fatalf("export is not the set: %v\n%s", err, out)
	}
	if len(set.LineItems) != 3 || set.LineItems[1].ID != "li-spring-mornings" || !set.LineItems[1].Paused() ||
		set.LineItems[1].CPM != 420_500_000 || set.Currency != "JPY" {
		t.Fatalf("exported %+v", set.LineItems)
	}

	// Round trip: a YAML export, imported in place of everything, exports
	// the same file again.
	yamlFile := filepath.Join(dir, "out.yaml")
	if code, _, stderr := runCmd(t, env, "", "campaigns", "export", yamlFile); code != 0 || !strings.Contains(stderr, "exported 2 advertisers") {
		t.Fatalf("export to a file: %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, env, "advertisers: [{id: other, name: Other}]\n", "campaigns", "import", "-replace", "-"); code != 0 ||
		!strings.Contains(stderr, "the store holds 1 advertisers, 0 campaigns") {
		t.Fatalf("replace from standard input: %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, env, "", "campaigns", "import", "-replace", yamlFile); code != 0 {
		t.Fatalf("import the export: %d %s", code, stderr)
	}
	if again := exportJSON(t, env); again != out {
		t.Fatalf("the round trip changed the set:\n%s\n---\n%s", out, again)
	}
	if code, yamlOut, _ := runCmd(t, env, "", "campaigns", "export", "-format", "yaml"); code != 0 || !strings.HasPrefix(yamlOut, "currency: JPY\nadvertisers:\n") {
		t.Fatalf("YAML export: %d %s", code, yamlOut)
	}

	// Line items as CSV: exported to a .csv file, edited, merged back; a
	// CSV never replaces the set.
	csvFile := filepath.Join(dir, "line-items.csv")
	if code, _, stderr := runCmd(t, env, "", "campaigns", "export", csvFile); code != 0 {
		t.Fatalf("CSV export: %d %s", code, stderr)
	}
	sheet, err := os.ReadFile(csvFile)
	if err != nil || !strings.HasPrefix(string(sheet), "id,name,campaign,status,priority,weight,cpm,") || strings.Count(string(sheet), "\n") != 4 {
		t.Fatalf("the CSV: %v\n%s", err, sheet)
	}
	edited := strings.Replace(string(sheet), ",420.5,", ",421,", 1)
	if err := os.WriteFile(csvFile, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, env, "", "campaigns", "import", csvFile); code != 0 ||
		!strings.Contains(stderr, "(merge): 0 advertisers, 0 campaigns, 0 creatives, 3 line_items") {
		t.Fatalf("CSV import: %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, env, "", "campaigns", "import", "-replace", csvFile); code != 2 || !strings.Contains(stderr, "can only be merged") {
		t.Fatalf("a CSV replacing the set: %d %s", code, stderr)
	}
	var after tsubame.CampaignSet
	if err := json.Unmarshal([]byte(exportJSON(t, env)), &after); err != nil || after.LineItems[1].CPM != 421_000_000 {
		t.Fatalf("after the CSV import: %v %+v", err, after.LineItems)
	}
	if code, _, stderr := runCmd(t, env, "", "campaigns", "import", "-replace", yamlFile); code != 0 {
		t.Fatalf("import the YAML export again: %d %s", code, stderr)
	}

	// A file with several problems: all of them, with file, line, item and
	// field; nothing written.
	bad := filepath.Join(dir, "bad.json")
	badFile := `{
  "line_items": [
    {"id": "li-spring-tokyo", "campaign": "camp-spring", "priority": 99, "weight": 1, "cpm": "1", "creatives": ["cr-spring-300x250"]},
    {"id": "li-new", "campaign": "camp-gone", "priority": 1, "weight": 1, "cpm": "0.0000001", "creatives": ["cr-okinawa-video"]},
    {"id": "li-new2", "campaign": "camp-spring", "priority": 1, "weight": 1, "cpm": "1", "creatives": ["cr-okinawa-video"], "targetting": {}}
  ]
}`
	if err := os.WriteFile(bad, []byte(badFile), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCmd(t, env, "", "campaigns", "import", bad)
	for _, want := range []string{
		"tsubame: 5 problems, nothing imported:\n",
		bad + `:3: line_items[0] (id "li-spring-tokyo").priority: must be 1 to 16, not 99` + "\n",
		bad + `:4: line_items[1] (id "li-new").cpm: amount "0.0000001": more than 6 decimals (the smallest amount is 0.000001)` + "\n",
		bad + `:4: line_items[1] (id "li-new").campaign: campaign "camp-gone" does not exist` + "\n",
		bad + `:5: line_items[2] (id "li-new2").targetting: unknown field` + "\n",
		bad + `:5: line_items[2] (id "li-new2").creatives[0]: creative "cr-okinawa-video" belongs to advertiser "adv-kaze", not to the campaign's advertiser "adv-sakura"` + "\n",
	} {
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("bad import: %d\n%s\nwant %q", code, stderr, want)
		}
	}
	if after := exportJSON(t, env); after != out {
		t.Fatal("a refused import changed the store")
	}

	// Usage errors.
	for _, args := range [][]string{{"campaigns"}, {"campaigns", "list"}, {"campaigns", "import"}, {"campaigns", "import", "-format", "toml", "x.yaml"},
		{"campaigns", "export", "a", "b"}} {
		if code, _, _ := runCmd(t, env, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, stderr := runCmd(t, []string{"TSUBAME_STORE=memory"}, "", "campaigns", "export"); code != 2 || !strings.Contains(stderr, "memory") {
		t.Errorf("memory store: %d %s", code, stderr)
	}

	// The imports are in the audit log, the refused one not.
	cfg, err := loadConfig("", env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var imports []string
	for _, rec := range auditRecords(t, cfg.AuditLogPath()) {
		if rec.Action == "campaigns.import" {
			imports = append(imports, rec.Target)
		}
	}
	want := []string{
		"merge: 2 advertisers, 2 campaigns, 3 creatives, 3 line_items",
		"replace: 1 advertisers, 0 campaigns, 0 creatives, 0 line_items",
		"replace: 2 advertisers, 2 campaigns, 3 creatives, 3 line_items",
		"merge: 0 advertisers, 0 campaigns, 0 creatives, 3 line_items", // the CSV
		"replace: 2 advertisers, 2 campaigns, 3 creatives, 3 line_items",
	}
	if strings.Join(imports, "\n") != strings.Join(want, "\n") {
		t.Errorf("audited imports:\n%s\nwant:\n%s", strings.Join(imports, "\n"), strings.Join(want, "\n"))
	}
}

// postCampaigns imports a campaign file through a running server's admin API.
func postCampaigns(t *testing.T, m *Main, token, file string) (int, string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req, _ := http.NewRequest("POST", "http://"+m.AdminAddr()+"/api/v1/campaigns/import", f)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/yaml")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// While a server without a control socket holds the embedded store, the
// campaign commands name the admin API route that does the same; the
// server's admin API imports.
func TestCampaignsCLIWhileServerRuns(t *testing.T) {
	env := append(testEnv(t), "TSUBAME_ADMIN_SOCKET=off")
	m := openMain(t, env, false)
	for args, route := range map[string]string{"import " + exampleCampaigns: "POST /api/v1/campaigns/import", "export": "GET /api/v1/campaigns/export"} {
		code, _, stderr := runCmd(t, env, "", append([]string{"campaigns"}, strings.Fields(args)...)...)
		if code != 1 || !strings.Contains(stderr, "in use by another process") || !strings.Contains(stderr, route) {
			t.Errorf("campaigns %s: %d %s", args, code, stderr)
		}
	}
	token := adminToken(t, m)
	if code, body := postCampaigns(t, m, token, exampleCampaigns); code != 200 || !strings.Contains(body, `"line_items":3`) {
		t.Fatalf("import through the admin API: %d %s", code, body)
	}
	status, body := getWith(t, "http://"+m.AdminAddr()+"/api/v1/line-items/li-spring-mornings", token)
	var li tsubame.LineItem
	if err := json.Unmarshal([]byte(body), &li); err != nil || !li.Paused() {
		t.Fatalf("line item through the admin API: %d %+v %v", status, li, err)
	}
}

// On Redis the CLI writes while servers run; they read the same set.
func TestCampaignsCLIOnRedis(t *testing.T) {
	// The decision engine is another test's: this one is about the store.
	env := append(redisEnv(t, redistest.Start(t).Addr), "TSUBAME_ADS_ENABLED=false")
	m := openMain(t, env, false)
	if code, _, stderr := runCmd(t, env, "", "campaigns", "import", exampleCampaigns); code != 0 {
		t.Fatalf("import beside a running server: %d %s", code, stderr)
	}
	token := adminToken(t, m)
	status, served := getWith(t, "http://"+m.AdminAddr()+"/api/v1/campaigns/export?format=yaml", token)
	code, exported, _ := runCmd(t, env, "", "campaigns", "export", "-format", "yaml")
	if status != 200 || code != 0 || served != exported || !strings.Contains(exported, "li-okinawa-preroll") {
		t.Fatalf("the server's export (%d) differs from the CLI's (%d):\n%s\n---\n%s", status, code, served, exported)
	}
}
