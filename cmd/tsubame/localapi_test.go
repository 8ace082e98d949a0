package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tsubame/internal/admin"
)

// shortEnv is testEnv with the data in a directory of a short path: the
// control socket's path (in it) may have at most 107 bytes.
func shortEnv(t *testing.T) []string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return []string{
		"TSUBAME_LISTEN=127.0.0.1:0",
		"TSUBAME_ADMIN_LISTEN=127.0.0.1:0",
		"TSUBAME_DATA_DIR=" + dir,
		"TSUBAME_ACCESS_LOG_DIR=" + t.TempDir(),
	}
}

// auditRecords reads the audit log's active file.
func auditRecords(t *testing.T, path string) []admin.AuditRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []admin.AuditRecord
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec admin.AuditRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// runOK runs a command that must succeed and returns its output.
func runOK(t *testing.T, env []string, stdin string, args ...string) (string, string) {
	t.Helper()
	code, out, stderr := runCmd(t, env, stdin, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d\n%s", args, code, stderr)
	}
	return out, stderr
}

// testCampaigns is a campaign merged into testdata/campaigns.yaml: a line
// item for placement top, in flight whenever the test runs.
const testCampaigns = `currency: JPY
advertisers: [{id: adv-test, name: Test}]
campaigns: [{id: camp-test, advertiser: adv-test}]
creatives:
  - {id: cr-test, advertiser: adv-test, format: banner, w: 300, h: 250, image: "https://cdn.test.example/b.png",
     click: "https://test.example/", status: approved}
line_items:
  - {id: li-test-top, campaign: camp-test, priority: 1, weight: 1, cpm: "100", creatives: [cr-test], targeting: {placements: [top]}}
`

