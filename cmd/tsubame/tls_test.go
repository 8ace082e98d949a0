package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tsubame/internal/certs/certstest"
)

// tlsSetup is a binary serving TLS with a default certificate (ads.test
// and 127.0.0.1) and one for the site pub.test, whose static root holds a
// publisher's page.
type tlsSetup struct {
	p                *proc
	dir, port        string
	ca               *certstest.CA
	def, pub         certstest.Leaf
	pubPage, adsBase string
}

// publisherPage loads an ad tag by <script> and reads .json with fetch()
// from another origin: one endpoint allows the page's origin, one does not.
const publisherPage = `<!doctype html>
<meta charset="utf-8">
<title>publisher</title>
<script>
window.results = {};
var Example = {process: function (d) { window.results.jsonp = d; }};
</script>
<script src="ADS/api/sample4.js?id=1&callback=Example.process"></script>
<script>
function read(name, url, init) {
  fetch(url, init).then(function (r) { return r.json(); })
    .then(function (d) { window.results[name] = d; })
    .catch(function (e) { window.results[name] = "blocked: " + e; });
}
read("cors", "ADS/api/sample3.json?id=1");
read("preflight", "ADS/api/sample3.json?id=2", {headers: {"X-Requested-With": "page"}});
read("denied", "ADS/api/sample5.json?id=1");
</script>
`

func startTLSBinary(t *testing.T) *tlsSetup {
	t.Helper()
	s := &tlsSetup{dir: t.TempDir(), port: freePort(t)}
	s.ca = certstest.NewCA(t, s.dir)
	s.def = s.ca.Issue(t, s.dir, "default", "ads.test", "127.0.0.1")
	s.pub = s.ca.Issue(t, s.dir, "pub", "pub.test")
	s.adsBase = "https://ads.test:" + s.port
	s.pubPage = "https://pub.test:" + s.port + "/lib/index.html"
	root := filepath.Join(s.dir, "pub")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "index.html"), []byte(strings.ReplaceAll(publisherPage, "ADS", s.adsBase)), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(s.dir, "tsubame.yaml")
	if err := os.WriteFile(conf, []byte(`
tls:
  listen: 127.0.0.1:`+s.port+`
  cert: `+s.def.CertFile+`
  key: `+s.def.KeyFile+`
endpoints:
  sample3: {source: store, cors_origins: ["https://pub.test:`+s.port+`"]}
  sample4: {source: store, access_log: file}
  sample5: {source: store}
sites:
  pub:
    hosts: [pub.test]
    static_root: `+root+`
    tls_cert: `+s.pub.CertFile+`
    tls_key: `+s.pub.KeyFile+`
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s.p = startBinary(t, "TSUBAME_CONFIG="+conf)
	return s
}

// curl fetches url through the TLS listener (names resolved to 127.0.0.1,
// the test CA trusted) and returns its verbose report and the body.
func (s *tlsSetup) curl(t *testing.T, url string, args ...string) (report, body string) {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl on PATH (apt-get install curl)")
	}
	args = append([]string{"-sS", "-v", "--cacert", s.ca.File, "--max-time", "30",
		"--resolve", "ads.test:" + s.port + ":127.0.0.1", "--resolve", "pub.test:" + s.port + ":127.0.0.1"}, append(args, url)...)
	cmd := exec.Command(path, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl %s: %v\n%s", url, err, stderr.String())
	}
	return stderr.String(), string(out)
}

var curlSubject = regexp.MustCompile(`subject: CN=(\S+)`)

// curl, verifying against the test CA: each name gets its certificate, the
// ad tag is served over TLS (HTTP/1.1 though curl offers h2), and a
// renewed certificate is presented after SIGHUP while a connection made
// before keeps being served.
func TestTLSWithCurl(t *testing.T) {
	s := startTLSBinary(t)
	for url, want := range map[string]struct{ subject, body string }{
		s.adsBase + "/api/sample4.js?id=1&callback=cb": {"ads.test", "cb({\"urls\":["},
		s.pubPage:                               {"pub.test", "<!doctype html>"},
		"https://127.0.0.1:" + s.port + "/json": {"ads.test", `{"message":"Hello, World!"}`},
	} {
		report, body := s.curl(t, url, "--http2")
		if m := curlSubject.FindStringSubmatch(report); m == nil || m[1] != want.subject {
			t.Errorf("%s: certificate subject %v, want CN=%s\n%s", url, m, want.subject, report)
		}
		if !strings.HasPrefix(body, want.body) {
			t.Errorf("%s: body %q", url, body)
		}
		if !strings.Contains(report, "ALPN: server accepted http/1.1") || !strings.Contains(report, "< HTTP/1.1 200") {
			t.Errorf("%s: not HTTP/1.1 over ALPN:\n%s", url, report)
		}
		if !regexp.MustCompile(`SSL connection using TLSv1\.[23]`).MatchString(report) {
			t.Errorf("%s: protocol:\n%s", url, report)
		}
	}

	// A kept-alive connection made before the renewal.
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: s.ca.ClientConfig("ads.test"),
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, "127.0.0.1:"+s.port)
		},
	}}
	reused := func() (bool, string) {
		var got bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { got = i.Reused }})
		req, _ := http.NewRequestWithContext(ctx, "GET", s.adsBase+"/json", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return got, resp.TLS.PeerCertificates[0].Subject.CommonName
	}
	if _, cn := reused(); cn != "ads.test" {
		t.Fatalf("first certificate %s", cn)
	}
	s.ca.Issue(t, s.dir, "default", "renewed.ads.test", "ads.test", "127.0.0.1")
	hangup(t, s.p, "configuration reloaded")
	if again, cn := reused(); !again || cn != "ads.test" {
		t.Fatalf("after SIGHUP the open connection was reused=%v (certificate %s): it must stay open", again, cn)
	}
	if report, _ := s.curl(t, s.adsBase+"/json"); !strings.Contains(report, "subject: CN=renewed.ads.test") {
		t.Fatalf("a new connection after SIGHUP did not get the renewed certificate:\n%s", report)
	}

	// A bad renewal (a key that does not match) is refused; the current
	// certificates stay.
	if err := os.WriteFile(s.def.KeyFile, mustRead(t, s.pub.KeyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	hangup(t, s.p, "configuration not reloaded")
	if report, _ := s.curl(t, s.adsBase+"/json"); !strings.Contains(report, "subject: CN=renewed.ads.test") {
		t.Fatalf("after a refused reload:\n%s", report)
	}

	// A reload that leaves the listener without a default certificate is
	// warned of, as check-config and the start warn of it.
	conf := filepath.Join(s.dir, "tsubame.yaml")
	text := strings.NewReplacer("  cert: "+s.def.CertFile+"\n", "", "  key: "+s.def.KeyFile+"\n", "").Replace(string(mustRead(t, conf)))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	hangup(t, s.p, "has no default certificate (tls.cert and tls.key)")
}

// The publisher's HTTPS page in Chromium: the ad tag loads by <script>
// across origins, fetch() reads the endpoint that allows the page's origin
// (with and without a preflight) and is kept from the one that does not.
func TestTLSInBrowser(t *testing.T) {
	browser := chromium(t)
	s := startTLSBinary(t)
	ctx := browserContext(t, browser,
		chromedp.Flag("host-resolver-rules", "MAP *.test 127.0.0.1"),
		// Trust exactly the two keys the server presents, as if the test
		// CA were installed.
		chromedp.Flag("ignore-certificate-errors-spki-list", s.def.SPKIHash()+","+s.pub.SPKIHash()),
	)
	b := &page{t: t, ctx: ctx}
	b.do("open the publisher's page",
		chromedp.Navigate(s.pubPage),
		b.until(`window.results && "jsonp" in window.results && "cors" in window.results && "preflight" in window.results && "denied" in window.results`, 30*time.Second),
	)
	results, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`window.results`))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"jsonp", "cors", "preflight"} {
		d, ok := results[name].(map[string]any)
		if urls, _ := d["urls"].([]any); !ok || len(urls) == 0 {
			t.Errorf("%s: %v", name, results[name])
		}
	}
	if denied, _ := results["denied"].(string); !strings.HasPrefix(denied, "blocked:") {
		t.Errorf("fetch() from a page of an origin the endpoint does not allow: %v", results["denied"])
	}
	secure, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.isSecureContext && location.protocol === "https:"`))
	if err != nil || !secure {
		t.Errorf("the page is not a secure context: %v", err)
	}
}

