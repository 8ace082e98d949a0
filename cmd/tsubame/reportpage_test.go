package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/pquerna/otp/totp"
)

// The dashboard's reports in Chromium: after known traffic (repeats and a
// tampered URL included), a viewer sees the table the API answers for the
// page's own query, row for row; the delivery chart sums to the API's
// totals; choosing a line item narrows both; the spend chart sets the
// campaign's spend beside its budget's pacing curve; the CSV link answers
// the same rows.
func TestDashboardReportsInBrowser(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr, "TSUBAME_REPORT_INTERVAL=50ms", "TSUBAME_REPORT_COMMIT_EVERY=50ms")
	adminURL := "http://" + adminAddr
	secret, token := dashboardUsers(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir})

	// The coffee campaign gets a budget over a day around now: its spend
	// chart has a pacing curve.
	start := time.Now().UTC().Add(-time.Hour).Truncate(time.Hour)
	camp := fmt.Sprintf(`{"id":"demo-coffee-autumn","advertiser":"demo-coffee","timezone":"Asia/Tokyo","pacing":"even",
		"start":%q,"end":%q,"budget":{"total":"100"}}`, start.Format(time.RFC3339), start.Add(24*time.Hour).Format(time.RFC3339))
	req, _ := http.NewRequest("PUT", adminURL+"/api/v1/campaigns/demo-coffee-autumn", bytes.NewReader([]byte(camp)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT campaign: %d", resp.StatusCode)
	}

	// The budget's first lease is taken in the background: until it is,
	// the coffee campaign's line items are not chosen, and the traffic
	// below could all go to the travel campaign. Wait for a coffee
	// decision first (never shown: the report counts it as a decision).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		_, body := browserGet(t, p.base+"/api/decide?placement=1&uid=warm-up")
		if strings.Contains(body, `"line_item":"demo-coffee-`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coffee campaign never delivered: %s", body)
		}
	}
	tr := newReportTraffic()
	tr.send(t, p.base, 30)
	var sent int64
	for _, n := range tr.imps {
		sent += n
	}
	// The server rolls the traffic up.
	apiRows := func(query string) []map[string]any {
		t.Helper()
		code, body := getWith(t, adminURL+"/api/v1/reports?"+query, token)
		var res struct {
			Rows []map[string]any `json:"rows"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &res) != nil {
			t.Fatalf("reports: %d %s", code, body)
		}
		return res.Rows
	}
	total := func(rows []map[string]any, key string) (n int64) {
		for _, r := range rows {
			v, _ := r[key].(float64)
			n += int64(v)
		}
		return n
	}
	for deadline := time.Now().Add(time.Minute); total(apiRows("by=line_item"), "impressions") != sent; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the reports count %d impressions, %d were sent", total(apiRows("by=line_item"), "impressions"), sent)
		}
	}

	// Bad input is the request's fault, with the reason.
	for query, reason := range map[string]string{"by=nope": "unknown dimension", "from=2026-11-27T10:00:30Z": "whole minute",
		"from=yesterday": "RFC 3339", "tz=Mars/Base": "IANA", "format=xml": "format"} {
		if code, body := getWith(t, adminURL+"/api/v1/reports?"+query, token); code != 400 || !strings.Contains(body, reason) {
			t.Errorf("reports?%s: %d %s, want 400 saying %q", query, code, body, reason)
		}
	}

	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	b.do("log in as a viewer", append(b.loginViewer(adminURL, secret),
		b.until(`window.tsubameReport !== null && document.querySelectorAll("#report-table tbody tr[data-time]").length > 0`, 20*time.Second))...,
	)
	saveScreenshot(t, ctx, "reports.png")

	// shown is the table as the page shows it, and want the API's rows for
	// the page's own query, written the same way.
	shown := func() (string, string) {
		t.Helper()
		q, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.tsubameReport.query`))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll("#report-table tbody tr[data-time]")].map(r => [...r.cells].map(c => c.textContent).join("|"))`))
		if err != nil {
			t.Fatal(err)
		}
		return q, strings.Join(rows, "\n")
	}
	format := func(rows []map[string]any, only string) string {
		var out []string
		for _, r := range rows {
			li, _ := r["line_item"].(string)
			if only != "" && li != only {
				continue
			}
			if rejected, _ := r["rejected"].(float64); li == "" && rejected == 0 {
				continue // the ad requests' row: no line item's delivery, not shown
			}
			when, _ := r["day"].(string)
			name := li
			if li == "" {
				name = "(refused tracking URLs)"
			}
			n := func(k string) string { v, _ := r[k].(float64); return commas(int64(v)) }
			invalid := int64(0)
			for _, k := range []string{"invalid_impressions", "invalid_clicks", "invalid_bids", "invalid_bills"} {
				v, _ := r[k].(float64)
				invalid += int64(v)
			}
			out = append(out, strings.Join([]string{when, name, r["currency"].(string), n("impressions"), n("clicks"),
				r["ctr"].(string), r["spend"].(string), n("overage"), commas(invalid)}, "|"))
		}
		return strings.Join(out, "\n")
	}
	q, table := shown()
	rows := apiRows(q)
	if want := format(rows, ""); table != want || len(rows) < 2 {
		t.Errorf("the reports table:\n%s\nwant (the API's for %s):\n%s", table, q, want)
	}
	// The ad requests (the warm-up's too) are in the API's rows, in a row
	// of their own that the table leaves out (format does too).
	if n := total(rows, "requests"); n <= tr.requests {
		t.Errorf("the API counts %d ad requests, %d were sent after the warm-up's", n, tr.requests)
	}
	// The charts: drawn, and their sums are the API's.
	if !b.eval(`document.querySelectorAll("#report-delivery canvas, #report-ctr canvas, #report-spend canvas").length >= 3`) {
		t.Error("the report charts are not drawn")
	}
	sums, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](
		`[window.tsubameReport.impressions.reduce((a, b) => a + b, 0), window.tsubameReport.clicks.reduce((a, b) => a + b, 0)]`))
	if err != nil {
		t.Fatal(err)
	}
	if int64(sums[0]) != total(rows, "impressions") || int64(sums[1]) != total(rows, "clicks") || int64(sums[0]) != sent {
		t.Errorf("the delivery chart sums %v, the API %d impressions and %d clicks (%d sent)", sums, total(rows, "impressions"), total(rows, "clicks"), sent)
	}

	// One line item: the table and the charts narrow to it; its campaign's
	// spend is charted beside the budget's pacing curve.
	line, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`(window.tsubameReport.rows.find(r => r.campaign === "demo-coffee-autumn") || {}).line_item || ""`))
	if err != nil || line == "" {
		t.Fatalf("no line item of the coffee campaign delivered (%v): %s", err, table)
	}
	b.do("choose a line item",
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`{ const s = document.querySelector("#report-line"); s.value = %q; s.dispatchEvent(new Event("change")); }`, line)),
		b.until(fmt.Sprintf(`[...document.querySelectorAll("#report-table tbody tr[data-time]")].every(r => r.dataset.lineItem === %q)`, line), 10*time.Second),
		b.until(`document.querySelector("#report-budget").textContent.includes("demo-coffee-autumn")`, 10*time.Second),
	)
	q, table = shown()
	if want := format(apiRows(q), line); table != want || want == "" {
		t.Errorf("one line item's table:\n%s\nwant:\n%s", table, want)
	}
	if got := b.text("#report-budget"); !strings.Contains(got, "100 USD") {
		t.Errorf("the budget caption %q", got)
	}

	// The CSV link answers the page's query as CSV.
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#report-csv").getAttribute("href")`))
	if err != nil {
		t.Fatal(err)
	}
	code2, csv := getWith(t, adminURL+href, token)
	if code2 != 200 || !strings.HasPrefix(csv, "day,campaign,line_item,currency,impressions,clicks,ctr,spend,") ||
		strings.Count(csv, "\n") != len(apiRows(q))+1 {
		t.Errorf("CSV (%d):\n%s", code2, csv)
	}
}

