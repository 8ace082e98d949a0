package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	qr "github.com/piglig/go-qr"
	"github.com/pquerna/otp/totp"
)

// chromium finds the browser, or skips with the reason outside CI (in CI
// it must be there: .ci/run installs Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("TSUBAME_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH; .ci/run installs it (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium); the dashboard's browser test needs it")
	return ""
}

// The path a new user follows in README: start the server, open the admin
// page, create the first user with the bootstrap token the console shows,
// log in with the password and an authenticator code, watch the dashboard
// move under load, edit a placement and see the public endpoint serve it.
func TestDashboardInBrowser(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	adminURL := "http://" + adminAddr + "/"
	// Without a terminal the server writes the bootstrap token to a file
	// only its user reads, and logs where (never the token).
	tokenFile := filepath.Join(p.dataDir, "admin", BootstrapTokenFile)
	waitLog(t, p, `token_file=`+tokenFile)
	tokenText, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token file's mode: %v %v", fi.Mode(), err)
	}
	token := []string{"", strings.TrimSpace(string(tokenText))}
	if strings.Contains(p.logs.String(), token[1]) {
		t.Fatalf("the bootstrap token is in the process log:\n%s", p.logs)
	}

	ctx := browserContext(t, browser)
	const user, password = "ops", "correct horse battery staple"
	b := &page{t: t, ctx: ctx}
	b.do("create the first user",
		chromedp.Navigate(adminURL),
		chromedp.WaitVisible(css("#setup")),
		chromedp.SendKeys(css("#setup-token"), token[1]),
		chromedp.SendKeys(css("#setup-user"), user),
		chromedp.SendKeys(css("#setup-password"), password),
		chromedp.Click(css("#setup-submit")),
		chromedp.WaitVisible(css("#setup-done")),
	)
	secret := b.text("#setup-secret")
	if secret == "" {
		t.Fatal("no TOTP secret shown")
	}
	// The spent form is gone; the next step shows a QR code an
	// authenticator app reads: the same otpauth:// URL as the text.
	if shown := b.eval(`getComputedStyle(document.getElementById("setup-form")).display !== "none"`); shown {
		t.Error("the setup form stays on screen after the user was created")
	}
	otpURL, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("setup-url").textContent`))
	if err != nil || !strings.HasPrefix(otpURL, "otpauth://totp/Tsubame:"+user+"?") || !strings.Contains(otpURL, "secret="+secret) {
		t.Fatalf("otpauth URL %q (%v)", otpURL, err)
	}
	b.do("see the QR code", b.until(`document.getElementById("setup-qr").complete && document.getElementById("setup-qr").naturalWidth > 0`, 10*time.Second))
	shot, err := chromedp.Run(ctx, chromedp.Screenshot(css("#setup-qr")))
	if err != nil {
		t.Fatal(err)
	}
	saveScreenshot(t, ctx, "setup.png")
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := qr.Decode(img); err != nil || got != otpURL {
		t.Fatalf("the QR code on screen reads %q (%v), want %q", got, err, otpURL)
	}
	b.do("go to the login form", chromedp.Click(css("#setup-continue")), chromedp.WaitVisible(css("#login")))
	if b.eval(`document.getElementById("setup").offsetParent !== null || document.getElementById("setup-secret").textContent !== ""`) {
		t.Error("the setup step (or its secret) stays on the page after it")
	}

	// A wrong code is refused with the one message for every failure.
	b.do("a failed login",
		chromedp.SendKeys(css("#login-password"), password),
		chromedp.SendKeys(css("#login-totp"), "000000"),
		chromedp.Click(css("#login-submit")),
		b.until(`document.getElementById("login-error").textContent !== ""`, 10*time.Second),
	)
	if got := b.text("#login-error"); got != "Invalid credentials." {
		t.Errorf("login error %q", got)
	}
	code, err := totp.GenerateCode(secret, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b.do("log in",
		chromedp.SendKeys(css("#login-password"), password),
		chromedp.SendKeys(css("#login-totp"), code),
		chromedp.Click(css("#login-submit")),
		chromedp.WaitVisible(css("#dash")),
	)

	// A small, bounded load: the dashboard must show it within seconds.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			client := &http.Client{Timeout: 5 * time.Second}
			for n := 0; n < 20000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(p.base + "/api/sample4.js?id=1&callback=Example.process")
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	b.do("see the load", b.until(`parseFloat(document.getElementById("rps").textContent.replace(/,/g, "")) > 10`, 20*time.Second))
	rps := b.text("#rps")
	close(stop)
	wg.Wait()
	cores, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#cores .core").length`))
	if err != nil || cores != runtime.NumCPU() {
		t.Errorf("the dashboard shows %d cores (%v), the machine has %d", cores, err, runtime.NumCPU())
	}
	hit, p99 := b.text("#hit"), b.text("#p99")
	if !strings.HasSuffix(hit, "%") || !strings.HasSuffix(p99, "ms") {
		t.Errorf("hit rate %q, p99 %q", hit, p99)
	}
	t.Logf("dashboard: %s req/s, p99 %s, hit rate %s", rps, p99, hit)
	saveScreenshot(t, ctx, "dashboard.png")

	// The chart has its axes: labels left of the plot (req/s) and under it
	// (the time of each minute) are drawn.
	if !b.eval(`(() => {
		const c = document.getElementById("chart"), g = c.getContext("2d");
		const inked = (x, y, w, h) => g.getImageData(x, y, w, h).data.some((v, i) => i % 4 === 3 && v > 0);
		return inked(20, 0, 40, c.height - 30) && inked(70, c.height - 20, c.width - 80, 20);
	})()`) {
		t.Error("the requests/s chart has no axis labels")
	}

	// Placements list by number (1, 2, 3, not 1, 10, 100), with the count;
	// the pager goes forward and back; a search narrows the list.
	firstIDs := func() string {
		ids, err := chromedp.Run(ctx, chromedp.Evaluate[string](
			`[...document.querySelectorAll("#placements tbody tr")].slice(0, 3).map(r => r.cells[0].textContent).join(",")`))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	b.do("the first page", b.until(`document.getElementById("page-count").textContent !== ""`, 10*time.Second))
	if ids, count := firstIDs(), b.text("#page-count"); ids != "1,2,3" || count != "1–20 of 1,000" {
		t.Errorf("first page: %s, %q", ids, count)
	}
	b.do("the next page", chromedp.Click(css("#page-next")), b.until(`document.getElementById("page-count").textContent.startsWith("21")`, 10*time.Second))
	if ids, count := firstIDs(), b.text("#page-count"); ids != "21,22,23" || count != "21–40 of 1,000" {
		t.Errorf("second page: %s, %q", ids, count)
	}
	b.do("the previous page", chromedp.Click(css("#page-prev")), b.until(`document.getElementById("page-count").textContent.startsWith("1–")`, 10*time.Second))
	if b.eval(`!document.getElementById("page-prev").disabled`) {
		t.Error("Previous is enabled on the first page")
	}
	b.do("search", chromedp.SendKeys(css("#search"), "100"),
		b.until(`document.getElementById("page-count").textContent.includes("matching")`, 10*time.Second))
	if ids, count := firstIDs(), b.text("#page-count"); ids != "100,1000" || count != "1–2 of 2 matching “100”" {
		t.Errorf("search 100: %s, %q", ids, count)
	}
	b.eval(`(document.getElementById("search").value = "", document.getElementById("search-form").requestSubmit(), true)`)
	b.do("clear the search", b.until(`document.getElementById("page-count").textContent === "1–20 of 1,000"`, 10*time.Second))

	// Delete does not look like Save.
	if b.eval(`(() => {
		const s = getComputedStyle(document.getElementById("edit-save")), d = getComputedStyle(document.getElementById("edit-delete"));
		return s.color === d.color && s.backgroundColor === d.backgroundColor && s.borderColor === d.borderColor;
	})()`) {
		t.Error("Delete is styled like Save")
	}

	// Edit placement 1 from the table and see the public endpoint serve it.
	const newURL = "https://edited.example.com/tag.js"
	b.do("pick placement 1",
		chromedp.WaitVisible(css("#placements tbody tr")),
		chromedp.Click(css("#placements tbody tr:first-child")),
	)
	if id, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("edit-id").value`)); err != nil || id != "1" {
		t.Fatalf("the editor shows id %q (%v)", id, err)
	}
	b.do("edit placement 1",
		chromedp.SetValue(css("#edit-urls"), newURL),
		chromedp.Click(css("#edit-save")),
		b.until(`document.getElementById("edit-status").textContent !== ""`, 10*time.Second),
	)
	if status := b.text("#edit-status"); status != "Saved 1." {
		t.Fatalf("edit status %q", status)
	}
	for _, ep := range []string{"sample3", "sample4"} {
		resp, err := http.Get(p.base + "/api/" + ep + ".js?id=1&callback=cb")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf(`cb({"urls":[%q]});`, newURL); string(body) != want {
			t.Errorf("%s after the edit: %s, want %s", ep, body, want)
		}
	}

	// Log out: the page returns to the login form and the session is gone.
	b.do("log out", chromedp.Click(css("#logout")), chromedp.WaitVisible(css("#login")))
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/api/v1/session").then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 401 {
		t.Errorf("session after logout: %d (%v)", status, err)
	}

	// A viewer (made with the CLI beside the running server) sees the
	// figures and the placements, not the tools to change them.
	env := []string{"TSUBAME_DATA_DIR=" + p.dataDir}
	exit, out, stderr := runCmd(t, env, password+"\n", "admin", "create-user", "-role", "viewer", "watcher")
	secretLine := regexp.MustCompile(`TOTP secret .*: ([A-Z2-7]+)`).FindStringSubmatch(out)
	if exit != 0 || secretLine == nil {
		t.Fatalf("create-user watcher: %d %s %s", exit, out, stderr)
	}
	code2, err := totp.GenerateCode(secretLine[1], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b.do("log in as a viewer",
		chromedp.SetValue(css("#login-user"), "watcher"),
		chromedp.SetValue(css("#login-password"), password),
		chromedp.SetValue(css("#login-totp"), code2),
		chromedp.Click(css("#login-submit")),
		chromedp.WaitVisible(css("#dash")),
		chromedp.WaitVisible(css("#placements tbody tr")),
	)
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("editor-tools").hidden`))
	if err != nil || !hidden {
		t.Errorf("a viewer sees the editing tools (hidden=%v, %v)", hidden, err)
	}
	if who := b.text("#whoami"); who != "watcher (viewer)" {
		t.Errorf("whoami %q", who)
	}
}

