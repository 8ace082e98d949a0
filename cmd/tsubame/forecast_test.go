package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tsubame/internal/accesslog"
	"tsubame/internal/forecast"
)

// forecastDay is a news site's day of ad requests' slots per hour from
// desktops in Japan, hour 0 first (Tokyo); phones ask half as many.
var forecastDay = [24]float64{300, 200, 120, 80, 80, 120, 300, 700, 900, 900, 900, 1000,
	1300, 1000, 900, 900, 900, 1000, 1300, 1500, 1600, 1400, 1000, 600}

// writeRequestHistory writes days of request lines into an access log
// directory, as servers would have logged them: the days before today in
// Tokyo, each 2 % busier than the one before it, each hour varied by up to
// 5 % at random. It returns the first day.
func writeRequestHistory(t *testing.T, dir string, days int, tokyo *time.Location) time.Time {
	t.Helper()
	y, m, d := time.Now().In(tokyo).Date()
	first := time.Date(y, m, d-days, 0, 0, 0, 0, tokyo)
	fs, err := accesslog.OpenFile(accesslog.FileOptions{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	l := accesslog.New(fs, accesslog.Options{Format: accesslog.LTSV, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	rnd := rand.New(rand.NewPCG(7, 8))
	n := 0
	for k := range days {
		for h, v := range forecastDay {
			at := time.Date(y, m, d-days+k, h, 30, 0, 0, tokyo)
			base := v * math.Pow(1.02, float64(k))
			for _, c := range []struct {
				device string
				share  float64
			}{{"desktop", 1}, {"mobile", 0.5}} {
				slots := int64(math.Round(base * c.share * (1 + 0.05*(2*rnd.Float64()-1))))
				e := &accesslog.Event{Kind: accesslog.EventRequest, ID: accesslog.String(fmt.Sprintf("r:hist-%d", n)),
					Placement: accesslog.String("top"), Currency: accesslog.String("USD"), Valid: true}
				e.AddOrigin("", "news.example.com", "JP", c.device)
				e.AddInt(accesslog.MustKey("slots"), slots)
				e.AddInt(accesslog.MustKey("filled"), 0)
				rec := accesslog.Record{Time: at, Remote: netip.MustParseAddr("192.0.2.1"), RequestID: []byte(fmt.Sprintf("h-%d", n)), Event: e}
				if err := l.Append(&rec, 0); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	return first
}

// The forecast on the real binary: with 8 days of requests in the access
// log (a trend and noise), the placement's forecast for tomorrow is within
// 15 % of every hour the trend gives; a line item booked for desktops in
// Japan takes its daily limit from them, which the net shows; the command
// through the control socket answers as the API; bad input is a 400; and a
// viewer sees the same forecast in the dashboard, in Chromium.
func TestForecastEndToEnd(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	first := writeRequestHistory(t, logDir, 8, tokyo)
	browser := chromium(t)
	adminAddr := "127.0.0.1:" + freePort(t)
	p := startBinary(t, "TSUBAME_ADMIN_LISTEN="+adminAddr, "TSUBAME_ACCESS_LOG_DIR="+logDir,
		"TSUBAME_REPORT_INTERVAL=50ms", "TSUBAME_REPORT_COMMIT_EVERY=50ms", "TSUBAME_REPORT_TIMEZONE=Asia/Tokyo")
	adminURL := "http://" + adminAddr
	env := []string{"TSUBAME_DATA_DIR=" + p.dataDir, "TSUBAME_ACCESS_LOG_DIR=" + logDir}
	secret, token := dashboardUsers(t, env)

	// A line item for desktops in Japan on top, first of all priorities,
	// with a daily limit of 5,000.
	li := `{"id":"li-jp-desktop","campaign":"demo-coffee-autumn","priority":1,"weight":1,"cpm":"2","creatives":["demo-coffee-300x250"],
		"limits":{"impressions":{"daily":5000}},"targeting":{"placements":["top"],"countries":["JP"],"devices":["desktop"]}}`
	req, _ := http.NewRequest("PUT", adminURL+"/api/v1/line-items/li-jp-desktop", strings.NewReader(li))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT line item: %d %s", resp.StatusCode, body)
	}

	// Tomorrow in Tokyo, once the server has rolled the history up and its
	// index holds the line item (a write reaches it at the next refresh).
	get := func(query string) forecast.Result {
		t.Helper()
		code, body := getWith(t, adminURL+"/api/v1/forecast?"+query, token)
		var res forecast.Result
		if code != 200 || json.Unmarshal([]byte(body), &res) != nil {
			t.Fatalf("forecast?%s: %d %s", query, code, body)
		}
		return res
	}
	var all forecast.Result
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		y, m, d := time.Now().In(tokyo).Date()
		from := time.Date(y, m, d+1, 0, 0, 0, 0, tokyo).Format(time.DateOnly)
		all = get("placement=top&from=" + from)
		if all.HistoryDays == 7 && all.Available > 0 && all.Booked > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the forecast never learned 7 days and the line item: %+v", all)
		}
	}
	if len(all.Hours) != 24 || all.Timezone != "Asia/Tokyo" {
		t.Fatalf("%d hours in %s", len(all.Hours), all.Timezone)
	}
	k := int(all.From.Sub(first).Hours()/24 + 0.5) // days after the first written
	for h, v := range all.Hours {
		want := 1.5 * forecastDay[h] * math.Pow(1.02, float64(k))
		if math.Abs(float64(v.Available)-want) > 0.15*want {
			t.Errorf("hour %s: forecast %d, the trend gives %.0f", v.Time.In(tokyo).Format(time.TimeOnly), v.Available, want)
		}
	}
	if all.Booked < 4990 || all.Booked > 5010 || all.Net != all.Available-all.Booked {
		t.Errorf("the placement: %d available, %d booked, %d net; want 5,000 booked", all.Available, all.Booked, all.Net)
	}
	day := all.From.Format(time.DateOnly)
	desk := get("placement=top&country=jp&device=desktop&from=" + day)
	phones := get("placement=top&device=mobile&from=" + day)
	if len(desk.LineItems) != 1 || desk.LineItems[0].LineItem != "li-jp-desktop" || desk.LineItems[0].Wants != 5000 ||
		desk.LineItems[0].Takes != 5000 || desk.LineItems[0].Short != 0 {
		t.Errorf("desktops in Japan: line items %+v", desk.LineItems)
	}
	if desk.Booked < 4990 || desk.Booked > 5010 || phones.Booked != 0 || len(phones.LineItems) != 0 {
		t.Errorf("booked: %d of the desktops, %d of the phones (%+v)", desk.Booked, phones.Booked, phones.LineItems)
	}
	if d := desk.Available + phones.Available - all.Available; d < -24 || d > 24 { // each hour rounded
		t.Errorf("desktops %d and phones %d, the placement %d", desk.Available, phones.Available, all.Available)
	}

	// The command asks the running server and answers as the API.
	exit, out, stderr := runCmd(t, env, "", "forecast", "-placement", "top", "-from", day, "-tz", "Asia/Tokyo", "-format", "json")
	var cli forecast.Result
	if exit != 0 || json.Unmarshal([]byte(out), &cli) != nil {
		t.Fatalf("forecast command: %d %s %s", exit, out, stderr)
	}
	if again := get("placement=top&from=" + day); cli.Available != again.Available || cli.Booked != again.Booked || len(cli.Hours) != 24 {
		t.Errorf("the command: %d available, %d booked; the API %d, %d", cli.Available, cli.Booked, again.Available, again.Booked)
	}
	exit, out, stderr = runCmd(t, env, "", "forecast", "-placement", "top", "-from", day, "-tz", "Asia/Tokyo")
	if exit != 0 || !strings.Contains(out, "total") || !strings.Contains(out, "li-jp-desktop") || !strings.Contains(out, "learned from 7 days") {
		t.Errorf("forecast table: %d %s %s", exit, out, stderr)
	}

	// Bad input is the request's fault, with the reason; a forecast needs
	// credentials.
	for query, reason := range map[string]string{"country=JPN": "ISO 3166-1", "device=watch": "one of", "from=tomorrow": "neither a date",
		"from=2026-11-27T10:30:00Z": "whole hour", "tz=Mars/Base": "IANA", "from=2020-01-01&to=2020-01-02": "has passed",
		"from=2027-01-01&to=2027-12-31": "at most 93 days"} {
		if code, body := getWith(t, adminURL+"/api/v1/forecast?"+query, token); code != 400 || !strings.Contains(body, reason) {
			t.Errorf("forecast?%s: %d %s, want 400 saying %q", query, code, body, reason)
		}
	}
	if resp, err := http.Get(adminURL + "/api/v1/forecast"); err != nil || resp.StatusCode != 401 {
		t.Errorf("without credentials: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// The dashboard's forecast, in a real browser: the viewer asks for
	// tomorrow's desktops in Japan and sees the API's figures.
	ctx := browserContext(t, browser)
	b := &page{t: t, ctx: ctx}
	b.do("log in as a viewer and ask for a forecast", append(b.loginViewer(adminURL, secret),
		b.until(`window.tsubameForecast !== null`, 20*time.Second),
		chromedp.SetValue(css("#forecast-from"), day),
		chromedp.SetValue(css("#forecast-to"), desk.To.In(tokyo).Format(time.DateOnly)),
		chromedp.SetValue(css("#forecast-placement"), "top"),
		chromedp.SetValue(css("#forecast-country"), "JP"),
		chromedp.SetValue(css("#forecast-device"), "desktop"),
		chromedp.Evaluate[chromedp.Void](`window.tsubameForecast = null; document.querySelector("#forecast-show").click()`),
		b.until(`window.tsubameForecast !== null && document.querySelectorAll("#forecast-lines tbody tr[data-line-item]").length === 1`, 20*time.Second))...,
	)
	saveScreenshot(t, ctx, "forecast.png")
	q, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.tsubameForecast.query`))
	if err != nil {
		t.Fatal(err)
	}
	page := get(q) // the API's answer to the page's own query (in the browser's zone)
	if !strings.Contains(q, "placement=top") || !strings.Contains(q, "country=JP") || !strings.Contains(q, "device=desktop") {
		t.Errorf("the page asked %s", q)
	}
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`[window.tsubameForecast.result.available, window.tsubameForecast.result.booked,
		window.tsubameForecast.result.net, window.tsubameForecast.result.hours.length, document.querySelectorAll("#forecast-chart canvas").length]`))
	if err != nil {
		t.Fatal(err)
	}
	if int64(shown[0]) != page.Available || int64(shown[1]) != page.Booked || int64(shown[2]) != page.Net || int(shown[3]) != len(page.Hours) || shown[4] < 1 ||
		page.Booked < 4980 || page.Booked > 5020 || page.Available < desk.Available/2 {
		t.Errorf("the dashboard shows %v; the API %d available, %d booked, %d net in %d hours", shown, page.Available, page.Booked, page.Net, len(page.Hours))
	}
	desk = page
	summary, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#forecast-summary").textContent`))
	if err != nil || !strings.Contains(summary, commas(desk.Net)+" left to sell") {
		t.Errorf("summary %q (%v), want %s left to sell", summary, err, commas(desk.Net))
	}
}
