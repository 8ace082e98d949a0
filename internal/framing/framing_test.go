package framing

import (
	"bytes"
	"testing"
)

func TestValidHost(t *testing.T) {
	for v, want := range map[string]bool{
		"a.example": true, "a.example:4000": true, "a.example:": true, "127.0.0.1": true, "[::1]": true,
		"[::1]:80": true, "[2001:db8::1]": true, "a.example.": true, "A%2Eexample": true, "": true,
		"a-b_c~d!$&'()*+,;=.example": true,
		"x@a.example":                false, "user:pass@a": false, "@a": false, "a b": false, "a/b": false, "a\\b": false,
		"a:80:80": false, "a:8x": false, "[::1": false, "[]": false, "[::1]x": false, "[::1%25eth0]": false,
		"a%zz": false, "a%2": false, "<a>": false, "a\"b": false, "a\tb": false,
	} {
		if got := ValidHost([]byte(v)); got != want {
			t.Errorf("ValidHost(%q) = %v", v, got)
		}
	}
}

func TestRequest(t *testing.T) {
	for head, want := range map[string]Error{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n":                                                     "",
		"GET http://a/x HTTP/1.1\r\nHost: b\r\n\r\n":                                            "",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n":                               "",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n":                      "",
		"GET / HTTP/1.0\r\n\r\n":                                                                "",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n": ErrCLAndTE,
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\ncontent-length: 5\r\n\r\n": ErrCLAndTE,
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n":          ErrCLTwice,
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n":                              ErrCLValue,
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n":                     ErrTEValue,
		"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n":                                 ErrTEOnHTTP10,
		"GET / HTTP/1.1\r\n\r\n":                                                                ErrNoHost,
		"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n":                                          ErrHostTwice,
		"GET / HTTP/1.1\r\nHost: x@a\r\n\r\n":                                                   ErrHost,
		"GET http://x@a/ HTTP/1.1\r\nHost: a\r\n\r\n":                                           ErrTarget,
		"GET //a/x HTTP/1.1\r\nHost: a\r\n\r\n":                                                 ErrSlashSlash,
		"GET / HTTP/2.0\r\nHost: a\r\n\r\n":                                                     ErrVersion,
		"GET  / HTTP/1.1\r\nHost: a\r\n\r\n":                                                    ErrRequestLine,
		"GET / HTTP/1.1\nHost: a\r\n\r\n":                                                       ErrBareLF,
		"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n":                                               ErrBareLF,
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n":                                       ErrObsFold,
		"GET / HTTP/1.1\r\nHost: a\r\nX Y: a\r\n\r\n":                                           ErrFieldName,
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n":                                        ErrCTL,
		"GET / HTTP/1.1\r\nHost: a\r\n":                                                         "",
	} {
		var h Head
		if got := Request([]byte(head), &h); got != want {
			t.Errorf("%q: %q, want %q", head, got, want)
		}
	}
}

// checkValue, eight bytes at a time, says what a byte-by-byte reading
// does of every byte at every place of values up to 20 bytes long, among
// printable bytes, tabs, DELs' neighbours and bytes of obs-text (0x80 and
// up), which the word-wise test must neither flag nor let mask a byte.
func TestCheckValue(t *testing.T) {
	byByte := func(v []byte) Error {
		for _, c := range v {
			if c == '\r' {
				return ErrBareCR
			}
			if (c < ' ' && c != '\t') || c == 0x7f {
				return ErrCTL
			}
		}
		return ""
	}
	for _, fill := range []byte{'a', '\t', 0x7e, 0x80, 0xff, ' '} {
		for n := 1; n <= 20; n++ {
			for at := range n {
				for c := range 256 {
					v := bytes.Repeat([]byte{fill}, n)
					v[at] = byte(c)
					if got, want := checkValue(v), byByte(v); got != want {
						t.Fatalf("checkValue(%q) = %q, want %q", v, got, want)
					}
				}
			}
		}
	}
}

// browserHead is the field lines of a browser's request for an ad tag.
const browserHead = "Host: ads.example.com\r\n" +
	"User-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36\r\n" +
	"Accept: */*\r\n" +
	"Accept-Language: ja,en-US;q=0.9,en;q=0.8\r\n" +
	"Accept-Encoding: gzip, deflate, br, zstd\r\n" +
	"Referer: https://www.news.example.jp/articles/2026/12/01/economy/index.html?utm_source=feed\r\n" +
	"Sec-Fetch-Dest: script\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Site: cross-site\r\n" +
	"Cookie: tsb_uid=v133056; _ga=GA1.2.1234567890.1733011200\r\n\r\n"

// BenchmarkFields is the check of a browser's field lines, which every
// request on the public listener takes.
func BenchmarkFields(b *testing.B) {
	raw := []byte(browserHead)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	var h Head
	for b.Loop() {
		if why := Fields(raw, &h); why != "" {
			b.Fatal(why)
		}
	}
}
