package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tsubame/internal/report"
)

// The dashboard's reports as an ad-ops team uses them, in Chromium: after
// real traffic, a viewer picks custom dates, a breakdown by creative and
// the whole period; the table's rows are the API's, its totals the API's
// totals for the same dates, it sorts by a column, and its CSV export is
// the table, cell for cell. A range the wrong way round is refused on the
// form; one the API refuses shows the API's reason. A placement's "Get
// tag" shows the snippets the API writes, on the public listener's
// address.
func TestDashboardReportBreakdownsInBrowser(t *testing.T) {
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr, "TSUBAME_REPORT_INTERVAL=50ms", "TSUBAME_REPORT_COMMIT_EVERY=50ms")
	adminURL := "http://" + adminAddr
	secret, token := dashboardUsers(t, []string{"TSUBAME_DATA_DIR=" + p.dataDir})

	tr := newReportTraffic()
	tr.send(t, p.base, 24)
	var sent int64
	for _, n := range tr.imps {
		sent += n
	}
	apiRows := func(query string) []map[string]any {
		t.Helper()
		code, body := getWith(t, adminURL+"/api/v1/reports?"+query, token)
		var res struct {
			Rows []map[string]any `json:"rows"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &res) != nil {
			t.Fatalf("reports?%s: %d %s", query, code, body)
		}
		return res.Rows
	}
	num := func(r map[string]any, key string) int64 { v, _ := r[key].(float64); return int64(v) }
	total := func(rows []map[string]any, key string) (n int64) {
		for _, r := range rows {
			n += num(r, key)
		}
		return n
	}
	for deadline := time.Now().Add(time.Minute); total(apiRows("by=line_item"), "impressions") != sent; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the reports count %d impressions, %d were sent", total(apiRows("by=line_item"), "impressions"), sent)
		}
	}
	// The API's limit on a span by hour, with its reason.
	long := url.Values{"from": {time.Now().UTC().Truncate(time.Hour).Add(-100 * 24 * time.Hour).Format(time.RFC3339)}, "by": {"hour"}}
	if code, body := getWith(t, adminURL+"/api/v1/reports?"+long.Encode(), token); code != 400 || !strings.Contains(body, "covers at most 92 days") {
		t.Errorf("100 days by hour: %d %s", code, body)
	}

	// The browser in another zone than the server's reports, so that the
	// page offers both.
	ctx := browserContext(t, browser, chromedp.Env("TZ=America/New_York"))
	b := &page{t: t, ctx: ctx}
	b.do("log in as a viewer", append(b.loginViewer(adminURL, secret),
		b.until(`window.tsubameReport !== null && document.querySelectorAll("#report-table tbody tr[data-time]").length > 0`, 20*time.Second))...,
	)

	if !b.eval(`reportZone() === "America/New_York" && [...document.querySelectorAll("#report-tz option")].some(o => o.value === "Asia/Tokyo")`) {
		t.Fatalf("the zones offered: %s", b.text("#report-tz"))
	}
	// Custom dates (yesterday to today) of the server's zone of reports
	// (report.timezone, Asia/Tokyo by default), not the browser's, by
	// creative, for the whole period.
	b.do("pick custom dates and a breakdown",
		chromedp.Evaluate[chromedp.Void](`{
			const set = (id, v) => { const e = document.getElementById(id); e.value = v; e.dispatchEvent(new Event("change")); };
			set("report-tz", "Asia/Tokyo");
			set("report-from", zoneDate(Date.now() - 86400e3, "Asia/Tokyo"));
			set("report-to", zoneDate(Date.now(), "Asia/Tokyo"));
			document.getElementById("report-time").value = "";
			set("report-by", "creative");
		}`),
		chromedp.Click(css("#report-show")),
		b.until(`window.tsubameReport !== null && window.tsubameReport.query.includes("by=creative") && window.tsubameReport.query.includes("to=")`, 20*time.Second),
	)
	if got := b.text("#report-period option:checked"); got != "custom dates" {
		t.Errorf("the period shows %q after the dates changed", got)
	}
	saveScreenshot(t, ctx, "reports-breakdown.png")
	type shownTable struct {
		Query   string     `json:"query"`
		Columns []string   `json:"columns"`
		Rows    [][]string `json:"rows"`
		Totals  [][]string `json:"totals"`
	}
	read := func() shownTable {
		t.Helper()
		js := `JSON.stringify({query: window.tsubameReport.query,
			columns: [...document.querySelectorAll("#report-table thead th")].map(c => c.textContent),
			rows: [...document.querySelectorAll("#report-table tbody tr[data-time]")].map(r => [...r.cells].map(c => c.textContent)),
			totals: [...document.querySelectorAll("#report-table tfoot tr")].map(r => [...r.cells].map(c => c.textContent))})`
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatal(err)
		}
		var st shownTable
		if err := json.Unmarshal([]byte(s), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := read()
	wantCols := []string{"creative", "currency", "impressions", "clicks", "CTR", "spend", "overage", "invalid"}
	if !slices.Equal(st.Columns, wantCols) {
		t.Fatalf("columns %q, want %q", st.Columns, wantCols)
	}
	q, err := url.ParseQuery(st.Query)
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	y, m, d := time.Now().In(tokyo).Date()
	if from, to := time.Date(y, m, d-1, 0, 0, 0, 0, tokyo).UTC(), time.Date(y, m, d+1, 0, 0, 0, 0, tokyo).UTC(); err != nil || q.Get("by") != "creative" ||
		q.Get("tz") != "Asia/Tokyo" || q.Get("from") != from.Format(time.RFC3339) || q.Get("to") != to.Format(time.RFC3339) {
		t.Fatalf("the page's query %q, want Tokyo's days from %s to %s", st.Query, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	// The rows: the API's for the page's query, the ad requests' row (no
	// creative) left out, the refused tracking URLs' kept.
	var want [][]string
	invalid := func(r map[string]any) int64 {
		return num(r, "invalid_impressions") + num(r, "invalid_clicks") + num(r, "invalid_bids") + num(r, "invalid_bills")
	}
	for _, r := range apiRows(st.Query) {
		cr, _ := r["creative"].(string)
		if cr == "" && num(r, "rejected") == 0 {
			continue
		}
		if cr == "" {
			cr = "(refused tracking URLs)"
		}
		want = append(want, []string{cr, r["currency"].(string), commas(num(r, "impressions")), commas(num(r, "clicks")),
			r["ctr"].(string), r["spend"].(string), commas(num(r, "overage")), commas(invalid(r))})
	}
	if !slices.EqualFunc(st.Rows, want, slices.Equal) || len(want) < 2 {
		t.Errorf("the table:\n%q\nwant the API's:\n%q", st.Rows, want)
	}
	// The totals: the API's for the same dates without a breakdown (one
	// row per currency: every amount here is in one, and the refused
	// URLs' row, without a currency, has no amount).
	q.Del("by")
	whole := apiRows(q.Encode())
	var spend int64
	for _, r := range whole {
		spend += billionths(t, r["spend"].(string))
	}
	imps, clicks := total(whole, "impressions"), total(whole, "clicks")
	var inv int64
	for _, r := range whole {
		inv += invalid(r)
	}
	wantTotal := []string{"total", "USD", commas(imps), commas(clicks), report.CTR(clicks, imps), report.Amount(spend),
		commas(total(whole, "overage")), commas(inv)}
	if len(st.Totals) != 1 || !slices.Equal(st.Totals[0], wantTotal) || imps != sent {
		t.Errorf("totals %q, want the API's %q (%d impressions sent)", st.Totals, wantTotal, sent)
	}

	// Sorted by impressions, most first, then fewest first.
	for _, dir := range []string{"descending", "ascending"} {
		b.do("sort by impressions", clickNow(`#report-table thead th:nth-child(3) button`),
			b.until(fmt.Sprintf(`document.querySelector("#report-table thead th:nth-child(3)").getAttribute("aria-sort") === %q`, dir), 10*time.Second))
		st = read()
		if !slices.IsSortedFunc(st.Rows, func(a, b []string) int {
			x, y := count(t, a[2]), count(t, b[2])
			if dir == "descending" {
				x, y = y, x
			}
			return int(x - y)
		}) || len(st.Rows) != len(want) {
			t.Errorf("%s by impressions: %q", dir, st.Rows)
		}
	}

	// The export is the table as shown: its columns, its rows in their
	// order and its totals; counts without separators, amounts exact.
	text := download(t, ctx, b, "export the table", "#report-export")
	records, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	if err != nil {
		t.Fatalf("the CSV %q: %v", text, err)
	}
	plain := [][]string{st.Columns}
	for _, r := range append(slices.Clone(st.Rows), st.Totals...) {
		row := slices.Clone(r)
		for _, i := range []int{2, 3, 6, 7} { // the counts, shown with separators
			row[i] = strings.ReplaceAll(row[i], ",", "")
		}
		plain = append(plain, row)
	}
	if !slices.EqualFunc(records, plain, slices.Equal) {
		t.Errorf("the CSV:\n%s\nwant the table:\n%q", text, plain)
	}

	// A range the wrong way round is refused on the form, before asking;
	// one too long by hour shows the API's reason.
	b.do("an end before the start",
		chromedp.Evaluate[chromedp.Void](`{
			document.getElementById("report-from").value = zoneDate(Date.now(), reportTZ());
			document.getElementById("report-to").value = zoneDate(Date.now() - 3 * 86400e3, reportTZ());
			document.getElementById("report-period").value = "custom";
		}`),
		chromedp.Click(css("#report-show")),
		b.until(`document.getElementById("report-error").textContent.includes("is before the start date")`, 10*time.Second),
	)
	if !b.eval(`document.getElementById("report-to").getAttribute("aria-invalid") === "true"`) {
		t.Error("the end date is not marked invalid")
	}
	b.do("100 days by hour",
		chromedp.Evaluate[chromedp.Void](`{
			document.getElementById("report-from").value = zoneDate(Date.now() - 100 * 86400e3, reportTZ());
			document.getElementById("report-to").value = zoneDate(Date.now(), reportTZ());
			document.getElementById("report-time").value = "hour";
		}`),
		chromedp.Click(css("#report-show")),
		b.until(`document.getElementById("report-error").textContent.includes("a report by hour covers at most 92 days")`, 10*time.Second),
	)

	// A placement's ad tag: the API's snippets, on the public listener.
	id, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#placements tbody tr[data-id]").dataset.id`))
	if err != nil || id == "" {
		t.Fatalf("no placement listed: %v", err)
	}
	b.do("get a placement's tag",
		chromedp.Click(css(fmt.Sprintf(`#placements tbody tr[data-id=%q] button.tag`, id))),
		b.until(`document.getElementById("tag-script").value !== "" && !document.getElementById("tag-panel").hidden`, 10*time.Second),
	)
	saveScreenshot(t, ctx, "placement-tag.png")
	code, body := getWith(t, adminURL+"/api/v1/placements/"+url.PathEscape(id)+"/tag", token)
	var tag struct {
		Script, Decide struct{ Snippet string }
	}
	if code != 200 || json.Unmarshal([]byte(body), &tag) != nil {
		t.Fatalf("tag: %d %s", code, body)
	}
	script, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[document.getElementById("tag-script").value, document.getElementById("tag-decide").value]`))
	if err != nil {
		t.Fatal(err)
	}
	cb := "tsubameAd_" + id // demo ids are letters and digits
	src := p.base + "/api/sample4.js?" + url.Values{"callback": {cb}, "id": {id}}.Encode()
	if script[0] != tag.Script.Snippet || !strings.Contains(script[0], `<script async src="`+strings.ReplaceAll(src, "&", "&amp;")+`"></script>`) ||
		!strings.Contains(script[0], "window."+cb+" = function (answer) {") {
		t.Errorf("the script tag:\n%s\nthe API's:\n%s", script[0], tag.Script.Snippet)
	}
	if script[1] != tag.Decide.Snippet || !strings.Contains(script[1], `fetch("`+p.base+"/api/decide?placement="+url.QueryEscape(id)+`", {credentials: "include"})`) {
		t.Errorf("the decide form:\n%s\nthe API's:\n%s", script[1], tag.Decide.Snippet)
	}
	// The snippet serves: the JSONP it loads calls its function.
	if code, js := browserGet(t, src); code != 200 || !strings.HasPrefix(js, cb+"(") {
		t.Errorf("%s: %d %s", src, code, js)
	}
	b.do("copy it", chromedp.Click(css("#tag-script-copy")), b.until(`document.getElementById("tag-status").textContent !== ""`, 10*time.Second))
}

// billionths reads an amount the API writes ("0.0025") in billionths of
// a unit, report.Amount's unit.
func billionths(t *testing.T, s string) int64 {
	t.Helper()
	whole, frac, _ := strings.Cut(s, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || len(frac) > 9 {
		t.Fatalf("amount %q", s)
	}
	f, err := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	if err != nil {
		t.Fatalf("amount %q", s)
	}
	return w*1e9 + f
}

// count reads a count as the dashboard shows it (1,234).
func count(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		t.Fatalf("count %q", s)
	}
	return n
}
