package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The page: a publisher's page on one origin loads a source:
// decide ad tag from Tsubame on another, shows the banner (an image on the
// advertiser's server, a third origin), fires the impression pixel, and a
// click on the banner goes through Tsubame's redirect to the landing page.
// The access log then holds the decision, one counted impression and one
// counted click of the same decision and visitor, and the requests that
// carried them.
func TestAdsPageInBrowser(t *testing.T) {
	browser := chromium(t)
	adv := newAdsAdvertiser(t)

	dir := t.TempDir()
	conf := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(conf, []byte(`
ads:
  headless_is_bot: false
endpoints:
  ad: {source: decide, formats: [js]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	m := openMain(t, append(testEnv(t), "TSUBAME_CONFIG="+conf), false)
	putCampaigns(t, m, fmt.Sprintf(`{
  "advertisers": [{"id": "acme", "name": "Acme"}],
  "campaigns": [{"id": "spring", "advertiser": "acme"}],
  "creatives": [{"id": "b1", "advertiser": "acme", "format": "banner", "w": 300, "h": 250,
    "image": %q, "click": %q, "status": "approved"}],
  "line_items": [{"id": "li-top", "campaign": "spring", "priority": 5, "weight": 1, "cpm": "0.5",
    "creatives": ["b1"], "targeting": {"placements": ["top"]}}]
}`, adv.URL+"/b1.png", adv.URL+"/spring?from=ad"))
	// The index is compiled before the page asks: a decide request made
	// to wait for it would be a decision of its own in the log.
	if _, err := m.ads.engine.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := m.ads.engine.Index().Len(); n != 1 {
		t.Fatalf("the index holds %d line items, want 1", n)
	}

	tag := "http://" + m.PublicAddr() + "/api/ad.js?id=top&callback=Ads.show"
	pub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, adsPublisherPage, tag)
	}))
	t.Cleanup(pub.Close)

	bctx := browserContext(t, browser)
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	b := &page{t: t, ctx: ctx}
	b.do("open the publisher's page",
		chromedp.Navigate(pub.URL+"/"),
		b.until(`window.adsAnswer !== undefined`, 30*time.Second),
	)
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.adsAnswer)`))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Decisions []struct {
			Decision      string `json:"decision"`
			LineItem      string `json:"line_item"`
			Image         string `json:"image"`
			ImpressionURL string `json:"impression_url"`
			ClickURL      string `json:"click_url"`
		} `json:"decisions"`
	}
	if err := json.Unmarshal([]byte(raw), &answer); err != nil || len(answer.Decisions) != 1 {
		t.Fatalf("the page's callback got %s (%v), want one decision", raw, err)
	}
	d := answer.Decisions[0]
	if d.LineItem != "li-top" || d.Image != adv.URL+"/b1.png" {
		t.Errorf("decision %+v", d)
	}
	b.do("see the banner and fire the impression",
		chromedp.WaitVisible(css("#ad img")),
		b.until(`(() => { const i = document.querySelector("#ad img"); return i.complete && i.naturalWidth === 300 && i.naturalHeight === 250; })()`, 20*time.Second),
		b.until(`(() => { const p = document.getElementById("pixel"); return p.complete && p.naturalWidth === 1 && p.naturalHeight === 1; })()`, 20*time.Second),
	)
	saveScreenshot(t, ctx, "adspage.png")
	b.do("click the banner",
		chromedp.Click(css("#ad img")),
		chromedp.WaitVisible(css("#landing")),
	)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil || loc != adv.URL+"/spring?from=ad" {
		t.Errorf("after the click the browser is at %q (%v), want the landing page", loc, err)
	}
	// The visitor cookie is HttpOnly: the landing page, on the same host,
	// gets it sent but cannot read it.
	if b.eval(`document.cookie.includes("tsubame_uid")`) {
		t.Error("a page's script reads the visitor cookie")
	}
	if err := chromedp.Cancel(ctx); err != nil {
		t.Errorf("closing the browser: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	lines := readAdsLog(t, m.Config.AccessLog.Dir)
	// Events and the request lines that carried them, by event kind.
	events := map[string][]adsLogLine{}
	requests := map[string][]adsLogLine{}
	for _, l := range lines {
		if e := l["event"]; e != "" {
			events[e] = append(events[e], l)
			continue
		}
		switch uri := l["uri"]; {
		case uri == "/api/ad.js":
			requests["decision"] = append(requests["decision"], l)
		case strings.HasPrefix(uri, "/t/i/"):
			requests["imp"] = append(requests["imp"], l)
		case strings.HasPrefix(uri, "/t/c/"):
			requests["click"] = append(requests["click"], l)
		}
	}
	dump := func() string {
		var s strings.Builder
		for _, l := range lines {
			s.WriteString(l.String())
		}
		return s.String()
	}
	for _, kind := range []string{"decision", "imp", "click"} {
		if n := len(events[kind]); n != 1 {
			t.Fatalf("%d event:%s lines, want 1:\n%s", n, kind, dump())
		}
		if n := len(requests[kind]); n != 1 {
			t.Fatalf("%d request lines of the %s, want 1:\n%s", n, kind, dump())
		}
	}
	dec, imp, click := events["decision"][0], events["imp"][0], events["click"][0]
	uid := dec["uid"]
	if uid == "" || uid == "-" {
		t.Errorf("the decision has no visitor: %s", dec)
	}
	for _, e := range []adsLogLine{dec, imp, click} {
		if e["decision"] != d.Decision || e["placement"] != "top" || e["line_item"] != "li-top" ||
			e["creative"] != "b1" || e["valid"] != "true" || e["uid"] != uid {
			t.Errorf("want decision:%s placement:top line_item:li-top creative:b1 valid:true uid:%s in\n%s", d.Decision, uid, e)
		}
	}
	// The page's origin is the site (its Referer's host).
	if dec["site"] != "127.0.0.1" {
		t.Errorf("decision site %q, want the page's host", dec["site"])
	}

	// Each event is logged with the request that carried it.
	for _, c := range []struct {
		what  string
		req   adsLogLine
		event adsLogLine
		path  string
		code  string
	}{
		{"ad tag", requests["decision"][0], dec, "/api/ad.js", "200"},
		{"impression", requests["imp"][0], imp, adsURLPath(t, d.ImpressionURL), "200"},
		{"click", requests["click"][0], click, adsURLPath(t, d.ClickURL), "302"},
	} {
		if c.req["uri"] != c.path || c.req["status"] != c.code || c.req["reqid"] != c.event["reqid"] || c.req["reqid"] == "" {
			t.Errorf("%s: want uri:%s status:%s reqid:%s in\n%s", c.what, c.path, c.code, c.event["reqid"], c.req)
		}
	}
	if r := requests["decision"][0]; r["id"] != "top" || r["callback"] != "Ads.show" || r["endpoint"] != "ad" {
		t.Errorf("ad tag request line %s", r)
	}

	// The browser kept the cookie the ad tag's answer set and sent it
	// with the click's navigation (cookies are per host, not per port):
	// the landing page got the visitor the log holds.
	hits := adv.seen()
	if hits["/b1.png"] != 1 || hits["/spring"] != 1 {
		t.Errorf("the advertiser's server saw %v, want one image and one landing request", hits)
	}
	if got := adv.cookie("/spring"); got != uid {
		t.Errorf("the landing request carried tsubame_uid %q, want the logged uid %q", got, uid)
	}
}

// adsPublisherPage is the publisher's page: its Ads.show shows the first
// decision as a linked image with its impression pixel. %s is the ad tag's
// URL.
const adsPublisherPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>The Daily Example</title></head>
<body>
<h1>The Daily Example</h1>
<div id="slot"></div>
<script>
window.Ads = {show: function (r) {
  window.adsAnswer = r;
  var d = r.decisions[0];
  if (!d) return;
  var a = document.createElement("a");
  a.id = "ad";
  a.href = d.click_url;
  var img = document.createElement("img");
  img.src = d.image;
  img.width = d.w;
  img.height = d.h;
  a.appendChild(img);
  var px = document.createElement("img");
  px.id = "pixel";
  px.src = d.impression_url;
  px.width = 1;
  px.height = 1;
  var slot = document.getElementById("slot");
  slot.appendChild(a);
  slot.appendChild(px);
}};
</script>
<script src="%s"></script>
</body></html>
`

// adsAdvertiser is the advertiser's server: the banner (a real PNG) and the
// landing page, counting requests and keeping the visitor cookie each
// carried.
type adsAdvertiser struct {
	*httptest.Server
	mu      sync.Mutex
	hits    map[string]int
	cookies map[string]string
}

func newAdsAdvertiser(t *testing.T) *adsAdvertiser {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 300, 250))
	for y := range 250 {
		for x := range 300 {
			img.Set(x, y, color.RGBA{R: 0xe8, G: 0x5d, B: 0x2a, A: 0xff})
		}
	}
	var banner bytes.Buffer
	if err := png.Encode(&banner, img); err != nil {
		t.Fatal(err)
	}
	a := &adsAdvertiser{hits: map[string]int{}, cookies: map[string]string{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.hits[r.URL.Path]++
		if c, err := r.Cookie("tsubame_uid"); err == nil {
			a.cookies[r.URL.Path] = c.Value
		}
		a.mu.Unlock()
		switch r.URL.Path {
		case "/b1.png":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write(banner.Bytes())
		case "/spring":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, `<!doctype html><html><head><title>Acme</title></head><body><h1 id="landing">Spring at Acme</h1></body></html>`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *adsAdvertiser) seen() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.hits)
}

func (a *adsAdvertiser) cookie(path string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cookies[path]
}

// adsLogLine is one access-log line's fields.
type adsLogLine map[string]string

func (l adsLogLine) String() string {
	var s strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		fmt.Fprintf(&s, "%s:%s\t", k, l[k])
	}
	s.WriteString("\n")
	return s.String()
}

// readAdsLog reads every line of the access-log files in dir, closed
// (gzipped or not) and active.
func readAdsLog(t *testing.T, dir string) []adsLogLine {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var lines []adsLogLine
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = f
		if strings.HasSuffix(e.Name(), ".gz") {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatal(err)
			}
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			l := adsLogLine{}
			for _, field := range strings.Split(sc.Text(), "\t") {
				if k, v, ok := strings.Cut(field, ":"); ok {
					l[k] = v
				}
			}
			lines = append(lines, l)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return lines
}

func adsURLPath(t *testing.T, s string) string {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path
}