// While a server holds the embedded store, the data commands go through
// its control socket: they succeed, say so, print what they print on the
// store itself, and the server serves the change at once.
func TestDataCommandsThroughServer(t *testing.T) {
	env := append(shortEnv(t), "TSUBAME_ADS_CURRENCY=JPY")
	m := openMain(t, env, false)
	through := "the store is held by the running server (pid " + strconv.Itoa(os.Getpid()) + "): going through its control socket " +
		m.Config.AdminSocketPath() + "\n"
	if fi, err := os.Lstat(m.Config.AdminSocketPath()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket: %v %v", fi, err)
	}
	serves := func(id, want string) {
		t.Helper()
		code, body := get(t, "http://"+m.PublicAddr()+"/api/sample3.js?callback=cb&id="+id)
		if code != 200 || body != `cb({"urls":["`+want+`"]});` {
			t.Errorf("placement %s: %d %s, want %s", id, code, body, want)
		}
	}

	// Placements.
	file := filepath.Join(t.TempDir(), "in.jsonl")
	in := `{"id":"a","urls":["https://a.example.com/1.js"]}
{"id":"b","urls":["https://b.example.com/1.js"],"deps":["campaign:9"]}
`
	if err := os.WriteFile(file, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr := runOK(t, env, "", "placements", "import", file)
	if !strings.HasPrefix(stderr, "tsubame: "+through+"imported 2 placement(s) from "+file+" in ") {
		t.Errorf("import:\n%s", stderr)
	}
	serves("a", "https://a.example.com/1.js")
	// The write goes through the server's cache: the cached value goes.
	if _, stderr := runOK(t, env, "", "placements", "put", "a", "https://a.example.com/2.js"); !strings.HasSuffix(stderr, `placement "a" saved`+"\n") {
		t.Errorf("put: %s", stderr)
	}
	serves("a", "https://a.example.com/2.js")
	if out, _ := runOK(t, env, "", "placements", "get", "b"); !strings.Contains(out, `"campaign:9"`) || !strings.HasPrefix(out, "{\n  \"id\": \"b\"") {
		t.Errorf("get: %s", out)
	}
	runOK(t, env, "", "placements", "put", "c", "https://c.example.com/1.js")
	if _, stderr := runOK(t, env, "", "placements", "delete", "c"); !strings.HasSuffix(stderr, `placement "c" deleted`+"\n") {
		t.Errorf("delete: %s", stderr)
	}
	if code, _, stderr := runCmd(t, env, "", "placements", "get", "c"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("get a deleted placement: %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, env, "", "placements", "get", "a/b"); code != 2 || !strings.Contains(stderr, "placement id may contain only") {
		t.Errorf("get an invalid id: %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, env, "", "placements", "put", "x", "javascript:alert(1)"); code != 2 || !strings.HasSuffix(stderr, `tsubame: placement "x" url 1: must be an absolute http or https URL`+"\n") {
		t.Errorf("an invalid put: %d %s", code, stderr)
	}
	bad := `{"id":"e","urls":["https://e.example.com/1.js"]}
{"id":"f","urls":["not a url"]}
{"id":"g"
`
	code, _, stderr := runCmd(t, env, bad, "placements", "import")
	if code != 2 || !strings.Contains(stderr, "tsubame: standard input: 2 bad line(s), nothing imported:\n  line 2: ") || !strings.Contains(stderr, "\n  line 3: ") {
		t.Errorf("a bad import: %d %s", code, stderr)
	}
	if code, _, _ := runCmd(t, env, "", "placements", "get", "e"); code != 1 {
		t.Error("a line of a refused import was written")
	}
	placements, stderr := runOK(t, env, "", "placements", "export")
	if stderr != "tsubame: "+through+"exported 2 placement(s)\n" {
		t.Errorf("export: %s", stderr)
	}

	// Campaigns.
	_, stderr = runOK(t, env, "", "campaigns", "import", exampleCampaigns)
	if want := "tsubame: " + through + "imported testdata/campaigns.yaml (merge): 2 advertisers, 2 campaigns, 3 creatives, 3 line_items\n" +
		"the store holds 2 advertisers, 2 campaigns, 3 creatives, 3 line_items\n"; stderr != want {
		t.Errorf("campaigns import:\n%s\nwant:\n%s", stderr, want)
	}
	if _, stderr := runOK(t, env, testCampaigns, "campaigns", "import", "-"); !strings.HasSuffix(stderr, "the store holds 3 advertisers, 3 campaigns, 4 creatives, 4 line_items\n") {
		t.Errorf("campaigns import from standard input: %s", stderr)
	}
	deadline := time.Now().Add(20 * time.Second) // the index is rebuilt within ads.refresh
	for {
		code, body := browserGet(t, "http://"+m.PublicAddr()+"/api/decide?placement=top&uid=u-1")
		if code == http.StatusOK && strings.Contains(body, `"line_item":"li-test-top"`) {
			break
		}
		if code != http.StatusNoContent || time.Now().After(deadline) {
			t.Fatalf("decide: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	campaigns, _ := runOK(t, env, "", "campaigns", "export")
	badFile := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(badFile, []byte(`{
  "line_items": [
    {"id": "li-spring-tokyo", "campaign": "camp-spring", "priority": 99, "weight": 1, "cpm": "1", "creatives": ["cr-spring-300x250"]},
    {"id": "li-new", "campaign": "camp-gone", "priority": 1, "weight": 1, "cpm": "1", "creatives": ["cr-okinawa-video"], "targetting": {}}
  ]
}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCmd(t, env, "", "campaigns", "import", badFile)
	problems := "tsubame: 3 problems, nothing imported:\n" +
		badFile + `:3: line_items[0] (id "li-spring-tokyo").priority: must be 1 to 16, not 99` + "\n" +
		badFile + `:4: line_items[1] (id "li-new").targetting: unknown field` + "\n" +
		badFile + `:4: line_items[1] (id "li-new").campaign: campaign "camp-gone" does not exist` + "\n"
	if code != 2 || stderr != "tsubame: "+through+problems {
		t.Errorf("a bad campaign file: %d\n%s\nwant:\n%s", code, stderr, problems)
	}
	if after, _ := runOK(t, env, "", "campaigns", "export"); after != campaigns {
		t.Error("a refused campaign import changed the set")
	}

	// Every change is audited as this user on the socket.
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	actor := "local:" + u.Username + "(uid " + u.Uid + ")"
	var audited []string
	for _, rec := range auditRecords(t, m.Config.AuditLogPath()) {
		if rec.Actor == actor && rec.Remote == "local" {
			audited = append(audited, rec.Action+" "+rec.Target+" "+rec.Result)
		}
	}
	for _, want := range []string{"placement.import 2 placements ok", "placement.put a ok", "placement.delete c ok", "placement.put x invalid",
		"campaigns.import merge: 2 advertisers, 2 campaigns, 3 creatives, 3 line_items ok",
		"campaigns.import merge: 0 advertisers, 0 campaigns, 0 creatives, 2 line_items invalid"} {
		if !strings.Contains(strings.Join(audited, "\n"), want) {
			t.Errorf("no audit line %q by %s in:\n%s", want, actor, strings.Join(audited, "\n"))
		}
	}

	// What went through the server is what the commands print on the
	// store itself.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(m.Config.AdminSocketPath()); !os.IsNotExist(err) {
		t.Errorf("the control socket outlives the server: %v", err)
	}
	if direct, stderr := runOK(t, env, "", "placements", "export"); direct != placements || strings.Contains(stderr, "control socket") {
		t.Errorf("placements export on the store itself differs:\n%s\n---\n%s", direct, placements)
	}
	if direct, _ := runOK(t, env, "", "campaigns", "export"); direct != campaigns {
		t.Errorf("campaigns export on the store itself differs:\n%s\n---\n%s", direct, campaigns)
	}
	if code, _, stderr := runCmd(t, env, "", "campaigns", "import", badFile); code != 2 || stderr != problems {
		t.Errorf("the bad campaign file on the store itself: %d\n%s\nwant:\n%s", code, stderr, problems)
	}
}
