package main

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/store/redis/redistest"
)

// Three real Mains decide on one Redis for a line item capped at 3 a day,
// node 0 reaching Redis through a way whose answers to some takes come
// 1.5 s late (Redis counts the impression at once; the request gives up
// after ads.caps_timeout, 50 ms, and the line item does not serve it). Twelve
// visitors are each asked for by three streams at once, one per node. A
// take answered late is cancelled: once the cancels have landed, every
// visitor has been served exactly 3 times, across the nodes, and the store
// counts exactly those 3. Without the cancel, each late take that landed
// under the cap would leave its visitor served one less (an ad never shown
// counted for the day).
func TestDecideCapsSurviveALateStore(t *testing.T) {
	const visitors, streams, tries, capOf = 12, 3, 4, 3
	srv := redistest.Start(t)
	px := startFaultProxy(t, srv.Addr)
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	var nodes []*Main
	for i, addr := range []string{px.addr, srv.Addr, srv.Addr} {
		env := append(testEnv(t), "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+addr, "TSUBAME_STORE_REDIS_KEY_PREFIX="+prefix)
		if i > 0 {
			// Only node 0's takes come late: on a busy machine the
			// others' would pass the default 50 ms now and then, and be
			// cancelled as well, after the count below has read them.
			env = append(env, "TSUBAME_ADS_CAPS_TIMEOUT=10s")
		}
		nodes = append(nodes, openMain(t, env, false))
	}
	putCampaigns(t, nodes[1], `{
  "advertisers": [{"id": "acme", "name": "Acme"}],
  "campaigns": [{"id": "spring", "advertiser": "acme"}],
  "creatives": [{"id": "b1", "advertiser": "acme", "format": "banner", "w": 300, "h": 250,
    "image": "https://cdn.acme.example/b1.png", "click": "https://acme.example/spring", "status": "approved"}],
  "line_items": [
    {"id": "li-three", "campaign": "spring", "priority": 5, "weight": 1, "cpm": "0.5", "creatives": ["b1"],
     "frequency": [{"impressions": 3, "per": "24h"}], "targeting": {"placements": ["top"]}}
  ]
}`)
	decide := func(i int, visitor string) bool {
		req, _ := http.NewRequest("GET", "http://"+nodes[i%len(nodes)].PublicAddr()+"/api/decide?placement=top&uid="+visitor, nil)
		req.Header.Set("User-Agent", browserUA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true
		case http.StatusNoContent:
			return false
		}
		t.Errorf("decide for %s on node %d: %d %s", visitor, i, resp.StatusCode, body)
		return false
	}
	for i, nd := range nodes {
		nd.ads.engine.Changed()
		waitUntil(t, fmt.Sprint("node ", i, " serves the line item"), func() bool { return decide(i, fmt.Sprint("warm-up-", i)) })
	}

	var mu sync.Mutex
	served := make([]int, visitors)
	px.armed.Store(true)
	var wg sync.WaitGroup
	for v := range visitors {
		for s := range streams {
			wg.Go(func() {
				for range tries {
					if decide(v+s, fmt.Sprint("visitor-", v)) {
						mu.Lock()
						served[v]++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	px.armed.Store(false)
	if px.lateTakes.Load() == 0 {
		t.Fatal("no take was answered late: the test proves nothing")
	}
	for i, nd := range nodes {
		waitUntil(t, fmt.Sprint("node ", i, " sent every update it kept"), func() bool { return nd.ads.counters.Stats().Pending == 0 })
	}
	// Each visitor is served until its cap says no, by nodes 1 and 2.
	for v := range visitors {
		for i := 0; i < 2*capOf && decide(1+i%2, fmt.Sprint("visitor-", v)); i++ {
			served[v]++
		}
	}
	fc := nodes[1].backend.(tsubame.FrequencyCounter)
	for v := range visitors {
		var rec tsubame.FrequencyRecord
		if err := fc.Read(t.Context(), fmt.Sprint("visitor-", v), &rec); err != nil {
			t.Fatal(err)
		}
		if n := len(rec.Entries("li-three")); served[v] != capOf || n != capOf {
			t.Errorf("visitor-%d served %d times, the store counts %d; want %d and %d", v, served[v], n, capOf, capOf)
		}
	}
	st := nodes[0].ads.counters.Stats()
	t.Logf("%d takes answered late; node 0: %+v", px.lateTakes.Load(), st)
	if st.Sent == 0 || st.Dropped != 0 {
		t.Fatalf("node 0: %+v, want cancels sent and none lost", st)
	}
}
