package admin

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/certs"
	"tsubame/internal/certs/certstest"
)

// tlsHarness is a harness whose listener speaks TLS with the certificate
// store's configuration, as cmd/tsubame builds it.
func tlsHarness(t *testing.T) (*harness, *certstest.CA) {
	t.Helper()
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir)
	leaf := ca.Issue(t, dir, "admin", "localhost", "127.0.0.1")
	st := new(certs.Store)
	if err := st.Load(certs.Pair{Cert: leaf.CertFile, Key: leaf.KeyFile}, nil); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, true, func(o *Options) { o.TLS = st.Config(tls.VersionTLS12) })
	return h, ca
}

// A TLS 1.2 client offering only CBC suites fails its handshake with the
// admin listener; an ECDHE AEAD suite is accepted.
func TestAdminTLSRefusesCBCSuites(t *testing.T) {
	h, ca := tlsHarness(t)
	addr := h.base[len("http://"):]
	for _, suite := range []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
	} {
		cfg := ca.ClientConfig("localhost")
		cfg.MaxVersion, cfg.CipherSuites = tls.VersionTLS12, []uint16{suite}
		if c, err := tls.Dial("tcp", addr, cfg); err == nil {
			c.Close()
			t.Errorf("a client offering only %s completed a handshake", tls.CipherSuiteName(suite))
		}
	}
	cfg := ca.ClientConfig("localhost")
	cfg.MaxVersion, cfg.CipherSuites = tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("an AEAD suite: %v", err)
	}
	c.Close()
}

// adminExchange writes raw on a new connection to the harness and reads
// every answer until the server closes; closed reports a clean close.
func adminExchange(t *testing.T, h *harness, raw string) (statuses []int, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", h.base[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	// A generous bound so that a server waiting for more bytes fails the
	// test instead of hanging it.
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return statuses, !(errors.As(err, &ne) && ne.Timeout())
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
}

// adminSmuggled follows each case on its connection: answered only if
// the first request was accepted and framed where it ends.
const adminSmuggled = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"

