package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/pquerna/otp/totp"
)

// consoleWatch records what a page reports as going wrong, as a developer
// sees it in the browser's console: console.error calls, uncaught
// exceptions, the browser's own error lines, loads that failed and answers
// of 400 or more.
type consoleWatch struct {
	mu       sync.Mutex
	problems []string
}

// watchConsole starts recording the problems of ctx's tab.
func watchConsole(t *testing.T, ctx context.Context) *consoleWatch {
	t.Helper()
	if err := chromedp.Do(ctx); err != nil { // opens the tab: no event is missed
		t.Fatal(err)
	}
	w := &consoleWatch{}
	urls := map[network.RequestID]string{} // only the listener's goroutine touches it
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			urls[e.RequestID] = e.Request.URL
		case *network.EventResponseReceived:
			if e.Response.Status >= 400 {
				w.add("%d %s", e.Response.Status, e.Response.URL)
			}
		case *network.EventLoadingFailed:
			// A load the page itself ended (an EventSource it closed, a
			// navigation away) is no error, and the console shows none.
			if !e.Canceled {
				w.add("failed %s: %s", urls[e.RequestID], e.ErrorText)
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				w.add("console.%s: %s", e.Type, strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			text := d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
			w.add("exception: %s", text)
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				w.add("log %s: %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *consoleWatch) add(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

// take returns the problems recorded since the last call.
func (w *consoleWatch) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.problems
	w.problems = nil
	return p
}

// dashboardUser makes a user of role with the CLI beside the running
// server p, and returns a function that logs it in on the page b shows.
func dashboardUser(t *testing.T, p *proc, user, role string) func(b *page) {
	t.Helper()
	const password = "correct horse battery staple"
	exit, out, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir}, password+"\n", "admin", "create-user", "-role", role, user)
	secret := regexp.MustCompile(`TOTP secret .*: ([A-Z2-7]+)`).FindStringSubmatch(out)
	if exit != 0 || secret == nil {
		t.Fatalf("create-user %s: %d %s %s", user, exit, out, stderr)
	}
	return func(b *page) {
		b.t.Helper()
		code, err := totp.GenerateCode(secret[1], time.Now())
		if err != nil {
			b.t.Fatal(err)
		}
		b.do("log in as "+user,
			chromedp.WaitVisible(css("#login")),
			chromedp.SetValue(css("#login-user"), user),
			chromedp.SetValue(css("#login-password"), password),
			chromedp.SetValue(css("#login-totp"), code),
			chromedp.Click(css("#login-submit")),
			chromedp.WaitVisible(css("#dash")),
		)
	}
}

// loaded waits for every section of the logged-in dashboard to have
// answered, and for the stats stream to have moved on once.
func (b *page) loaded() {
	b.t.Helper()
	b.do("the dashboard loads",
		chromedp.WaitVisible(css("#placements tbody tr")),
		b.until(`document.getElementById("campaigns-count").textContent !== ""`, 30*time.Second),
		b.until(`document.getElementById("budgets-count").textContent !== ""`, 30*time.Second),
		b.until(`document.getElementById("report-range").textContent !== ""`, 30*time.Second),
		b.until(`document.getElementById("updated").textContent !== ""`, 30*time.Second),
	)
	before := b.text("#updated")
	b.do("the stream moves", b.until(fmt.Sprintf(`document.getElementById("updated").textContent !== %q`, before), 30*time.Second))
}

// A normal load of the dashboard, logged out and logged in, a reload and
// logging out leave nothing in the browser's console: no failed request
// (a session probe answered 401, a favicon 404, an optional section's
// 404), no error, no exception. Twice: with every section, and with the
// reports off.
func TestDashboardConsoleClean(t *testing.T) {
	browser := chromium(t)
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"every section", nil},
		{"reports off", []string{"TSUBAME_REPORT_ENABLED=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			adminAddr := "127.0.0.1:" + freePort(t)
			p := startBinary(t, append([]string{"TSUBAME_ADMIN_LISTEN=" + adminAddr}, tc.env...)...)
			login := dashboardUser(t, p, "ops", "admin")
			ctx := browserContext(t, browser)
			watch := watchConsole(t, ctx)
			b := &page{t: t, ctx: ctx}
			check := func(when string) {
				t.Helper()
				if got := watch.take(); len(got) > 0 {
					t.Errorf("%s, the console shows:\n%s", when, strings.Join(got, "\n"))
				}
			}
			b.do("open the page logged out", chromedp.Navigate("http://"+adminAddr+"/"), chromedp.WaitVisible(css("#login")),
				b.until(`document.readyState === "complete"`, 30*time.Second))
			check("logged out")
			login(b)
			b.loaded()
			if tc.env != nil && !b.eval(`document.getElementById("reports-body").hidden && document.getElementById("report-range").textContent.startsWith("— off")`) {
				t.Errorf("with the reports off the section says %q", b.text("#report-range"))
			}
			check("logged in")
			b.do("reload", chromedp.Reload(), chromedp.WaitVisible(css("#dash")))
			b.loaded()
			check("reloaded, logged in")
			b.do("log out", chromedp.Click(css("#logout")), chromedp.WaitVisible(css("#login")))
			b.do("reload logged out", chromedp.Reload(), chromedp.WaitVisible(css("#login")),
				b.until(`document.readyState === "complete"`, 30*time.Second))
			check("logged out again")
		})
	}
}

