package framing

import "testing"

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
