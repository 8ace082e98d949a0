package certs_test

import (
	"crypto/tls"
	"errors"
	"os"
	"strings"
	"testing"

	"tsubame/internal/certs"
	"tsubame/internal/certs/certstest"
)

func TestCertificateBySNI(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir)
	def := ca.Issue(t, dir, "default", "ads.example")
	news := ca.Issue(t, dir, "news", "news.example", "*.news.example")
	deep := ca.Issue(t, dir, "deep", "*.a.news.example")
	var s certs.Store
	err := s.Load(certs.Pair{Cert: def.CertFile, Key: def.KeyFile}, []certs.Site{
		{Name: "news", Hosts: []string{"news.example", "*.news.example"}, Pair: certs.Pair{Cert: news.CertFile, Key: news.KeyFile}},
		{Name: "deep", Hosts: []string{"*.A.news.example"}, Pair: certs.Pair{Cert: deep.CertFile, Key: deep.KeyFile}},
		{Name: "nocert", Hosts: []string{"plain.example"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]certstest.Leaf{
		"news.example":       news,
		"NEWS.example.":      news,
		"www.news.example":   news,
		"x.y.news.example":   news,
		"b.a.news.example":   deep, // the longest suffix wins
		"a.news.example":     news,
		"ads.example":        def,
		"plain.example":      def,
		"":                   def, // no SNI: an IP address in the URL
		"unknown.example":    def,
		"evilnews.example":   def,
		"news.example.evil.": def,
	} {
		c, err := s.Certificate(&tls.ClientHelloInfo{ServerName: name})
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if c.Leaf.SerialNumber.Cmp(want.Cert.SerialNumber) != 0 {
			t.Errorf("%q: got the certificate for %v, want %v", name, c.Leaf.DNSNames, want.Cert.DNSNames)
		}
	}
	if got := len(s.Loaded()); got != 3 {
		t.Errorf("Loaded lists %d certificates, want 3", got)
	}
}

func TestNoDefaultFailsUnknownNames(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir)
	news := ca.Issue(t, dir, "news", "news.example")
	var s certs.Store
	if _, err := s.Certificate(&tls.ClientHelloInfo{ServerName: "news.example"}); !errors.Is(err, certs.ErrNoCertificate) {
		t.Fatalf("an empty store gave %v", err)
	}
	if err := s.Load(certs.Pair{}, []certs.Site{{Name: "news", Hosts: []string{"news.example"}, Pair: certs.Pair{Cert: news.CertFile, Key: news.KeyFile}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Certificate(&tls.ClientHelloInfo{ServerName: "news.example"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "other.example"} {
		if _, err := s.Certificate(&tls.ClientHelloInfo{ServerName: name}); !errors.Is(err, certs.ErrNoCertificate) {
			t.Errorf("%q: got %v, want ErrNoCertificate", name, err)
		}
	}
}

// A failed load (a bad file, a key that does not match) keeps the current
// certificates and names every bad pair.
func TestFailedLoadKeepsCurrent(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir)
	def := ca.Issue(t, dir, "default", "ads.example")
	other := ca.Issue(t, dir, "other", "other.example")
	var s certs.Store
	if err := s.Load(certs.Pair{Cert: def.CertFile, Key: def.KeyFile}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/garbage.crt", []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := s.Load(certs.Pair{Cert: def.CertFile, Key: other.KeyFile}, []certs.Site{
		{Name: "bad", Hosts: []string{"bad.example"}, Pair: certs.Pair{Cert: dir + "/garbage.crt", Key: def.KeyFile}},
		{Name: "half", Hosts: []string{"half.example"}, Pair: certs.Pair{Cert: other.CertFile}},
	})
	if err == nil {
		t.Fatal("a mismatched key and a garbage file loaded")
	}
	for _, want := range []string{"tls.cert/tls.key", "sites.bad.", "sites.half.", "give both"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	c, err := s.Certificate(&tls.ClientHelloInfo{ServerName: "bad.example"})
	if err != nil || c.Leaf.SerialNumber.Cmp(def.Cert.SerialNumber) != 0 {
		t.Fatalf("after a failed load: %v, %v", c, err)
	}
	if err := s.Load(certs.Pair{}, nil); err == nil {
		t.Fatal("a load without any certificate succeeded")
	}
}

func TestMinVersion(t *testing.T) {
	for in, want := range map[string]uint16{"": tls.VersionTLS12, "1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13} {
		if got, err := certs.MinVersion(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"1.1", "1.0", "tls1.2", "3"} {
		if _, err := certs.MinVersion(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
