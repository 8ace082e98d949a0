package main

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/pquerna/otp/totp"
)

// axeScript reads axe-core's axe.min.js: from TSUBAME_AXE (make test and
// make screenshots set it), else where make axe installs it. Missing, the
// test fails under make test and CI, and skips with the reason in -short
// mode, where a contributor may have only Go.
func axeScript(t *testing.T) string {
	t.Helper()
	path := os.Getenv("TSUBAME_AXE")
	if path == "" {
		path = filepath.Join("..", "..", "tools", "axe", "node_modules", "axe-core", "axe.min.js")
	}
	src, err := os.ReadFile(path)
	if err != nil {
		const why = "axe-core is not installed (make axe installs the version tools/axe pins; TSUBAME_AXE names its axe.min.js)"
		if os.Getenv("CI") != "" || !testing.Short() {
			t.Fatalf("%s: %v", why, err)
		}
		t.Skipf("%s; the accessibility test needs it", why)
	}
	return string(src)
}

// a11yStep is one state of the dashboard a user sees: what brings the page
// there from the step before, and the screenshot of it docs/admin.md
// shows, if any.
type a11yStep struct {
	state string    // what the user sees, as a failure names it
	do    func()    // gets the page from the step before into this state
	shot  string    // the screenshot's file name under $TSUBAME_SCREENSHOTS ("": none)
	crop  [2]string // the first and last element the screenshot covers ("": the window)
}

