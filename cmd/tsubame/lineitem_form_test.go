package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tsubame"
	"tsubame/internal/device"
)

// lineItemForm is a running server (-demo) with an editor logged in on a
// dashboard page, and an API token of the editor's.
type lineItemForm struct {
	t        *testing.T
	p        *proc
	b        *page
	adminURL string
	token    string
}

func openLineItemForm(t *testing.T) *lineItemForm {
	t.Helper()
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	login := dashboardUser(t, p, "ed", "editor")
	exit, token, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir}, "", "admin", "create-token", "-user", "ed", "-name", "form")
	token = strings.TrimSpace(token)
	if exit != 0 || token == "" {
		t.Fatalf("create-token: %d %s", exit, stderr)
	}
	b := &page{t: t, ctx: browserContext(t, browser)}
	b.do("open the page", chromedp.Navigate("http://"+adminAddr+"/"))
	login(b)
	b.do("see the line items", b.until(`document.querySelector('#campaigns tr[data-id="demo-coffee-run"]') !== null`, 30*time.Second))
	return &lineItemForm{t: t, p: p, b: b, adminURL: "http://" + adminAddr, token: token}
}

// get is a line item as GET /api/v1/line-items/{id} answers it, without
// the status the API adds (serving, reasons), which is not the line
// item's.
func (f *lineItemForm) get(id string) map[string]any {
	f.t.Helper()
	code, body := getWith(f.t, f.adminURL+"/api/v1/line-items/"+id, f.token)
	var li map[string]any
	if err := json.Unmarshal([]byte(body), &li); err != nil || code != 200 {
		f.t.Fatalf("line item %s: %d %s", id, code, body)
	}
	delete(li, "serving")
	delete(li, "reasons")
	delete(li, "pacing")
	return li
}

// choose picks value in a select as a user does: the value, then the
// change event the page listens to.
func (f *lineItemForm) choose(sel, value string) chromedp.Action[chromedp.Void] {
	return f.b.until(fmt.Sprintf(`(() => { const s = document.querySelector(%q);
		if (![...s.options].some(o => o.value === %q)) return false;
		s.value = %q; s.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`, sel, value, value), 10*time.Second)
}

// open opens the editor of line item id from its row, and waits for the
// pickers to be filled.
func (f *lineItemForm) open(id string) {
	f.t.Helper()
	f.b.do("open "+id,
		f.b.until(fmt.Sprintf(`document.querySelector('#campaigns tr[data-id=%q]') !== null`, id), 30*time.Second),
		chromedp.Click(css(fmt.Sprintf(`#campaigns tr[data-id=%q] td:nth-child(2)`, id))),
		f.b.until(fmt.Sprintf(`document.getElementById("li-id").value === %q && document.getElementById("li-form").dataset.ready === "true"`, id), 10*time.Second))
}

// shownJSON is the object the form's JSON disclosure shows.
func (f *lineItemForm) shownJSON() map[string]any {
	f.t.Helper()
	s, err := chromedp.Run(f.b.ctx, chromedp.Evaluate[string](`document.getElementById("li-json").textContent`))
	var v map[string]any
	if err != nil || json.Unmarshal([]byte(s), &v) != nil {
		f.t.Fatalf("the JSON shown: %q (%v)", s, err)
	}
	return v
}

func jsonObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return v
}

func diffJSON(a, b any) string {
	x, _ := json.MarshalIndent(a, "", "  ")
	y, _ := json.MarshalIndent(b, "", "  ")
	return fmt.Sprintf("got:\n%s\nwant:\n%s", x, y)
}