// A restart hands the TLS socket over with the plain one.
func TestTLSRestart(t *testing.T) {
	s := startTLSBinary(t)
	pidFile := filepath.Join(s.p.dataDir, PIDFile)
	oldPID := waitPID(t, pidFile)
	code, _, stderr := runCmd(t, []string{"TSUBAME_DATA_DIR=" + s.p.dataDir}, "", "restart", "-timeout", "30s")
	if code != 0 {
		t.Fatalf("restart: %d %s\n%s", code, stderr, s.p.logs)
	}
	newPID, err := readPID(pidFile)
	if err != nil || newPID == oldPID {
		t.Fatalf("new pid %d (%v)", newPID, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(newPID, syscall.SIGKILL) })
	conn, err := tls.Dial("tcp", "127.0.0.1:"+s.port, s.ca.ClientConfig("pub.test"))
	if err != nil {
		t.Fatalf("TLS after the restart: %v\n%s", err, s.p.logs)
	}
	conn.Close()
	if _, body := s.curl(t, s.adsBase+"/api/sample4.js?id=1&callback=cb"); !strings.HasPrefix(body, "cb(") {
		t.Fatalf("after the restart: %q", body)
	}
	if err := syscall.Kill(newPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The old process's output pipe closes when both have exited.
	if err := s.p.wait(t); err != nil {
		t.Fatalf("old process: %v\n%s", err, s.p.logs)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hangup sends the process a SIGHUP and waits until it has logged want
// once more.
func hangup(t *testing.T, p *proc, want string) {
	t.Helper()
	before := strings.Count(p.logs.String(), want)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(p.logs.String(), want) <= before {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not log %q:\n%s", want, p.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
