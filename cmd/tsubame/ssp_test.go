package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame/internal/config"
	"tsubame/internal/openrtb"
	"tsubame/internal/report"
	"tsubame/internal/ssp"
	"tsubame/internal/store/redis/redistest"
)

// scripted is a demand partner on 127.0.0.1 that answers after delay
// with a bid of price (none when price is ""), or never (hang), and
// records every request and notice it gets.
type scripted struct {
	srv   *httptest.Server
	delay time.Duration
	price string
	hang  chan struct{}

	mu       sync.Mutex
	requests []*openrtb.BidRequest
	notices  []string
}

func newScripted(t *testing.T, delay time.Duration, price string, hang bool) *scripted {
	s := &scripted{delay: delay, price: price}
	if hang {
		s.hang = make(chan struct{})
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		if s.hang != nil {
			close(s.hang)
		}
		s.srv.Close()
	})
	return s
}

func (s *scripted) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		s.mu.Lock()
		s.notices = append(s.notices, r.URL.RequestURI())
		s.mu.Unlock()
		return
	}
	var in io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		in = zr
	}
	body, _ := io.ReadAll(in)
	req, err := openrtb.Decode(body)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	if s.hang != nil {
		select {
		case <-s.hang:
		case <-r.Context().Done():
		}
		return
	}
	time.Sleep(s.delay)
	if s.price == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	base := s.srv.URL
	fmt.Fprintf(w, `{"id":%q,"cur":"USD","seatbid":[{"seat":"s","bid":[{"id":"bid-%s","impid":"1","price":%s,
		"adm":"<div>ad of %s for ${AUCTION_ID}</div>","adomain":["brand.example"],"w":300,"h":250,
		"nurl":"%s/win?id=${AUCTION_ID}&p=${AUCTION_PRICE}","burl":"%s/bill?id=${AUCTION_ID}&p=${AUCTION_PRICE}",
		"lurl":"%s/loss?id=${AUCTION_ID}&c=${AUCTION_LOSS}"}]}]}`,
		req.ID, s.price, s.price, s.price, base, base, base)
}

func (s *scripted) seen() (requests []*openrtb.BidRequest, notices []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*openrtb.BidRequest(nil), s.requests...), append([]string(nil), s.notices...)
}

// waitNotices waits until s has been called on n notices, and returns them.
func (s *scripted) waitNotices(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, got = s.seen(); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d notices within 30s, want %d: %v", len(got), n, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// accessEvents reads the event lines of the access log files in dir.
func accessEvents(t *testing.T, dir string) []map[string]string {
	t.Helper()
	var out []map[string]string
	files, _ := filepath.Glob(filepath.Join(dir, "access*.log"))
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			fields := map[string]string{}
			for kv := range strings.SplitSeq(sc.Text(), "\t") {
				k, v, _ := strings.Cut(kv, ":")
				fields[k] = v
			}
			if fields["event"] != "" && fields["event"] != "-" {
				out = append(out, fields)
			}
		}
		f.Close()
	}
	return out
}

const sspCampaigns = `{"currency":"USD",
 "advertisers":[{"id":"pub","name":"Publisher's own"}],
 "campaigns":[{"id":"house","advertiser":"pub","name":"House"}],
 "creatives":[{"id":"cr","advertiser":"pub","format":"banner","w":300,"h":250,"image":"https://pub.example/b.png",
   "click":"https://pub.example/","status":"approved"}],
 "line_items":[
  {"id":"li-sponsor","campaign":"house","priority":1,"weight":1,"cpm":"0.10","creatives":["cr"],"targeting":{"placements":["gtop"]}},
  {"id":"li-price","campaign":"house","priority":5,"weight":1,"cpm":"1.10","creatives":["cr"],"targeting":{"placements":["top","mid"]}}]}`

