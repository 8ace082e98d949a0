package admin

import (
	"crypto/tls"
	"testing"

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
