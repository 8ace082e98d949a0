package acceptance

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"tsubame/internal/openrtb"
)

// A server killed (kill -9) while it calls a win notice loses it not: the
// next server started on its data directory finds the dead one's notice
// journal, calls the notice and removes the journal; a server stopped
// cleanly with nothing pending leaves no journal.
func TestSellSideWinNoticeSurvivesKill9(t *testing.T) {
	var (
		mu    sync.Mutex
		calls = map[string]int{}
		held  = make(chan struct{}) // the killed server's call is never answered
		first atomic.Bool
	)
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			calls[r.URL.Query().Get("id")]++
			mu.Unlock()
			if first.CompareAndSwap(false, true) {
				select {
				case <-held:
				case <-r.Context().Done():
				}
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		req, err := openrtb.Decode(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, `{"id":%q,"cur":"USD","seatbid":[{"bid":[{"id":"b","impid":"1","price":1.25,"adm":"<div>sold</div>",`+
			`"adomain":["brand.example"],"w":300,"h":250,"nurl":"http://%s/win?id=${AUCTION_ID}"}]}]}`, req.ID, r.Host)
	}))
	t.Cleanup(partner.Close)
	t.Cleanup(func() { close(held) }) // runs first: the hung call returns before the partner closes
	dir, dataDir := t.TempDir(), t.TempDir()
	conf := filepath.Join(dir, "tsubame.yaml")
	if err := os.WriteFile(conf, []byte(`ads:
  currency: USD
ssp:
  seller: {domain: ssp.example}
  tmax: 1s
  notices: {allow_private: true, timeout: 1m}
  publishers:
    foobar: {seller_id: pub-7, domain: foobar.com}
  placements:
    top: {publisher: foobar, floor: "0.50", sizes: ["300x250"]}
  demand:
    dsp: {url: `+partner.URL+`}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"TSUBAME_CONFIG=" + conf, "TSUBAME_DATA_DIR=" + dataDir}
	journals := func() []string {
		m, _ := filepath.Glob(filepath.Join(dataDir, "ssp-notices.*.journal"))
		return m
	}
	pidOf := func(p *proc) int {
		pid, err := readPID(p.pidFile())
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	gone := func(pid int) func() bool { return func() bool { return syscall.Kill(pid, 0) != nil } }

	p := serve(t, env...)
	req, _ := http.NewRequest("GET", p.base+"/api/decide?placement=top&site=foobar.com&uid=u-1", nil)
	req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, rest, ok := strings.Cut(string(body), `"decision":"`)
	id, _, _ := strings.Cut(rest, `"`)
	if !ok || !strings.Contains(string(body), `"partner":"dsp"`) {
		t.Fatalf("not sold to the partner: %d %s", resp.StatusCode, body)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return calls[id]
	}
	waitUntil(t, "the win notice to be called", func() bool { return count() == 1 })
	if j := journals(); len(j) != 1 {
		t.Fatalf("journals while the notice is out: %v", j)
	}
	killed := journals()[0]
	pid := pidOf(p)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the killed server to be gone", gone(pid))

	p = serve(t, env...)
	waitUntil(t, "the next server to call the notice", func() bool { return count() == 2 })
	waitUntil(t, "the dead server's journal to be removed", func() bool {
		j := journals()
		return len(j) == 1 && j[0] != killed
	})
	pid = pidOf(p)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the server to stop", gone(pid))
	if j := journals(); len(j) != 0 || count() != 2 {
		t.Fatalf("after a clean stop: journals %v, %d calls", j, count())
	}
}
