package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"tsubame/internal/accesslog"
	"tsubame/internal/certs"
	"tsubame/internal/certs/certstest"
	"tsubame/internal/server"
)

// tlsFixture is a server with a plain and a TLS listener, a default
// certificate for ads.example and one for the site news.example.
type tlsFixture struct {
	srv             *server.Server
	plain, tls      string
	ca              *certstest.CA
	dir             string
	certs           *certs.Store
	def, news       certstest.Leaf
	lines           func() []string
	defPair, nsPair certs.Pair
}

func startTLS(t *testing.T, opt server.Options) *tlsFixture {
	t.Helper()
	f := &tlsFixture{dir: t.TempDir(), certs: new(certs.Store)}
	f.ca = certstest.NewCA(t, f.dir)
	f.def = f.ca.Issue(t, f.dir, "default", "ads.example", "127.0.0.1")
	f.news = f.ca.Issue(t, f.dir, "news", "news.example")
	f.defPair = certs.Pair{Cert: f.def.CertFile, Key: f.def.KeyFile}
	f.nsPair = certs.Pair{Cert: f.news.CertFile, Key: f.news.KeyFile}
	if err := f.certs.Load(f.defPair, []certs.Site{{Name: "news", Hosts: []string{"news.example"}, Pair: f.nsPair}}); err != nil {
		t.Fatal(err)
	}
	var alog *accesslog.Logger
	alog, f.lines = memoryLog(t)
	opt = testDefaults(opt)
	opt.HelloJSON = true
	opt.Sites = []server.Site{{Name: "news", Hosts: []string{"news.example"},
		Endpoints: []server.Endpoint{{Name: "e", Source: server.Fixed(`{"urls":["news"]}`), Log: alog}}}}
	srv, err := server.New(opt, []server.Endpoint{{Name: "e", Source: server.Fixed(`{"urls":[]}`), Log: alog}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(pln) }()
	go func() { _ = srv.ServeTLS(tln, f.certs.Config(tls.VersionTLS12)) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	f.plain, f.tls = pln.Addr().String(), tln.Addr().String()
	return f
}

// client is an HTTPS client trusting only the test CA, dialling the TLS
// listener whatever the URL's host, with TLS config tweaks.
func (f *tlsFixture) client(tweak func(*tls.Config)) *http.Client {
	cfg := &tls.Config{RootCAs: f.ca.Pool()}
	if tweak != nil {
		tweak(cfg)
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   cfg,
		ForceAttemptHTTP2: true, // the server must answer over HTTP/1.1 all the same
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, f.tls)
		},
	}}
}

func fetch(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The TLS listener serves the same sites as the plain one, presenting the
// certificate of the site the SNI name belongs to (verified by the client
// against the test CA), over HTTP/1.1 with TLS 1.2 or newer.
func TestTLSServesSitesBySNI(t *testing.T) {
	f := startTLS(t, server.Options{})
	c := f.client(nil)
	for url, want := range map[string]struct {
		body string
		leaf certstest.Leaf
	}{
		"https://news.example/api/e.json?id=1": {`{"urls":["news"]}`, f.news},
		"https://ads.example/api/e.json?id=1":  {`{"urls":[]}`, f.def},
		"https://127.0.0.1/api/e.json?id=1":    {`{"urls":[]}`, f.def}, // no SNI for an IP address
	} {
		resp, body := fetch(t, c, url)
		if resp.StatusCode != 200 || body != want.body {
			t.Errorf("%s: %d %q, want %q", url, resp.StatusCode, body, want.body)
		}
		st := resp.TLS
		if st == nil || st.Version < tls.VersionTLS12 || st.NegotiatedProtocol != "http/1.1" || resp.ProtoMajor != 1 {
			t.Errorf("%s: %s over %+v", url, resp.Proto, st)
			continue
		}
		if got := st.PeerCertificates[0].SerialNumber; got.Cmp(want.leaf.Cert.SerialNumber) != 0 {
			t.Errorf("%s: presented %v", url, st.PeerCertificates[0].DNSNames)
		}
	}
	// The plain listener serves the same.
	resp, err := http.Get("http://" + f.plain + "/json")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("plain listener: %v %v", resp, err)
	}
	resp.Body.Close()
}

