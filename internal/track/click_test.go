package track_test

import (
	"net/url"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/track"
)

// clickSeeds are destinations of every shape: ones a creative may have,
// and ones import must refuse because signing does (issue 48: userinfo,
// IDN, a non-ASCII path, '_' in a host, a backslash).
var clickSeeds = []string{
	"https://advertiser.example/landing?utm_source=tsubame&x=%20y#top",
	"HTTPS://A.Example/Landing", "http://a.example:8080/x?y=1#z", "https://[2001:db8::1]:8443/",
	"https://[::ffff:192.0.2.1]/", "https://a.example?q=1", "https://a.example#top", "https://a.example",
	"https://xn--bcher-kva.example/%E5%95%86%E5%93%81", "http://192.0.2.1/", "https://a.example./",
	"https://a.example/{gclid}?x=|^`\"<>", "https://a-b.example:65535/",
	"https://advertiser.example@evil.example/", "https://u:p@a.example/", "https://bücher.example/",
	"https://shop.example/商品", "https://my_shop.example/", "https://evil.example\\@advertiser.example/",
	"https://evil%2eexample/", "https://a.example/100%", "https://a.example:/", "https://a.example:0/",
	"https://a.example:65536/", "https://[2001:db8::1/", "https://[a.example]/", "https://[fe80::1%25eth0]/",
	"https://../", "https:///x", "https://:443/", "https:evil.example", "//evil.example/", "javascript:alert(1)",
	"https://a.example/x y", "https://a.example/\r\nSet-Cookie:x", "", "https://", "http://a.example:8080:1/",
	"https://a.example/" + strings.Repeat("p", tsubame.MaxClickLength),
}

// acceptedClick is what import and every store write decide of a
// creative's click destination.
func acceptedClick(click string) bool {
	c := &tsubame.Creative{ID: "cr", Advertiser: "adv", Format: tsubame.FormatBanner, W: 1, H: 1,
		Image: "https://cdn.example/1.png", Click: click}
	return c.Validate() == nil
}

// checkAcceptedClick fails t when a destination the model accepts does not
// sign and verify to itself, or when net/url reads another scheme, user or
// host in it than the server's rule did (what a browser and the server
// would disagree on).
func checkAcceptedClick(t *testing.T, s *track.Signer, click string) {
	t.Helper()
	if !acceptedClick(click) {
		return
	}
	tk := token(track.KindClick)
	tk.Click = click
	tok, err := s.Sign(tk)
	if err != nil {
		t.Fatalf("%q: the model accepts it, signing refuses it: %v", click, err)
	}
	got, err := s.VerifyKind(tok, track.KindClick, t0)
	if err != nil || got.Click != click {
		t.Fatalf("%q: verified %q, %v", click, got.Click, err)
	}
	u, err := url.Parse(click)
	if err != nil {
		t.Fatalf("%q: accepted, and net/url refuses it: %v", click, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.User != nil || u.Opaque != "" || u.Hostname() == "" {
		t.Fatalf("%q: accepted, and net/url reads scheme %q, user %v, opaque %q, host %q", click, u.Scheme, u.User, u.Opaque, u.Host)
	}
	rest := click[len(u.Scheme)+3:]
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if rest != u.Host {
		t.Fatalf("%q: the server reads the host %q, net/url %q", click, rest, u.Host)
	}
}

// Nothing import accepts makes signing fail, and the shapes signing refuses
// are refused by the model (import) too.
func TestClickAcceptedAtImportSigns(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	accepted := 0
	for _, click := range clickSeeds {
		checkAcceptedClick(t, s, click)
		tk := token(track.KindClick)
		tk.Click = click
		_, signErr := s.Sign(tk)
		if ok := acceptedClick(click); ok != (signErr == nil) {
			t.Errorf("%q: import accepts %v, signing %v", click, ok, signErr)
		} else if ok {
			accepted++
		}
	}
	if accepted != 13 {
		t.Errorf("%d of the seeds accepted, want the 13 good ones", accepted)
	}
}

// FuzzClickAcceptedAtImportSigns looks for a destination the model accepts
// and signing refuses, or that net/url reads another way (go test
// -fuzz=FuzzClickAcceptedAtImportSigns ./internal/track).
func FuzzClickAcceptedAtImportSigns(f *testing.F) {
	for _, c := range clickSeeds {
		f.Add(c)
	}
	s := newSigner(f, "k1", track.Key{ID: "k1", Secret: secret('a')})
	f.Fuzz(func(t *testing.T, click string) {
		checkAcceptedClick(t, s, click)
		tk := token(track.KindClick)
		tk.Click = click
		if _, err := s.Sign(tk); (err == nil) != acceptedClick(click) {
			t.Fatalf("%q: import accepts %v, signing %v", click, acceptedClick(click), err)
		}
	})
}
