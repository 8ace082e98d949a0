package main

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// getCreative reads a creative through the admin API with token.
func getCreative(t *testing.T, adminURL, token, id string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", adminURL+"/api/v1/creatives/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("get creative %s: %d %v", id, resp.StatusCode, err)
	}
	return c
}

// An editor uploads a banner's image from the dashboard: an SVG and a
// text file are refused with why, on the file's field; a PNG made here is
// kept, its URL and size fill the form, the creative is added, the queue's
// preview loads the file from the public listener, and once approved
// /api/decide serves its URL. Edit of the approved creative's click sends
// it back to review, as the form says; Duplicate adds a copy under
// <id>-copy, waiting for review; an HTML banner is written in the form and
// previewed in a sandboxed frame.
func TestDashboardCreativeUploadEditDuplicateInBrowser(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	adminURL := "http://" + adminAddr
	login := dashboardUser(t, p, "ed", "editor")
	code, token, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir}, "", "admin", "create-token", "-user", "ed", "-name", "check")
	if token = strings.TrimSpace(token); code != 0 || token == "" {
		t.Fatalf("create-token: %d %s", code, stderr)
	}

	dir := t.TempDir()
	var pic bytes.Buffer
	img := image.NewNRGBA(image.Rect(0, 0, 40, 30))
	for i := range img.Pix {
		img.Pix[i] = byte(255 - i%200)
	}
	if err := png.Encode(&pic, img); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"banner.png": pic.Bytes(),
		"evil.svg":   []byte(`<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><rect width="10" height="10"/></svg>`),
		"notes.txt":  []byte("not an image\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	watch := watchConsole(t, ctx)
	b.do("open the page", chromedp.Navigate(adminURL+"/"))
	login(b)
	b.loaded()
	b.do("open the form",
		chromedp.Click(css("#creative-new")),
		b.until(`!document.getElementById("creative-tools").hidden && !document.getElementById("cr-file").closest("label").hidden`, 10*time.Second),
		chromedp.SetValue(css("#cr-id"), "up-img"),
		chromedp.SetValue(css("#cr-advertiser"), "demo-coffee"),
		chromedp.SetValue(css("#cr-click"), "https://coffee.example/upload"),
	)
	for name, want := range map[string]string{"evil.svg": "SVG image, which is refused", "notes.txt": "text/plain, which is not kept"} {
		b.do("upload "+name,
			chromedp.SetUploadFiles(css("#cr-file"), []string{filepath.Join(dir, name)}),
			b.until(`document.getElementById("cr-file").getAttribute("aria-invalid") === "true"`, 10*time.Second),
		)
		if got := b.text("#cr-file-problem"); !strings.Contains(got, name+" not uploaded") || !strings.Contains(got, want) {
			t.Errorf("%s: the file's problem says %q", name, got)
		}
		b.eval(`(document.getElementById("cr-file-problem").remove(), document.getElementById("cr-file").removeAttribute("aria-invalid"), true)`)
	}
	b.do("upload the PNG",
		chromedp.SetUploadFiles(css("#cr-file"), []string{filepath.Join(dir, "banner.png")}),
		b.until(`document.getElementById("cr-image").value !== ""`, 10*time.Second),
	)
	url := b.fieldValue("#cr-image")
	if !strings.HasPrefix(url, p.base+"/assets/") || !strings.HasSuffix(url, ".png") {
		t.Fatalf("the image URL filled in: %q", url)
	}
	if w, h := b.fieldValue("#cr-w"), b.fieldValue("#cr-h"); w != "40" || h != "30" {
		t.Errorf("the size filled in: %s×%s, want 40×30", w, h)
	}
	if b.eval(`document.getElementById("cr-file-problem") !== null`) {
		t.Error("a problem stays on the file's field after an upload that went through")
	}
	b.do("add it",
		chromedp.Click(css("#cr-save")),
		b.until(`document.getElementById("cr-status").textContent === "Added up-img: it waits for review."`, 10*time.Second),
		b.until(`(() => { const i = document.querySelector('#creatives tr[data-id="up-img"] img');
			return !!i && i.complete && i.naturalWidth === 40 && i.naturalHeight === 30; })()`, 10*time.Second),
	)
	saveScreenshot(t, ctx, "creative-upload.png")

	// Approved, it serves its uploaded image.
	if code, body := putWith(t, adminURL+"/api/v1/line-items/up-li", token,
		`{"campaign": "demo-coffee-autumn", "priority": 1, "weight": 1, "cpm": "3", "creatives": ["up-img"], "targeting": {"placements": ["upload"]}}`); code != 200 {
		t.Fatalf("put the line item: %d %s", code, body)
	}
	b.do("approve it",
		chromedp.Click(css(`#creatives tr[data-id="up-img"] button.approve`)),
		b.until(`document.querySelector('#creatives tr[data-id="up-img"]') === null`, 10*time.Second),
	)
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := browserGet(t, p.base+"/api/decide?placement=upload&uid=u-1")
		if code == http.StatusOK && strings.Contains(body, `"image":"`+url+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the approved creative does not serve its upload: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Edited: a new click URL sends the approved creative back to review.
	b.do("list the approved", chromedp.SetValue(css("#creatives-status"), "approved"))
	b.eval(`document.getElementById("creatives-status").dispatchEvent(new Event("change"))`)
	b.do("edit it",
		chromedp.WaitVisible(css(`#creatives tr[data-id="up-img"] button.edit`)),
		chromedp.Click(css(`#creatives tr[data-id="up-img"] button.edit`)),
		b.until(`document.getElementById("cr-title").textContent === "Edit up-img" && document.getElementById("cr-id").readOnly`, 10*time.Second),
	)
	if got := b.text("#cr-status"); !strings.Contains(got, "sends it back to review") {
		t.Errorf("the edit form of an approved creative says %q", got)
	}
	if b.fieldValue("#cr-image") != url || b.fieldValue("#cr-w") != "40" {
		t.Error("the edit form is not filled with the creative")
	}
	b.do("save a new click URL",
		chromedp.SetValue(css("#cr-click"), "https://coffee.example/upload-2"),
		chromedp.Click(css("#cr-save")),
		b.until(`document.getElementById("cr-status").textContent.startsWith("Saved up-img: its content changed, so it went back to review")`, 10*time.Second),
		b.until(`document.querySelector('#creatives tr[data-id="up-img"] td.status')?.textContent === "waiting for review"`, 10*time.Second),
	)
	if c := getCreative(t, adminURL, token, "up-img"); c["status"] != nil && c["status"] != "pending" || c["click"] != "https://coffee.example/upload-2" || c["image"] != url {
		t.Errorf("the edited creative: %v", c)
	}

	// Duplicated: a new creative under the first free id, waiting for review.
	b.do("duplicate it",
		chromedp.Click(css(`#creatives tr[data-id="up-img"] button.duplicate`)),
		b.until(`document.getElementById("cr-id").value === "up-img-copy" && !document.getElementById("cr-id").readOnly`, 10*time.Second),
		chromedp.Click(css("#cr-save")),
		b.until(`document.getElementById("cr-status").textContent === "Added up-img-copy: it waits for review."`, 10*time.Second),
		b.until(`!!document.querySelector('#creatives tr[data-id="up-img-copy"] img')`, 10*time.Second),
	)
	if c := getCreative(t, adminURL, token, "up-img-copy"); c["status"] != nil && c["status"] != "pending" || c["image"] != url || c["w"] != 40.0 ||
		c["click"] != "https://coffee.example/upload-2" {
		t.Errorf("the copy: %v", c)
	}
	b.do("duplicate it again",
		chromedp.Click(css(`#creatives tr[data-id="up-img"] button.duplicate`)),
		b.until(`document.getElementById("cr-id").value === "up-img-copy-2"`, 10*time.Second),
	)

	// An HTML banner, written in the form: its preview is sandboxed.
	b.do("write an HTML banner",
		chromedp.Click(css("#creative-new")),
		b.until(`document.getElementById("cr-title").textContent === "Add a creative" && document.getElementById("cr-id").value === ""`, 10*time.Second),
		chromedp.SetValue(css("#cr-format"), "html"),
	)
	b.eval(`document.getElementById("cr-format").dispatchEvent(new Event("change"))`)
	b.do("fill it",
		b.until(`!document.getElementById("cr-html").closest("label").hidden && document.getElementById("cr-file").closest("label").hidden`, 10*time.Second),
		chromedp.SetValue(css("#cr-id"), "up-html"),
		chromedp.SetValue(css("#cr-advertiser"), "demo-coffee"),
		chromedp.SetValue(css("#cr-w"), "300"),
		chromedp.SetValue(css("#cr-h"), "250"),
		chromedp.SetValue(css("#cr-click"), "https://coffee.example/html"),
		chromedp.SetValue(css("#cr-html"), `<p id="html-marker">Winter roast</p><script>parent.document.title = "taken"</script>`),
	)
	b.eval(`document.getElementById("cr-html").dispatchEvent(new Event("change"))`)
	if !b.eval(`(() => { const f = document.querySelector("#cr-preview iframe"); return !!f && f.getAttribute("sandbox") === "" && f.contentDocument === null; })()`) {
		t.Error("the form's HTML preview is not a sandboxed frame")
	}
	b.do("add the HTML banner",
		chromedp.Click(css("#cr-save")),
		b.until(`document.getElementById("cr-status").textContent === "Added up-html: it waits for review."`, 10*time.Second),
		b.until(`document.querySelector('#creatives tr[data-id="up-html"] iframe')?.getAttribute("sandbox") === ""`, 10*time.Second),
	)
	if c := getCreative(t, adminURL, token, "up-html"); c["format"] != "banner" || !strings.Contains(c["html"].(string), "Winter roast") || c["image"] != nil {
		t.Errorf("the HTML creative: %v", c)
	}
	if b.eval(`document.getElementById("html-marker") !== null || document.title === "taken"`) {
		t.Error("the HTML creative's markup reached the dashboard")
	}
	// The console holds the refused uploads' 400s, the demo creatives'
	// images from hosts that do not resolve here and the sandbox refusing
	// the HTML's script, nothing else.
	for _, p := range watch.take() {
		if !strings.Contains(p, "/api/v1/assets") && !strings.Contains(p, "ERR_NAME_NOT_RESOLVED") &&
			!strings.Contains(p, "'allow-scripts' permission is not set") {
			t.Errorf("the console shows: %s", p)
		}
	}
}

// fieldValue is the value of the form field sel.
func (b *page) fieldValue(sel string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector(`+strconvQuote(sel)+`).value`))
	if err != nil {
		b.t.Fatalf("value of %s: %v", sel, err)
	}
	return v
}

func strconvQuote(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}