// The tiles say what they count and in what unit, with one convention
// when nothing happens ("0 req/s"; "—" only for what was not measured);
// the per-endpoint table shows, for each configured endpoint and each
// route that answered, the requests sent, their 4xx/5xx share and their
// latency, as the stats API does.
func TestDashboardEndpointsAndTiles(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	login := dashboardUser(t, p, "ops", "admin")
	exit, token, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir}, "", "admin", "create-token", "-user", "ops", "-name", "stats")
	token = strings.TrimSpace(token)
	if exit != 0 || token == "" {
		t.Fatalf("create-token: %d %s", exit, stderr)
	}
	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	b.do("open the page", chromedp.Navigate("http://"+adminAddr+"/"))
	login(b)
	b.loaded()

	// Idle: nothing is sent to the public listener now, and once the page
	// has read its placements (through the cache), nothing looks the cache up.
	b.do("an idle second", b.until(`document.getElementById("rps").textContent === "0 req/s" &&
		document.getElementById("hit").textContent === "—"`, 30*time.Second))
	tiles, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](`[...document.querySelectorAll(".tile")].filter(t => !t.hidden).map(t =>
		[t.querySelector(".label").textContent, t.querySelector(".value").textContent, t.querySelector(".note").textContent])`))
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string][2]string{}
	for _, tile := range tiles {
		label, value, note := tile[0], tile[1], tile[2]
		shown[label] = [2]string{value, note}
		if value == "" || note == "" || strings.ContainsAny(value, "–") ||
			strings.Contains(value, "NaN") || strings.Contains(value, "undefined") || strings.Contains(value, "null") {
			t.Errorf("tile %q shows %q (%q)", label, value, note)
		}
	}
	for label, want := range map[string]string{
		"public requests":           `^0 req/s$`,
		"p50 latency":               `^—$`,
		"p99 latency":               `^—$`,
		"cache hit rate":            `^—$`,
		"access log: bytes waiting": `^\d+(\.\d)? (B|KiB|MiB)$`,
		"webhook messages":          `^\d+ waiting$`,
		"connections":               `^\d+ open$`,
		"goroutines":                `^\d+$`,
		"memory (RSS)":              `^\d+(\.\d)? (KiB|MiB|GiB)$`,
		"CPU: this process":         `^\d+ %$`,
		"CPU: whole machine":        `^\d+ %$`,
	} {
		got, ok := shown[label]
		if !ok {
			t.Errorf("no tile %q among %v", label, shown)
			continue
		}
		if !regexp.MustCompile(want).MatchString(got[0]) {
			t.Errorf("tile %q shows %q, want %s", label, got[0], want)
		}
	}
	for label, note := range map[string]string{
		"p50 latency":               "no request",
		"cache hit rate":            "no cache lookup",
		"access log: bytes waiting": "not yet written",
		"webhook messages":          "being processed",
		"CPU: this process":         "of one core",
		"CPU: whole machine":        "all processes",
	} {
		if got := shown[label][1]; !strings.Contains(got, note) {
			t.Errorf("tile %q's note %q does not say %q", label, got, note)
		}
	}

	// Known traffic: per endpoint, so many 200s, 404s (an unknown id, an
	// unknown path) and 400s (a callback that is no identifier).
	send := func(path string, n, status int) {
		t.Helper()
		for range n {
			resp, err := http.Get(p.base + path)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != status {
				t.Fatalf("%s: %d, want %d", path, resp.StatusCode, status)
			}
		}
	}
	send("/api/sample4.js?id=1&callback=cb", 7, 200)
	send("/api/sample4.js?id=no-such-placement&callback=cb", 3, 404)
	send("/api/sample4.js?id=1&callback=1bad", 2, 400)
	send("/api/sample1.json?id=1", 4, 200)
	send("/no/such/path", 1, 404)

	// Each row: endpoint|req/s|requests|4xx|5xx|error rate|p50|p99|since start.
	row := func(name string) string {
		return fmt.Sprintf(`(() => { const r = document.querySelector('#endpoints tr[data-endpoint=%q]');
			return r ? [...r.cells].slice(2).map(c => c.textContent).join("|") : ""; })()`, name)
	}
	want := map[string]string{ // requests|4xx|5xx|error rate|p50|p99|since start
		"sample4": `^12\|5\|0\|41\.7 %\|[\d.]+ ms\|[\d.]+ ms\|12$`,
		"sample1": `^4\|0\|0\|0\.0 %\|[\d.]+ ms\|[\d.]+ ms\|4$`,
		"other":   `^1\|1\|0\|100\.0 %\|[\d.]+ ms\|[\d.]+ ms\|1$`,
		"sample2": `^0\|0\|0\|—\|—\|—\|0$`, // configured, never asked
	}
	for name, re := range want {
		var got string
		err := chromedp.Do(ctx, b.until(fmt.Sprintf(`new RegExp(%q).test(%s)`, re, row(name)), 45*time.Second))
		if err != nil {
			got, _ = chromedp.Run(ctx, chromedp.Evaluate[string](row(name)))
			t.Errorf("endpoint %s: %q, want %s", name, got, re)
		}
	}
	if rps := b.text(`#endpoints tr[data-endpoint="sample2"] td.rps`); rps != "0 req/s" {
		t.Errorf("an endpoint with no request shows %q", rps)
	}
	if title, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#endpoints tr[data-endpoint="sample4"] td.rate').title`)); err != nil || title != "200: 7, 400: 2, 404: 3" {
		t.Errorf("sample4's error rate title %q (%v)", title, err)
	}
	saveScreenshot(t, ctx, "endpoints.png")

	// The stats API says the same.
	code, body := getWith(t, "http://"+adminAddr+"/api/v1/stats", token)
	var stats struct {
		Endpoints struct {
			Endpoints []struct {
				Endpoint     string
				Configured   bool
				Requests     uint64
				ClientErrors uint64 `json:"client_errors"`
				ServerErrors uint64 `json:"server_errors"`
				Total        uint64
				Codes        map[string]uint64
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &stats); err != nil || code != 200 {
		t.Fatalf("/api/v1/stats: %d %s", code, body)
	}
	got := map[string]string{}
	for _, e := range stats.Endpoints.Endpoints {
		got[e.Endpoint] = fmt.Sprintf("%v %d %d %d %d %v", e.Configured, e.Requests, e.ClientErrors, e.ServerErrors, e.Total, e.Codes)
	}
	for name, w := range map[string]string{
		"sample4": "true 12 5 0 12 map[200:7 400:2 404:3]",
		"sample1": "true 4 0 0 4 map[200:4]",
		"sample2": "true 0 0 0 0 map[]",
		"other":   "false 1 1 0 1 map[404:1]",
	} {
		if got[name] != w {
			t.Errorf("stats API, %s: %q, want %q", name, got[name], w)
		}
	}
}

// The placement and line item editors open in a row of their own right
// below the row they edit, stay there when the table is drawn again after
// a save or a pause, move with the next row picked, and a new one opens at
// the top of its table. A viewer's click opens none.
func TestDashboardEditorBelowRow(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	login := dashboardUser(t, p, "ops", "editor")
	watcher := dashboardUser(t, p, "watcher", "viewer")
	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	b.do("open the page", chromedp.Navigate("http://"+adminAddr+"/"))
	login(b)
	b.loaded()

	// below reports whether the editor (its form) is in the row right after
	// the row of table whose data-id is id, is the table's one editor, and
	// is drawn right under that row.
	below := func(table, id, form string) string {
		return fmt.Sprintf(`(() => {
			const r = document.querySelector('#%s tbody tr[data-id=%q]'), n = r && r.nextElementSibling;
			return !!n && n.classList.contains("editor-row") && n.contains(document.getElementById(%q)) &&
				document.querySelectorAll("#%s tr.editor-row").length === 1 &&
				document.getElementById(%q).offsetParent !== null &&
				Math.abs(n.getBoundingClientRect().top - r.getBoundingClientRect().bottom) < 2;
		})()`, table, id, form, table, form)
	}
	b.do("pick placement 3",
		chromedp.Click(css(`#placements tbody tr[data-id="3"] td:first-child`)),
		b.until(`document.getElementById("edit-id").value === "3"`, 10*time.Second),
	)
	if !b.eval(below("placements", "3", "edit-form")) {
		t.Error("the placement editor is not right below row 3")
	}
	saveScreenshot(t, ctx, "editor.png")
	b.do("save placement 3",
		chromedp.SetValue(css("#edit-urls"), "https://edited.example.com/3.js"),
		chromedp.Click(css("#edit-save")),
		b.until(`document.getElementById("edit-status").textContent === "Saved 3."`, 10*time.Second),
		b.until(`document.querySelector('#placements tbody tr[data-id="3"]').cells[2].textContent === "https://edited.example.com/3.js"`, 10*time.Second),
	)
	if !b.eval(below("placements", "3", "edit-form")) || b.text("#edit-status") != "Saved 3." {
		t.Error("after the save the placement editor left row 3, or its status")
	}
	b.do("pick placement 5",
		chromedp.Click(css(`#placements tbody tr[data-id="5"] td:first-child`)),
		b.until(`document.getElementById("edit-id").value === "5"`, 10*time.Second),
	)
	if !b.eval(below("placements", "5", "edit-form")) {
		t.Error("the placement editor did not move right below row 5")
	}
	b.do("close", chromedp.Click(css("#edit-close")))
	if !b.eval(`document.querySelectorAll("#placements tr.editor-row").length === 0 && document.getElementById("placement-editor").hidden`) {
		t.Error("Close leaves the placement editor open")
	}
	b.do("a new placement", chromedp.Click(css("#placement-new")), b.until(`document.getElementById("edit-title").textContent === "New placement"`, 10*time.Second))
	if !b.eval(`document.querySelector("#placements tbody").firstElementChild.contains(document.getElementById("edit-form")) && document.getElementById("edit-id").value === ""`) {
		t.Error("a new placement's editor is not first in the table")
	}
	b.do("close", chromedp.Click(css("#edit-close")))

	// Line items: the editor stays under its row through another row's
	// pause (the table is drawn again) and its own save.
	const li = "demo-coffee-sports"
	b.do("pick a line item",
		chromedp.Click(css(`#campaigns tr[data-id="`+li+`"] td:first-child`)),
		b.until(`document.getElementById("li-id").value === "`+li+`"`, 10*time.Second),
	)
	if !b.eval(below("campaigns", li, "li-form")) {
		t.Error("the line item editor is not right below its row")
	}
	b.do("pause another",
		chromedp.Click(css(`#campaigns tr[data-id="demo-travel-run"] button.pause`)),
		b.until(`document.querySelector('#campaigns tr[data-id="demo-travel-run"] td.status').textContent === "paused"`, 10*time.Second),
	)
	if !b.eval(below("campaigns", li, "li-form")) || !b.eval(`document.getElementById("li-id").value === "`+li+`"`) {
		t.Error("another row's pause moved the line item editor")
	}
	b.do("save the line item",
		chromedp.SetValue(css("#li-weight"), "7"),
		chromedp.Click(css("#li-save")),
		b.until(`document.getElementById("li-edit-status").textContent === "Saved `+li+`."`, 10*time.Second),
		b.until(`document.querySelector('#campaigns tr[data-id="`+li+`"]').cells[4].textContent === "7"`, 10*time.Second),
	)
	if !b.eval(below("campaigns", li, "li-form")) {
		t.Error("after the save the line item editor left its row")
	}

	// A viewer reads: a click opens no editor.
	b.do("log out", chromedp.Click(css("#logout")))
	watcher(b)
	b.loaded()
	b.do("a viewer clicks a row", chromedp.Click(css(`#placements tbody tr[data-id="3"] td:first-child`)),
		chromedp.Click(css(`#campaigns tr[data-id="`+li+`"] td:first-child`)))
	if !b.eval(`document.querySelectorAll("tr.editor-row").length === 0 && document.getElementById("placement-editor").hidden && document.getElementById("line-item-tools").hidden`) {
		t.Error("a viewer's click opened an editor")
	}
}
