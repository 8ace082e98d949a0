package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// putWith puts body to url with an API token, and returns the status and
// the answer.
func putWith(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// An editor reviews creatives in the dashboard: the queue shows each
// pending creative with its preview (an image from the advertiser's host;
// HTML in a sandboxed frame, its markup never in the page and its script
// never run), a creative added by URL through the form (the API's problems
// shown on its fields first), Approve takes one out of the queue and its
// line item serves through /api/decide, Reject asks for the reason, which
// the rejected list shows.
func TestDashboardCreativeQueueInBrowser(t *testing.T) {
	browser := chromium(t)
	// The advertiser's image host.
	var pic bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 30, 25))
	for i := range img.Pix {
		img.Pix[i] = 0x80
	}
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	if err := png.Encode(&pic, img); err != nil {
		t.Fatal(err)
	}
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(pic.Bytes())
	}))
	t.Cleanup(cdn.Close)

	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	adminURL := "http://" + adminAddr
	login := dashboardUser(t, p, "ed", "editor")
	watcher := dashboardUser(t, p, "watcher", "viewer")
	exit, token, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir}, "", "admin", "create-token", "-user", "ed", "-name", "review")
	token = strings.TrimSpace(token)
	if exit != 0 || token == "" {
		t.Fatalf("create-token: %d %s", exit, stderr)
	}
	// An HTML creative waiting for review, whose markup tries to reach the
	// dashboard around it.
	html := `<p id="creative-marker">Autumn blend</p><script>parent.document.title = "taken"</script>`
	if code, body := putWith(t, adminURL+"/api/v1/creatives/review-html", token, fmt.Sprintf(
		`{"advertiser": "demo-coffee", "format": "banner", "w": 300, "h": 250, "html": %q, "click": "https://coffee.example/"}`, html)); code != 200 {
		t.Fatalf("put the HTML creative: %d %s", code, body)
	}

	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	watch := watchConsole(t, ctx)
	b.do("open the page", chromedp.Navigate(adminURL+"/"))
	login(b)
	b.loaded()
	b.do("the queue shows the HTML creative", chromedp.WaitVisible(css(`#creatives tr[data-id="review-html"] iframe`)))
	if !b.eval(`(() => { const f = document.querySelector('#creatives tr[data-id="review-html"] iframe');
		return f.getAttribute("sandbox") === "" && f.contentDocument === null; })()`) {
		t.Error("the HTML creative's frame is not sandboxed apart from the page")
	}
	if b.eval(`document.getElementById("creative-marker") !== null || document.title === "taken"`) {
		t.Error("the creative's markup reached the dashboard")
	}

	// Added by URL: first with a click URL the API refuses, shown on its field.
	image := cdn.URL + "/autumn-300x250.png"
	b.do("add a creative",
		chromedp.Click(css("#creative-new")),
		chromedp.WaitVisible(css("#cr-form")),
		chromedp.SetValue(css("#cr-id"), "review-img"),
		chromedp.SetValue(css("#cr-advertiser"), "demo-coffee"),
		chromedp.SetValue(css("#cr-w"), "300"),
		chromedp.SetValue(css("#cr-h"), "250"),
		chromedp.SetValue(css("#cr-image"), image),
		chromedp.SetValue(css("#cr-click"), "javascript:alert(1)"),
		chromedp.Click(css("#cr-save")),
		b.until(`document.getElementById("cr-click").getAttribute("aria-invalid") === "true"`, 10*time.Second),
	)
	if got := b.text("#cr-click-problem"); !strings.Contains(got, "http or https URL") {
		t.Errorf("the click field's problem: %q", got)
	}
	b.do("fix the click URL and add it",
		chromedp.SetValue(css("#cr-click"), "https://coffee.example/autumn"),
		chromedp.Click(css("#cr-save")),
		b.until(`document.getElementById("cr-status").textContent === "Added review-img: it waits for review."`, 10*time.Second),
		b.until(`(() => { const i = document.querySelector('#creatives tr[data-id="review-img"] img');
			return !!i && i.complete && i.naturalWidth === 30; })()`, 10*time.Second),
	)
	if got := b.text("#creatives-count"); got != "2 waiting for review" {
		t.Errorf("the queue's count: %q", got)
	}
	saveScreenshot(t, ctx, "creatives.png")

	// Its line item waits for it.
	if code, body := putWith(t, adminURL+"/api/v1/line-items/review-li", token,
		`{"campaign": "demo-coffee-autumn", "priority": 1, "weight": 1, "cpm": "3", "creatives": ["review-img"], "targeting": {"placements": ["review"]}}`); code != 200 {
		t.Fatalf("put the line item: %d %s", code, body)
	}
	decide := func() (int, string) { return browserGet(t, p.base+"/api/decide?placement=review&uid=u-1") }
	if code, body := decide(); code != http.StatusNoContent {
		t.Fatalf("a pending creative serves: %d %s", code, body)
	}
	b.do("approve it",
		chromedp.Click(css(`#creatives tr[data-id="review-img"] button.approve`)),
		b.until(`document.querySelector('#creatives tr[data-id="review-img"]') === null`, 10*time.Second),
	)
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := decide()
		if code == http.StatusOK && strings.Contains(body, `"line_item":"review-li"`) && strings.Contains(body, `"creative":"review-img"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the approved creative does not serve: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Rejected, with its reason.
	const reason = "Shows a price the landing page does not"
	b.do("reject the HTML creative",
		chromedp.Click(css(`#creatives tr[data-id="review-html"] button.reject`)),
		chromedp.WaitVisible(css(`#creatives tr[data-id="review-html"] form.reject input`)),
		chromedp.SetValue(css(`#creatives tr[data-id="review-html"] form.reject input`), reason),
		chromedp.Click(css(`#creatives tr[data-id="review-html"] form.reject button[type="submit"]`)),
		b.until(`document.querySelector('#creatives tr[data-id="review-html"]') === null`, 10*time.Second),
		b.until(`document.getElementById("creatives-count").textContent === "0 waiting for review"`, 10*time.Second),
	)
	b.do("list the rejected", chromedp.SetValue(css("#creatives-status"), "rejected"))
	b.eval(`document.getElementById("creatives-status").dispatchEvent(new Event("change"))`)
	b.do("the rejected list", chromedp.WaitVisible(css(`#creatives tr[data-id="review-html"]`)))
	if got := b.text(`#creatives tr[data-id="review-html"] td.status`); got != "rejected: "+reason {
		t.Errorf("the rejected creative's status: %q", got)
	}
	// A viewer sees the queue and may not review or add.
	if code, body := putWith(t, adminURL+"/api/v1/creatives/review-img2", token, fmt.Sprintf(
		`{"advertiser": "demo-coffee", "format": "banner", "w": 300, "h": 250, "image": %q, "click": "https://coffee.example/"}`, image)); code != 200 {
		t.Fatalf("put another creative: %d %s", code, body)
	}
	b.do("log out", chromedp.Click(css("#logout")))
	watcher(b)
	b.loaded()
	b.do("the viewer's queue", chromedp.WaitVisible(css(`#creatives tr[data-id="review-img2"]`)))
	if !b.eval(`document.querySelector('#creatives tr[data-id="review-img2"] button.approve').disabled &&
		document.querySelector('#creatives tr[data-id="review-img2"] button.reject').disabled &&
		document.getElementById("creative-new").hidden`) {
		t.Error("a viewer may review or add creatives in the page")
	}
	// The console holds the sandbox refusing the creative's script (its
	// frame's, where it is reported) and the refused add's 400, nothing else.
	for _, p := range watch.take() {
		if !strings.Contains(p, "sandboxed and the 'allow-scripts' permission is not set") && !strings.Contains(p, "400 ") &&
			!strings.Contains(p, "status of 400") {
			t.Errorf("the console shows: %s", p)
		}
	}
}