// An editor makes a line item with the form alone: the campaign from its
// list, a creative from the advertiser's, the flight in the campaign's
// zone, limits, a cap, deals, and every targeting picker, include and
// exclude. The server's problems land on their pickers, all at once; the
// saved line item is exactly the object the pickers wrote. Duplicate makes
// paused copies under free ids.
func TestLineItemFormPickersInBrowser(t *testing.T) {
	f := openLineItemForm(t)
	b := f.b
	const id = "li-form-made"
	b.do("a new line item",
		chromedp.Click(css("#li-new")),
		b.until(`document.getElementById("li-form").dataset.ready === "true"`, 10*time.Second),
		chromedp.SetValue(css("#li-id"), id),
		chromedp.SetValue(css("#li-name"), "Made in the form"),
		f.choose("#li-campaign", "demo-coffee-autumn"),
		b.until(`document.querySelector('#li-creatives-list input[value="demo-coffee-300x250"]') !== null`, 10*time.Second),
	)
	if !b.eval(`document.getElementById("li-creatives-list").textContent.includes("banner 300×250") &&
		document.querySelector('#li-creatives-list input[value="demo-travel-300x250"]') === null &&
		document.getElementById("li-zone").textContent === "in Asia/Tokyo"`) {
		t.Errorf("the creatives offered: %q, zone %q", b.text("#li-creatives-list"), b.text("#li-zone"))
	}
	// check ticks values in a checklist, chips adds them to a list of
	// codes, as a user does: one click each.
	check := func(prefix, list string, values ...string) []chromedp.Action[chromedp.Void] {
		var out []chromedp.Action[chromedp.Void]
		for _, v := range values {
			out = append(out, chromedp.Click(css(fmt.Sprintf(`#%s-%s-list input[value=%q]`, prefix, list, v))))
		}
		return out
	}
	chips := func(prefix, name string, values ...string) []chromedp.Action[chromedp.Void] {
		var out []chromedp.Action[chromedp.Void]
		for _, v := range values {
			out = append(out, chromedp.SetValue(css("#"+prefix+"-"+name+"-in"), v), chromedp.Click(css("#"+prefix+"-"+name+"-add")))
		}
		return out
	}
	var steps []chromedp.Action[chromedp.Void]
	add := func(a ...chromedp.Action[chromedp.Void]) { steps = append(steps, a...) }
	add(check("li", "creatives", "demo-coffee-300x250")...)
	add(chromedp.SetValue(css("#li-priority"), "5"))
	add(chromedp.SetValue(css("#li-weight"), "2"))
	add(chromedp.SetValue(css("#li-cpm"), "3.25"))
	add(chromedp.SetValue(css("#li-start"), "2027-01-01T09:00"))
	add(chromedp.SetValue(css("#li-end"), "2027-02-01T00:00"))
	add(chromedp.SetValue(css("#li-limit-total"), "1000"))
	add(chromedp.SetValue(css("#li-limit-daily"), "100"))
	add(chromedp.Click(css("#li-frequency-add")))
	add(chromedp.Click(css("#li-frequency-add")))
	add(chromedp.SetValue(css("#li-frequency-rows .fc-row:nth-child(1) .fc-imps"), "3"))
	add(chromedp.SetValue(css("#li-frequency-rows .fc-row:nth-child(1) .fc-n"), "12"))
	add(f.choose("#li-frequency-rows .fc-row:nth-child(1) .fc-unit", "3600"))
	add(chromedp.SetValue(css("#li-frequency-rows .fc-row:nth-child(2) .fc-imps"), "1"))
	add(chromedp.SetValue(css("#li-frequency-rows .fc-row:nth-child(2) .fc-n"), "400")) // a problem: caps count a year at most
	add(f.choose("#li-frequency-rows .fc-row:nth-child(2) .fc-unit", "86400"))
	add(chromedp.SetValue(css("#li-deals"), "deal-a\ndeal-b"))
	// Placements: the first page is listed; a search finds the others.
	add(check("li-t", "placements", "2", "1")...)
	add(chromedp.SendKeys(css("#li-t-placements-q"), "999"))
	add(b.until(`document.querySelector('#li-t-placements-list input[value="999"]') !== null`, 10*time.Second))
	add(check("li-t", "placements", "999")...)
	add(chromedp.SetValue(css("#li-t-sites"), "news.example\nsports.example"))
	add(chromedp.SetValue(css("#li-t-apps"), "com.example.reader"))
	add(chips("li-t", "countries", "JP", "us", "XX1")...) // XX1: a problem
	add(chips("li-t", "regions", "JP-13")...)
	add(check("li-t", "devices", "mobile", "desktop")...)
	add(check("li-t", "os", "ios", "android")...)
	add(check("li-t", "browsers", "chrome", "safari")...)
	add(f.choose("#li-t-hours-from", "22"))
	add(f.choose("#li-t-hours-to", "6"))
	add(check("li-t", "weekdays", "sat", "sun")...)
	add(chromedp.Click(css("#li-t-keyvalues-add")))
	add(chromedp.SetValue(css("#li-t-keyvalues-rows .kv-row:nth-child(1) .kv-key"), "section"))
	add(chromedp.SetValue(css("#li-t-keyvalues-rows .kv-row:nth-child(1) .kv-values"), "news, sports"))
	add(chromedp.Click(css("#li-x-box summary")))
	add(chromedp.SetValue(css("#li-x-sites"), "bad.example"))
	add(check("li-x", "devices", "tv")...)
	add(chips("li-x", "countries", "KP")...)
	b.do("fill every field", steps...)
	// Both problems at once, each on its picker.
	b.do("save with two problems",
		chromedp.Click(css("#li-save")),
		b.until(`document.getElementById("li-edit-status").textContent.startsWith("Not saved")`, 10*time.Second))
	if got := b.text("#li-edit-status"); got != "Not saved: 2 problems, shown on the fields." {
		t.Fatalf("status %q", got)
	}
	if !b.eval(`document.getElementById("li-t-countries").getAttribute("aria-invalid") === "true" &&
		document.getElementById("li-t-countries-problem").textContent === 'targeting.countries[2]: "XX1": not an ISO 3166-1 alpha-2 code (two capital letters, such as JP)' &&
		document.getElementById("li-frequency").getAttribute("aria-invalid") === "true" &&
		document.getElementById("li-frequency-problem").textContent === "frequency[1].per: must be whole seconds from 1s to 8784h" &&
		document.querySelectorAll("#li-form [aria-invalid]").length === 2`) {
		t.Errorf("the problems shown: %q, %q", b.text("#li-t-countries-problem"), b.text("#li-frequency-problem"))
	}
	saveFormShot(t, b, "line-item-form-problems.png")
	b.do("fix them",
		chromedp.Click(css(`#li-t-countries-chips button[aria-label="remove XX1"]`)),
		chromedp.Click(css("#li-frequency-rows .fc-row:nth-child(2) button")),
	)
	want := jsonObject(t, `{"id": "li-form-made", "name": "Made in the form", "campaign": "demo-coffee-autumn",
		"priority": 5, "weight": 2, "cpm": "3.25", "creatives": ["demo-coffee-300x250"],
		"start": "2027-01-01T09:00:00+09:00", "end": "2027-02-01T00:00:00+09:00",
		"limits": {"impressions": {"total": 1000, "daily": 100}},
		"frequency": [{"impressions": 3, "per": "12h"}], "deals": ["deal-a", "deal-b"],
		"targeting": {"placements": ["2", "1", "999"], "sites": ["news.example", "sports.example"], "apps": ["com.example.reader"],
			"countries": ["JP", "US"], "regions": ["JP-13"], "devices": ["mobile", "desktop"], "os": ["ios", "android"],
			"browsers": ["chrome", "safari"], "hours": {"from": 22, "to": 6}, "weekdays": ["sat", "sun"],
			"keyvalues": {"section": ["news", "sports"]},
			"exclude": {"sites": ["bad.example"], "countries": ["KP"], "devices": ["tv"]}}}`)
	if got := f.shownJSON(); !reflect.DeepEqual(got, want) {
		t.Errorf("the JSON disclosure shows another object:\n%s", diffJSON(got, want))
	}
	b.do("save",
		chromedp.Click(css("#li-save")),
		b.until(`document.getElementById("li-edit-status").textContent === "Saved li-form-made."`, 10*time.Second),
		b.until(`document.querySelectorAll("#li-form [aria-invalid]").length === 0`, 10*time.Second),
		b.until(`document.querySelector('#campaigns tr[data-id="li-form-made"]') !== null`, 10*time.Second))
	if got := f.get(id); !reflect.DeepEqual(got, want) {
		t.Errorf("the API holds another line item than the form made:\n%s", diffJSON(got, want))
	}
	// The demo server has no geo database: the line item's status says so,
	// and the form warns next to the countries.
	b.do("the geo warning", b.until(`!document.getElementById("li-t-geo-warning").hidden`, 10*time.Second))
	if got := b.text("#li-t-geo-warning"); !strings.Contains(got, "no geo database") {
		t.Errorf("geo warning %q", got)
	}
	saveFormShot(t, b, "line-item-form.png")

	// Duplicate: a paused copy under a free id; again, the next free one.
	for _, copyID := range []string{id + "-copy", id + "-copy-2"} {
		f.open(id)
		b.do("duplicate",
			chromedp.Click(css("#li-duplicate")),
			b.until(fmt.Sprintf(`document.getElementById("li-id").value === %q && document.getElementById("li-form").dataset.ready === "true"`, copyID), 10*time.Second))
		if !b.eval(`document.getElementById("li-status").value === "paused" && document.getElementById("li-title").textContent === "New line item (a copy of li-form-made)"`) {
			t.Errorf("the copy's form: status %q, title %q", b.text("#li-status"), b.text("#li-title"))
		}
		b.do("save the copy",
			chromedp.Click(css("#li-save")),
			b.until(fmt.Sprintf(`document.getElementById("li-edit-status").textContent === "Saved %s."`, copyID), 10*time.Second),
			b.until(fmt.Sprintf(`document.querySelector('#campaigns tr[data-id=%q]') !== null`, copyID), 10*time.Second))
		copied := f.get(copyID)
		if copied["status"] != "paused" {
			t.Errorf("%s: status %v", copyID, copied["status"])
		}
		copied["id"] = id
		delete(copied, "status")
		if !reflect.DeepEqual(copied, want) {
			t.Errorf("%s is not a copy:\n%s", copyID, diffJSON(copied, want))
		}
	}
}