// The admin listener refuses the framing the public edge refuses: a 400
// (505 for another version), one answer, and the connection closed, so
// the request smuggled after it is never answered. net/http alone framed
// Content-Length beside Transfer-Encoding by the chunked body and answered
// the next request on the same socket.
func TestAdminStrictFraming(t *testing.T) {
	h := newHarness(t, true, nil)
	const login = "POST /api/v1/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	for _, tc := range []struct {
		name, raw string
		status    int // of the first answer; 400 and 505 must be alone
	}{
		{"GET", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 200},
		{"POST with Content-Length", login + "Content-Length: 2\r\n\r\n{}", 401},
		{"POST chunked", login + "Transfer-Encoding: chunked\r\n\r\n2;x=y\r\n{}\r\n0\r\nX-T: 1\r\n\r\n", 401},
		{"pipelined", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 200},

		{"CL then TE", login + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"TE then CL", login + "Transfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n", 400},
		{"TE identity", login + "Transfer-Encoding: identity\r\nContent-Length: 0\r\n\r\n", 400},
		{"TE on HTTP/1.0", "POST /api/v1/login HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400},
		{"CL twice, same value", login + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400},
		{"obs-fold", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\r\n b\r\n\r\n", 400},
		{"bare LF ending a field line", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\nX-A: b\r\n\r\n", 400},
		{"space in a field name", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX A: b\r\n\r\n", 400},
		{"Host with userinfo", "GET /healthz HTTP/1.1\r\nHost: x@127.0.0.1\r\n\r\n", 400},
		{"HTTP/1.2", "GET /healthz HTTP/1.2\r\nHost: 127.0.0.1\r\n\r\n", 505},
		{"bare LF ending a chunk line (the handler answers the body cut short)", login + "Transfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n", 400},
		{"refused after an accepted one", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + login +
			"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 200},
	} {
		statuses, closed := adminExchange(t, h, tc.raw+adminSmuggled)
		switch {
		case len(statuses) == 0 || statuses[0] != tc.status:
			t.Errorf("%s: answered %v, want %d first", tc.name, statuses, tc.status)
		case tc.status >= 400 && tc.status != 401 && (len(statuses) != 1 || !closed):
			t.Errorf("%s: answered %v (closed %v): want one answer and a closed connection", tc.name, statuses, closed)
		case tc.name == "refused after an accepted one" && (len(statuses) != 2 || statuses[1] != 400 || !closed):
			t.Errorf("%s: answered %v (closed %v): want 200, 400 and a closed connection", tc.name, statuses, closed)
		case tc.status < 400 && tc.name != "refused after an accepted one" && statuses[len(statuses)-1] != 200:
			t.Errorf("%s: answered %v: the smuggled request was not framed where the first ended", tc.name, statuses)
		case tc.status == 401 && (len(statuses) != 2 || statuses[1] != 200):
			t.Errorf("%s: answered %v: the request after the body was not framed where it ended", tc.name, statuses)
		}
	}
}

// The admin listener answers only Hosts that name it (DNS rebinding: a
// page whose name resolves to 127.0.0.1 must not read it): localhost,
// loopback addresses, its own address and admin.hosts; others get a 421.
func TestAdminHosts(t *testing.T) {
	h := newHarness(t, true, func(o *Options) { o.Hosts = []string{"Admin.Internal", "10.1.2.3"} })
	port := h.base[strings.LastIndexByte(h.base, ':'):]
	for host, want := range map[string]int{
		"127.0.0.1" + port: 200, "127.0.0.1": 200, "localhost" + port: 200, "LOCALHOST.": 200, "[::1]" + port: 200,
		"127.9.9.9": 200, "admin.internal" + port: 200, "admin.internal.": 200, "10.1.2.3:443": 200,
		"evil.example": 421, "evil.example" + port: 421, "localhost.evil.example": 421, "10.1.2.4": 421,
	} {
		got := h.doHost(host, "/healthz")
		if got != want {
			t.Errorf("Host %q: %d, want %d", host, got, want)
		}
	}
	// The routes that need no user are the point: setup and login too.
	if got := h.doHost("rebound.example", "/api/v1/setup"); got != 421 {
		t.Errorf("setup status through a foreign Host: %d", got)
	}
}

// doHost sends GET path with the given Host header and returns the status.
func (h *harness) doHost(host, path string) int {
	h.t.Helper()
	req, err := http.NewRequest("GET", h.base+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// Two Authorization fields on the admin API are a 400, whichever comes
// first: authenticate would read only the first.
func TestAdminTwoAuthorizations(t *testing.T) {
	h := newHarness(t, true, nil)
	plain, _, err := h.accounts.CreateToken(testUser, "ci", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for i, pair := range [][2]string{{"Bearer " + plain, "Bearer nope"}, {"Bearer nope", "Bearer " + plain}, {"Bearer " + plain, "Bearer " + plain}} {
		req, err := http.NewRequest("GET", h.base+"/api/v1/session", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header["Authorization"] = pair[:]
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 400 || !strings.Contains(string(b), "more than one Authorization header") {
			t.Errorf("pair %d: %d %s", i, res.StatusCode, b) // not the pair: it holds a token
		}
	}
	if r := h.do("GET", "/api/v1/session", nil, "Authorization", "Bearer "+plain); r.status != 200 {
		t.Fatalf("one Authorization: %d %s", r.status, r.body)
	}
}

// A user whose name differs from another's by case only is refused at
// creation, with an error that names the existing user.
func TestUserNamesDifferingByCaseOnly(t *testing.T) {
	a, err := OpenAccounts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	policy := PasswordPolicy{MinLength: 12}
	if err := a.CreateUser("rootadmin", testPassword, "", policy); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Rootadmin", "ROOTADMIN", "rootAdmin"} {
		err := a.CreateUserWithRole(name, testPassword, "", RoleViewer, policy)
		if tsubame.ErrorCode(err) != tsubame.ECONFLICT || !strings.Contains(err.Error(), "differ by case only") {
			t.Errorf("%s beside rootadmin: %v", name, err)
		}
	}
	if err := a.CreateUser("rootadmin2", testPassword, "", policy); err != nil {
		t.Fatalf("another name: %v", err)
	}
}