// Every screen and state of the dashboard a user sees, logged out and in
// (the first user's setup, the login form, every section, every editor and
// form opened, each with its problems shown, a report, a forecast and an
// explained request), passes axe-core's checks with no serious or critical
// violation; every control that reacts to a click is reachable with the
// keyboard, and shows where the focus is. With TSUBAME_SCREENSHOTS set
// (make screenshots) it saves the screenshots of docs/admin.md.
func TestDashboardAccessibility(t *testing.T) {
	browser := chromium(t)
	axeJS := axeScript(t)

	// The advertiser's image host, for the previews of the queue.
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(demoBanner(r.URL.Path))
	}))
	t.Cleanup(cdn.Close)

	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr, "TSUBAME_REPORT_INTERVAL=50ms", "TSUBAME_REPORT_COMMIT_EVERY=50ms")
	adminURL := "http://" + adminAddr
	tokenFile := filepath.Join(p.dataDir, "admin", BootstrapTokenFile)
	waitLog(t, p, `token_file=`+tokenFile)
	bootstrap, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}

	ctx := a11yBrowserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	const user, password = "ops", "correct horse battery staple"
	var secret string
	click := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(css(sel)) }
	value := func(sel, v string) chromedp.Action[chromedp.Void] { return chromedp.SetValue(css(sel), v) }
	choose := func(sel, v string) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
			`{ const s = document.querySelector(%q); s.value = %q; s.dispatchEvent(new Event("change")); }`, sel, v))
	}
	lineRow := func(id string) string { return fmt.Sprintf(`#campaigns tr[data-id=%q]`, id) }

	// The states in the order a user meets them; a new screen, form or
	// dialog is one more step here, after the one its way starts from.
	steps := []a11yStep{
		{state: "the first user's setup form", do: func() {
			b.do("open the page", chromedp.Navigate(adminURL+"/"), chromedp.WaitVisible(css("#setup-form")))
		}},
		{state: "the setup form refusing a wrong token", do: func() {
			b.do("a wrong token", value("#setup-token", "not-the-token"), value("#setup-user", user), value("#setup-password", password),
				click("#setup-submit"), b.until(`document.getElementById("setup-error").textContent !== ""`, 10*time.Second))
			if !b.eval(`document.getElementById("setup-form").checkVisibility()`) {
				t.Error("a wrong bootstrap token leaves the setup form, its reason unseen")
			}
		}},
		{state: "the first user created, with the authenticator's QR code", do: func() {
			b.do("create the first user", value("#setup-token", strings.TrimSpace(string(bootstrap))), click("#setup-submit"),
				chromedp.WaitVisible(css("#setup-done")),
				b.until(`document.getElementById("setup-qr").complete && document.getElementById("setup-qr").naturalWidth > 0`, 10*time.Second))
			secret = b.text("#setup-secret")
			// What every section shows, written once the first user (an admin) exists.
			a11yDemoData(t, p, adminURL, user, cdn.URL)
		}},
		{state: "the login form", do: func() {
			b.do("go to the login form", click("#setup-continue"), chromedp.WaitVisible(css("#login-form")))
		}},
		{state: "a refused login", do: func() {
			b.do("a wrong code", value("#login-user", user), value("#login-password", password), value("#login-totp", "000000"),
				click("#login-submit"), b.until(`document.getElementById("login-error").textContent !== ""`, 10*time.Second))
		}},
		{state: "the dashboard's overview", do: func() {
			code, err := totp.GenerateCode(secret, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			b.do("log in", value("#login-user", user), value("#login-password", password), value("#login-totp", code), click("#login-submit"), chromedp.WaitVisible(css("#dash")))
			b.loaded()
			b.do("every section filled",
				b.until(`![...document.querySelectorAll("#campaigns td.serving")].some(td => td.textContent === "…")`, 30*time.Second),
				b.until(`document.querySelectorAll("#report-table tbody tr[data-time]").length > 0`, 30*time.Second),
				b.until(`document.getElementById("forecast-summary").textContent !== ""`, 30*time.Second),
				b.until(`[...document.querySelectorAll("#creatives img")].every(i => i.complete && i.naturalWidth > 0)`, 30*time.Second),
				chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
		}, shot: "overview.png"},
		{state: "a placement's editor, opened with the keyboard", do: func() {
			b.do("pick placement 2", chromedp.Focus(css(`#placements tr[data-id="2"]`)), chromedp.KeyEvent("\r"),
				b.until(`document.getElementById("edit-id").value === "2" && document.getElementById("edit-form").checkVisibility()`, 10*time.Second))
		}},
		{state: "a new placement's form", do: func() {
			b.do("new placement", click("#placement-new"), b.until(`document.getElementById("edit-title").textContent === "New placement"`, 10*time.Second))
		}},
		{state: "a placement's ad tag", do: func() {
			b.do("get a tag", click("#edit-close"), click(`#placements tr[data-id="1"] button.tag`),
				b.until(`document.getElementById("tag-script").value !== ""`, 10*time.Second), click("#tag-script-copy"),
				b.until(`document.getElementById("tag-status").textContent !== ""`, 10*time.Second))
		}},
		{state: "the line items with their serving reasons", do: func() {
			b.do("close the tag", click("#tag-close"))
		}, shot: "line-items.png", crop: [2]string{"#campaigns-body", ""}},
		{state: "line items selected for a bulk change, archived ones shown", do: func() {
			b.do("select two line items", click(lineRow("demo-coffee-run")+" input.pick"), click(lineRow("demo-travel-run")+" input.pick"),
				chromedp.WaitVisible(css("#bulk-bar")), click("#show-archived"),
				b.until(`document.querySelector('#campaigns td.status.archived') !== null`, 10*time.Second))
		}},
		{state: "a line item's editor with its changes", do: func() {
			b.do("clear the selection", click("#bulk-clear"), click("#show-archived"),
				b.until(`document.querySelector('#campaigns td.status.archived') === null`, 10*time.Second))
			b.do("pick a line item", chromedp.Focus(css(lineRow("demo-coffee-run"))), chromedp.KeyEvent(" "),
				b.until(`document.getElementById("li-id").value === "demo-coffee-run"`, 10*time.Second),
				b.until(`document.querySelectorAll("#li-history li").length > 0`, 10*time.Second))
		}, shot: "line-item-editor.png", crop: [2]string{lineRow("demo-coffee-run"), "#line-item-tools"}},
		{state: "a line item's editor showing each problem on its field", do: func() {
			b.do("a bad save", value("#li-t-countries-in", "XX1"), click("#li-t-countries-add"),
				value("#li-limit-total", "10"), value("#li-limit-daily", "100"), click("#li-save"),
				b.until(`document.getElementById("li-edit-status").textContent.startsWith("Not saved")`, 10*time.Second))
		}},
		{state: "a new line item's form", do: func() {
			b.do("new line item", click("#li-close"), click("#li-new"), chromedp.WaitVisible(css("#li-form")))
		}},
		{state: "an advertiser's form showing a problem on its field", do: func() {
			b.do("close the line item", click("#li-close"))
			b.do("a new advertiser", click("#adv-new"), chromedp.WaitVisible(css("#adv-form")),
				value("#adv-id", "a11y-adv"), value("#adv-name", "A11y"), value("#adv-domains", "Shop.Example"), click("#adv-save"),
				b.until(`document.getElementById("adv-domains").getAttribute("aria-invalid") === "true"`, 10*time.Second))
		}},
		{state: "a campaign's form showing its problems on their fields", do: func() {
			b.do("close the advertiser", click("#adv-close"))
			b.do("a new campaign", click("#camp-new"), chromedp.WaitVisible(css("#camp-form")),
				value("#camp-id", "a11y-camp"), value("#camp-name", "A11y"), value("#camp-advertiser", "demo-coffee"),
				value("#camp-start", "2026-07-01T09:30"), value("#camp-end", "2026-06-01T00:00"), value("#camp-budget-total", "0"),
				click("#camp-save"),
				b.until(`document.getElementById("camp-budget-total").getAttribute("aria-invalid") === "true"`, 10*time.Second))
		}},
		{state: "a campaign's form with its changes", do: func() {
			b.do("close the new campaign", click("#camp-close"))
			b.do("edit a campaign", click(`#camps tr[data-id="demo-coffee-autumn"] button.link`), chromedp.WaitVisible(css("#camp-form")),
				b.until(`document.getElementById("camp-id").value === "demo-coffee-autumn"`, 10*time.Second))
		}, shot: "campaign-editor.png", crop: [2]string{"#camp-body", "#camp-editor"}},
		{state: "the creative approval queue with its previews", do: func() {
			b.do("close the campaign", click("#camp-close"))
		}, shot: "creatives.png", crop: [2]string{"#creatives-body", ""}},
		{state: "a creative's rejection asking for its reason", do: func() {
			b.do("reject", click(`#creatives tr[data-id="demo-coffee-winter"] button.reject`), chromedp.WaitVisible(css("#creatives form.reject")))
		}},
		{state: "the form adding a creative, with its problems", do: func() {
			b.do("add a creative", click("#creative-new"), chromedp.WaitVisible(css("#cr-form")),
				value("#cr-id", "a11y-banner"), value("#cr-advertiser", "demo-coffee"), value("#cr-w", "300"), value("#cr-h", "250"),
				value("#cr-image", cdn.URL+"/a11y.png"), value("#cr-click", "javascript:alert(1)"), click("#cr-save"),
				b.until(`document.getElementById("cr-click").getAttribute("aria-invalid") === "true"`, 10*time.Second))
		}, shot: "creative-form.png", crop: [2]string{"#creative-tools", ""}},
		{state: "the form adding a video creative", do: func() {
			b.do("a video", choose("#cr-format", "video"), chromedp.WaitVisible(css("#cr-media")))
		}},
		{state: "the form adding an image, with a refused upload", do: func() {
			refused := filepath.Join(t.TempDir(), "notes.txt")
			if err := os.WriteFile(refused, []byte("not an image"), 0o600); err != nil {
				t.Fatal(err)
			}
			b.do("an upload refused", choose("#cr-format", "banner"), chromedp.WaitVisible(css("#cr-file")),
				chromedp.SetUploadFiles(css("#cr-file"), []string{refused}),
				b.until(`document.getElementById("cr-file").getAttribute("aria-invalid") === "true"`, 10*time.Second))
		}},
		{state: "the form adding an HTML creative", do: func() {
			b.do("HTML", choose("#cr-format", "html"), chromedp.WaitVisible(css("#cr-html")))
		}},
		{state: "a creative's form, opened by Edit", do: func() {
			b.do("edit", click("#cr-close"), click(`#creatives tr[data-id="demo-coffee-winter"] button.edit`),
				b.until(`document.getElementById("cr-id").value === "demo-coffee-winter"`, 10*time.Second))
		}},
		{state: "every creative: images, HTML, video, rejected with its reason", do: func() {
			b.do("all creatives", click("#cr-close"), choose("#creatives-status", ""),
				b.until(`document.getElementById("creatives-count").textContent.endsWith("not archived")`, 10*time.Second))
		}},
		{state: "an archived creative, the filter on archived", do: func() {
			b.eval(`(window.confirm = () => true, true)`)
			b.do("archive a creative", click(`#creatives tr[data-id="demo-coffee-leaderboard"] button.archive`),
				b.until(`document.querySelector('#creatives tr[data-id="demo-coffee-leaderboard"]') === null`, 10*time.Second),
				choose("#creatives-status", "archived"),
				b.until(`document.querySelector('#creatives tr.archived[data-id="demo-coffee-leaderboard"] button.restore') !== null`, 10*time.Second))
		}},
		{state: "the budgets and their pacing", do: func() {
			b.do("budgets", b.until(`document.querySelectorAll("#budgets tbody tr").length > 0`, 10*time.Second))
		}},
		{state: "a report broken down by line item, sorted by its impressions", do: func() {
			b.do("sort", click(`#report-table th:nth-child(4) button.sort`),
				b.until(`document.querySelector("#report-table th:nth-child(4)").getAttribute("aria-sort") === "descending"`, 10*time.Second))
		}, shot: "reports.png", crop: [2]string{"#reports-body", ""}},
		{state: "a report by campaign for the whole period, with custom dates", do: func() {
			b.do("by campaign", choose("#report-time", ""), choose("#report-by", "campaign"), choose("#report-period", "custom"),
				b.until(`document.querySelectorAll("#report-table tbody tr[data-time]").length > 0`, 10*time.Second))
		}},
		{state: "a forecast", do: func() {
			b.do("forecast", value("#forecast-country", "JP"), click("#forecast-show"),
				b.until(`document.getElementById("forecast-summary").textContent !== ""`, 10*time.Second))
		}},
		{state: "a request explained", do: func() {
			b.do("explain", value("#explain-placement", "1"), value("#explain-kv", "section=sports"), value("#explain-ua", browserUA),
				click("#explain-run"), b.until(`document.querySelectorAll("#explain-lines tbody tr[data-line-item]").length > 0`, 10*time.Second))
		}, shot: "explain.png", crop: [2]string{"#explain-section", ""}},
		{state: "an explain refused", do: func() {
			b.do("a bad country", value("#explain-country", "jp"), click("#explain-run"),
				b.until(`document.getElementById("explain-error").textContent !== ""`, 10*time.Second))
		}},
		{state: "a cache purge", do: func() {
			b.do("purge", value("#purge-keys", "1"), click("#purge-submit"),
				b.until(`document.getElementById("purge-status").textContent !== ""`, 10*time.Second))
		}},
		{state: "a viewer's dashboard", do: func() {
			login := dashboardUser(t, p, "watcher", "viewer")
			b.do("log out", click("#logout"), chromedp.WaitVisible(css("#login")))
			login(b)
			b.loaded()
		}},
	}

	for _, s := range steps {
		stepCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		b.ctx = stepCtx
		began := time.Now()
		s.do()
		if s.shot != "" { // before the keyboard's walk moves the focus and the scroll
			b.screenshot(s.shot, s.crop)
		}
		for _, v := range b.axe(axeJS) {
			t.Errorf("%s: %s", s.state, v)
		}
		for _, v := range b.keyboardGaps() {
			t.Errorf("%s: %s", s.state, v)
		}
		cancel()
		t.Logf("%s: checked in %v", s.state, time.Since(began).Round(time.Millisecond))
	}
}

// a11yDemoData writes, with an API token of the admin user, what makes
// every section of the dashboard show something on top of serve -demo's
// data: creatives in every status (images from the cdn, HTML, a video, a
// rejected one), a paused and an archived line item, a campaign budget
// over a day around now, and traffic rolled up into the reports.
func a11yDemoData(t *testing.T, p *proc, adminURL, user, cdn string) {
	t.Helper()
	exit, token, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir}, "", "admin", "create-token", "-user", user, "-name", "demo")
	token = strings.TrimSpace(token)
	if exit != 0 || token == "" {
		t.Fatalf("create-token: %d %s", exit, stderr)
	}
	send := func(method, path, body string) {
		t.Helper()
		req, _ := http.NewRequest(method, adminURL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	send("PUT", "/api/v1/creatives/demo-coffee-winter", fmt.Sprintf(`{"advertiser": "demo-coffee", "format": "banner", "w": 300, "h": 250,
		"image": %q, "click": "https://coffee.example/winter"}`, cdn+"/winter-300x250.png"))
	send("PUT", "/api/v1/creatives/demo-travel-spring", `{"advertiser": "demo-travel", "format": "banner", "w": 300, "h": 250,
		"html": "<p style=\"font: 20px sans-serif\">Spring in Kyoto</p>", "click": "https://travel.example/spring"}`)
	send("PUT", "/api/v1/creatives/demo-coffee-leaderboard", fmt.Sprintf(`{"advertiser": "demo-coffee", "format": "banner", "w": 728, "h": 90,
		"image": %q, "click": "https://coffee.example/"}`, cdn+"/leaderboard-728x90.png"))
	send("POST", "/api/v1/creatives/demo-coffee-leaderboard/reject", `{"reason": "the image has no advertiser's logo"}`)
	send("PUT", "/api/v1/line-items/demo-coffee-run", `{"campaign": "demo-coffee-autumn", "priority": 8, "weight": 3, "cpm": "1.40",
		"creatives": ["demo-coffee-300x250"], "targeting": {"placements": ["1", "2", "3"]}}`)
	send("POST", "/api/v1/line-items/demo-travel-preroll/pause", "")
	send("PUT", "/api/v1/line-items/demo-travel-archive", `{"campaign": "demo-travel-winter", "priority": 8, "weight": 1, "cpm": "1",
		"creatives": ["demo-travel-300x250"], "targeting": {"placements": ["3"]}}`)
	send("POST", "/api/v1/line-items/demo-travel-archive/archive", "")
	send("PUT", "/api/v1/line-items/demo-coffee-japan", `{"campaign": "demo-coffee-autumn", "priority": 6, "weight": 1, "cpm": "3",
		"creatives": ["demo-coffee-300x250"], "targeting": {"placements": ["2"], "countries": ["JP"]}}`)
	start := time.Now().UTC().Add(-time.Hour).Truncate(time.Hour)
	send("PUT", "/api/v1/campaigns/demo-coffee-autumn", fmt.Sprintf(`{"id":"demo-coffee-autumn","advertiser":"demo-coffee","timezone":"Asia/Tokyo",
		"pacing":"even","start":%q,"end":%q,"budget":{"total":"100"}}`, start.Format(time.RFC3339), start.Add(24*time.Hour).Format(time.RFC3339)))
	// The budget's first lease is taken in the background: wait for a
	// coffee decision, so that the traffic below reaches both advertisers.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		_, body := browserGet(t, p.base+"/api/decide?placement=1&uid=warm-up")
		if strings.Contains(body, `"line_item":"demo-coffee-`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coffee campaign never delivered: %s", body)
		}
	}
	newReportTraffic().send(t, p.base, 30)
}