// Reading a line item that uses every field fills the form back without
// loss: saved without a change, the form PUTs exactly the object the API
// gave, its lists in their order, values no picker offers (an OS the
// parser does not name), times in the offset they were written with, a
// window of 1h30m and exclusions of every kind.
func TestLineItemFormRoundTripInBrowser(t *testing.T) {
	f := openLineItemForm(t)
	b := f.b
	const id = "li-every-field"
	full := `{"id": "li-every-field", "name": "Every field", "campaign": "demo-coffee-autumn", "status": "active",
		"priority": 3, "weight": 7, "cpm": "0.125", "creatives": ["demo-coffee-300x250"],
		"start": "2026-12-24T15:00:00Z", "end": "2027-03-31T23:59:30+09:00",
		"limits": {"impressions": {"total": 50000, "daily": 2500}},
		"frequency": [{"impressions": 2, "per": "1h30m"}, {"impressions": 5, "per": "168h"}, {"impressions": 9, "per": "45s"}],
		"deals": ["deal-b", "deal-a"],
		"targeting": {"placements": ["top", "7", "3"], "sites": ["b.example", "a.example"], "apps": ["id1234", "com.example.app"],
			"countries": ["US", "JP"], "regions": ["US-CA", "JP-13"], "devices": ["tv", "desktop"], "os": ["tizen", "ios"],
			"browsers": ["firefox", "chrome"], "hours": {"from": 0, "to": 24}, "weekdays": ["fri", "mon"],
			"keyvalues": {"section": ["sports", "news"], "tag": ["a,b", "c"]},
			"exclude": {"placements": ["9"], "sites": ["bad.example"], "apps": ["com.bad"], "countries": ["KP"], "regions": ["JP-01"],
				"devices": ["mobile"], "os": ["android"], "browsers": ["ie"], "hours": {"from": 22, "to": 6}, "weekdays": ["sun"],
				"keyvalues": {"adult": ["yes"]}}}}`
	if code, body := putWith(t, f.adminURL+"/api/v1/line-items/"+id, f.token, full); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	read := f.get(id)
	if !reflect.DeepEqual(read, jsonObject(t, full)) {
		t.Fatalf("the API does not give back the object put:\n%s", diffJSON(read, jsonObject(t, full)))
	}
	b.do("reload", chromedp.Reload(), chromedp.WaitVisible(css("#dash")))
	f.open(id)
	if got := f.shownJSON(); !reflect.DeepEqual(got, read) {
		t.Errorf("the form reads the line item as another object:\n%s", diffJSON(got, read))
	}
	if !b.eval(`document.querySelector('#li-t-os-list input[value="tizen"]').checked &&
		document.getElementById("li-t-countries-chips").textContent.includes("JP Japan") &&
		document.getElementById("li-x-box").open`) {
		t.Error("the pickers do not show the values read")
	}
	b.do("save without a change",
		b.until(`(() => { window.putBodies = []; const f = window.fetch;
			window.fetch = (u, o) => { if (o && o.method === "PUT") window.putBodies.push(o.body); return f(u, o); }; return true; })()`, time.Second),
		chromedp.Click(css("#li-save")),
		b.until(`document.getElementById("li-edit-status").textContent === "Saved li-every-field."`, 10*time.Second))
	sent, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`window.putBodies`))
	if err != nil || len(sent) != 1 {
		t.Fatalf("PUTs sent: %q (%v)", sent, err)
	}
	if got := jsonObject(t, sent[0]); !reflect.DeepEqual(got, read) {
		t.Errorf("saved without a change, the form PUT another object:\n%s", diffJSON(got, read))
	}
	if got := f.get(id); !reflect.DeepEqual(got, read) {
		t.Errorf("after the save the API holds:\n%s", diffJSON(got, read))
	}
}