// Handshakes that cannot succeed are refused and counted; HTTP sent to the
// TLS port gets a 400 it can read.
func TestTLSRefusals(t *testing.T) {
	f := startTLS(t, server.Options{})
	_, err := f.client(func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11 }).Get("https://ads.example/json")
	if err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}
	waitUntil(t, func() bool { return f.srv.Stats().Refused[server.ReasonTLSHandshake] == 1 })

	_, err = f.client(func(c *tls.Config) { c.ServerName = "ads.example"; c.RootCAs = nil }).Get("https://ads.example/json")
	if err == nil {
		t.Fatal("a certificate from the test CA verified against the system roots")
	}

	conn, err := net.Dial("tcp", f.tls)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /json HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "HTTP request to an HTTPS server") {
		t.Fatalf("plain HTTP on the TLS port: %d %q", resp.StatusCode, b)
	}
	waitUntil(t, func() bool { return f.srv.Stats().Refused[server.ReasonTLSHandshake] == 3 })
	if got := f.srv.Stats().Refused[server.ReasonMalformed]; got != 0 {
		t.Fatalf("failed handshakes also counted as %d malformed requests", got)
	}
}

// A client that opens a TLS connection and never finishes its handshake is
// cut at read_timeout, counted as a read timeout, and holds no slot.
func TestTLSSlowHandshakeCut(t *testing.T) {
	f := startTLS(t, server.Options{ReadTimeout: 300 * time.Millisecond, MaxConns: 100})
	const n = 20
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", f.tls)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte{0x16, 0x03, 0x01}); err != nil { // the start of a ClientHello, no more
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		// The deadline only ends a test whose server never closes.
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d: the server kept a stalled handshake open", i)
		}
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	waitUntil(t, func() bool { return f.srv.Stats().Refused[server.ReasonTimeout] == n && f.srv.Stats().Conns == 0 })
	if got := f.srv.Stats().Refused[server.ReasonTLSHandshake]; got != 0 {
		t.Fatalf("%d stalled handshakes counted as failed handshakes", got)
	}
}

// One connection bound for both listeners: with max_conns held on the plain
// port, a TLS connection is closed without a handshake.
func TestTLSSharesConnectionBound(t *testing.T) {
	f := startTLS(t, server.Options{MaxConns: 2})
	for range 2 {
		c, err := net.Dial("tcp", f.plain)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if code, _ := rawGet(t, c, "/json"); code != 200 {
			t.Fatalf("within the bound: %d", code)
		}
	}
	if got := f.srv.Stats().Conns; got != 2 {
		t.Fatalf("%d connections counted, want 2", got)
	}
	tc, err := net.Dial("tcp", f.tls)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	cl := tls.Client(tc, &tls.Config{RootCAs: f.ca.Pool(), ServerName: "ads.example"})
	_ = cl.SetDeadline(time.Now().Add(30 * time.Second))
	err = cl.Handshake()
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("a TLS connection over the bound: %v", err)
	}
	if got := f.srv.Stats().Refused[server.ReasonConns]; got != 1 {
		t.Fatalf("refused %d, want 1", got)
	}
}

// Renewed certificates take effect at the next handshake; a connection
// made before keeps working.
func TestTLSCertificateSwapKeepsConnections(t *testing.T) {
	f := startTLS(t, server.Options{})
	c := f.client(nil)
	resp, _ := fetch(t, c, "https://ads.example/json")
	if resp.TLS.PeerCertificates[0].SerialNumber.Cmp(f.def.Cert.SerialNumber) != 0 {
		t.Fatal("not the first certificate")
	}
	renewed := f.ca.Issue(t, f.dir, "default", "ads.example", "127.0.0.1")
	if err := f.certs.Load(f.defPair, []certs.Site{{Name: "news", Hosts: []string{"news.example"}, Pair: f.nsPair}}); err != nil {
		t.Fatal(err)
	}
	// The kept-alive connection still answers, with the certificate it
	// was made with.
	resp, _ = fetch(t, c, "https://ads.example/json")
	if resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].SerialNumber.Cmp(f.def.Cert.SerialNumber) != 0 {
		t.Fatalf("the open connection after the swap: %d", resp.StatusCode)
	}
	resp, _ = fetch(t, f.client(nil), "https://ads.example/json")
	if resp.TLS.PeerCertificates[0].SerialNumber.Cmp(renewed.Cert.SerialNumber) != 0 {
		t.Fatal("a new connection did not get the renewed certificate")
	}
}

