package server_test

import (
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"tsubame/internal/server"
)

// A client that reaches a site by its fully qualified name (a trailing
// dot) sends SNI without the dot, as RFC 6066 §3 requires and browsers,
// curl and Go do: it gets the site's certificate, and the Host header's
// trailing dot is ignored when the site is picked.
func TestTLSTrailingDot(t *testing.T) {
	f := startTLS(t, server.Options{})
	resp, body := fetch(t, f.client(nil), "https://news.example./api/e.json?id=1")
	if resp.StatusCode != 200 || body != `{"urls":["news"]}` {
		t.Fatalf("https://news.example./: %d %q", resp.StatusCode, body)
	}
	if got := resp.TLS.PeerCertificates[0].SerialNumber; got.Cmp(f.news.Cert.SerialNumber) != 0 {
		t.Fatalf("presented %v", resp.TLS.PeerCertificates[0].DNSNames)
	}
}

// An SNI name that keeps its trailing dot breaks RFC 6066 §3, and Go's TLS
// stack refuses the ClientHello (a decode_error alert) before any
// certificate is picked; docs/edge.md says so. The refusal is counted.
func TestTLSTrailingDotInSNIRefused(t *testing.T) {
	f := startTLS(t, server.Options{})
	hello := clientHello(t, "news.example")
	dotted := withSNIDot(t, hello)

	answer := func(rec []byte) byte {
		c, err := net.Dial("tcp", f.tls)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(rec); err != nil {
			t.Fatal(err)
		}
		var hdr [5]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			t.Fatal(err)
		}
		return hdr[0]
	}
	if got := answer(hello); got != 22 { // handshake: a ServerHello
		t.Fatalf("the ClientHello without a dot was answered with record type %d", got)
	}
	if got := answer(dotted); got != 21 { // alert
		t.Fatalf("the ClientHello with a dot was answered with record type %d, not an alert", got)
	}
	waitUntil(t, func() bool { return f.srv.Stats().Refused[server.ReasonTLSHandshake] >= 1 })
}

// clientHello returns the first TLS record Go's client sends for name.
func clientHello(t *testing.T, name string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _ = tls.Client(a, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake() }()
	var hdr [5]byte
	if _, err := io.ReadFull(b, hdr[:]); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 5+int(binary.BigEndian.Uint16(hdr[3:])))
	copy(rec, hdr[:])
	if _, err := io.ReadFull(b, rec[5:]); err != nil {
		t.Fatal(err)
	}
	return rec
}

// withSNIDot returns a copy of the ClientHello record rec whose server
// name ends in a dot, every enclosing length grown by one.
func withSNIDot(t *testing.T, rec []byte) []byte {
	t.Helper()
	grow16 := func(b []byte, at int) { binary.BigEndian.PutUint16(b[at:], binary.BigEndian.Uint16(b[at:])+1) }
	out := append([]byte(nil), rec...)
	p := 5 + 4 + 2 + 32                            // record and handshake headers, version, random
	p += 1 + int(out[p])                           // session id
	p += 2 + int(binary.BigEndian.Uint16(out[p:])) // cipher suites
	p += 1 + int(out[p])                           // compression methods
	extsLen := p
	p += 2
	for p+4 <= len(out) {
		typ, n := binary.BigEndian.Uint16(out[p:]), int(binary.BigEndian.Uint16(out[p+2:]))
		if typ != 0 { // server_name
			p += 4 + n
			continue
		}
		nameLen := p + 4 + 2 + 1 // extension header, list length, name type
		end := nameLen + 2 + int(binary.BigEndian.Uint16(out[nameLen:]))
		out = append(out[:end], append([]byte{'.'}, out[end:]...)...)
		for _, at := range []int{nameLen, p + 4, p + 2, extsLen, 3} {
			grow16(out, at)
		}
		hs := int(out[6])<<16 | int(out[7])<<8 | int(out[8]) + 1 // the handshake's 24-bit length
		out[6], out[7], out[8] = byte(hs>>16), byte(hs>>8), byte(hs)
		return out
	}
	t.Fatal("no server_name extension")
	return nil
}