// An editor sees the campaigns the file gave (advertisers, their campaigns,
// each campaign's line items), pauses a line item and edits another; a
// viewer sees the same table with the buttons disabled and no editor.
func TestDashboardCampaignsInBrowser(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	adminURL := "http://" + adminAddr
	env := []string{"TSUBAME_DATA_DIR=" + p.dataDir}
	const password = "correct horse battery staple"
	secrets := map[string]string{}
	for _, u := range []string{"ed", "watcher", "boss"} {
		role := map[string]string{"ed": "editor", "watcher": "viewer", "boss": "admin"}[u]
		exit, out, stderr := runCmd(t, env, password+"\n", "admin", "create-user", "-role", role, u)
		secret := regexp.MustCompile(`TOTP secret .*: ([A-Z2-7]+)`).FindStringSubmatch(out)
		if exit != 0 || secret == nil {
			t.Fatalf("create-user %s: %d %s %s", u, exit, out, stderr)
		}
		secrets[u] = secret[1]
	}
	exit, token, stderr := runCmd(t, env, "", "admin", "create-token", "-user", "ed", "-name", "import")
	token = strings.TrimSpace(token)
	if exit != 0 || token == "" {
		t.Fatalf("create-token: %d %s", exit, stderr)
	}
	file, err := os.ReadFile(exampleCampaigns)
	if err != nil {
		t.Fatal(err)
	}
	// Replace: -demo loaded campaigns of its own (in another currency).
	req, _ := http.NewRequest("POST", adminURL+"/api/v1/campaigns/import?mode=replace", bytes.NewReader(file))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("import: %d %s", resp.StatusCode, answer)
	}
	lineItem := func(id string) map[string]any {
		t.Helper()
		code, body := getWith(t, adminURL+"/api/v1/line-items/"+id, token)
		var li map[string]any
		if err := json.Unmarshal([]byte(body), &li); err != nil || code != 200 {
			t.Fatalf("line item %s: %d %s", id, code, body)
		}
		return li
	}

	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	login := func(user string) {
		t.Helper()
		code, err := totp.GenerateCode(secrets[user], time.Now())
		if err != nil {
			t.Fatal(err)
		}
		b.do("log in as "+user,
			chromedp.Navigate(adminURL+"/"),
			chromedp.WaitVisible(css("#login")),
			chromedp.SetValue(css("#login-user"), user),
			chromedp.SetValue(css("#login-password"), password),
			chromedp.SetValue(css("#login-totp"), code),
			chromedp.Click(css("#login-submit")),
			chromedp.WaitVisible(css("#dash")),
			chromedp.WaitVisible(css(`#campaigns tr[data-id="li-spring-tokyo"]`)),
		)
	}
	// row returns a line item's row as the table shows it: its cells' text.
	row := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
			`[...document.querySelector('#campaigns tr[data-id=%q]').cells].map(c => c.textContent).join("|")`, id)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	login("ed")
	b.do("budgets read", b.until(`document.querySelectorAll("#budgets tbody tr").length > 0`, 10*time.Second))
	// Each line item's status, from GET /api/v1/line-items: the example's
	// flights ended, and it targets Japan while the server has no geo
	// database. The explain is an admin's: an editor has no form.
	b.do("line item status read", b.until(`document.querySelectorAll("#campaigns td.serving").length > 0 && `+
		`![...document.querySelectorAll("#campaigns td.serving")].some(td => td.textContent === "…")`, 10*time.Second))
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("explain-section").hidden`)); err != nil || !hidden {
		t.Errorf("an editor sees the explain form (%v)", err)
	}
	saveScreenshot(t, ctx, "campaigns.png")
	// li-spring-tokyo has impression limits: its delivery is counted.
	if got, want := row("li-spring-tokyo"), "li-spring-tokyo|active|no: not indexed, no geo database|4|3|350 JPY|2026-03-01 → 2026-06-01|0|Pause"; got != want {
		t.Errorf("row %q, want %q", got, want)
	}
	if got, want := row("li-spring-mornings"), "li-spring-mornings|paused|no: paused, no geo database|2|1|420.5 JPY|2026-03-01 → 2026-06-01|—|Resume"; got != want {
		t.Errorf("row %q, want %q", got, want)
	}
	// The budgets table shows what the API answers, row for row.
	code, body := getWith(t, adminURL+"/api/v1/budgets", token)
	var api struct {
		Budgets []struct {
			Key                                  string
			Booked, Settled, Reserved, Remaining json.RawMessage
			Target                               json.RawMessage
			Kind                                 string
		}
	}
	if err := json.Unmarshal([]byte(body), &api); err != nil || code != 200 {
		t.Fatalf("budgets: %d %s", code, body)
	}
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#budgets tbody tr")].map(r => r.dataset.key + "|" + [...r.querySelectorAll("td.num:not(.target)")].map(c => c.textContent).join("|"))`))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, u := range api.Budgets {
		f := func(raw json.RawMessage) string {
			var s string
			if json.Unmarshal(raw, &s) == nil { // spend: a decimal string
				return s + " JPY"
			}
			n, _ := strconv.ParseInt(string(raw), 10, 64)
			return commas(n)
		}
		// The ideal now moves with the clock between the page's read and
		// this one: it is compared where a flight has ended (below).
		want = append(want, strings.Join([]string{u.Key, f(u.Booked), f(u.Settled), f(u.Reserved), f(u.Remaining)}, "|"))
	}
	if got := b.text(`#budgets tr[data-key="li/li-spring-tokyo/imp"] td.target`); got != "2,000,000" {
		t.Errorf("the ideal of a flight that has ended is %q, want all of it", got)
	}
	if len(want) != 5 || strings.Join(shown, "\n") != strings.Join(want, "\n") {
		t.Errorf("budgets table:\n%s\nwant (the API's):\n%s", strings.Join(shown, "\n"), strings.Join(want, "\n"))
	}
	// Advertisers, then their campaigns, then the campaigns' line items.
	order, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`[...document.querySelectorAll("#campaigns tbody tr")].map(r => r.dataset.id || r.className + ":" + r.cells[0].textContent.split(" · ")[0]).join(",")`))
	if want := "adv:Kaze Travel (adv-kaze),camp:campaign camp-summer-trips,li-okinawa-preroll," +
		"adv:Sakura Coffee (adv-sakura),camp:campaign camp-spring,li-spring-mornings,li-spring-tokyo"; err != nil || order != want {
		t.Errorf("table order %q (%v), want %q", order, err, want)
	}
	if got := b.text("#campaigns-count"); got != "2 advertisers, 2 campaigns, 3 line items (1 paused)" {
		t.Errorf("count %q", got)
	}

	b.do("pause a line item",
		chromedp.Click(css(`#campaigns tr[data-id="li-spring-tokyo"] button.pause`)),
		b.until(`document.querySelector('#campaigns tr[data-id="li-spring-tokyo"] td.status').textContent === "paused"`, 10*time.Second),
	)
	if li := lineItem("li-spring-tokyo"); li["status"] != "paused" || li["cpm"] != "350" {
		t.Errorf("after the pause the store holds %v", li)
	}
	if got := row("li-spring-tokyo"); !strings.HasSuffix(got, "|Resume") {
		t.Errorf("a paused row offers %q", got)
	}

	// Edit another from the table: the form shows it; a creative of
	// another advertiser is refused by the server, on its field; then a
	// save.
	b.do("pick a line item",
		chromedp.Click(css(`#campaigns tr[data-id="li-okinawa-preroll"] td:first-child`)),
		b.until(`document.getElementById("li-id").value === "li-okinawa-preroll"`, 10*time.Second),
		b.until(`document.getElementById("li-form").dataset.ready === "true"`, 10*time.Second),
	)
	if !b.eval(`JSON.parse(document.getElementById("li-json").textContent).targeting.devices.length === 3 && document.getElementById("li-cpm").value === "1200"`) {
		t.Error("the editor does not show the line item's targeting and CPM")
	}
	b.do("a creative of another advertiser",
		chromedp.SetValue(css("#li-t-countries-in"), "KR"),
		chromedp.Click(css("#li-t-countries-add")),
		chromedp.SetValue(css("#li-campaign"), "camp-spring"),
		chromedp.Click(css("#li-save")),
		b.until(`document.getElementById("li-edit-status").textContent === "Not saved: 1 problem, shown on the fields."`, 10*time.Second),
	)
	if !b.eval(`document.getElementById("li-creatives").getAttribute("aria-invalid") === "true" &&
		document.getElementById("li-creatives-problem").textContent.startsWith("creatives[0]: creative \"cr-okinawa-video\" belongs to advertiser")`) {
		t.Error("the creative's problem is not shown on the creatives field")
	}
	// Every problem at once, each on its field: a country that is not a
	// code, and a daily limit above the total.
	b.do("two problems",
		chromedp.SetValue(css("#li-campaign"), "camp-summer-trips"),
		chromedp.SetValue(css("#li-t-countries-in"), "JPN"),
		chromedp.Click(css("#li-t-countries-add")),
		chromedp.SetValue(css("#li-limit-total"), "10"),
		chromedp.SetValue(css("#li-limit-daily"), "20"),
		chromedp.Click(css("#li-save")),
		b.until(`document.getElementById("li-edit-status").textContent === "Not saved: 2 problems, shown on the fields."`, 10*time.Second),
	)
	if !b.eval(`document.getElementById("li-t-countries-problem").textContent.startsWith("targeting.countries[2]: \"JPN\": not an ISO 3166-1 alpha-2 code") &&
		document.getElementById("li-limit-daily-problem").textContent === "20 is more than the total 10" &&
		document.getElementById("li-cpm").getAttribute("aria-invalid") === null`) {
		t.Errorf("the two problems are not each on their field: %q %q", b.text("#li-t-countries-problem"), b.text("#li-limit-daily-problem"))
	}
	b.do("save",
		chromedp.Click(css(`#li-t-countries-chips button[aria-label="remove JPN"]`)),
		chromedp.SetValue(css("#li-limit-total"), ""),
		chromedp.SetValue(css("#li-limit-daily"), ""),
		chromedp.SetValue(css("#li-weight"), "5"),
		chromedp.SetValue(css("#li-cpm"), "1250.5"),
		chromedp.Click(css("#li-save")),
		b.until(`document.getElementById("li-edit-status").textContent === "Saved li-okinawa-preroll."`, 10*time.Second),
		b.until(`document.querySelector('#campaigns tr[data-id="li-okinawa-preroll"]').cells[4].textContent === "5"`, 10*time.Second),
	)
	if !b.eval(`document.querySelectorAll("#li-form [aria-invalid]").length === 0 && document.querySelectorAll("#li-form .field-problem").length === 0`) {
		t.Error("the fields still show problems after the save")
	}
	// The editor lists the line item's changes, the save first.
	b.do("the changes",
		b.until(`(document.querySelector("#li-history li") || {textContent: ""}).textContent.includes(": put (")`, 10*time.Second),
	)
	if !b.eval(`document.querySelector("#li-history li").textContent.includes("weight: ") &&
		document.querySelector("#li-history li").textContent.includes("→ 5") &&
		document.querySelector("#li-history li").textContent.includes('cpm: "1200" → "1250.5"')`) {
		t.Errorf("the last change listed: %q", b.text("#li-history li"))
	}
	li := lineItem("li-okinawa-preroll")
	if li["weight"] != 5.0 || li["cpm"] != "1250.5" || fmt.Sprint(li["targeting"]) != "map[countries:[JP KR] devices:[mobile tablet tv] os:[ios android]]" ||
		fmt.Sprint(li["deals"]) != "[deal-travel-q3]" || len(li["frequency"].([]any)) != 2 {
		t.Errorf("after the edit the store holds %v", li)
	}

	// A viewer: the same table, the buttons disabled, no editor.
	b.do("log out", chromedp.Click(css("#logout")), chromedp.WaitVisible(css("#login")))
	login("watcher")
	if !b.eval(`[...document.querySelectorAll("#campaigns button.pause")].every(b => b.disabled)`) {
		t.Error("a viewer's pause buttons are enabled")
	}
	if !b.eval(`document.getElementById("line-item-tools").hidden`) {
		t.Error("a viewer sees the line item editor")
	}
	if got := row("li-spring-tokyo"); !strings.Contains(got, "|paused|") {
		t.Errorf("the viewer sees %q", got)
	}
	if !b.eval(`document.getElementById("explain-section").hidden`) {
		t.Error("a viewer sees the explain form")
	}

	// An admin asks why: the index still holds the demo's campaigns (the
	// example's are in another currency than ads.currency), two of which
	// share placement 1 at one priority and one wants kv section=sports.
	b.do("log out", chromedp.Click(css("#logout")), chromedp.WaitVisible(css("#login")))
	login("boss")
	b.do("explain a request",
		chromedp.WaitVisible(css("#explain-form")),
		chromedp.SetValue(css("#explain-placement"), "1"),
		chromedp.SetValue(css("#explain-kv"), "section=news"),
		chromedp.SetValue(css("#explain-ua"), browserUA),
		chromedp.Click(css("#explain-run")),
		b.until(`document.querySelectorAll("#explain-lines tbody tr[data-line-item]").length === 3`, 10*time.Second),
	)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`[...document.querySelectorAll("#explain-lines tbody tr")].map(r => r.dataset.lineItem + ":" + r.cells[3].textContent).sort().join(",")`))
	if err != nil {
		t.Fatal(err)
	}
	if got != "demo-coffee-run:lost draw,demo-coffee-sports:key values,demo-travel-run:won" &&
		got != "demo-coffee-run:won,demo-coffee-sports:key values,demo-travel-run:lost draw" {
		t.Errorf("the explain lists %q", got)
	}
	if summary := b.text("#explain-summary"); !strings.HasPrefix(summary, "Serves demo-") || !strings.Contains(summary, "desktop") {
		t.Errorf("the explain's summary: %q", summary)
	}
	saveScreenshot(t, ctx, "explain.png")
	b.do("a placement missing",
		chromedp.SetValue(css("#explain-placement"), "x"),
		chromedp.SetValue(css("#explain-country"), "jp"),
		chromedp.Click(css("#explain-run")),
		b.until(`document.getElementById("explain-error").textContent === "country must be an ISO 3166-1 alpha-2 code such as JP"`, 10*time.Second),
	)
}