// The sell side end to end, on real servers: a seller whose placement top
// is sold to four partners (Tsubame's own bidder on /rtb/seller, a
// partner answering in 10 ms at 1.00, one in 80 ms at 2.50, one that never
// answers) against its own line item at 1.10. The highest valid price
// wins and is served; the bidder's and the fast partner's bids lose with
// 102, the winner's nurl is called once, its burl once however often the
// impression is fired; the hung partner is counted as timed out. A
// price-priority line item beats a lower bid (mid, 1.10 against 1.00);
// a sponsorship (gtop) wins outright with no partner asked. The event
// lines say so.
func TestSellSideEndToEnd(t *testing.T) {
	// The bidder: the bidder's test campaigns bid 1.20 on foobar.com.
	bport := freePort(t)
	bconf := filepath.Join(t.TempDir(), "bidder.yaml")
	if err := os.WriteFile(bconf, []byte(`ads:
  currency: USD
rtb:
  notice_url: http://127.0.0.1:`+bport+`
  exchanges:
    seller:
      seat: s1
      token_header: X-Exchange-Token
      token: a-token-of-16-chars
`), 0o600); err != nil {
		t.Fatal(err)
	}
	benv := []string{"TSUBAME_LISTEN=127.0.0.1:" + bport, "TSUBAME_ADMIN_LISTEN=127.0.0.1:0", "TSUBAME_DATA_DIR=" + t.TempDir(),
		"TSUBAME_ACCESS_LOG_DIR=" + t.TempDir(), "TSUBAME_CONFIG=" + bconf}
	b := openMain(t, benv, false)
	set, err := os.ReadFile("../../internal/bidder/testdata/campaigns.json")
	if err != nil {
		t.Fatal(err)
	}
	putCampaigns(t, b, string(set))

	fast := newScripted(t, 10*time.Millisecond, "1.00", false)
	slow := newScripted(t, 80*time.Millisecond, "2.50", false)
	never := newScripted(t, 0, "", true)
	sconf := filepath.Join(t.TempDir(), "seller.yaml")
	if err := os.WriteFile(sconf, []byte(`ads:
  currency: USD
admin:
  metrics_public: true
ssp:
  seller: {domain: ssp.example, name: Example SSP}
  tmax: 1s
  notices: {allow_private: true} # the partners are on loopback
  publishers:
    foobar: {seller_id: pub-7, name: Foobar, domain: foobar.com}
  placements:
    top: {publisher: foobar, floor: "0.50", sizes: ["300x250"]}
    mid: {publisher: foobar, floor: "0.50", sizes: ["300x250"], partners: [fast]}
    gtop: {publisher: foobar, sizes: ["300x250"]}
  demand:
    tsubame:
      url: http://`+b.PublicAddr()+`/rtb/seller
      token_header: X-Exchange-Token
      token: a-token-of-16-chars
    fast: {url: `+fast.srv.URL+`, sync: "https://sync.fast.example/u?r={redirect}"}
    slow: {url: `+slow.srv.URL+`, gzip: true}
    never: {url: `+never.srv.URL+`}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	senv := []string{"TSUBAME_LISTEN=127.0.0.1:0", "TSUBAME_ADMIN_LISTEN=127.0.0.1:0", "TSUBAME_DATA_DIR=" + t.TempDir(),
		"TSUBAME_ACCESS_LOG_DIR=" + logDir, "TSUBAME_CONFIG=" + sconf}
	s := openMain(t, senv, false)
	putCampaigns(t, s, sspCampaigns)
	base := "http://" + s.PublicAddr()

	type sale struct {
		Decisions []struct {
			Decision      string `json:"decision"`
			Partner       string `json:"partner"`
			LineItem      string `json:"line_item"`
			HTML          string `json:"html"`
			ImpressionURL string `json:"impression_url"`
		} `json:"decisions"`
	}
	decide := func(placement string) sale {
		t.Helper()
		var a sale
		waitUntil(t, "an answer for "+placement, func() bool {
			req, _ := http.NewRequest("GET", base+"/api/decide?placement="+placement+"&site=foobar.com&uid=u-1"+
				"&page=http%3A%2F%2Ffoobar.com%2Fstory&schain=1.0,1!upstream.example,77,1,,,", nil)
			req.Header.Set("User-Agent", browserUA)
			req.Header.Set("Accept-Language", "ja-JP,ja;q=0.9,en;q=0.8")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return false
			}
			if err := json.Unmarshal(body, &a); err != nil || len(a.Decisions) != 1 {
				t.Fatalf("%v: %s", err, body)
			}
			return true
		})
		return a
	}

	a := decide("top")
	d := a.Decisions[0]
	if d.Partner != "slow" || d.HTML != "<div>ad of 2.50 for "+d.Decision+"</div>" || d.ImpressionURL == "" {
		t.Fatalf("top: %+v", d)
	}
	for range 3 {
		if code, _ := getAs(t, http.DefaultClient, d.ImpressionURL, browserUA); code != 200 {
			t.Fatalf("impression: %d", code)
		}
	}
	if got := slow.waitNotices(t, 2); !sameSet(got, []string{"/win?id=" + d.Decision + "&p=2.5", "/bill?id=" + d.Decision + "&p=2.5"}) {
		t.Fatalf("the winner's notices: %v", got)
	}
	if got := fast.waitNotices(t, 1); got[0] != "/loss?id="+d.Decision+"&c=102" {
		t.Fatalf("the fast partner's notices: %v", got)
	}
	// The request the partners received.
	reqs, _ := slow.seen()
	r := reqs[len(reqs)-1]
	nodes := r.Source.SChain.Nodes
	if r.Site.Domain != "foobar.com" || r.Site.Page != "http://foobar.com/story" || r.Imp[0].BidFloor != 500_000 ||
		len(nodes) != 2 || nodes[0].ASI != "upstream.example" || nodes[1].ASI != "ssp.example" || nodes[1].SID != "pub-7" ||
		r.User == nil || r.User.ID != "u-1" || r.TMax > 960 || r.TMax < 1 || r.Device.Language != "ja" {
		t.Fatalf("request %+v, schain %+v, user %+v", r, r.Source.SChain, r.User)
	}

	a = decide("mid")
	if d := a.Decisions[0]; d.LineItem != "li-price" || d.Partner != "" {
		t.Fatalf("mid: %+v", d)
	}
	requestsBefore, _ := fast.seen()
	a = decide("gtop")
	if d := a.Decisions[0]; d.LineItem != "li-sponsor" {
		t.Fatalf("gtop: %+v", d)
	}
	if requestsAfter, _ := fast.seen(); len(requestsAfter) != len(requestsBefore) {
		t.Fatal("a partner was asked for a sponsorship's slot")
	}
	// sellers.json, the ads.txt lines, and a user sync: /cookie_sync lists
	// the partner's, /setuid keeps its id in the visitor's cookie, and
	// its next bid request carries it; not where GDPR applies without
	// consent.
	code, sellers := get(t, base+"/sellers.json")
	if code != 200 || !strings.Contains(sellers, `"seller_id": "pub-7"`) || !strings.Contains(sellers, `"seller_type": "PUBLISHER"`) ||
		!strings.Contains(sellers, `"domain": "foobar.com"`) {
		t.Fatalf("sellers.json: %d %s", code, sellers)
	}
	if code, out, stderr := runCmd(t, senv, "", "ssp", "ads-txt"); code != 0 || !strings.Contains(out, "ssp.example, pub-7, DIRECT") {
		t.Fatalf("ads-txt: %d %s %s", code, out, stderr)
	}
	code, syncs := get(t, base+"/cookie_sync")
	wantSync := `{"partner":"fast","url":"https://sync.fast.example/u?r=` + url.QueryEscape(base+"/setuid?partner=fast&uid=") + `","type":"redirect"}`
	if code != 200 || syncs != `{"status":"ok","syncs":[`+wantSync+`]}` {
		t.Fatalf("cookie_sync: %d %s", code, syncs)
	}
	if code, syncs = get(t, base+"/cookie_sync?gdpr=1"); syncs != `{"status":"no_consent","syncs":[]}` {
		t.Fatalf("cookie_sync without consent: %d %s", code, syncs)
	}
	jar, _ := cookiejar.New(nil)
	visitor := &http.Client{Jar: jar}
	if code, _ := getAs(t, visitor, base+"/setuid?partner=fast&uid=F-123", browserUA); code != 200 {
		t.Fatalf("setuid: %d", code)
	}
	if code, _ := getAs(t, visitor, base+"/setuid?partner=nobody&uid=F-123", browserUA); code != 400 {
		t.Fatalf("setuid of an unknown partner: %d", code)
	}
	if code, syncs = getAs(t, visitor, base+"/cookie_sync", browserUA); syncs != `{"status":"ok","syncs":[]}` {
		t.Fatalf("cookie_sync once synced: %d %s", code, syncs)
	}
	if code, _ := getAs(t, visitor, base+"/api/decide?placement=mid&site=foobar.com", browserUA); code != 200 {
		t.Fatalf("decide with the uids cookie: %d", code)
	}
	reqs, _ = fast.seen()
	if u := reqs[len(reqs)-1].User; u == nil || u.BuyerUID != "F-123" {
		t.Fatalf("the partner's id was not sent: %+v", u)
	}
	if code, _ := getAs(t, visitor, base+"/api/decide?placement=mid&site=foobar.com&gdpr=1", browserUA); code != 200 {
		t.Fatalf("decide with gdpr=1: %d", code)
	}
	reqs, _ = fast.seen()
	if u := reqs[len(reqs)-1].User; u != nil && (u.BuyerUID != "" || u.ID != "") {
		t.Fatalf("a visitor without consent was sent: %+v", u)
	}

	// The partners' counts, on /metrics.
	wantMetrics := []string{`tsubame_ssp_partner_requests_total{partner="slow"} 1`, `tsubame_ssp_partner_wins_total{partner="slow"} 1`,
		`tsubame_ssp_partner_timeouts_total{partner="never"} 1`, `tsubame_ssp_partner_requests_total{partner="fast"} 4`,
		`tsubame_ssp_partner_bids_total{partner="tsubame"} 1`}
	var metrics string
	waitUntil(t, "the partners' counts on /metrics", func() bool {
		_, metrics = get(t, "http://"+s.AdminAddr()+"/metrics")
		for _, want := range wantMetrics {
			if !strings.Contains(metrics, want) {
				return false
			}
		}
		return true
	})
	// Nothing more to come: the 2 notices of the winner stay 2.
	_, notices := slow.seen()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, after := slow.seen(); len(after) != len(notices) || len(after) != 2 {
		t.Fatalf("the winner was called %d times: %v", len(after), after)
	}

	byKind := map[string][]map[string]string{}
	for _, e := range accessEvents(t, logDir) {
		byKind[e["event"]] = append(byKind[e["event"]], e)
	}
	auctions := byKind["auction"]
	if len(auctions) != 5 { // top, mid, gtop, and mid twice for the user sync
		t.Fatalf("%d auction lines", len(auctions))
	}
	top := auctions[0]
	if top["winner"] != "slow" || top["price"] != "2500000" || top["asked"] != "4" || top["answered"] != "3" || top["timed_out"] != "1" ||
		top["decision"] != d.Decision {
		t.Fatalf("top's auction line %v", top)
	}
	if auctions[1]["winner"] != "direct" || auctions[1]["price"] != "1100000" || auctions[2]["winner"] != "direct" || auctions[2]["asked"] != "0" {
		t.Fatalf("mid's and gtop's auction lines %v, %v", auctions[1], auctions[2])
	}
	outcomes := map[string]string{}
	for _, e := range byKind["bid_received"] {
		if e["decision"] == top["decision"] {
			outcomes[e["partner"]] = e["outcome"] + " " + e["price"] + " " + e["won"]
		}
	}
	want := map[string]string{"slow": "bid 2500000 true", "fast": "bid 1000000 false", "tsubame": "bid 1200000 false",
		"never": "timeout 0 false"}
	for p, w := range want {
		if outcomes[p] != w {
			t.Errorf("%s's bid_received: %q, want %q", p, outcomes[p], w)
		}
	}
	imps := 0
	for _, e := range byKind["imp"] {
		if e["decision"] == top["decision"] {
			if e["partner"] != "slow" || e["price"] != "2500000" {
				t.Errorf("a sold impression's line %v", e)
			}
			if e["valid"] == "true" {
				imps++
			}
		}
	}
	if imps != 1 {
		t.Fatalf("%d valid impressions of the sold slot, fired 3 times", imps)
	}

	// The report's partner rows equal the event lines.
	type tally struct{ requests, bids, wins, timeouts, revenue int }
	counts := map[string]*tally{}
	for _, e := range byKind["bid_received"] {
		c := counts[e["partner"]]
		if c == nil {
			c = &tally{}
			counts[e["partner"]] = c
		}
		c.requests++
		switch e["outcome"] {
		case "bid":
			c.bids++
		case "timeout":
			c.timeouts++
		}
		if e["won"] == "true" {
			c.wins++
		}
	}
	for _, e := range byKind["imp"] {
		if p := e["partner"]; p != "" && p != "-" && e["valid"] == "true" {
			var price int
			fmt.Sscan(e["price"], &price)
			counts[p].revenue += price
		}
	}
	code, out, stderr := runCmd(t, senv, "", "report", "-by", "partner", "-format", "json")
	if code != 0 {
		t.Fatalf("report: %d %s", code, stderr)
	}
	var rep struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	rows := 0
	for _, row := range rep.Rows {
		p, _ := row["partner"].(string)
		c := counts[p]
		if c == nil {
			continue
		}
		rows++
		got := fmt.Sprint(row["partner_requests"], row["partner_bids"], row["partner_wins"], row["partner_timeouts"], row["revenue"])
		want := fmt.Sprint(c.requests, c.bids, c.wins, c.timeouts, amount(c.revenue))
		if got != want {
			t.Errorf("%s's report row %s, the event lines say %s", p, got, want)
		}
	}
	if rows != 4 {
		t.Fatalf("%d partner rows, want 4: %s", rows, out)
	}
}

// amount writes thousandths of a micro-unit as the reports do.
func amount(v int) string { return report.Amount(int64(v)) }

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

// Three sellers on one Redis, 30 auctions among them from three clients,
// each sold impression fired on every node at once: every winning bid's
// nurl and burl are called once, and every losing bid's lurl once, across
// the nodes.
func TestSellSideNoticesOnceAcrossNodes(t *testing.T) {
	addr := redistest.Start(t).Addr
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	win := newScripted(t, 0, "2.00", false)
	lose := newScripted(t, 0, "1.00", false)
	dir := t.TempDir()
	keys := filepath.Join(dir, "tracking.keys") // shared: an impression verifies on any node
	if err := os.WriteFile(keys, []byte("k1 "+strings.Repeat("s", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "seller.yaml")
	if err := os.WriteFile(conf, []byte(`ads:
  currency: USD
  tracking:
    keys_file: `+keys+`
ssp:
  seller: {domain: ssp.example}
  notices: {allow_private: true} # the partners are on loopback
  publishers:
    foobar: {seller_id: pub-7}
  placements:
    top: {publisher: foobar, floor: "0.50", sizes: ["300x250"]}
  demand:
    win: {url: `+win.srv.URL+`}
    lose: {url: `+lose.srv.URL+`}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var nodes []*Main
	for range 3 {
		nodes = append(nodes, openMain(t, []string{"TSUBAME_LISTEN=127.0.0.1:0", "TSUBAME_ADMIN_LISTEN=127.0.0.1:0",
			"TSUBAME_DATA_DIR=" + t.TempDir(), "TSUBAME_ACCESS_LOG_DIR=" + t.TempDir(), "TSUBAME_CONFIG=" + conf,
			"TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS=" + addr, "TSUBAME_STORE_REDIS_KEY_PREFIX=" + prefix}, false))
	}
	var mu sync.Mutex
	imps := map[string]string{} // auction id -> impression URL
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			for k := range 10 {
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/api/decide?placement=top&site=foobar.com&uid=u-%d-%d", n.PublicAddr(), i, k), nil)
				req.Header.Set("User-Agent", browserUA)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				var a struct {
					Decisions []struct {
						Decision, Partner string
						ImpressionURL     string `json:"impression_url"`
					} `json:"decisions"`
				}
				err = json.NewDecoder(resp.Body).Decode(&a)
				resp.Body.Close()
				if err != nil || len(a.Decisions) != 1 || a.Decisions[0].Partner != "win" {
					t.Errorf("node %d: %v %+v", i, err, a)
					return
				}
				mu.Lock()
				imps[a.Decisions[0].Decision] = a.Decisions[0].ImpressionURL
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(imps) != 30 {
		t.Fatalf("%d auctions sold", len(imps))
	}
	for _, u := range imps {
		path := u[strings.Index(u[len("http://"):], "/")+len("http://"):]
		for _, n := range nodes {
			wg.Go(func() {
				if code, _ := getAs(t, http.DefaultClient, "http://"+n.PublicAddr()+path, browserUA); code != 200 {
					t.Errorf("impression on %s: %d", n.PublicAddr(), code)
				}
			})
		}
	}
	wg.Wait()
	win.waitNotices(t, 60)
	lose.waitNotices(t, 30)
	for _, n := range nodes {
		if err := n.Close(); err != nil { // the queued notices are called first
			t.Fatal(err)
		}
	}
	_, wins := win.seen()
	_, losses := lose.seen()
	count := map[string]int{}
	for _, u := range append(wins, losses...) {
		count[u]++
	}
	for id := range imps {
		for _, want := range []string{"/win?id=" + id + "&p=2", "/bill?id=" + id + "&p=2", "/loss?id=" + id + "&c=102"} {
			if count[want] != 1 {
				t.Errorf("%s called %d times", want, count[want])
			}
		}
	}
	if len(wins) != 60 || len(losses) != 30 {
		t.Fatalf("%d notices to the winner, %d to the loser", len(wins), len(losses))
	}
}

// docs/ssp.md's configuration example is valid as it stands (with the
// rate its JPY partner needs).
func TestSSPDocsExampleIsValid(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ssp.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "```yaml\nssp:")
	if i < 0 {
		t.Fatal("docs/ssp.md has no ssp: example")
	}
	s = s[i+len("```yaml\n"):]
	s = s[:strings.Index(s, "```")]
	conf := filepath.Join(t.TempDir(), "ssp.yaml")
	if err := os.WriteFile(conf, []byte("ads:\n  currency: USD\nrtb:\n  rates: {JPY: \"150.25\"}\n"+s), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, nil, "", "check-config", "-config", conf); code != 0 {
		t.Fatalf("check-config of the example: %d\n%s", code, stderr)
	}
	cfg, _, err := config.Load(conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := cfg.SSP.Demand["dsp-a"], cfg.SSP.Demand["dsp-b"]; a.GVLID != 32 || b.OpenRTB != ssp.OpenRTB25 || a.OpenRTB != "" {
		t.Fatalf("read as dsp-a %+v, dsp-b %+v", a, b)
	}
}
