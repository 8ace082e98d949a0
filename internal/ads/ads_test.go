package ads_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/ads"
	"tsubame/internal/decision"
	"tsubame/internal/privacy/privacytest"
	"tsubame/internal/render"
	"tsubame/internal/server"
	"tsubame/internal/store/memory"
	"tsubame/internal/track"
)

// node is one server with the ads service on a shared store.
type node struct {
	url  string
	log  *accesslog.Logger
	dir  string
	svc  *ads.Service
	stop func()
}

type fixture struct {
	store *memory.Store
	keys  []track.Key
}

func newFixture(t *testing.T) *fixture { return newFixtureB(t) }

func newFixtureB(t testing.TB) *fixture {
	t.Helper()
	b, err := os.ReadFile("testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	var set tsubame.CampaignSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	if err := st.ReplaceAll(context.Background(), &set); err != nil {
		t.Fatal(err)
	}
	return &fixture{store: st, keys: []track.Key{{ID: "k1", Secret: []byte(strings.Repeat("s", 32))}}}
}

type nodeOpts struct {
	// reservation is how long a limited line item's decision holds its
	// price (ads.Options.Reservation; 0: none).
	reservation time.Duration
	device      func([]byte) ads.Device
	privacy     map[string]ads.Privacy
	sites       []server.Site
	geo         func(netip.Addr) (string, string)
	// counters keep the caps, limits and budgets (none when nil).
	counters decision.Counters
	// vendor is the operator's IAB TCF vendor id (ads.Options.TCFVendorID).
	vendor int
}

// adsStore is what a node needs of its store.
type adsStore interface {
	tsubame.CampaignStore
	ads.Deduper
}

func (f *fixture) start(t *testing.T, o nodeOpts) *node {
	t.Helper()
	return f.startOn(t, f.store, o)
}

// startOn starts a node on st (the fixture's campaigns must be in it).
func (f *fixture) startOn(t *testing.T, st adsStore, o nodeOpts) *node {
	t.Helper()
	signer, err := track.NewSigner(f.keys[0].ID, f.keys...)
	if err != nil {
		t.Fatal(err)
	}
	eng := decision.NewEngine(st, decision.EngineOptions{Currency: "JPY", Counters: o.counters})
	if _, err := eng.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc, err := ads.New(ads.Options{Engine: eng, Signer: signer, Currency: "JPY", TTL: time.Hour, Reservation: o.reservation,
		CookieName: "tsubame_uid", CookieMaxAge: 24 * time.Hour, Privacy: o.privacy, Dedupe: st,
		Device: o.device, Geo: o.geo, TCFVendorID: o.vendor})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sink, err := accesslog.OpenFile(accesslog.FileOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	log := accesslog.New(sink, accesslog.Options{FlushInterval: 10 * time.Millisecond})
	opt := server.Options{Routes: svc.Routes(log), Sites: o.sites}
	eps := []server.Endpoint{{Name: "ad", Source: svc.Source(), Log: log,
		Formats: []render.Format{render.FormatJSONP, render.FormatJSON, render.FormatVAST}}}
	srv, err := server.New(opt, eps)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	n := &node{url: "http://" + ln.Addr().String(), log: log, dir: dir, svc: svc}
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			<-done
			_ = log.Close(ctx)
		})
	}
	t.Cleanup(n.stop)
	return n
}

// lines stops the node and returns its access-log lines as label maps.
func (n *node) lines(t *testing.T) []map[string]string {
	t.Helper()
	n.stop()
	files, err := filepath.Glob(filepath.Join(n.dir, "access*.log"))
	if err != nil || len(files) != 1 {
		t.Fatalf("log files %v %v", files, err)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := map[string]string{}
		for _, kv := range strings.Split(sc.Text(), "\t") {
			k, v, _ := strings.Cut(kv, ":")
			m[k] = v
		}
		out = append(out, m)
	}
	return out
}

