package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// An editor runs advertisers and campaigns from the dashboard: creates an
// advertiser and a campaign through their forms (the API's problems shown
// on their fields, all at once, first), edits, duplicates, pauses,
// archives and restores them; what the API stores is what the forms
// showed, a campaign's start and end written as instants of its time zone
// (summer and winter offsets apart). A viewer sees the tables and no tool
// to change them.
func TestDashboardAdvertisersAndCampaignsInBrowser(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	adminURL := "http://" + adminAddr
	login := dashboardUser(t, p, "ed", "editor")
	watcher := dashboardUser(t, p, "watcher", "viewer")
	exit, token, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir}, "", "admin", "create-token", "-user", "ed", "-name", "objects")
	token = strings.TrimSpace(token)
	if exit != 0 || token == "" {
		t.Fatalf("create-token: %d %s", exit, stderr)
	}
	// stored reads an object from the API.
	stored := func(path string) map[string]any {
		t.Helper()
		code, body := getWith(t, adminURL+"/api/v1/"+path, token)
		var o map[string]any
		if err := json.Unmarshal([]byte(body), &o); err != nil || code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		return o
	}
	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	watch := watchConsole(t, ctx)
	b.do("open the page", chromedp.Navigate(adminURL+"/"))
	login(b)
	b.loaded()
	b.do("the tables", chromedp.WaitVisible(css(`#advertisers tr[data-id="demo-coffee"]`)), chromedp.WaitVisible(css(`#camps tr[data-id="demo-travel-winter"]`)))
	if got := b.text("h2:has(+ #campaigns-body)"); !strings.HasPrefix(got, "Line items") {
		t.Errorf("the line items' heading: %q", got)
	}
	// The form's conversions between a zone's wall clock and RFC 3339,
	// each checked against Go's reading of the zone.
	for _, tc := range []struct{ local, zone, want string }{
		{"2026-11-01T00:00", "Asia/Tokyo", "2026-11-01T00:00:00+09:00"},
		{"2026-11-01T00:00", "UTC", "2026-11-01T00:00:00+00:00"},
		{"2026-12-31T23:59:30", "Asia/Kolkata", "2026-12-31T23:59:30+05:30"},
		{"2026-07-01T09:30", "America/New_York", "2026-07-01T09:30:00-04:00"},
		{"2027-01-15T18:00", "America/New_York", "2027-01-15T18:00:00-05:00"},
		{"2026-03-29T12:00", "Europe/Paris", "2026-03-29T12:00:00+02:00"},
		// A time the spring change skips: the offset before it.
		{"2026-03-08T02:30", "America/New_York", "2026-03-08T02:30:00-05:00"},
	} {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(`[zoneInstant(%q, %q), zoneInput(%q, %q)]`, tc.local, tc.zone, tc.want, tc.zone)))
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != tc.want {
			t.Errorf("%s in %s: %s, want %s", tc.local, tc.zone, got[0], tc.want)
		}
		loc, err := time.LoadLocation(tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse(time.RFC3339, tc.want)
		if err != nil {
			t.Fatal(err)
		}
		wall := at.In(loc).Format("2006-01-02T15:04")
		if at.Second() != 0 {
			wall = at.In(loc).Format("2006-01-02T15:04:05")
		}
		if got[1] != wall {
			t.Errorf("%s shown in %s: %s, want %s", tc.want, tc.zone, got[1], wall)
		}
	}
	field := func(id string) string {
		t.Helper()
		return b.text(fmt.Sprintf(`#%s-problem`, id))
	}
	invalid := func(ids ...string) string {
		var conds []string
		for _, id := range ids {
			conds = append(conds, fmt.Sprintf(`document.getElementById(%q).getAttribute("aria-invalid") === "true"`, id))
		}
		return strings.Join(conds, " && ")
	}
	input := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.getElementById(%q).value`, id)))
		if err != nil {
			t.Fatalf("value of #%s: %v", id, err)
		}
		return v
	}

	// A new advertiser: a domain the model refuses, shown on its field.
	b.do("a new advertiser with a bad domain",
		chromedp.Click(css("#adv-new")),
		chromedp.WaitVisible(css("#adv-form")),
		chromedp.SetValue(css("#adv-id"), "acme"),
		chromedp.SetValue(css("#adv-name"), "Acme Corp"),
		chromedp.SetValue(css("#adv-domains"), "acme.example\nShop.Acme.example"),
		chromedp.Click(css("#adv-save")),
		b.until(invalid("adv-domains"), 10*time.Second),
	)
	if got := field("adv-domains"); !strings.Contains(got, "domains[1]") || !strings.Contains(got, "lower-case domain") {
		t.Errorf("the domains' problem: %q", got)
	}
	b.do("fix it and save",
		chromedp.SetValue(css("#adv-domains"), "acme.example\nshop.acme.example"),
		chromedp.Click(css("#adv-save")),
		b.until(`document.getElementById("adv-status").textContent === "Saved acme."`, 10*time.Second),
		chromedp.WaitVisible(css(`#advertisers tr[data-id="acme"]`)),
	)
	if a := stored("advertisers/acme"); a["name"] != "Acme Corp" || fmt.Sprint(a["domains"]) != "[acme.example shop.acme.example]" || a["status"] != nil {
		t.Errorf("the stored advertiser: %v", a)
	}
	if got := b.text(`#advertisers tr[data-id="acme"]`); !strings.Contains(got, "Acme Corp") || !strings.Contains(got, "acme.example, shop.acme.example") {
		t.Errorf("the advertiser's row: %q", got)
	}
	b.do("close it", chromedp.Click(css("#adv-close")))

	// A new campaign: its end before its start and a budget of 0, both
	// told on their fields at once.
	b.do("a new campaign with problems",
		chromedp.Click(css("#camp-new")),
		chromedp.WaitVisible(css("#camp-form")),
		b.until(`document.getElementById("camp-timezone").value === "Asia/Tokyo"`, 10*time.Second),
		chromedp.SetValue(css("#camp-id"), "acme-spring"),
		chromedp.SetValue(css("#camp-name"), "Spring"),
		chromedp.SetValue(css("#camp-advertiser"), "acme"),
		chromedp.SetValue(css("#camp-timezone"), "America/New_York"),
		chromedp.SetValue(css("#camp-start"), "2026-07-01T09:30"),
		chromedp.SetValue(css("#camp-end"), "2026-06-01T00:00"),
		chromedp.SetValue(css("#camp-budget-total"), "0"),
		chromedp.SetValue(css("#camp-budget-daily"), "500.5"),
		chromedp.SetValue(css("#camp-pacing"), "frontloaded"),
		chromedp.Click(css("#camp-save")),
		b.until(invalid("camp-end", "camp-budget-total"), 10*time.Second),
	)
	if got := field("camp-end"); !strings.Contains(got, "must be after start (2026-07-01T09:30:00-04:00)") {
		t.Errorf("the end's problem: %q", got)
	}
	if got := field("camp-budget-total"); !strings.Contains(got, "0 is no budget") {
		t.Errorf("the total budget's problem: %q", got)
	}
	if got := b.text("#camp-edit-status"); got != "Not saved: 2 problems, shown on the fields." {
		t.Errorf("the form's status: %q", got)
	}
	if code, _ := getWith(t, adminURL+"/api/v1/campaigns/acme-spring", token); code != 404 {
		t.Errorf("the refused campaign was stored: %d", code)
	}
	b.do("fix them and save",
		chromedp.SetValue(css("#camp-end"), "2027-01-15T18:00"),
		chromedp.SetValue(css("#camp-budget-total"), "15000"),
		chromedp.Click(css("#camp-save")),
		b.until(`document.getElementById("camp-edit-status").textContent === "Saved acme-spring."`, 10*time.Second),
		chromedp.WaitVisible(css(`#camps tr[data-id="acme-spring"]`)),
	)
	if invalidNow := b.eval(`document.querySelectorAll("#camp-form [aria-invalid]").length > 0`); invalidNow {
		t.Error("the saved form still marks fields invalid")
	}
	c := stored("campaigns/acme-spring")
	want := map[string]string{"name": "Spring", "advertiser": "acme", "timezone": "America/New_York", "start": "2026-07-01T09:30:00-04:00",
		"end": "2027-01-15T18:00:00-05:00", "budget": "map[daily:500.5 total:15000]", "pacing": "frontloaded", "status": "<nil>"}
	for k, v := range want {
		if got := fmt.Sprint(c[k]); got != v {
			t.Errorf("the stored campaign's %s: %s, want %s (%v)", k, got, v, c)
		}
	}
	row := b.text(`#camps tr[data-id="acme-spring"]`)
	for _, s := range []string{"Spring", "Acme Corp (acme)", "active", "2026-07-01 09:30 → 2027-01-15 18:00 (America/New_York)", "15000 USD", "500.5 USD", "frontloaded"} {
		if !strings.Contains(row, s) {
			t.Errorf("the campaign's row %q does not show %q", row, s)
		}
	}

	// Edited from its id: the form shows what is stored, in its zone.
	b.do("edit the campaign",
		chromedp.Click(css("#camp-close")),
		chromedp.Click(css(`#camps tr[data-id="acme-spring"] button.link`)),
		chromedp.WaitVisible(css("#camp-form")),
		b.until(`document.getElementById("camp-title").textContent === "Edit campaign acme-spring"`, 10*time.Second),
	)
	for id, v := range map[string]string{"camp-start": "2026-07-01T09:30", "camp-end": "2027-01-15T18:00", "camp-timezone": "America/New_York",
		"camp-budget-total": "15000", "camp-budget-daily": "500.5", "camp-pacing": "frontloaded", "camp-advertiser": "acme", "camp-status": "active"} {
		if got := input(id); got != v {
			t.Errorf("the edit form's %s: %q, want %q", id, got, v)
		}
	}
	b.eval(`(document.getElementById("camp-budget-daily").value = "", true)`)
	b.do("rename it and clear its daily budget",
		chromedp.SetValue(css("#camp-name"), "Spring sale"),
		chromedp.Click(css("#camp-save")),
		b.until(`document.getElementById("camp-edit-status").textContent === "Saved acme-spring."`, 10*time.Second),
		b.until(`document.querySelectorAll("#camp-history li").length === 2`, 10*time.Second),
	)
	c = stored("campaigns/acme-spring")
	if c["name"] != "Spring sale" || fmt.Sprint(c["budget"]) != "map[total:15000]" || c["start"] != "2026-07-01T09:30:00-04:00" {
		t.Errorf("the edited campaign: %v", c)
	}
	if got := b.text("#camp-history"); !strings.Contains(got, "put (") || !strings.Contains(got, `name: "Spring" → "Spring sale"`) || !strings.Contains(got, "put (created)") {
		t.Errorf("the campaign's history: %q", got)
	}

	// A campaign written elsewhere, in UTC's notation and with the model's
	// defaults left out, saved unchanged from the form: nothing changes.
	if code, body := putWith(t, adminURL+"/api/v1/campaigns/acme-utc", token, `{"advertiser": "acme", "start": "2026-11-15T00:00:00Z"}`); code != 200 {
		t.Fatalf("put acme-utc: %d %s", code, body)
	}
	b.eval(`(loadObjects(), true)`)
	b.do("save it from the form unchanged",
		chromedp.WaitVisible(css(`#camps tr[data-id="acme-utc"]`)),
		chromedp.Click(css(`#camps tr[data-id="acme-utc"] button.edit`)),
		b.until(`document.getElementById("camp-start").value === "2026-11-15T09:00" && document.getElementById("camp-timezone").value === "Asia/Tokyo"`, 10*time.Second),
		chromedp.Click(css("#camp-save")),
		b.until(`document.getElementById("camp-edit-status").textContent === "Saved acme-utc."`, 10*time.Second),
		b.until(`document.querySelectorAll("#camp-history li").length === 2`, 10*time.Second),
	)
	if got := b.text("#camp-history li:first-child"); !strings.HasSuffix(got, "put (no change)") {
		t.Errorf("the unchanged save's history: %q", got)
	}
	if c := stored("campaigns/acme-utc"); c["start"] != "2026-11-15T00:00:00Z" || c["timezone"] != nil || c["pacing"] != nil || c["status"] != nil {
		t.Errorf("acme-utc saved unchanged: %v", c)
	}

	// Duplicated: a new id, everything else as the original.
	b.do("duplicate the campaign",
		chromedp.Click(css(`#camps tr[data-id="acme-spring"] button.duplicate`)),
		b.until(`document.getElementById("camp-id").value === "acme-spring-copy"`, 10*time.Second),
	)
	if got := b.text("#camp-title"); got != "New campaign (a copy of acme-spring)" || input("camp-start") != "2026-07-01T09:30" {
		t.Errorf("the copy's form: %q, start %q", got, input("camp-start"))
	}
	b.do("save the copy",
		chromedp.Click(css("#camp-save")),
		b.until(`document.getElementById("camp-edit-status").textContent === "Saved acme-spring-copy."`, 10*time.Second),
		chromedp.WaitVisible(css(`#camps tr[data-id="acme-spring-copy"]`)),
		chromedp.Click(css(`#camps tr[data-id="acme-spring"] button.duplicate`)),
		b.until(`document.getElementById("camp-id").value === "acme-spring-copy-2"`, 10*time.Second),
		chromedp.Click(css("#camp-close")),
	)
	cp := stored("campaigns/acme-spring-copy")
	for _, k := range []string{"name", "advertiser", "timezone", "start", "end", "budget", "pacing", "status"} {
		if fmt.Sprint(cp[k]) != fmt.Sprint(c[k]) {
			t.Errorf("the copy's %s: %v, the original's %v", k, cp[k], c[k])
		}
	}

	// Paused and resumed; archived (out of the table until asked for) and
	// restored.
	b.eval(`(window.confirm = () => true, true)`)
	status := func(table, id string) string {
		return fmt.Sprintf(`document.querySelector('#%s tr[data-id=%q] td.status')?.textContent`, table, id)
	}
	b.do("pause the campaign",
		chromedp.Click(css(`#camps tr[data-id="acme-spring"] button.pause`)),
		b.until(status("camps", "acme-spring")+` === "paused"`, 10*time.Second),
	)
	if s := stored("campaigns/acme-spring")["status"]; s != "paused" {
		t.Errorf("the paused campaign's status: %v", s)
	}
	b.do("resume it",
		chromedp.Click(css(`#camps tr[data-id="acme-spring"] button.pause`)),
		b.until(status("camps", "acme-spring")+` === "active"`, 10*time.Second),
		chromedp.Click(css(`#camps tr[data-id="acme-spring-copy"] button.archive`)),
		b.until(`document.querySelector('#camps tr[data-id="acme-spring-copy"]') === null`, 10*time.Second),
	)
	if s := stored("campaigns/acme-spring")["status"]; s != nil {
		t.Errorf("the resumed campaign's status: %v", s)
	}
	if s := stored("campaigns/acme-spring-copy")["status"]; s != "archived" {
		t.Errorf("the archived campaign's status: %v", s)
	}
	b.do("show the archived campaigns and restore the copy",
		chromedp.Click(css("#camp-show-archived")),
		b.until(status("camps", "acme-spring-copy")+` === "archived"`, 10*time.Second),
		chromedp.Click(css(`#camps tr[data-id="acme-spring-copy"] button.restore`)),
		b.until(status("camps", "acme-spring-copy")+` === "active"`, 10*time.Second),
	)
	if s := stored("campaigns/acme-spring-copy")["status"]; s != nil {
		t.Errorf("the restored campaign's status: %v", s)
	}
	b.do("archive the advertiser",
		chromedp.Click(css(`#advertisers tr[data-id="acme"] button.archive`)),
		b.until(`document.querySelector('#advertisers tr[data-id="acme"]') === null`, 10*time.Second),
	)
	if s := stored("advertisers/acme")["status"]; s != "archived" {
		t.Errorf("the archived advertiser's status: %v", s)
	}
	b.do("restore it",
		chromedp.Click(css("#adv-show-archived")),
		b.until(status("advertisers", "acme")+` === "archived"`, 10*time.Second),
		chromedp.Click(css(`#advertisers tr[data-id="acme"] button.restore`)),
		b.until(status("advertisers", "acme")+` === "active"`, 10*time.Second),
	)
	if s := stored("advertisers/acme")["status"]; s != nil {
		t.Errorf("the restored advertiser's status: %v", s)
	}
	b.do("duplicate the advertiser",
		chromedp.Click(css(`#advertisers tr[data-id="acme"] button.duplicate`)),
		b.until(`document.getElementById("adv-id").value === "acme-copy"`, 10*time.Second),
		chromedp.Click(css("#adv-save")),
		b.until(`document.getElementById("adv-status").textContent === "Saved acme-copy."`, 10*time.Second),
		b.until(`document.querySelectorAll("#adv-history li").length === 1`, 10*time.Second),
	)
	if a := stored("advertisers/acme-copy"); a["name"] != "Acme Corp" || fmt.Sprint(a["domains"]) != "[acme.example shop.acme.example]" {
		t.Errorf("the advertiser's copy: %v", a)
	}
	saveScreenshot(t, ctx, "objects.png")

	// A campaign paused from the line items' table shows paused here, and
	// resumed here shows active there.
	camp := `#campaigns tr.camp[data-campaign="demo-travel-winter"] button.campaign-pause`
	b.do("close the form", chromedp.Click(css("#adv-close")))
	b.eval(`(document.querySelector('` + camp + `').click(), true)`)
	b.do("the campaign paused from the line items' table",
		b.until(status("camps", "demo-travel-winter")+` === "paused"`, 10*time.Second),
		chromedp.Click(css(`#camps tr[data-id="demo-travel-winter"] button.pause`)),
		b.until(status("camps", "demo-travel-winter")+` === "active"`, 10*time.Second),
		b.until(`document.querySelector('`+camp+`')?.textContent === "Pause campaign"`, 10*time.Second),
	)

	// An archived campaign's line items leave the line items' table with
	// it, and come back, marked, with the archived line items; it is not
	// paused (un-archived) from there.
	line := `#campaigns tr.line[data-id="demo-travel-run"]`
	b.do("archive the travel campaign",
		chromedp.Click(css(`#camps tr[data-id="demo-travel-winter"] button.archive`)),
		b.until(`document.querySelector('`+line+`') === null`, 10*time.Second),
		chromedp.Click(css("#show-archived")),
		b.until(`document.querySelector('`+line+`') !== null`, 10*time.Second),
	)
	if got := b.text(`#campaigns tr.camp[data-campaign="demo-travel-winter"]`); !strings.Contains(got, "archived: none of its line items serves") ||
		b.eval(`document.querySelector('`+camp+`') !== null`) {
		t.Errorf("the archived campaign's row in the line items' table: %q, with a pause button: %v", got, b.eval(`document.querySelector('`+camp+`') !== null`))
	}
	restore := `#camps tr[data-id="demo-travel-winter"] button.restore`
	b.do("restore it",
		clickNow("#show-archived"),
		// The table renders again as the archived rows show: the button
		// is clicked from the page's script once it is there (clickNow).
		b.until(`document.querySelector('`+restore+`') !== null`, 10*time.Second),
		clickNow(restore),
		b.until(`document.querySelector('`+line+`') !== null && document.querySelector('`+camp+`') !== null`, 10*time.Second),
	)

	// A viewer reads the tables and changes nothing.
	b.do("log out", chromedp.Click(css("#logout")), chromedp.WaitVisible(css("#login")))
	watcher(b)
	b.loaded()
	b.do("the viewer's tables", chromedp.WaitVisible(css(`#advertisers tr[data-id="acme"]`)), chromedp.WaitVisible(css(`#camps tr[data-id="acme-spring"]`)))
	if !b.eval(`document.querySelectorAll("#advertisers button, #camps button").length === 0 &&
		document.getElementById("adv-new").hidden && document.getElementById("camp-new").hidden`) {
		t.Error("a viewer sees tools to change advertisers or campaigns")
	}
	if got := b.text(`#camps tr[data-id="acme-spring"]`); !strings.Contains(got, "Spring sale") {
		t.Errorf("the viewer's campaign row: %q", got)
	}
	// The console holds the refused saves' 400s, nothing else.
	for _, p := range watch.take() {
		if !strings.Contains(p, "400 ") && !strings.Contains(p, "status of 400") {
			t.Errorf("the console shows: %s", p)
		}
	}
}

// clickNow clicks the element sel names from the page's own script, in
// one step: chromedp.Click finds a node and then clicks it, which fails
// ("Could not find node with given id") when the dashboard renders the
// section again in between, as its refreshes do on a busy machine.
func clickNow(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, sel))
}