// The pickers offer the values the server knows: a value added to the
// model or the User-Agent parser is added to the form too.
func TestLineItemFormVocabulary(t *testing.T) {
	js, err := os.ReadFile("../../internal/admin/web/dashboard.js")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{
		"liDevices": tsubame.Devices, "liWeekdays": tsubame.Weekdays, "liOSes": device.OSes, "liBrowsers": device.Browsers,
	} {
		m := regexp.MustCompile(`(?s)const ` + name + ` = \[(.*?)\];`).FindSubmatch(js)
		if m == nil {
			t.Errorf("dashboard.js has no %s", name)
			continue
		}
		got := regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(string(m[1]), -1)
		var values []string
		for _, g := range got {
			values = append(values, g[1])
		}
		if !slices.Equal(values, want) {
			t.Errorf("dashboard.js %s = %q, the server's are %q", name, values, want)
		}
	}
}

// From the form to a page and back, on the real binary: an editor makes a
// line item with the form for a creative still in review, approves the
// creative in the queue, and a page gets the ad; the line item's row says
// it serves, and what it shows delivered is what the report counts; paused
// from its row, it serves nothing (204), and the report keeps what it
// served.
func TestLineItemFormEndToEnd(t *testing.T) {
	f := openLineItemForm(t)
	b := f.b
	const id, creative, placement = "li-e2e", "cr-e2e", "42"
	if code, body := putWith(t, f.adminURL+"/api/v1/creatives/"+creative, f.token, `{"advertiser": "demo-coffee", "format": "banner",
		"w": 300, "h": 250, "image": "https://coffee.example/ads/e2e.png", "click": "https://coffee.example/e2e"}`); code != 200 {
		t.Fatalf("put creative: %d %s", code, body)
	}
	b.do("reload", chromedp.Reload(), chromedp.WaitVisible(css("#dash")),
		b.until(`document.querySelector('#creatives tr[data-id="cr-e2e"]') !== null`, 30*time.Second))

	b.do("make the line item with the form",
		chromedp.Click(css("#li-new")),
		b.until(`document.getElementById("li-form").dataset.ready === "true"`, 10*time.Second),
		chromedp.SetValue(css("#li-id"), id),
		f.choose("#li-campaign", "demo-coffee-autumn"),
		b.until(`document.querySelector('#li-creatives-list input[value="cr-e2e"]') !== null`, 10*time.Second))
	if !b.eval(`document.querySelector('#li-creatives-list input[value="cr-e2e"]').parentElement.textContent.includes("pending")`) {
		t.Errorf("the creative in review is not marked: %q", b.text("#li-creatives-list"))
	}
	b.do("fill it",
		chromedp.Click(css(`#li-creatives-list input[value="cr-e2e"]`)),
		chromedp.SetValue(css("#li-priority"), "1"),
		chromedp.SetValue(css("#li-weight"), "1"),
		chromedp.SetValue(css("#li-cpm"), "2"),
		chromedp.SetValue(css("#li-limit-total"), "1000"),
		chromedp.SendKeys(css("#li-t-placements-q"), placement),
		b.until(`document.querySelector('#li-t-placements-list input[value="42"]') !== null`, 10*time.Second),
		chromedp.Click(css(`#li-t-placements-list input[value="42"]`)),
		chromedp.Click(css("#li-save")),
		b.until(`document.getElementById("li-edit-status").textContent === "Saved li-e2e."`, 10*time.Second))

	decide := func() (int, map[string]any) {
		t.Helper()
		code, body := browserGet(t, f.p.base+"/api/decide?placement="+placement+"&uid=visitor-1")
		var v struct {
			Decisions []map[string]any `json:"decisions"`
		}
		if code == 200 && json.Unmarshal([]byte(body), &v) == nil && len(v.Decisions) == 1 {
			return code, v.Decisions[0]
		}
		return code, nil
	}
	// The creative waits for review: nothing serves.
	if code, d := decide(); code != 204 {
		t.Fatalf("before the approval the page gets %d %v", code, d)
	}
	b.do("approve the creative",
		chromedp.Click(css(`#creatives tr[data-id="cr-e2e"] button.approve`)),
		b.until(`document.querySelector('#creatives tr[data-id="cr-e2e"]') === null`, 10*time.Second))

	// The page gets the ad once the index has the approval and the line
	// item its first lease; it shows five (their impression URLs fetched,
	// as the page's browser does).
	const shown = 5
	for deadline, n := time.Now().Add(time.Minute), 0; n < shown; {
		code, d := decide()
		if d == nil || d["line_item"] != id {
			if time.Now().After(deadline) {
				t.Fatalf("the page never got the ad: %d %v", code, d)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if code, _ := browserGet(t, d["impression_url"].(string)); code != 200 {
			t.Fatalf("impression: %d", code)
		}
		n++
	}

	// The row says it serves; delivered and the report agree, at the
	// impressions shown.
	b.do("reload", chromedp.Reload(), chromedp.WaitVisible(css("#dash")),
		b.until(`(document.querySelector('#campaigns tr[data-id="li-e2e"] td.serving') || {}).textContent === "yes"`, 30*time.Second))
	reported := `(window.tsubameReport && window.tsubameReport.rows || []).filter(r => r.line_item === "li-e2e").reduce((n, r) => n + r.impressions, 0)`
	deadline := time.Now().Add(2 * time.Minute)
	for {
		delivered := b.text(`#campaigns tr[data-id="li-e2e"] td.delivered`)
		v, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](reported))
		if err != nil {
			t.Fatal(err)
		}
		if delivered == fmt.Sprint(shown) && v == shown {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivered shows %q, the report %d impressions, after %d shown", delivered, v, shown)
		}
		b.do("read the report again", chromedp.Click(css("#report-show")), chromedp.Sleep(500*time.Millisecond))
	}

	b.do("pause it from its row",
		chromedp.Click(css(`#campaigns tr[data-id="li-e2e"] button.pause`)),
		b.until(`document.querySelector('#campaigns tr[data-id="li-e2e"] td.status').textContent === "paused"`, 10*time.Second))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		code, d := decide()
		if code == 204 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("paused, the line item still serves: %d %v", code, d)
		}
	}
	b.do("the report keeps what it served",
		chromedp.Click(css("#report-show")),
		b.until(reported+` === 5`, 30*time.Second))
	if li := f.get(id); li["status"] != "paused" {
		t.Errorf("the API holds %v", li)
	}
}

// saveFormShot writes the line item editor alone to
// $TSUBAME_SCREENSHOTS/name when that is set.
func saveFormShot(t *testing.T, b *page, name string) {
	t.Helper()
	dir := os.Getenv("TSUBAME_SCREENSHOTS")
	if dir == "" {
		return
	}
	shot, err := chromedp.Run(b.ctx, chromedp.Screenshot(css("#line-item-tools")))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
		t.Error(err)
	}
}
