package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"tsubame"
)

// store audit on the binary's embedded store: through the running server's
// control socket (it holds the file), as a table and as JSON, and with the
// server stopped, from the file itself.
func TestStoreAuditCommand(t *testing.T) {
	p := startBinary(t)
	env := []string{"TSUBAME_DATA_DIR=" + p.dataDir}
	exit, out, stderr := runCmd(t, env, "", "store", "audit")
	if exit != 0 || !strings.Contains(stderr, "control socket") || !regexp.MustCompile(`(?m)^placements +1000 +1000 +[1-9]\d* `).MatchString(out) ||
		!strings.Contains(out, "embedded store") {
		t.Fatalf("store audit: %d\n%s\n%s", exit, out, stderr)
	}
	audit := func() tsubame.StoreAudit {
		t.Helper()
		exit, out, stderr := runCmd(t, env, "", "store", "audit", "-format", "json")
		var a tsubame.StoreAudit
		if exit != 0 || json.Unmarshal([]byte(out), &a) != nil {
			t.Fatalf("store audit -format json: %d %s %s", exit, out, stderr)
		}
		return a
	}
	byName := func(a tsubame.StoreAudit) map[string]tsubame.AuditFamily {
		m := map[string]tsubame.AuditFamily{}
		for _, f := range a.Families {
			m[f.Name] = f
		}
		return m
	}
	a := audit()
	if f := byName(a)["line_items"]; a.Store != "embedded" || f.Keys != 4 {
		t.Errorf("the demo's line items: %+v in %+v", f, a)
	}
	if exit, out, stderr := runCmd(t, env, "", "store", "audit", "-expire-past-days"); exit != 0 || !strings.Contains(out, "given theirs, 0") {
		t.Errorf("-expire-past-days: %d %s %s", exit, out, stderr)
	}
	if exit, _, stderr := runCmd(t, env, "", "store", "audit", "-format", "xml"); exit != 2 || !strings.Contains(stderr, "table, json") {
		t.Errorf("-format xml: %d %s", exit, stderr)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("the server's stop: %v", err)
	}
	if b := audit(); len(b.Families) != len(a.Families) || byName(b)["placements"].Keys != 1000 {
		t.Errorf("without the server: %+v", b)
	}
}