// browserContext starts headless Chromium with a profile of its own, the
// extra flags given, and a 90 s bound on the whole test's browsing.
func browserContext(t *testing.T, browser string, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}, extra...)
	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(cancelCtx)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// saveScreenshot writes the page to $TSUBAME_SCREENSHOTS/name when that
// is set, to look at the dashboard as a user sees it.
func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("TSUBAME_SCREENSHOTS")
	if dir == "" {
		return
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
		t.Error(err)
	}
}

// page drives one browser tab, failing the test on the first error.
type page struct {
	t   *testing.T
	ctx context.Context
}

func (b *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript boolean expression.
func (b *page) eval(expr string) bool {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// text is the element's rendered text, read in one evaluation in the
// page: a node the page moves or redraws meanwhile (the editor under its
// row, as the table refreshes) is not lost between finding and reading it.
func (b *page) text(sel string) string {
	b.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e === null ? [false, ""] : [true, e.innerText]; })()`, sel)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]any](js))
		if err != nil {
			b.t.Fatalf("text of %s: %v", sel, err)
		}
		if found, _ := got[0].(bool); found {
			s, _ := got[1].(string)
			return s
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("text of %s: no such element", sel)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// until waits for a JavaScript condition to hold.
func (b *page) until(cond string, timeout time.Duration) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(timeout))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := poll(ctx, t)
		return chromedp.Void{}, err
	}
}

// commas writes n as the dashboard does (toLocaleString("en")).
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