// Behind a TLS-passthrough balancer: the PROXY header comes before the
// handshake, and X-Forwarded-For inside TLS from a trusted peer; the log
// records the client either way.
func TestTLSClientAddress(t *testing.T) {
	f := startTLS(t, server.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, ProxyProtocol: true})
	send := func(id string, proxyHeader []byte, headers string) {
		t.Helper()
		c, err := net.Dial("tcp", f.tls)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(proxyHeader); err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, &tls.Config{RootCAs: f.ca.Pool(), ServerName: "ads.example"})
		if _, err := io.WriteString(tc, get(id, headers)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", id, resp, err)
		}
		resp.Body.Close()
	}
	v2, err := proxyproto.HeaderProxyFromAddrs(2, &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 1234},
		&net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 443}).Format()
	if err != nil {
		t.Fatal(err)
	}
	send("proxy", v2, "")
	send("xff", nil, "X-Forwarded-For: 198.51.100.3\r\n")
	send("none", nil, "")
	checkHosts(t, f.lines(), map[string][2]string{
		"proxy": {"203.0.113.7", "127.0.0.1"},
		"xff":   {"198.51.100.3", "127.0.0.1"},
		"none":  {"127.0.0.1", ""},
	})
}

// cbcSuites are the TLS 1.2 CBC suites Go's client can offer: none may be
// accepted (docs/edge.md promises AEAD only).
var cbcSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
}

// A TLS 1.2 client offering only CBC suites fails its handshake; one
// offering an ECDHE AEAD suite is served.
func TestTLSRefusesCBCSuites(t *testing.T) {
	f := startTLS(t, server.Options{})
	for _, suite := range cbcSuites {
		_, err := f.client(func(c *tls.Config) {
			c.MaxVersion, c.CipherSuites = tls.VersionTLS12, []uint16{suite}
		}).Get("https://ads.example/json")
		if err == nil {
			t.Errorf("a client offering only %s was served", tls.CipherSuiteName(suite))
		}
	}
	waitUntil(t, func() bool { return f.srv.Stats().Refused[server.ReasonTLSHandshake] == uint64(len(cbcSuites)) })
	resp, _ := fetch(t, f.client(func(c *tls.Config) {
		c.MaxVersion, c.CipherSuites = tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}
	}), "https://ads.example/json")
	if resp.TLS.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 {
		t.Fatalf("negotiated %s", tls.CipherSuiteName(resp.TLS.CipherSuite))
	}
}

// With HSTS set, every answer over TLS carries Strict-Transport-Security,
// and none over plain HTTP does (a browser ignores it there, and it would
// say nothing true); a reload changes it.
func TestHSTSOnTLSOnly(t *testing.T) {
	const want = "max-age=31536000; includeSubDomains"
	f := startTLS(t, server.Options{HSTS: want})
	c := f.client(nil)
	for _, path := range []string{"/api/e.json?id=1", "/json", "/nowhere"} {
		resp, _ := fetch(t, c, "https://ads.example"+path)
		if got := resp.Header.Get("Strict-Transport-Security"); got != want {
			t.Errorf("TLS %s: Strict-Transport-Security %q, want %q", path, got, want)
		}
		plain, err := http.Get("http://" + f.plain + path)
		if err != nil {
			t.Fatal(err)
		}
		plain.Body.Close()
		if got := plain.Header.Get("Strict-Transport-Security"); got != "" {
			t.Errorf("plain %s: Strict-Transport-Security %q, want none", path, got)
		}
	}
	if err := f.srv.Reload(testDefaults(server.Options{HelloJSON: true}), []server.Endpoint{{Name: "e", Source: server.Fixed(`{"urls":[]}`)}}); err != nil {
		t.Fatal(err)
	}
	if resp, _ := fetch(t, c, "https://ads.example/json"); resp.Header.Get("Strict-Transport-Security") != "" {
		t.Errorf("after a reload without HSTS: %q", resp.Header.Get("Strict-Transport-Security"))
	}
}
