package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// An editor downloads the line items as CSV from the dashboard (the
// browser's real download), adds a row in it, and uploads it: the new line
// item is in the table. A file with a problem is refused with the problem
// by its row, and nothing is written; a viewer has the download only.
func TestDashboardLineItemsCSVInBrowser(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr)
	login := dashboardUser(t, p, "ed", "editor")
	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	b.do("open the page", chromedp.Navigate("http://"+adminAddr+"/"))
	login(b)
	b.loaded()
	b.do("see the line items", b.until(`document.querySelector('#campaigns tr[data-id="demo-coffee-run"]') !== null`, 30*time.Second))

	sheet := download(t, ctx, b, "download the CSV", "#li-csv-download")
	rows := strings.Split(strings.TrimSpace(sheet), "\n")
	if !strings.HasPrefix(rows[0], "id,name,campaign,status,priority,weight,cpm,creatives,") || !strings.Contains(sheet, "\ndemo-coffee-run,") {
		t.Fatalf("the downloaded CSV:\n%s", sheet)
	}
	columns := len(strings.Split(rows[0], ","))
	row := func(fields ...string) string {
		return strings.Join(fields, ",") + strings.Repeat(",", columns-len(fields)) + "\n"
	}

	upload := func(name, text string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		b.do("upload "+name, chromedp.SetUploadFiles(css("#li-csv-upload"), []string{path}))
	}
	upload("bad.csv", rows[0]+"\n"+row("demo-csv-bad", "", "no-such-campaign", "", "8", "1", "1", "demo-coffee-300x250"))
	b.do("see the problem by its row",
		b.until(`document.getElementById("li-csv-result").textContent.includes('bad.csv:2: line_items[0] (id "demo-csv-bad").campaign')`, 30*time.Second))
	if b.eval(`document.querySelector('#campaigns tr[data-id="demo-csv-bad"]') !== null`) {
		t.Fatal("a refused file wrote its line item")
	}
	upload("line-items.csv", sheet+row("demo-csv-new", "Added in a sheet", "demo-coffee-autumn", "", "8", "2", "1.5", "demo-coffee-300x250"))
	b.do("see the new line item",
		b.until(`document.getElementById("li-csv-result").textContent.startsWith("Imported line-items.csv: ")`, 30*time.Second),
		b.until(`document.querySelector('#campaigns tr[data-id="demo-csv-new"]') !== null`, 30*time.Second))
	saveScreenshot(t, ctx, "line-items-csv.png")

	viewer := dashboardUser(t, p, "watcher", "viewer")
	v := &page{t: t, ctx: browserContext(t, browser)}
	v.do("open the page", chromedp.Navigate("http://"+adminAddr+"/"))
	viewer(v)
	v.loaded()
	v.do("see the line items", v.until(`document.querySelector('#campaigns tr[data-id="demo-csv-new"]') !== null`, 30*time.Second))
	if !v.eval(`document.getElementById("li-csv-upload-label").hidden && !document.getElementById("li-csv-download").hidden`) {
		t.Error("a viewer is offered the upload, or not the download")
	}
}

// download clicks what sel names on b's page and returns the file the
// browser saved: a real download, through Chromium's own download path.
func download(t *testing.T, ctx context.Context, b *page, what, sel string) string {
	t.Helper()
	dir := t.TempDir()
	progress := chromedp.Events(ctx, cdpbrowser.DownloadProgress)
	b.do(what,
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
				Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: new(true)})
			return err
		}),
		chromedp.Click(css(sel)))
	for ev, err := range progress {
		if err != nil {
			t.Fatalf("the download: %v", err)
		}
		if ev.State == cdpbrowser.DownloadProgressStateCanceled {
			t.Fatal("the download was canceled")
		}
		if ev.State != cdpbrowser.DownloadProgressStateCompleted {
			continue
		}
		got, err := os.ReadFile(filepath.Join(dir, ev.GUID))
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	t.Fatal("the download never completed")
	return ""
}