// dashboardPassword is the password of the users dashboardUsers makes.
const dashboardPassword = "correct horse battery staple"

// dashboardUsers makes, with the CLI beside the running server of env, a
// viewer "watcher" (returning its TOTP secret) and an editor "ed" with an
// API token (returned).
func dashboardUsers(t *testing.T, env []string) (secret, token string) {
	t.Helper()
	exit, out, stderr := runCmd(t, env, dashboardPassword+"\n", "admin", "create-user", "-role", "viewer", "watcher")
	m := regexp.MustCompile(`TOTP secret .*: ([A-Z2-7]+)`).FindStringSubmatch(out)
	if exit != 0 || m == nil {
		t.Fatalf("create-user: %d %s %s", exit, out, stderr)
	}
	if exit, _, stderr = runCmd(t, env, dashboardPassword+"\n", "admin", "create-user", "-role", "editor", "ed"); exit != 0 {
		t.Fatalf("create-user ed: %s", stderr)
	}
	exit, token, stderr = runCmd(t, env, "", "admin", "create-token", "-user", "ed", "-name", "test")
	token = strings.TrimSpace(token)
	if exit != 0 || token == "" {
		t.Fatalf("create-token: %d %s", exit, stderr)
	}
	return m[1], token
}

// loginViewer are the steps that log the dashboard in as dashboardUsers'
// viewer, up to the dashboard shown.
func (b *page) loginViewer(adminURL, secret string) []chromedp.Action[chromedp.Void] {
	code, err := totp.GenerateCode(secret, time.Now())
	if err != nil {
		b.t.Fatal(err)
	}
	return []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(adminURL + "/"),
		chromedp.WaitVisible(css("#login")),
		chromedp.SetValue(css("#login-user"), "watcher"),
		chromedp.SetValue(css("#login-password"), dashboardPassword),
		chromedp.SetValue(css("#login-totp"), code),
		chromedp.Click(css("#login-submit")),
		chromedp.WaitVisible(css("#dash")),
	}
}
