package track_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"testing"

	"tsubame/internal/track"
)

// The visitor id travels enciphered: a tracking URL is read by any page
// that shows the ad (a JSONP answer's, a bid's markup), and the id is
// the HttpOnly cookie's, which no page's script may read. No token holds
// it in clear, one visitor's tokens of two decisions do not share its
// bytes (a page cannot link them), and Verify gives it back.
func TestVisitorTravelsEnciphered(t *testing.T) {
	const visitor = "01M89NT1MMEGHRWX2XX0N7AA6T"
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	var seen [][]byte
	for i, kind := range []track.Kind{track.KindImp, track.KindClick, track.KindWin, track.KindBill, track.KindLoss, track.KindBidImp} {
		tk := token(kind)
		tk.User = visitor
		tk.Decision = "01JDX8Q5ZK3M9T7A2B4C6D8E0" + string(rune('A'+i))
		tok, err := s.Sign(tk)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte(visitor)) || bytes.Contains(raw, []byte(visitor[:8])) {
			t.Errorf("%s: the visitor in clear in %q", kind, raw)
		}
		at := bytes.Index(raw, []byte(tk.Placement)) + len(tk.Placement)
		if raw[at] != byte(len(visitor)) {
			t.Fatalf("%s: layout: %q", kind, raw)
		}
		enc := raw[at+1 : at+1+len(visitor)]
		for _, o := range seen {
			if bytes.Equal(o, enc) {
				t.Errorf("%s: two decisions' tokens carry the visitor alike: %x", kind, enc)
			}
		}
		seen = append(seen, enc)
		got, err := s.VerifyKind(tok, kind, t0)
		if err != nil || got.User != visitor {
			t.Errorf("%s: verified as %q (%v)", kind, got.User, err)
		}
	}
	// Another key's ring reads its own only: a token signed by k1 and
	// verified with k1 in a rotated ring gives the same visitor.
	rotated := newSigner(t, "k2", track.Key{ID: "k2", Secret: secret('b')}, track.Key{ID: "k1", Secret: secret('a')})
	tk := token(track.KindImp)
	tk.User = visitor
	tok, _ := s.Sign(tk)
	if got, err := rotated.VerifyKind(tok, track.KindImp, t0); err != nil || got.User != visitor {
		t.Errorf("after a rotation: %q (%v)", got.User, err)
	}
}

// A test auction's click (its markup's tracker) says so, as its notices
// do, so that it is never counted.
func TestTestClick(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, test := range []bool{true, false} {
		for _, kind := range []track.Kind{track.KindClick, track.KindImp, track.KindBill} {
			tk := token(kind)
			tk.Test = test
			tok, err := s.Sign(tk)
			if err != nil {
				t.Fatalf("%s test=%v: %v", kind, test, err)
			}
			if got, err := s.VerifyKind(tok, kind, t0); err != nil || got.Test != test {
				t.Errorf("%s test=%v: verified %+v (%v)", kind, test, got, err)
			}
		}
	}
}

// Tokens of version 3 (the visitor in clear, no flags but a notice's),
// made by the previous release, still verify.
func TestVerifyReadsVersion3(t *testing.T) {
	key := secret('a')
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: key})
	tk := token(track.KindClick)
	raw := []byte{3, 2, 'k', '1', byte(track.KindClick)}
	raw = binary.BigEndian.AppendUint64(raw, uint64(tk.Expires.Unix()))
	raw = binary.BigEndian.AppendUint64(raw, uint64(tk.Price))
	raw = binary.BigEndian.AppendUint64(raw, uint64(tk.Reserved.Unix()))
	for _, f := range []string{tk.Decision, tk.LineItem, tk.Campaign, tk.Creative, tk.Placement, tk.User,
		tk.Advertiser, tk.Site, tk.Country, tk.Device} {
		raw = append(append(raw, byte(len(f))), f...)
	}
	raw = binary.BigEndian.AppendUint16(raw, uint16(len(tk.Click)))
	raw = append(raw, tk.Click...)
	mac := hmac.New(sha256.New, key)
	mac.Write(raw)
	got, err := s.VerifyKind(base64.RawURLEncoding.EncodeToString(mac.Sum(raw)), track.KindClick, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got.User != tk.User || got.Click != tk.Click || got.Origin != tk.Origin || got.Test {
		t.Fatalf("version 3 read as %+v", got)
	}
}

// A token carries the node holding its decision's money, for the outcome
// queue; a holder that is not printable ASCII without spaces and '|', or
// longer than a ledger's, is refused.
func TestHolderTravels(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, kind := range []track.Kind{track.KindImp, track.KindClick} {
		tk := token(kind)
		if kind != track.KindClick {
			tk.Click = ""
		}
		tk.Holder = "web-3/4242/9f8e7d6c"
		tok, err := s.Sign(tk)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.VerifyKind(tok, kind, t0)
		if err != nil || got.Holder != tk.Holder {
			t.Fatalf("%s: holder %q, %v; want %q", kind, got.Holder, err, tk.Holder)
		}
	}
	for _, h := range []string{"a|b", "a b", "caf\xc3\xa9", strings.Repeat("h", 65)} {
		tk := token(track.KindImp)
		tk.Click, tk.Holder = "", h
		if _, err := s.Sign(tk); err == nil {
			t.Errorf("holder %q signed", h)
		}
	}
}

// A bid's four tokens share their decision, whose visitor keystream is
// kept from one to the next: whatever was signed before (the same
// decision with a shorter or a longer visitor, another decision, another
// key), a token is the one a signer of its own makes, and verifies to its
// visitor.
func TestVisitorKeystreamKept(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	other := newSigner(t, "k2", track.Key{ID: "k2", Secret: secret('b')})
	visitors := []string{"u", "01M89NT1MMEGHRWX2XX0N7AA6T", strings.Repeat("v", 33), strings.Repeat("w", track.MaxIDLen)}
	decisions := []string{"01JDX8Q5ZK3M9T7A2B4C6D8E0A", "01JDX8Q5ZK3M9T7A2B4C6D8E0B", strings.Repeat("d", track.MaxIDLen)}
	step := 0
	for _, d := range decisions {
		for _, v := range append(visitors, visitors[1], visitors[0]) { // shorter after longer too
			for _, kind := range []track.Kind{track.KindWin, track.KindBill, track.KindLoss, track.KindClick} {
				tk := token(kind)
				tk.Decision, tk.User = d, v
				got, err := s.Sign(tk)
				if err != nil {
					t.Fatal(err)
				}
				if step++; step%3 == 0 { // now and then another key's token between
					if _, err := other.Sign(tk); err != nil {
						t.Fatal(err)
					}
				}
				// A signer of its own, the same key: its ring key is not
				// the one any kept keystream was derived for.
				fresh := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
				want, err := fresh.Sign(tk)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("%s of decision %.8s… for visitor %q: %s, a fresh signer's %s", kind, d, v, got, want)
				}
				if back, err := s.VerifyKind(got, kind, t0); err != nil || back.User != v {
					t.Fatalf("%s: verified as %q (%v), want %q", kind, back.User, err, v)
				}
			}
		}
	}
}
