package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A publisher's page on another origin reads /api/decide with fetch(),
// the visitor cookie riding along: with ads.cors_origins naming the page's
// origin, a fetch with credentials and a header of its own (a real
// preflight) gets the decision; the next one, carrying the cookie the
// first set, meets the line item's frequency cap of one (204); one
// without credentials is a new visitor and is served. A page of an origin
// not listed cannot read the answer.
func TestDecideCORSInABrowser(t *testing.T) {
	browser := chromium(t)
	var decideURL string
	serve := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, decideCORSPage, decideURL)
	}
	pub := httptest.NewServer(http.HandlerFunc(serve))
	t.Cleanup(pub.Close)
	other := httptest.NewServer(http.HandlerFunc(serve))
	t.Cleanup(other.Close)
	m := openMain(t, append(testEnv(t), "TSUBAME_ADS_HEADLESS_IS_BOT=false", "TSUBAME_ADS_CORS_ORIGINS="+pub.URL), false)
	decideURL = "http://" + m.PublicAddr() + "/api/decide?placement=top"
	putCampaigns(t, m, `{
  "advertisers": [{"id": "acme", "name": "Acme"}],
  "campaigns": [{"id": "spring", "advertiser": "acme"}],
  "creatives": [{"id": "b1", "advertiser": "acme", "format": "banner", "w": 300, "h": 250,
    "image": "https://cdn.acme.example/b1.png", "click": "https://acme.example/spring", "status": "approved"}],
  "line_items": [
    {"id": "li-once", "campaign": "spring", "priority": 5, "weight": 1, "cpm": "0.5", "creatives": ["b1"],
     "frequency": [{"impressions": 1, "per": "1h"}], "targeting": {"placements": ["top"]}}
  ]
}`)
	if _, err := m.ads.engine.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(browserContext(t, browser), 60*time.Second)
	defer cancel()
	b := &page{t: t, ctx: ctx}
	type result struct {
		First     int    `json:"first"`
		Line      string `json:"line"`
		Second    int    `json:"second"`
		Anonymous int    `json:"anonymous"`
		Error     string `json:"error"`
	}
	read := func(origin string) result {
		t.Helper()
		b.do("open the page of "+origin, chromedp.Navigate(origin+"/"), b.until(`window.result !== undefined`, 30*time.Second))
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.result)`))
		if err != nil {
			t.Fatal(err)
		}
		var r result
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		return r
	}
	if got, want := read(pub.URL), (result{First: 200, Line: "li-once", Second: 204, Anonymous: 200}); got != want {
		t.Errorf("the listed origin's page: got %+v, want %+v (the second fetch carries the visitor cookie and meets the cap)", got, want)
	}
	if got := read(other.URL); got.Error == "" || got.First != 0 {
		t.Errorf("an origin not listed read the answer: %+v", got)
	}
}

// decideCORSPage fetches /api/decide (%s) three times: with credentials
// and a header of its own, again, and without credentials.
const decideCORSPage = `<!doctype html>
<html><head><title>news</title></head><body>
<script>
(async () => {
  const u = %q;
  const withCookie = {credentials: "include", headers: {"X-Page-View": "1"}};
  const a = await fetch(u, withCookie);
  const first = a.status === 200 ? await a.json() : null;
  const b = await fetch(u, withCookie);
  const c = await fetch(u, {credentials: "omit"});
  window.result = {first: a.status, line: first ? first.decisions[0].line_item : "", second: b.status, anonymous: c.status, error: ""};
})().catch(e => { window.result = {first: 0, line: "", second: 0, anonymous: 0, error: String(e)}; });
</script>
</body></html>`