func events(lines []map[string]string, kind string) []map[string]string {
	var out []map[string]string
	for _, l := range lines {
		if l["event"] == kind {
			out = append(out, l)
		}
	}
	return out
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func get(t *testing.T, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

type decisionJSON struct {
	Decision      string `json:"decision"`
	LineItem      string `json:"line_item"`
	Campaign      string `json:"campaign"`
	Creative      string `json:"creative"`
	Format        string `json:"format"`
	W             int    `json:"w"`
	H             int    `json:"h"`
	Image         string `json:"image"`
	HTML          string `json:"html"`
	VAST          string `json:"vast"`
	ImpressionURL string `json:"impression_url"`
	ClickURL      string `json:"click_url"`
}

func decide(t *testing.T, n *node, query string, header ...string) (*http.Response, []decisionJSON) {
	t.Helper()
	resp, body := get(t, n.url+"/api/decide?"+query, header...)
	if resp.StatusCode == http.StatusNoContent {
		if len(body) != 0 {
			t.Fatalf("204 with a body: %q", body)
		}
		return resp, nil
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("decide %s: %d %s", query, resp.StatusCode, body)
	}
	var out struct {
		Decisions []decisionJSON `json:"decisions"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return resp, out.Decisions
}

// A decision names its line item and carries signed tracking URLs; the
// impression and the click each count once, a repeat is logged as not
// valid, and every request, decision, impression and click is a line.
func TestDecideTrackAndLog(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{})
	resp, ds := decide(t, n, "placement=top&uid=u-1&site=News.Example.com")
	if len(ds) != 1 {
		t.Fatalf("decisions %+v", ds)
	}
	d := ds[0]
	if d.LineItem != "li-top" || d.Campaign != "spring" || d.Creative != "banner-1" || d.Format != "banner" ||
		d.W != 300 || d.H != 250 || d.Image != "https://cdn.acme.example/b1.png" || d.Decision == "" {
		t.Fatalf("decision %+v", d)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q", got)
	}
	if resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("a cookie was set for a request with a uid: %q", resp.Header.Get("Set-Cookie"))
	}
	if !strings.HasPrefix(d.ImpressionURL, n.url+ads.PathImp) || !strings.HasPrefix(d.ClickURL, n.url+ads.PathClick) {
		t.Fatalf("tracking URLs %q %q", d.ImpressionURL, d.ClickURL)
	}

	for i := range 3 {
		resp, body := get(t, d.ImpressionURL)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/gif" || !strings.HasPrefix(string(body), "GIF89a") {
			t.Fatalf("impression %d: %d %s %q", i, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	for i := range 2 {
		resp, _ := get(t, d.ClickURL)
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://acme.example/spring?utm_source=tsubame&a=1" {
			t.Fatalf("click %d: %d Location %q", i, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// Tampered, swapped and foreign tokens: a 4xx, never a redirect.
	tok := strings.TrimPrefix(d.ClickURL, n.url+ads.PathClick)
	flipped := []byte(tok)
	flipped[len(flipped)/2] ^= 1
	if flipped[len(flipped)/2] == tok[len(tok)/2] || !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", rune(flipped[len(flipped)/2])) {
		flipped[len(flipped)/2] = 'A' + (tok[len(tok)/2]-'A'+1)%26
	}
	impTok := strings.TrimPrefix(d.ImpressionURL, n.url+ads.PathImp)
	foreign, _ := track.NewSigner("k9", track.Key{ID: "k9", Secret: []byte(strings.Repeat("x", 32))})
	ftok, err := foreign.Sign(track.Token{Kind: track.KindClick, Decision: "d", LineItem: "li-top", Campaign: "spring",
		Creative: "banner-1", Placement: "top", Click: "https://evil.example/", Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for name, u := range map[string]string{
		"tampered":         n.url + ads.PathClick + string(flipped),
		"impression token": n.url + ads.PathClick + impTok,
		"foreign key":      n.url + ads.PathClick + ftok,
		"empty":            n.url + ads.PathClick,
		"garbage":          n.url + ads.PathClick + "%3Cscript%3E",
		"huge":             n.url + ads.PathClick + strings.Repeat("A", 5000),
	} {
		resp, _ := get(t, u)
		if resp.StatusCode < 400 || resp.StatusCode >= 500 || resp.Header.Get("Location") != "" {
			t.Errorf("%s click token: %d Location %q", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}

	lines := n.lines(t)
	dec := events(lines, "decision")
	if len(dec) != 1 {
		t.Fatalf("decision lines %v", dec)
	}
	want := map[string]string{"event_id": "d:" + d.Decision, "decision": d.Decision, "line_item": "li-top", "campaign": "spring",
		"creative": "banner-1", "placement": "top", "uid": "u-1", "price": "250500000", "currency": "JPY", "valid": "true",
		"site": "news.example.com"}
	for k, v := range want {
		if dec[0][k] != v {
			t.Errorf("decision line %s = %q, want %q (%v)", k, dec[0][k], v, dec[0])
		}
	}
	imps, clicks := events(lines, "imp"), events(lines, "click")
	if len(imps) != 3 || len(clicks) != 2 {
		t.Fatalf("%d impression and %d click lines, want 3 and 2", len(imps), len(clicks))
	}
	valid := func(ls []map[string]string) (n int) {
		for _, l := range ls {
			if l["valid"] == "true" {
				n++
			} else if l["reason"] != "repeat" {
				t.Errorf("an invalid line's reason %q", l["reason"])
			}
			if l["decision"] != d.Decision || l["uid"] != "u-1" || l["campaign"] != "spring" {
				t.Errorf("event line %v", l)
			}
		}
		return n
	}
	if valid(imps) != 1 || valid(clicks) != 1 {
		t.Errorf("valid impressions %d, clicks %d: want 1 and 1", valid(imps), valid(clicks))
	}
	if imps[0]["event_id"] != imps[1]["event_id"] || imps[0]["event_id"] != "imp:"+d.Decision || imps[0]["price"] != "250500000" {
		t.Errorf("impression event ids %q %q, price %q", imps[0]["event_id"], imps[1]["event_id"], imps[0]["price"])
	}
	if clicks[0]["price"] != "0" {
		t.Errorf("click price %q", clicks[0]["price"])
	}
	// One request line per response: the decision, 3 impressions, 2+6 clicks.
	requests := 0
	for _, l := range lines {
		if l["event"] == "" {
			requests++
		}
	}
	if requests != 1+3+2+6 {
		t.Errorf("%d request lines, want 12", requests)
	}
}

// Nothing qualifies: a bare 204, and no decision line.
func TestDecideNoFill(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{})
	for _, q := range []string{"placement=nowhere&uid=u", "placement=side&uid=u", "placement=side&uid=u&kv.section=news"} {
		if resp, ds := decide(t, n, q); resp.StatusCode != http.StatusNoContent || ds != nil {
			t.Errorf("%s: %d %v", q, resp.StatusCode, ds)
		}
	}
	for _, q := range []string{"", "placement=", "placement=a%20b", "placement=" + strings.Repeat("p", 65), "placement=top&count=0", "placement=top&count=17",
		"placement=top&uid=a%20b", "placement=top&site=a/b", "placement=top&kv.a%20b=1", "placement=top&format=native",
		"placement=top&w=0", "placement=top&vast=1"} {
		if resp, body := get(t, n.url+"/api/decide?"+q); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: %d %s, want 400", q, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, n.url+"/api/decide?placement=top", "X-Method", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("plain decide: %d", resp.StatusCode)
	}
	if dec := events(n.lines(t), "decision"); len(dec) != 1 {
		t.Errorf("%d decision lines, want 1", len(dec))
	}
}

// Every request decided for is one request line, filled or not: the
// slots it asked (count), how many were filled, and the origin its
// decision lines carry; a refused request and a crawler's have none.
func TestDecideRequestLine(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{
		geo: func(netip.Addr) (string, string) { return "US", "" },
		device: func(ua []byte) ads.Device {
			return ads.Device{Device: "mobile", Bot: strings.Contains(string(ua), "Googlebot")}
		},
	})
	// li-jp wants Japan, li-sports the sports section: nothing fits.
	if resp, ds := decide(t, n, "placement=side&uid=u-1&site=News.Example.com&kv.section=news&count=2"); resp.StatusCode != http.StatusNoContent || ds != nil {
		t.Fatalf("unfilled: %d %v", resp.StatusCode, ds)
	}
	// Three slots, one filled: li-jp would share li-sports' advertiser.
	_, ds := decide(t, n, "placement=side&uid=u-2&site=news.example.com&kv.section=sports&count=3")
	if len(ds) != 1 || ds[0].LineItem != "li-sports" {
		t.Fatalf("filled: %+v", ds)
	}
	// A decide endpoint's request is one too.
	if _, body := get(t, n.url+"/api/ad.js?id=nowhere&callback=cb&uid=u-3"); string(body) != `cb({"decisions":[]});` {
		t.Fatalf("endpoint: %s", body)
	}
	// Refused, and a crawler's: no request line.
	if resp, _ := get(t, n.url+"/api/decide?placement=side&count=17"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("count=17: %d", resp.StatusCode)
	}
	if resp, _ := decide(t, n, "placement=top", "User-Agent", "Mozilla/5.0 (compatible; Googlebot/2.1)"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("crawler: %d", resp.StatusCode)
	}

	lines := n.lines(t)
	reqs, dec := events(lines, "request"), events(lines, "decision")
	if len(reqs) != 3 || len(dec) != 1 {
		t.Fatalf("%d request and %d decision lines, want 3 and 1: %v", len(reqs), len(dec), reqs)
	}
	byPlacement := map[string][]map[string]string{}
	ids := map[string]bool{}
	for _, l := range reqs {
		byPlacement[l["placement"]] = append(byPlacement[l["placement"]], l)
		if id := l["event_id"]; !strings.HasPrefix(id, "r:") || len(id) != len("r:")+26 || ids[id] {
			t.Errorf("request event_id %q (seen: %v)", id, ids[id])
		}
		ids[l["event_id"]] = true
		for k, v := range map[string]string{"decision": "-", "line_item": "-", "campaign": "-", "creative": "-", "uid": "-",
			"price": "0", "currency": "JPY", "valid": "true", "advertiser": "-", "country": "US", "device": "mobile"} {
			if l[k] != v {
				t.Errorf("request line %s = %q, want %q (%v)", k, l[k], v, l)
			}
		}
	}
	side, nowhere := byPlacement["side"], byPlacement["nowhere"]
	if len(side) != 2 || len(nowhere) != 1 {
		t.Fatalf("request lines by placement %v", byPlacement)
	}
	if side[0]["slots"] == "3" {
		side[0], side[1] = side[1], side[0]
	}
	for i, want := range []map[string]string{
		{"slots": "2", "filled": "0", "site": "news.example.com"},
		{"slots": "3", "filled": "1", "site": "news.example.com", "reqid": dec[0]["reqid"], "host": dec[0]["host"]},
		{"slots": "1", "filled": "0", "site": "-"},
	} {
		l := append(side, nowhere...)[i]
		for k, v := range want {
			if l[k] != v {
				t.Errorf("request line %d: %s = %q, want %q (%v)", i, k, l[k], v, l)
			}
		}
	}
	if dec[0]["placement"] != "side" || dec[0]["site"] != "news.example.com" || dec[0]["country"] != "US" || dec[0]["device"] != "mobile" {
		t.Errorf("decision line %v", dec[0])
	}
}

// Key-values and the country target: kv.section=sports wins at priority
// 2; from Japan li-jp serves at priority 3 otherwise.
func TestDecideTargeting(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{geo: func(a netip.Addr) (string, string) {
		if a == netip.MustParseAddr("127.0.0.1") {
			return "JP", "JP-13"
		}
		return "", ""
	}})
	for q, want := range map[string]string{
		"placement=side&uid=u&kv.section=sports": "li-sports",
		"placement=side&uid=u&kv.section=news":   "li-jp",
		"placement=top&uid=u&kv.section=sports":  "li-top",
	} {
		if _, ds := decide(t, n, q); len(ds) != 1 || ds[0].LineItem != want {
			t.Errorf("%s: %+v, want %s", q, ds, want)
		}
	}
	dec := events(n.lines(t), "decision")
	for _, l := range dec {
		if l["country"] != "JP" {
			t.Errorf("decision line country %q", l["country"])
		}
	}
}

// The visitor: a cookie made when there is no uid (HttpOnly; Secure and
// SameSite=None only over TLS), read back on the next request; with a
// privacy signal no cookie is set or read and the uid is not logged.
func TestVisitorAndPrivacy(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{
		privacy: map[string]ads.Privacy{"strict": ads.PrivacyNoCookies},
		sites:   []server.Site{{Name: "strict", Hosts: []string{"strict.example"}}},
		vendor:  ourVendor,
	})
	resp, _ := decide(t, n, "placement=top")
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "tsubame_uid" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.Secure || cookie.MaxAge != 86400 || len(cookie.Value) != 26 {
		t.Fatalf("visitor cookie %+v (Set-Cookie %q)", cookie, resp.Header.Get("Set-Cookie"))
	}
	resp, _ = decide(t, n, "placement=top", "Cookie", "tsubame_uid="+cookie.Value)
	if resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("the cookie was set again: %q", resp.Header.Get("Set-Cookie"))
	}
	// A cookie that is not one of ours is replaced, never logged.
	resp, _ = decide(t, n, "placement=top", "Cookie", "tsubame_uid=%3Cscript%3E")
	if !strings.Contains(resp.Header.Get("Set-Cookie"), "tsubame_uid=") {
		t.Errorf("a foreign cookie value was kept")
	}
	consent := privacytest.Consent{Purposes: []int{1, 2, 3, 4}, Vendors: []int{ourVendor}}.String()
	noConsent := privacytest.Consent{Purposes: []int{2, 3, 4}, Vendors: []int{ourVendor}}.String()
	private := []struct {
		query  string
		header []string
	}{
		{"placement=top&uid=u-2&gdpr=1", nil},
		{"placement=top&uid=u-2&gdpr=1&gdpr_consent=" + noConsent, nil},
		{"placement=top&uid=u-2&us_privacy=1YYN", nil},
		{"placement=top&uid=u-2&gpp=DBABMA~CPXxRfAPXxRfAAfKABENB-CgAAAAAAAAAAYgAAAAAAAA&gpp_sid=2", nil},
		{"placement=top&uid=u-2&coppa=1", nil},
		{"placement=top&uid=u-2", []string{"DNT", "1"}},
		{"placement=top&uid=u-2", []string{"Sec-GPC", "1"}},
		{"placement=top", []string{"Cookie", "tsubame_uid=" + cookie.Value, "DNT", "1"}},
	}
	for _, p := range private {
		resp, ds := decide(t, n, p.query, p.header...)
		if len(ds) != 1 || resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("%s %v: %d decisions, Set-Cookie %q", p.query, p.header, len(ds), resp.Header.Get("Set-Cookie"))
		}
	}
	// Consent, and an opt-out string that does not opt out, keep the visitor.
	for _, q := range []string{"placement=top&uid=u-3&gdpr=1&gdpr_consent=" + consent, "placement=top&uid=u-3&us_privacy=1YNN", "placement=top&uid=u-3&gdpr=0"} {
		decide(t, n, q)
	}
	// A no_cookies site: no cookie, but a uid is taken.
	resp, _ = decide(t, n, "placement=top", "Host", "strict.example")
	if resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("the no_cookies site set a cookie")
	}
	decide(t, n, "placement=top&uid=u-4", "Host", "strict.example")

	var uids []string
	for _, l := range events(n.lines(t), "decision") {
		uids = append(uids, l["uid"])
	}
	want := []string{cookie.Value, cookie.Value, "", "-", "-", "-", "-", "-", "-", "-", "-", "u-3", "u-3", "u-3", "-", "u-4"}
	if fmt.Sprint(uids[:1]) != fmt.Sprint(want[:1]) || len(uids) != len(want) {
		t.Fatalf("uids %v, want %v", uids, want)
	}
	uids[2] = "" // the replaced foreign cookie: a new random id
	if fmt.Sprint(uids) != fmt.Sprint(want) {
		t.Errorf("uids %v\nwant %v", uids, want)
	}
}

// A crawler gets a 204 and no cookie, and its fetch of a tracking URL is
// logged as not valid without using up the impression.
func TestCrawler(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{device: func(ua []byte) ads.Device {
		return ads.Device{Device: "desktop", Bot: strings.Contains(string(ua), "Googlebot")}
	}})
	const bot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
	resp, ds := decide(t, n, "placement=top", "User-Agent", bot)
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Set-Cookie") != "" || ds != nil {
		t.Fatalf("crawler: %d %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	_, ds = decide(t, n, "placement=top&uid=u", "User-Agent", "Mozilla/5.0 Chrome/131")
	get(t, ds[0].ImpressionURL, "User-Agent", bot)
	get(t, ds[0].ImpressionURL, "User-Agent", "Mozilla/5.0 Chrome/131")
	imps := events(n.lines(t), "imp")
	if len(imps) != 2 || imps[0]["valid"] != "false" || imps[0]["reason"] != "crawler" || imps[1]["valid"] != "true" {
		t.Errorf("impression lines %v", imps)
	}
}

// An endpoint with source: decide answers the decisions in its formats:
// JSONP calls the callback even with none, VAST holds the video.
func TestDecideEndpoint(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{})
	resp, body := get(t, n.url+"/api/ad.js?id=top&callback=Ads.show&uid=u")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), `Ads.show({"decisions":[{"decision":"`) ||
		!strings.Contains(string(body), `"line_item":"li-top"`) {
		t.Fatalf("js: %d %s", resp.StatusCode, body)
	}
	_, body = get(t, n.url+"/api/ad.js?id=nowhere&callback=Ads.show&uid=u")
	if string(body) != `Ads.show({"decisions":[]});` {
		t.Errorf("js without a decision: %s", body)
	}
	resp, body = get(t, n.url+"/api/ad.xml?id=preroll&uid=u&vast=3")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `version="3.0"`) ||
		!strings.Contains(string(body), "https://cdn.globex.example/launch.mp4") || !strings.Contains(string(body), n.url+ads.PathImp) {
		t.Fatalf("xml: %d %s", resp.StatusCode, body)
	}
	_, body = get(t, n.url+"/api/ad.xml?id=top&uid=u") // a banner: no video to answer
	if strings.Contains(string(body), "<Ad") {
		t.Errorf("xml for a banner placement: %s", body)
	}
	_, ds := decide(t, n, "placement=preroll&uid=u")
	if len(ds) != 1 || ds[0].Format != "video" || !strings.Contains(ds[0].VAST, "<MediaFile") {
		t.Errorf("video decision %+v", ds)
	}
	if dec := events(n.lines(t), "decision"); len(dec) != 3 { // top, preroll (xml), preroll; the banner xml decides none
		t.Errorf("%d decision lines, want 3", len(dec))
	}
}

// Two nodes on one store: the same impression fetched from both, by many
// clients at once, counts exactly once.
func TestRepeatsCountOnceAcrossNodes(t *testing.T) {
	f := newFixture(t)
	countOnce(t, f.start(t, nodeOpts{}), f.start(t, nodeOpts{}))
}

// countOnce decides 20 times on the first node, then fetches every
// impression and click URL 8 times at once, spread over the nodes: each
// must be logged valid exactly once, the rest as repeats.
func countOnce(t *testing.T, nodes ...*node) {
	t.Helper()
	const decisions, fetches = 20, 8
	first := nodes[0]
	var urls []string
	for range decisions {
		_, ds := decide(t, first, "placement=top&uid=u")
		urls = append(urls, ds[0].ImpressionURL, ds[0].ClickURL)
	}
	var wg sync.WaitGroup
	for i := range fetches {
		for _, u := range urls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				target := nodes[i%len(nodes)]
				resp, err := noRedirect.Get(strings.Replace(u, first.url, target.url, 1))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
	}
	wg.Wait()
	var lines []map[string]string
	for _, n := range nodes {
		lines = append(lines, n.lines(t)...)
	}
	for _, kind := range []string{"imp", "click"} {
		valid := map[string]int{}
		all := 0
		for _, l := range events(lines, kind) {
			all++
			if l["valid"] == "true" {
				valid[l["decision"]]++
			} else if l["reason"] != "repeat" {
				t.Errorf("%s line not valid for %q", kind, l["reason"])
			}
		}
		if all != decisions*fetches || len(valid) != decisions {
			t.Errorf("%s: %d lines, %d decisions counted; want %d and %d", kind, all, len(valid), decisions*fetches, decisions)
		}
		for d, c := range valid {
			if c != 1 {
				t.Errorf("%s of %s counted %d times", kind, d, c)
			}
		}
	}
}

// An impression of a line item with a limit counted after its decision's
// reservation ended is still valid (the ad was shown), and its line says
// late:true; one in time says nothing of it, and neither does a line item
// without a limit, whose decisions reserve nothing.
func TestLateImpression(t *testing.T) {
	f := newFixture(t)
	set, _, err := f.store.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, li := range set.LineItems {
		if li.ID == "li-top" {
			li.Limits.Impressions.Total = 1000
		}
	}
	if err := f.store.ReplaceAll(t.Context(), set); err != nil {
		t.Fatal(err)
	}
	n := f.start(t, nodeOpts{reservation: time.Second})
	long := f.start(t, nodeOpts{reservation: time.Hour}) // whatever the machine's pace, in time
	imp := func(n *node, query string) string {
		t.Helper()
		_, ds := decide(t, n, query)
		if len(ds) != 1 {
			t.Fatalf("%s: decisions %+v", query, ds)
		}
		return ds[0].ImpressionURL
	}
	inTime, late, unlimited := imp(long, "placement=top&uid=u-1"), imp(n, "placement=top&uid=u-2"), imp(n, "placement=preroll&uid=u-3")
	time.Sleep(2100 * time.Millisecond) // the 1 s reservations (to the second) have ended
	get(t, inTime)
	get(t, late)
	get(t, unlimited)
	got := map[string]map[string]string{}
	for _, e := range append(events(n.lines(t), "imp"), events(long.lines(t), "imp")...) {
		got[e["line_item"]+"/"+e["uid"]] = e
	}
	for key, wantLate := range map[string]string{"li-top/u-1": "", "li-top/u-2": "true", "li-video/u-3": ""} {
		e := got[key]
		if e == nil || e["valid"] != "true" || e["late"] != wantLate {
			t.Errorf("%s: %v, want valid and late %q", key, e, wantLate)
		}
	}
}

// Concurrent decisions each answer and log their own request: the
// visitor, site, key-values, ids and tracking URLs an answer keeps in its
// pooled memory (answer.keep) are never another request's. Four clients
// with a visitor, a site and a key-value of their own per request; each
// answer's tokens are checked against its request, and each decision line
// against its answer.
func TestConcurrentDecisionsKeepTheirOwnRequest(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{reservation: 10 * time.Minute})
	signer, err := track.NewSigner(f.keys[0].ID, f.keys...)
	if err != nil {
		t.Fatal(err)
	}
	type want struct{ uid, site string }
	var (
		mu    sync.Mutex
		wants = map[string]want{} // by decision id
	)
	const clients, each = 4, 150
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				uid := fmt.Sprintf("v-%d-%d", c, i)
				site := fmt.Sprintf("Site%d-%d.Example.COM", c, i)
				resp, err := http.Get(n.url + "/api/decide?placement=side&kv.section=sports&uid=" + uid + "&site=" + site)
				if err != nil {
					t.Error(err)
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				var out struct {
					Decisions []decisionJSON `json:"decisions"`
				}
				if err == nil {
					err = json.Unmarshal(body, &out)
				}
				if err != nil || resp.StatusCode != http.StatusOK || len(out.Decisions) != 1 {
					t.Errorf("%s: %d %q %v", uid, resp.StatusCode, body, err)
					return
				}
				d := out.Decisions[0]
				imp, err := signer.VerifyKind(strings.TrimPrefix(d.ImpressionURL, n.url+"/t/i/"), track.KindImp, time.Now())
				if err != nil {
					t.Errorf("%s: impression URL %q: %v", uid, d.ImpressionURL, err)
					return
				}
				click, err := signer.VerifyKind(strings.TrimPrefix(d.ClickURL, n.url+"/t/c/"), track.KindClick, time.Now())
				if err != nil {
					t.Errorf("%s: click URL %q: %v", uid, d.ClickURL, err)
					return
				}
				lower := strings.ToLower(site)
				for _, tk := range []track.Token{imp, click} {
					if tk.User != uid || tk.Site != lower || tk.Decision != d.Decision || tk.LineItem != "li-sports" || tk.Placement != "side" {
						t.Errorf("%s %s: token %+v, want user %s, site %s, decision %s, li-sports on side", uid, site, tk, uid, lower, d.Decision)
					}
				}
				mu.Lock()
				if _, dup := wants[d.Decision]; dup {
					t.Errorf("decision id %s answered twice", d.Decision)
				}
				wants[d.Decision] = want{uid, lower}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	lines := events(n.lines(t), "decision")
	if len(lines) != clients*each || len(wants) != clients*each {
		t.Fatalf("%d decision lines and %d answers, want %d", len(lines), len(wants), clients*each)
	}
	for _, l := range lines {
		w, ok := wants[l["decision"]]
		if !ok || l["uid"] != w.uid || l["site"] != w.site || l["line_item"] != "li-sports" || l["placement"] != "side" {
			t.Errorf("decision line %v, want uid %s and site %s (answered: %v)", l, w.uid, w.site, ok)
		}
	}
}
