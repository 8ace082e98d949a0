package acceptance

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tsubame/internal/openrtb"
	"tsubame/internal/rtbtest"
	"tsubame/internal/store/redis"
	"tsubame/internal/store/redis/redistest"
)

// The sell side's money on the real binary: three sellers on one Redis
// sell placement top in a unified auction of a direct line item (CPM
// 1.20, limited to 200 impressions) and a demand partner bidding 0.80 to
// 1.60 (seeded draws), twelve clients asking the sellers in turn and
// firing each answer's impression URL on another seller. The direct line
// item takes an impression only when it wins, so it serves exactly 200
// and the store commits exactly 200, however many auctions it lost
// before; every sold impression bills its bid once (burl) across the
// sellers, and every sold auction calls its nurl once.
func TestSellSideMoneyOnTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("three servers hold thousands of auctions; skipped in -short mode")
	}
	const limit = 200
	srv := redistest.Start(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "tracking.keys") // shared: an impression verifies on any server
	if err := os.WriteFile(keys, []byte("k1 "+strings.Repeat("s", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		mu            sync.Mutex
		nurls, burls  = map[string]int{}, map[string]int{}
		bids, bidsLow atomic.Int64
	)
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			id := r.URL.Query().Get("id")
			mu.Lock()
			switch r.URL.Path {
			case "/win":
				nurls[id]++
			case "/bill":
				burls[id]++
			}
			mu.Unlock()
			return
		}
		body, _ := io.ReadAll(r.Body)
		req, err := openrtb.Decode(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		// 0.80 to 1.60 by 0.10, drawn from the auction's id: the direct
		// line item (1.20) wins five draws in nine.
		h := uint64(0)
		for _, c := range req.ID {
			h = h*31 + uint64(c)
		}
		cents := 80 + 10*rand.New(rand.NewPCG(h, 7)).IntN(9)
		bids.Add(1)
		if cents <= 120 {
			bidsLow.Add(1)
		}
		base := "http://" + r.Host
		fmt.Fprintf(w, `{"id":%q,"cur":"USD","seatbid":[{"bid":[{"id":"b","impid":"1","price":%d.%02d,"adm":"<div>sold</div>",`+
			`"adomain":["brand.example"],"w":300,"h":250,"nurl":"%s/win?id=${AUCTION_ID}","burl":"%s/bill?id=${AUCTION_ID}"}]}]}`,
			req.ID, cents/100, cents%100, base, base)
	}))
	t.Cleanup(partner.Close)
	conf := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(conf, []byte(`ads:
  currency: USD
  budget: {interval: 100ms, grace: 2s}
  tracking: {keys_file: `+keys+`}
ssp:
  seller: {domain: ssp.example}
  tmax: 1s
  notices: {allow_private: true}
  publishers:
    foobar: {seller_id: pub-7, domain: foobar.com}
  placements:
    top: {publisher: foobar, floor: "0.50", sizes: ["300x250"]}
  demand:
    dsp: {url: `+partner.URL+`}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	st, err := redis.Open(redis.Options{Addrs: []string{srv.Addr}, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.ReplaceAll(t.Context(), rtbtest.CoffeeLine(t, "../internal/bidder/testdata/campaigns.json", limit)); err != nil {
		t.Fatal(err)
	}
	most := rtbtest.SampleCommitted(t, st, rtbtest.CoffeeKey)
	var procs []*proc
	for range 3 {
		procs = append(procs, serve(t, "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+srv.Addr,
			"TSUBAME_STORE_REDIS_KEY_PREFIX="+prefix, "TSUBAME_CONFIG="+conf))
	}
	const ua = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"
	get := func(url string) (int, []byte) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("User-Agent", ua)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	var direct, sold, auctions atomic.Int64
	var since atomic.Int64 // auctions since the direct line item last won
	soldIDs := sync.Map{}
	var wg sync.WaitGroup
	for c := range 12 {
		wg.Go(func() {
			for k := 0; k < 3000 && since.Load() < 300; k++ {
				p := procs[(c+k)%len(procs)]
				code, body := get(fmt.Sprintf("%s/api/decide?placement=top&site=foobar.com&uid=u-%d-%d", p.base, c, k))
				if code != 200 {
					t.Errorf("decide: %d %s", code, body)
					return
				}
				var a struct {
					Decisions []struct {
						Decision      string `json:"decision"`
						Partner       string `json:"partner"`
						LineItem      string `json:"line_item"`
						ImpressionURL string `json:"impression_url"`
					} `json:"decisions"`
				}
				if err := json.Unmarshal(body, &a); err != nil || len(a.Decisions) != 1 {
					t.Errorf("%v: %s", err, body)
					return
				}
				auctions.Add(1)
				switch d := a.Decisions[0]; {
				case d.LineItem == "li-coffee-web":
					direct.Add(1)
					since.Store(0)
				case d.Partner == "dsp":
					sold.Add(1)
					since.Add(1)
					soldIDs.Store(d.Decision, true)
				default:
					t.Errorf("an answer of neither: %s", body)
					return
				}
				// The impression, on another seller.
				u := a.Decisions[0].ImpressionURL
				path := u[strings.Index(u[len("http://"):], "/")+len("http://"):]
				if code, _ := get(procs[(c+k+1)%len(procs)].base + path); code != 200 {
					t.Errorf("impression: %d", code)
					return
				}
			}
		})
	}
	wg.Wait()
	mostCommitted := most()
	n := sold.Load()
	waitUntil(t, "every sold impression's burl and nurl", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(burls)) >= n && int64(len(nurls)) >= n
	})
	t.Logf("%d auctions: the line item won %d, the partner %d (of its %d bids, %d at or under 1.20); the store committed at most %d",
		auctions.Load(), direct.Load(), n, bids.Load(), bidsLow.Load(), mostCommitted)
	if got := direct.Load(); got != limit {
		t.Errorf("the line item served %d on a limit of %d", got, limit)
	}
	if mostCommitted > limit {
		t.Errorf("the store committed %d on a limit of %d", mostCommitted, limit)
	}
	waitUntil(t, "the line item's 200 impressions settled", func() bool {
		settled, _, err := st.Committed(t.Context(), rtbtest.CoffeeKey)
		return err == nil && settled == limit
	})
	mu.Lock()
	defer mu.Unlock()
	soldIDs.Range(func(k, _ any) bool {
		id := k.(string)
		if burls[id] != 1 || nurls[id] != 1 {
			t.Errorf("sale %s: burl called %d times, nurl %d", id, burls[id], nurls[id])
		}
		return true
	})
	if int64(len(burls)) != n || int64(len(nurls)) != n {
		t.Errorf("%d sales, %d billed, %d won", n, len(burls), len(nurls))
	}
}
