// Package certs holds the TLS certificates a listener presents: a default
// pair and one per site, picked by the client's SNI name, swapped whole by
// Load so that renewed files take effect on the next handshake without
// touching open connections.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Pair names a PEM certificate chain and its private key.
type Pair struct {
	Cert, Key string
}

// Empty reports whether no files are named.
func (p Pair) Empty() bool { return p.Cert == "" && p.Key == "" }

// Site is a certificate for a site's host names: exact names, or
// *.example.com for every subdomain of example.com (as sites match Host).
type Site struct {
	Name  string
	Hosts []string
	Pair  Pair
}

// Store picks a certificate by SNI. It is safe for concurrent use: Load may
// run while handshakes read the current set.
type Store struct {
	cur atomic.Pointer[set]
}

type set struct {
	def   *tls.Certificate            // nil: names no site claims fail
	exact map[string]*tls.Certificate // host -> certificate
	wild  map[string]*tls.Certificate // ".example.com" -> certificate
	certs []Loaded
}

// Loaded describes one certificate in use, for logs and metrics.
type Loaded struct {
	Site     string // "" for the default pair
	Subject  string
	NotAfter time.Time
}

// ErrNoCertificate is the handshake error for a name no certificate serves.
var ErrNoCertificate = errors.New("no certificate for this server name")

// Load reads every pair and, only if all of them load, makes them the
// current set; on error the current set stays. At least one pair is needed.
func (s *Store) Load(def Pair, sites []Site) error {
	next := &set{exact: map[string]*tls.Certificate{}, wild: map[string]*tls.Certificate{}}
	var errs []error
	if !def.Empty() {
		c, err := load(def)
		if err != nil {
			errs = append(errs, fmt.Errorf("tls.cert/tls.key: %w", err))
		} else {
			next.def = c
			next.certs = append(next.certs, describe("", c))
		}
	}
	for _, st := range sites {
		if st.Pair.Empty() {
			continue
		}
		c, err := load(st.Pair)
		if err != nil {
			errs = append(errs, fmt.Errorf("sites.%s.tls_cert/tls_key: %w", st.Name, err))
			continue
		}
		next.certs = append(next.certs, describe(st.Name, c))
		for _, h := range st.Hosts {
			h = strings.ToLower(h)
			if suffix, ok := strings.CutPrefix(h, "*"); ok {
				next.wild[suffix] = c
			} else {
				next.exact[h] = c
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if len(next.certs) == 0 {
		return errors.New("no certificate: set tls.cert and tls.key, or a site's tls_cert and tls_key")
	}
	s.cur.Store(next)
	return nil
}

// Loaded lists the certificates in use.
func (s *Store) Loaded() []Loaded {
	if c := s.cur.Load(); c != nil {
		return c.certs
	}
	return nil
}

// Certificate picks the certificate for a handshake: the site whose host
// names match the SNI name exactly, then the longest *.suffix, then the
// default pair. A client that sends no name (an IP address in the URL) gets
// the default pair.
func (s *Store) Certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	cur := s.cur.Load()
	if cur == nil {
		return nil, ErrNoCertificate
	}
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if name != "" {
		if c, ok := cur.exact[name]; ok {
			return c, nil
		}
		for i := 0; i < len(name); i++ {
			if name[i] == '.' {
				if c, ok := cur.wild[name[i:]]; ok {
					return c, nil
				}
			}
		}
	}
	if cur.def == nil {
		return nil, ErrNoCertificate
	}
	return cur.def, nil
}

// MinVersion maps a configured minimum version, "1.2" or "1.3", to its
// crypto/tls constant.
func MinVersion(v string) (uint16, error) {
	switch v {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("%q is not a TLS version this server accepts as a minimum: use 1.2 or 1.3", v)
}

// CipherSuites are the TLS 1.2 suites a listener accepts: ECDHE key
// exchange (forward secrecy) with an AEAD cipher only. Go's own default
// list still has the ECDHE CBC-SHA suites, which are neither; TLS 1.3's
// suites are all AEAD and are not configurable.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// Config returns a server tls.Config presenting the store's certificates.
// Cipher suites are CipherSuites; curves are Go's defaults, X25519 (with
// its post-quantum hybrid) first. nextProtos is what ALPN offers.
func (s *Store) Config(minVersion uint16, nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion:     minVersion,
		CipherSuites:   CipherSuites,
		GetCertificate: s.Certificate,
		NextProtos:     nextProtos,
	}
}

func load(p Pair) (*tls.Certificate, error) {
	if p.Cert == "" || p.Key == "" {
		return nil, errors.New("give both the certificate and the key")
	}
	c, err := tls.LoadX509KeyPair(p.Cert, p.Key)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

func describe(site string, c *tls.Certificate) Loaded {
	subject := c.Leaf.Subject.CommonName
	if len(c.Leaf.DNSNames) > 0 {
		subject = strings.Join(c.Leaf.DNSNames, ",")
	}
	return Loaded{Site: site, Subject: subject, NotAfter: c.Leaf.NotAfter}
}

// LoadCAPool reads a PEM bundle of certificates to trust (an option's
// ca_file) into a pool; a file without a certificate is an error.
func LoadCAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