// An editor selects line items in the campaigns table and pauses, then
// resumes, them at once, and archives one (it leaves the table until
// asked for, and is restored); a campaign's own Pause stops its line
// items serving (their own status stays active) until its Resume.
func TestDashboardBulkAndCampaignPauseInBrowser(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	login := dashboardUser(t, p, "ed", "editor")
	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	b.do("open the page", chromedp.Navigate("http://"+adminAddr+"/"))
	login(b)
	b.loaded()

	status := func(id string) string {
		return fmt.Sprintf(`document.querySelector('#campaigns tr[data-id=%q] td.status')?.textContent`, id)
	}
	pick := func(id string) chromedp.Action[chromedp.Void] {
		return chromedp.Click(css(`#campaigns tr[data-id="` + id + `"] input.pick`))
	}
	b.do("select two line items",
		pick("demo-coffee-sports"), pick("demo-coffee-run"),
		b.until(`document.getElementById("bulk-count").textContent === "2 line items selected"`, 10*time.Second),
	)
	if !b.eval(`document.getElementById("line-item-tools").hidden`) {
		t.Error("a box's click opened the line item editor")
	}
	saveScreenshot(t, ctx, "bulk.png")
	b.do("pause them",
		chromedp.Click(css("#bulk-pause")),
		b.until(status("demo-coffee-sports")+` === "paused" && `+status("demo-coffee-run")+` === "paused"`, 10*time.Second),
	)
	if got := b.eval(status("demo-travel-run") + ` === "active"`); !got {
		t.Error("a line item not selected was paused")
	}
	if !b.eval(`document.querySelector('#campaigns tr[data-id="demo-coffee-run"] input.pick').checked`) {
		t.Error("the selection did not live through the redraw")
	}
	b.do("resume them",
		chromedp.Click(css("#bulk-resume")),
		b.until(status("demo-coffee-sports")+` === "active" && `+status("demo-coffee-run")+` === "active"`, 10*time.Second),
		chromedp.Click(css("#bulk-clear")),
		b.until(`document.getElementById("bulk-bar").hidden`, 10*time.Second),
	)

	// Archived: out of the table until asked for, then restored.
	b.eval(`(window.confirm = () => true, true)`)
	b.do("archive a line item",
		pick("demo-travel-run"),
		chromedp.Click(css("#bulk-archive")),
		b.until(`document.querySelector('#campaigns tr[data-id="demo-travel-run"]') === null`, 10*time.Second),
		b.until(`document.getElementById("archived-count").textContent === "(1)"`, 10*time.Second),
	)
	if !b.eval(`document.getElementById("bulk-bar").hidden`) {
		t.Error("an archived line item stays selected")
	}
	b.do("show the archived",
		chromedp.Click(css("#show-archived")),
		b.until(status("demo-travel-run")+` === "archived"`, 10*time.Second),
	)
	b.do("restore it",
		chromedp.Click(css(`#campaigns tr[data-id="demo-travel-run"] button.pause`)),
		b.until(status("demo-travel-run")+` === "active"`, 10*time.Second),
		chromedp.Click(css("#show-archived")),
	)

	// The travel campaign's pause: its preroll line item stops serving.
	decide := func() (int, string) { return browserGet(t, p.base+"/api/decide?placement=preroll&uid=u-1") }
	waitFor := func(want int, why string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body := decide()
			if code == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: decide answers %d %s, want %d", why, code, body, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor(http.StatusOK, "before the pause")
	camp := `#campaigns tr.camp[data-campaign="demo-travel-winter"]`
	// Clicked in the page, found and clicked at once: the table may be
	// drawn again meanwhile (the restore's and the box's reloads).
	clickCampaign := `document.querySelector('` + camp + ` button.campaign-pause').click()`
	b.eval("(" + clickCampaign + ", true)")
	b.do("pause the campaign",
		b.until(`document.querySelector('`+camp+` button.campaign-pause')?.textContent === "Resume campaign"`, 10*time.Second),
	)
	if got := b.text(camp + " span.paused"); got != "paused: none of its line items serves" {
		t.Errorf("the paused campaign's row says %q", got)
	}
	if !b.eval(status("demo-travel-preroll") + ` === "active"`) {
		t.Error("the campaign's pause changed its line item's own status")
	}
	if !b.eval(`document.querySelector('#campaigns tr[data-id="demo-travel-preroll"] td.status').title === "its campaign is paused: it serves nothing"`) {
		t.Error("a paused campaign's line item does not say it serves nothing")
	}
	waitFor(http.StatusNoContent, "the campaign paused")
	b.eval("(" + clickCampaign + ", true)")
	b.do("resume the campaign",
		b.until(`document.querySelector('`+camp+` button.campaign-pause')?.textContent === "Pause campaign"`, 10*time.Second),
	)
	waitFor(http.StatusOK, "the campaign resumed")
}

// An editor archives a creative from its row (after a confirm): it
// leaves the approval queue, the "archived" filter shows it marked
// archived with its review kept, and Restore brings it back to the queue;
// the API agrees each time.
func TestDashboardCreativeArchiveInBrowser(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	adminURL := "http://" + adminAddr
	login := dashboardUser(t, p, "ed", "editor")
	exit, token, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir}, "", "admin", "create-token", "-user", "ed", "-name", "archive")
	token = strings.TrimSpace(token)
	if exit != 0 || token == "" {
		t.Fatalf("create-token: %d %s", exit, stderr)
	}
	if code, body := putWith(t, adminURL+"/api/v1/creatives/archive-me", token,
		`{"advertiser": "demo-coffee", "format": "banner", "w": 300, "h": 250, "html": "<p>Autumn</p>", "click": "https://coffee.example/"}`); code != 200 {
		t.Fatalf("put the creative: %d %s", code, body)
	}
	// stored checks the creative as the API has it: archived or not, its
	// review pending either way.
	stored := func(archived bool) {
		t.Helper()
		code, body := getWith(t, adminURL+"/api/v1/creatives/archive-me", token)
		if code != 200 || strings.Contains(body, `"archived":true`) != archived || strings.Contains(body, `"status"`) {
			t.Errorf("the API's creative (archived %v wanted, pending): %d %s", archived, code, body)
		}
	}

	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	filter := func(status string) {
		t.Helper()
		b.do("filter "+status, chromedp.SetValue(css("#creatives-status"), status))
		b.eval(`document.getElementById("creatives-status").dispatchEvent(new Event("change"))`)
	}
	b.do("open the page", chromedp.Navigate(adminURL+"/"))
	login(b)
	b.loaded()
	row := `#creatives tr[data-id="archive-me"]`
	b.do("the queue shows it", chromedp.WaitVisible(css(row+` button.archive`)))
	b.eval(`(window.confirm = () => true, true)`)
	b.do("archive it",
		chromedp.Click(css(row+` button.archive`)),
		b.until(`document.querySelector('`+row+`') === null`, 10*time.Second),
	)
	stored(true)
	// The line item form's checklist marks it archived.
	b.do("a new line item", chromedp.Click(css("#li-new")),
		b.until(`document.getElementById("li-form").dataset.ready === "true"`, 10*time.Second),
		chromedp.SetValue(css("#li-campaign"), "demo-coffee-autumn"))
	b.eval(`document.getElementById("li-campaign").dispatchEvent(new Event("change"))`)
	note := `document.querySelector('#li-creatives-list input[value="archive-me"]')?.parentElement.querySelector("small")`
	b.do("its creatives", b.until(note+` !== null`, 10*time.Second))
	if !b.eval(note + `.textContent === "archived" && ` + note + `.classList.contains("archived")`) {
		t.Errorf("the line item form's creatives: %q", b.text("#li-creatives-list"))
	}
	b.do("close the line item", chromedp.Click(css("#li-close")))
	filter("archived")
	b.do("the archived list", chromedp.WaitVisible(css(row+` button.restore`)),
		b.until(`document.getElementById("creatives-count").textContent === "1 archived"`, 10*time.Second))
	if got := b.text(row + ` td.status`); got != "archived (waiting for review)" {
		t.Errorf("the archived creative's status: %q", got)
	}
	if !b.eval(`document.querySelector('` + row + `').classList.contains("archived") && document.querySelector('` + row + ` button.archive') === null`) {
		t.Error("the archived creative's row is not marked archived, or offers Archive")
	}
	b.do("restore it",
		chromedp.Click(css(row+` button.restore`)),
		b.until(`document.querySelector('`+row+`') === null`, 10*time.Second),
		b.until(`document.getElementById("creatives-count").textContent === "0 archived"`, 10*time.Second),
	)
	stored(false)
	filter("pending")
	b.do("back in the queue", chromedp.WaitVisible(css(row+` button.archive`)))
	if b.eval(`document.querySelector('` + row + `').classList.contains("archived")`) {
		t.Error("the restored creative's row is still marked archived")
	}
}