// demoBanner is a small image for the queue's previews: two bands of
// colour, the lower one wider for a leaderboard's path.
func demoBanner(path string) []byte {
	w, h := 300, 250
	if strings.Contains(path, "728x90") {
		w, h = 728, 90
	}
	img := image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.RGBA{0x6b, 0x3e, 0x26, 0xff}, color.RGBA{0xf4, 0xe1, 0xc1, 0xff}})
	for y := range h {
		for x := range w {
			if y > h*3/5 {
				img.SetColorIndex(x, y, 1)
			}
		}
	}
	var out bytes.Buffer
	_ = png.Encode(&out, img)
	return out.Bytes()
}

// a11yBrowserContext is browserContext with a fixed 1280x900 window (the
// screenshots' size) and a longer bound: the walk through every screen
// runs axe-core some thirty times.
func a11yBrowserContext(t *testing.T, browser string) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("lang", "en-US"),
	)
	t.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(cancelCtx)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// axe runs axe-core (its source given) on the whole page as it is now and
// returns its serious and critical violations, each with the elements
// that fail it. Creatives' frames are left out: their markup is the
// advertiser's, shown sandboxed, and no script runs in them.
func (b *page) axe(src string) []string {
	b.t.Helper()
	loaded, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`typeof window.axe === "object"`))
	if err != nil {
		b.t.Fatal(err)
	}
	if !loaded {
		if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[*runtime.RemoteObject](src)); err != nil {
			b.t.Fatalf("load axe-core: %v", err)
		}
	}
	found, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`axe.run(document, {resultTypes: ["violations"], iframes: false}).then(r =>
		r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v =>
			v.impact + " " + v.id + ": " + v.help + " (" + v.helpUrl + ")" + v.nodes.map(n =>
				"\n\t" + n.target.join(" ") + ": " + (n.failureSummary || "").replace(/\s+/g, " ")).join("")))`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("axe: %v", err)
	}
	return found
}

// keyboardGaps lists what the keyboard cannot do on the page as it is
// now: a shown element that reacts to a click but takes no focus (a table
// row that opens an editor), and a control whose focus leaves no visible
// mark. The focus is moved with Tab, as a user does, through every control
// of the page.
func (b *page) keyboardGaps() []string {
	b.t.Helper()
	// A chart's plot area (uPlot's .u-wrap) is where a pointer reads and
	// zooms it: the numbers it draws are in the table beside it.
	gaps, err := chromedp.Run(b.ctx, chromedp.EvaluateAsDevTools[[]string](`[...document.querySelectorAll("body *")].filter(el =>
		el.checkVisibility() && getEventListeners(el).click && el.tabIndex < 0 && !el.disabled && !el.matches(".u-wrap, .u-wrap *")).map(el =>
		"reacts to a click, takes no focus: " + el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className ? "." + el.className : "") +
		(el.dataset.id ? "[data-id=" + el.dataset.id + "]" : "") + " " + JSON.stringify(el.textContent.slice(0, 40)))`,
		chromedp.EvalAsValue))
	if err != nil {
		b.t.Fatalf("listeners: %v", err)
	}
	// Tab from the top of the page until the focus comes back around.
	if err := chromedp.Do(b.ctx, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur()`)); err != nil {
		b.t.Fatal(err)
	}
	// Inside a creative's frame the page's focus stays on the frame while
	// Tab moves through the frame's links: a repeat is no way round yet.
	first, last := "", ""
	for range 1000 {
		if err := chromedp.Do(b.ctx, chromedp.KeyEvent("\t")); err != nil {
			b.t.Fatal(err)
		}
		got, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`(() => {
			const el = document.activeElement;
			if (!el || el === document.body) return ["", ""];
			const path = [];
			for (let e = el; e && e !== document.body; e = e.parentElement) path.unshift(e.tagName + [...e.parentElement.children].indexOf(e));
			const s = getComputedStyle(el);
			// In a creative's frame the focus is on the frame's own content,
			// marked there by the browser, out of this page's reach.
			const marked = (s.outlineStyle !== "none" && parseFloat(s.outlineWidth) > 0) || s.boxShadow !== "none" || el.tagName === "IFRAME";
			return [path.join(">"), marked ? "" : "its focus leaves no visible mark: " + el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
				" " + JSON.stringify((el.textContent || el.value || "").slice(0, 40))];
		})()`))
		if err != nil {
			b.t.Fatal(err)
		}
		if got[0] == "" || got[0] == first {
			break
		}
		if got[0] == last {
			continue
		}
		if first == "" {
			first = got[0]
		}
		last = got[0]
		if got[1] != "" {
			gaps = append(gaps, got[1])
		}
	}
	return gaps
}

// screenshot writes the page, or the part from the first element of crop
// to the last, to $TSUBAME_SCREENSHOTS/name, when that is set.
func (b *page) screenshot(name string, crop [2]string) {
	b.t.Helper()
	dir := os.Getenv("TSUBAME_SCREENSHOTS")
	if dir == "" {
		return
	}
	var shot []byte
	var err error
	if crop[0] == "" {
		shot, err = chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	} else {
		// The section's heading is the element before its body.
		var clip cdppage.Viewport
		clip, err = chromedp.Run(b.ctx, chromedp.Evaluate[cdppage.Viewport](fmt.Sprintf(`(() => {
			const first = document.querySelector(%q), last = %q ? document.querySelector(%[2]q) : first;
			const head = first.previousElementSibling && /^H[1-4]$/.test(first.previousElementSibling.tagName) ? first.previousElementSibling : first;
			const a = head.getBoundingClientRect(), z = last.getBoundingClientRect();
			const top = Math.min(a.top, z.top) + window.scrollY, left = 0;
			return {x: left, y: Math.max(0, top - 8), width: document.documentElement.clientWidth, height: Math.max(a.bottom, z.bottom) - Math.min(a.top, z.top) + 16, scale: 1};
		})()`, crop[0], crop[1])))
		if err == nil {
			clip.X, clip.Y, clip.Width, clip.Height = math.Round(clip.X), math.Round(clip.Y), math.Round(clip.Width), math.Round(clip.Height)
			shot, err = chromedp.Run(b.ctx, func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
				r, err := cdp.Call(ctx, t, cdppage.CaptureScreenshot, cdppage.CaptureScreenshotParams{Format: cdppage.CaptureScreenshotFormatPng,
					CaptureBeyondViewport: new(true), FromSurface: new(true), Clip: &clip})
				if err != nil {
					return nil, err
				}
				return r.Data, nil
			})
		}
	}
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
		b.t.Error(err)
	}
}
