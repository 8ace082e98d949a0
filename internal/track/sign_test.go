package track_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/track"
)

// t0 is the injected clock of every test: no test reads the wall clock.
var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func secret(c byte) []byte { return bytes.Repeat([]byte{c}, 32) }

func newSigner(t testing.TB, current string, keys ...track.Key) *track.Signer {
	t.Helper()
	s, err := track.NewSigner(current, keys...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func token(kind track.Kind) track.Token {
	tk := track.Token{
		Kind: kind, Decision: "01JDX8Q5ZK3M9T7A2B4C6D8E0F", LineItem: "li-42", Campaign: "spring", Creative: "cr.7",
		Placement: "top:banner@home", User: "u-9f8e", Price: 2_500_000, Expires: t0.Add(time.Hour),
		Reserved: t0.Add(10 * time.Minute),
		Origin:   track.Origin{Advertiser: "adv-1", Site: "news.example.co.jp", Country: "JP", Device: "mobile"},
	}
	if kind == track.KindClick {
		tk.Click = "https://advertiser.example/landing?utm_source=tsubame&x=%20y#top"
	}
	if kind.Notice() {
		tk.Exchange, tk.Auction, tk.Imp, tk.Deal, tk.Currency = "ssp-1", "80ce30c53c16e6ede735f123ef6e32361bfc7b22", "1", "AB-Agency1-0001", "USD"
	}
	return tk
}

func TestSignVerifyRoundTrip(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, kind := range []track.Kind{track.KindImp, track.KindClick, track.KindWin, track.KindBill, track.KindLoss, track.KindBidImp} {
		t.Run(kind.String(), func(t *testing.T) {
			want := token(kind)
			tok, err := s.Sign(want)
			if err != nil {
				t.Fatal(err)
			}
			if len(tok) > track.MaxTokenLen || strings.ContainsAny(tok, "+/=") {
				t.Fatalf("token %q is not bounded base64url without padding", tok)
			}
			got, err := s.VerifyKind(tok, kind, t0)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != want.Kind || got.Decision != want.Decision || got.LineItem != want.LineItem ||
				got.Creative != want.Creative || got.Placement != want.Placement || got.Click != want.Click ||
				got.Price != want.Price || !got.Expires.Equal(want.Expires) || !got.Reserved.Equal(want.Reserved) ||
				got.Exchange != want.Exchange || got.Auction != want.Auction || got.Imp != want.Imp || got.Deal != want.Deal || got.Currency != want.Currency {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

// A token without a reservation says so (Reserved zero), and a deadline
// is kept to the second, truncated, as the expiry is.
func TestSignReserved(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, tc := range []struct{ in, want time.Time }{
		{time.Time{}, time.Time{}},
		{t0.Add(90*time.Second + 999*time.Millisecond), t0.Add(90 * time.Second)},
	} {
		tk := token(track.KindImp)
		tk.Reserved = tc.in
		tok, err := s.Sign(tk)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Verify(tok, t0)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Reserved.Equal(tc.want) || got.Reserved.IsZero() != tc.want.IsZero() {
			t.Fatalf("Reserved %v signed, %v read, want %v", tc.in, got.Reserved, tc.want)
		}
	}
	tk := token(track.KindImp)
	tk.Reserved = time.Unix(-5, 0)
	if _, err := s.Sign(tk); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("a deadline before 1970 signed: %v", err)
	}
}

// Tokens of version 1 (before reservations), made by an earlier release
// and still out in pages, verify with no reservation.
func TestVerifyReadsVersion1(t *testing.T) {
	key := secret('a')
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: key})
	tk := token(track.KindImp)
	raw := []byte{1, 2, 'k', '1', byte(track.KindImp)}
	raw = binary.BigEndian.AppendUint64(raw, uint64(tk.Expires.Unix()))
	raw = binary.BigEndian.AppendUint64(raw, uint64(tk.Price))
	for _, f := range []string{tk.Decision, tk.LineItem, tk.Campaign, tk.Creative, tk.Placement, tk.User} {
		raw = append(append(raw, byte(len(f))), f...)
	}
	raw = append(raw, 0, 0) // no click destination
	mac := hmac.New(sha256.New, key)
	mac.Write(raw)
	got, err := s.VerifyKind(base64.RawURLEncoding.EncodeToString(mac.Sum(raw)), track.KindImp, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Decision != tk.Decision || got.User != tk.User || got.Price != tk.Price || !got.Expires.Equal(tk.Expires) || !got.Reserved.IsZero() {
		t.Fatalf("version 1 read as %+v", got)
	}
}

// Tokens of version 2 (before the origin), made by the previous release,
// verify with their reservation and an empty origin.
func TestVerifyReadsVersion2(t *testing.T) {
	key := secret('a')
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: key})
	tk := token(track.KindBill)
	raw := []byte{2, 2, 'k', '1', byte(track.KindBill)}
	raw = binary.BigEndian.AppendUint64(raw, uint64(tk.Expires.Unix()))
	raw = binary.BigEndian.AppendUint64(raw, uint64(tk.Price))
	raw = binary.BigEndian.AppendUint64(raw, uint64(tk.Reserved.Unix()))
	for _, f := range []string{tk.Decision, tk.LineItem, tk.Campaign, tk.Creative, tk.Placement, tk.User,
		tk.Exchange, tk.Auction, tk.Imp, tk.Deal, tk.Currency} {
		raw = append(append(raw, byte(len(f))), f...)
	}
	raw = append(raw, 0)    // flags
	raw = append(raw, 0, 0) // no click destination
	mac := hmac.New(sha256.New, key)
	mac.Write(raw)
	got, err := s.VerifyKind(base64.RawURLEncoding.EncodeToString(mac.Sum(raw)), track.KindBill, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Auction != tk.Auction || got.Deal != tk.Deal || !got.Reserved.Equal(tk.Reserved) || got.Origin != (track.Origin{}) {
		t.Fatalf("version 2 read as %+v", got)
	}
}

// The origin travels signed, and Clean empties what a token cannot carry.
func TestOrigin(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, kind := range []track.Kind{track.KindImp, track.KindClick, track.KindWin, track.KindBill, track.KindLoss, track.KindBidImp} {
		tk := token(kind)
		tok, err := s.Sign(tk)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Verify(tok, t0)
		if err != nil || got.Origin != tk.Origin {
			t.Fatalf("%v: origin %+v (%v), want %+v", kind, got.Origin, err, tk.Origin)
		}
	}
	bad := track.Origin{Advertiser: "a b", Site: "x y", Country: "jp", Device: "Phone"}.Clean()
	if bad != (track.Origin{}) {
		t.Fatalf("Clean kept %+v", bad)
	}
	good := track.Origin{Advertiser: "adv", Site: "com.example.app", Country: "US", Device: "tv"}
	if good.Clean() != good {
		t.Fatalf("Clean changed %+v to %+v", good, good.Clean())
	}
}

func TestSignLongestFieldsFit(t *testing.T) {
	s := newSigner(t, "abcdefgh", track.Key{ID: "abcdefgh", Secret: secret('a')})
	id := strings.Repeat("x", track.MaxIDLen)
	tk := track.Token{Kind: track.KindClick, Decision: id, LineItem: id, Campaign: id, Creative: id, Placement: id, User: id,
		Click: "https://a.example/" + strings.Repeat("p", track.MaxClickLen-len("https://a.example/")),
		Price: 1<<63 - 1, Expires: t0.Add(time.Hour),
		Holder: strings.Repeat("h", tsubame.MaxHolderLength),
		Origin: track.Origin{Advertiser: id, Site: strings.Repeat("s", track.MaxSiteLen), Country: "JP", Device: strings.Repeat("d", track.MaxDeviceLen)}}
	tok, err := s.Sign(tk)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != track.MaxTokenLen {
		t.Fatalf("longest token is %d bytes, MaxTokenLen %d", len(tok), track.MaxTokenLen)
	}
	if _, err := s.Verify(tok, t0); err != nil {
		t.Fatal(err)
	}
}

func TestSignRefuses(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, tc := range []struct {
		name string
		edit func(*track.Token)
	}{
		{"unknown kind", func(t *track.Token) { t.Kind = 9 }},
		{"zero kind", func(t *track.Token) { t.Kind = 0 }},
		{"missing decision", func(t *track.Token) { t.Decision = "" }},
		{"long line item", func(t *track.Token) { t.LineItem = strings.Repeat("l", track.MaxIDLen+1) }},
		{"creative with space", func(t *track.Token) { t.Creative = "a b" }},
		{"placement with newline", func(t *track.Token) { t.Placement = "p\n" }},
		{"negative price", func(t *track.Token) { t.Price = -1 }},
		{"advertiser with space", func(t *track.Token) { t.Advertiser = "a b" }},
		{"site with space", func(t *track.Token) { t.Site = "a b.example" }},
		{"site too long", func(t *track.Token) { t.Site = strings.Repeat("s", track.MaxSiteLen+1) }},
		{"country lower case", func(t *track.Token) { t.Country = "jp" }},
		{"country of three", func(t *track.Token) { t.Country = "JPN" }},
		{"device upper case", func(t *track.Token) { t.Device = "Mobile" }},
		{"no expiry", func(t *track.Token) { t.Expires = time.Time{} }},
		{"click missing", func(t *track.Token) { t.Click = "" }},
		{"click relative", func(t *track.Token) { t.Click = "/landing" }},
		{"click scheme-relative", func(t *track.Token) { t.Click = "//evil.example/" }},
		{"click javascript", func(t *track.Token) { t.Click = "javascript:alert(1)" }},
		{"click data", func(t *track.Token) { t.Click = "data:text/html,<script>" }},
		{"click ftp", func(t *track.Token) { t.Click = "ftp://files.example/" }},
		{"click no host", func(t *track.Token) { t.Click = "https:///path" }},
		{"click opaque", func(t *track.Token) { t.Click = "https:evil.example" }},
		{"click user info", func(t *track.Token) { t.Click = "https://advertiser.example@evil.example/" }},
		{"click backslash", func(t *track.Token) { t.Click = "https://evil.example\\@advertiser.example/" }},
		{"click space", func(t *track.Token) { t.Click = "https://a.example/x y" }},
		{"click control", func(t *track.Token) { t.Click = "https://a.example/\r\nSet-Cookie:x" }},
		{"click non-ASCII", func(t *track.Token) { t.Click = "https://exämple.example/" }},
		{"click too long", func(t *track.Token) { t.Click = "https://a.example/" + strings.Repeat("p", track.MaxClickLen) }},
		{"click port only", func(t *track.Token) { t.Click = "https://:443/x" }},
		{"click host percent", func(t *track.Token) { t.Click = "https://evil%2eexample/" }},
		{"click scheme only", func(t *track.Token) { t.Click = "https://" }},
		{"destination on an impression", func(t *track.Token) { t.Kind = track.KindImp }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := token(track.KindClick)
			tc.edit(&tk)
			tok, err := s.Sign(tk)
			if tsubame.ErrorCode(err) != tsubame.EINVALID || tok != "" {
				t.Fatalf("Sign = %q, %v; want EINVALID", tok, err)
			}
		})
	}
}

func TestNewSignerRefuses(t *testing.T) {
	good := track.Key{ID: "k1", Secret: secret('a')}
	many := make([]track.Key, track.MaxKeys+1)
	for i := range many {
		many[i] = track.Key{ID: fmt.Sprintf("k%d", i), Secret: secret('a')}
	}
	for _, tc := range []struct {
		name    string
		current string
		keys    []track.Key
	}{
		{"no keys", "k1", nil},
		{"too many keys", "k0", many},
		{"empty id", "", []track.Key{{ID: "", Secret: secret('a')}}},
		{"long id", "abcdefghi", []track.Key{{ID: "abcdefghi", Secret: secret('a')}}},
		{"upper-case id", "K1", []track.Key{{ID: "K1", Secret: secret('a')}}},
		{"id with dash", "k-1", []track.Key{{ID: "k-1", Secret: secret('a')}}},
		{"short secret", "k1", []track.Key{{ID: "k1", Secret: secret('a')[:31]}}},
		{"long secret", "k1", []track.Key{{ID: "k1", Secret: bytes.Repeat([]byte{1}, track.MaxSecret+1)}}},
		{"duplicate id", "k1", []track.Key{good, good}},
		{"current not in ring", "k2", []track.Key{good}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := track.NewSigner(tc.current, tc.keys...)
			if tsubame.ErrorCode(err) != tsubame.EINVALID || s != nil {
				t.Fatalf("NewSigner = %v, %v; want EINVALID", s, err)
			}
		})
	}
}

// A secret never shows in an error, in a printed Key or in a printed Signer.
func TestSecretsNeverPrinted(t *testing.T) {
	sec := []byte("s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t")
	k := track.Key{ID: "k1", Secret: sec}
	s := newSigner(t, "k1", k)
	_, errID := track.NewSigner("x", track.Key{ID: string(sec), Secret: sec})
	_, errLen := track.NewSigner("k1", track.Key{ID: "k1", Secret: sec[:20]})
	for _, out := range []string{
		fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k), fmt.Sprintf("%v %+v %#v %s", s, s, s, s),
		fmt.Sprintf("%v", []track.Key{k}), errID.Error(), errLen.Error(),
	} {
		if strings.Contains(out, "s3cr3t") || strings.Contains(out, fmt.Sprint(sec[:8])) {
			t.Errorf("secret printed: %s", out)
		}
	}
}

// The caller's secret slice is copied: changing it later changes nothing.
func TestNewSignerCopiesSecret(t *testing.T) {
	sec := secret('a')
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: sec})
	tok, err := s.Sign(token(track.KindImp))
	if err != nil {
		t.Fatal(err)
	}
	sec[0] = 'b'
	if _, err := s.Verify(tok, t0); err != nil {
		t.Fatal(err)
	}
}

func TestRotation(t *testing.T) {
	old := track.Key{ID: "2026a", Secret: secret('a')}
	next := track.Key{ID: "2026b", Secret: secret('b')}
	before := newSigner(t, "2026a", old)
	during := newSigner(t, "2026b", old, next)
	after := newSigner(t, "2026b", next)

	oldTok, err := before.Sign(token(track.KindClick))
	if err != nil {
		t.Fatal(err)
	}
	newTok, err := during.Sign(token(track.KindClick))
	if err != nil {
		t.Fatal(err)
	}
	// The new key signs: the old ring does not know it.
	if _, err := before.Verify(newTok, t0); !errors.Is(err, track.ErrUnknownKey) {
		t.Fatalf("old ring verifies a new-key token: %v", err)
	}
	// The old key still verifies while it is in the ring.
	for name, tok := range map[string]string{"old": oldTok, "new": newTok} {
		if _, err := during.Verify(tok, t0); err != nil {
			t.Fatalf("%s token during rotation: %v", name, err)
		}
	}
	// Removed, it is refused; the new key's tokens live on.
	if _, err := after.Verify(oldTok, t0); !errors.Is(err, track.ErrUnknownKey) || tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("removed key: %v, want ErrUnknownKey", err)
	}
	if _, err := after.Verify(newTok, t0); err != nil {
		t.Fatal(err)
	}
	// Same id, other secret (a foreign signer): the signature fails.
	foreign := newSigner(t, "2026b", track.Key{ID: "2026b", Secret: secret('z')})
	if _, err := foreign.Verify(newTok, t0); !errors.Is(err, track.ErrSignature) {
		t.Fatalf("foreign secret: %v, want ErrSignature", err)
	}
}

func TestExpiryBoundary(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tk := token(track.KindImp)
	tk.Expires = t0.Add(90*time.Second + 700*time.Millisecond) // kept to the second
	tok, err := s.Sign(tk)
	if err != nil {
		t.Fatal(err)
	}
	exp := t0.Add(90 * time.Second)
	for _, tc := range []struct {
		now  time.Time
		want error
	}{
		{t0, nil},
		{exp.Add(-time.Nanosecond), nil},
		{exp, track.ErrExpired},
		{exp.Add(time.Nanosecond), track.ErrExpired},
		{exp.Add(24 * time.Hour), track.ErrExpired},
	} {
		got, err := s.Verify(tok, tc.now)
		if !errors.Is(err, tc.want) && err != tc.want {
			t.Errorf("now %v: err %v, want %v", tc.now, err, tc.want)
		}
		if tc.want == nil && !got.Expires.Equal(exp) {
			t.Errorf("Expires %v, want %v", got.Expires, exp)
		}
	}
	if _, err := s.Verify(tok, time.Time{}); tsubame.ErrorCode(err) != tsubame.EINTERNAL {
		t.Fatalf("zero now: %v, want an internal error", err)
	}
	if _, err := s.Verify(tok, exp); tsubame.ErrorCode(err) != tsubame.EUNAUTHORIZED {
		t.Fatalf("expired kind %q, want %q", tsubame.ErrorCode(err), tsubame.EUNAUTHORIZED)
	}
}

func TestVerifyKind(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	imp, _ := s.Sign(token(track.KindImp))
	click, _ := s.Sign(token(track.KindClick))
	if _, err := s.VerifyKind(imp, track.KindClick, t0); !errors.Is(err, track.ErrKind) || tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("impression token as a click: %v", err)
	}
	if _, err := s.VerifyKind(click, track.KindImp, t0); !errors.Is(err, track.ErrKind) {
		t.Fatalf("click token as an impression: %v", err)
	}
	if _, err := s.VerifyKind(click, track.KindClick, t0); err != nil {
		t.Fatal(err)
	}
}

// reencode decodes tok, lets edit change the bytes and encodes them again, so
// a test can forge tokens below the base64 layer.
func reencode(t *testing.T, tok string, edit func([]byte) []byte) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(edit(raw))
}

func TestVerifyRefuses(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tok, err := s.Sign(token(track.KindClick))
	if err != nil {
		t.Fatal(err)
	}
	other := newSigner(t, "k2", track.Key{ID: "k2", Secret: secret('a')})
	otherTok, _ := other.Sign(token(track.KindClick))
	last := tok[len(tok)-1]
	for _, tc := range []struct {
		name string
		tok  string
		want error
	}{
		{"empty", "", track.ErrMalformed},
		{"short", "AQJrMQ", track.ErrMalformed},
		{"over the bound", strings.Repeat("A", track.MaxTokenLen+1), track.ErrMalformed},
		{"huge", strings.Repeat("A", 1<<20), track.ErrMalformed},
		{"truncated by one", tok[:len(tok)-1], nil},  // malformed or a bad signature, by the length,
		{"truncated by four", tok[:len(tok)-4], nil}, // malformed or a bad signature, by the length,
		{"truncated to half", tok[:len(tok)/2], nil}, // malformed or a bad signature, by the length,
		{"extended by one", tok + "A", nil},          // malformed or a bad signature, by the length,
		{"extended by four", tok + "AAAA", nil},      // malformed or a bad signature, by the length,
		{"padding", tok + "=", track.ErrMalformed},
		{"newline inside", tok[:10] + "\n" + tok[10:], track.ErrMalformed},
		{"carriage return at end", tok + "\r", track.ErrMalformed},
		{"standard alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(tok) + "+", track.ErrMalformed},
		{"dot", tok[:10] + "." + tok[11:], track.ErrMalformed},
		{"non-canonical last char", tok[:len(tok)-1] + string(last^1), nil}, // malformed or a bad signature
		{"other version", reencode(t, tok, func(b []byte) []byte { b[0] = 6; return b }), track.ErrVersion},
		{"read as version 4", reencode(t, tok, func(b []byte) []byte { b[0] = 4; return b }), track.ErrSignature},
		{"read as version 3", reencode(t, tok, func(b []byte) []byte { b[0] = 3; return b }), track.ErrSignature},
		{"read as version 1", reencode(t, tok, func(b []byte) []byte { b[0] = 1; return b }), track.ErrSignature},
		{"read as version 2", reencode(t, tok, func(b []byte) []byte { b[0] = 2; return b }), track.ErrSignature},
		{"version zero", reencode(t, tok, func(b []byte) []byte { b[0] = 0; return b }), track.ErrVersion},
		{"unknown key", otherTok, track.ErrUnknownKey},
		{"key id length zero", reencode(t, tok, func(b []byte) []byte { b[1] = 0; return b }), track.ErrMalformed},
		{"key id length huge", reencode(t, tok, func(b []byte) []byte { b[1] = 200; return b }), track.ErrMalformed},
		{"MAC dropped", reencode(t, tok, func(b []byte) []byte { return b[:len(b)-32] }), track.ErrSignature},
		{"MAC zeroed", reencode(t, tok, func(b []byte) []byte { clear(b[len(b)-32:]); return b }), track.ErrSignature},
		{"destination swapped", reencode(t, tok, func(b []byte) []byte {
			return bytes.Replace(b, []byte("advertiser.example"), []byte("evil.example.zzzzz"), 1)
		}), track.ErrSignature},
		{"price raised", reencode(t, tok, func(b []byte) []byte { b[2+2+1+8] ^= 0x40; return b }), track.ErrSignature},
		{"expiry moved", reencode(t, tok, func(b []byte) []byte { b[2+2+1+3] ^= 1; return b }), track.ErrSignature},
		{"kind changed", reencode(t, tok, func(b []byte) []byte { b[2+2] = byte(track.KindImp); return b }), track.ErrSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Verify(tc.tok, t0)
			if err == nil {
				t.Fatalf("Verify accepted %q: %+v", tc.tok, got)
			}
			if got != (track.Token{}) {
				t.Fatalf("refused token returns fields: %+v", got)
			}
			if tsubame.ErrorCode(err) != tsubame.EINVALID {
				t.Fatalf("kind %q, want %q", tsubame.ErrorCode(err), tsubame.EINVALID)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// Flipping any bit of any byte of a real token, in its encoded form and in
// its decoded form, is refused.
func TestVerifyRefusesEveryFlip(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, kind := range []track.Kind{track.KindImp, track.KindClick} {
		tok, err := s.Sign(token(kind))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(tok); i++ {
			for bit := 0; bit < 8; bit++ {
				b := []byte(tok)
				b[i] ^= 1 << bit
				if got, err := s.Verify(string(b), t0); err == nil {
					t.Fatalf("%v: encoded byte %d bit %d flipped, accepted %+v", kind, i, bit, got)
				}
			}
		}
		raw, _ := base64.RawURLEncoding.DecodeString(tok)
		for i := range raw {
			for bit := 0; bit < 8; bit++ {
				b := bytes.Clone(raw)
				b[i] ^= 1 << bit
				forged := base64.RawURLEncoding.EncodeToString(b)
				if got, err := s.Verify(forged, t0); err == nil {
					t.Fatalf("%v: raw byte %d bit %d flipped, accepted %+v", kind, i, bit, got)
				}
			}
		}
	}
}

func FuzzVerify(f *testing.F) {
	s := newSigner(f, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, kind := range []track.Kind{track.KindImp, track.KindClick, track.KindWin, track.KindBill, track.KindLoss, track.KindBidImp} {
		tok, err := s.Sign(token(kind))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok)
		f.Add(tok[:len(tok)/2])
	}
	f.Add("")
	f.Add("AQJrMQ")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := s.Verify(in, t0)
		if err != nil {
			if got != (track.Token{}) {
				t.Fatalf("refused token returns fields: %+v", got)
			}
			return
		}
		// Whatever verifies is something Sign would sign: the same bounds hold.
		if _, err := s.Sign(got); err != nil {
			t.Fatalf("verified token %+v does not sign: %v", got, err)
		}
	})
}

var (
	sinkString string
	sinkToken  track.Token
)

func BenchmarkSign(b *testing.B) {
	s := newSigner(b, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tk := token(track.KindClick)
	b.ReportAllocs()
	for b.Loop() {
		tok, err := s.Sign(tk)
		if err != nil {
			b.Fatal(err)
		}
		sinkString = tok
	}
}

func BenchmarkVerify(b *testing.B) {
	s := newSigner(b, "k1", track.Key{ID: "k1", Secret: secret('a')}, track.Key{ID: "k0", Secret: secret('b')})
	tok, err := s.Sign(token(track.KindClick))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(tok)))
	b.ReportAllocs()
	for b.Loop() {
		t, err := s.Verify(tok, t0)
		if err != nil {
			b.Fatal(err)
		}
		sinkToken = t
	}
}

func BenchmarkVerifyRefused(b *testing.B) {
	s := newSigner(b, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tok, _ := s.Sign(token(track.KindClick))
	c := byte('A')
	if tok[20] == c {
		c = 'B'
	}
	bad := tok[:20] + string(c) + tok[21:]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Verify(bad, t0); err == nil {
			b.Fatal("accepted")
		}
	}
}

func BenchmarkVerifyParallel(b *testing.B) {
	s := newSigner(b, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tok, _ := s.Sign(token(track.KindClick))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Verify(tok, t0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A decision without a known visitor signs an empty User, and only an
// empty one: the other ids are required.
func TestSignWithoutUser(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tk := token(track.KindImp)
	tk.User = ""
	tok, err := s.Sign(tk)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Verify(tok, t0)
	if err != nil || got != tk {
		t.Fatalf("got %+v, %v; want %+v", got, err, tk)
	}
	tk.User, tk.Campaign = "u1", ""
	if _, err := s.Sign(tk); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("empty campaign signed: %v", err)
	}
	tk.Campaign, tk.User = "c", "bad user"
	if _, err := s.Sign(tk); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("user with a space signed: %v", err)
	}
}

// The destinations a creative may have sign: any case of scheme, a port,
// an IPv6 literal, a query and fragment without a path.
func TestSignClickAccepts(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, u := range []string{"HTTPS://A.Example/Landing", "http://a.example:8080/x?y=1#z", "https://[2001:db8::1]/",
		"https://a.example?q=1", "https://a.example#top", "https://a.example"} {
		tk := token(track.KindClick)
		tk.Click = u
		tok, err := s.Sign(tk)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		got, err := s.Verify(tok, t0)
		if err != nil || got.Click != u {
			t.Fatalf("%s: %q %v", u, got.Click, err)
		}
	}
}

// A notice's token carries its auction, checked like the rest: an exchange,
// auction and impression id are required, a deal is not, the currency is
// an ISO 4217 code; other kinds carry none of it.
func TestSignNoticeAuction(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	open := token(track.KindBill)
	open.Deal, open.Auction = "", "AB+cd/ef==" // base64, as some exchanges' ids are
	tok, err := s.Sign(open)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Verify(tok, t0); err != nil || got.Deal != "" || got.Exchange != "ssp-1" || got.Currency != "USD" || got.Test {
		t.Fatalf("an open auction's bill: %+v, %v", got, err)
	}
	open.Test = true
	if tok, err = s.Sign(open); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Verify(tok, t0); err != nil || !got.Test {
		t.Fatalf("a test auction's bill: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		edit func(*track.Token)
	}{
		{"no exchange", func(tk *track.Token) { tk.Exchange = "" }},
		{"no auction", func(tk *track.Token) { tk.Auction = "" }},
		{"no imp", func(tk *track.Token) { tk.Imp = "" }},
		{"long auction", func(tk *track.Token) { tk.Auction = strings.Repeat("a", track.MaxIDLen+1) }},
		{"bad deal", func(tk *track.Token) { tk.Deal = "a deal" }},
		{"control character", func(tk *track.Token) { tk.Imp = "1\n" }},
		{"lower-case currency", func(tk *track.Token) { tk.Currency = "usd" }},
		{"no currency", func(tk *track.Token) { tk.Currency = "" }},
	} {
		tk := token(track.KindWin)
		tc.edit(&tk)
		if _, err := s.Sign(tk); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("%s: %v, want EINVALID", tc.name, err)
		}
	}
	imp := token(track.KindImp)
	imp.Exchange = "ssp-1"
	if _, err := s.Sign(imp); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("an impression token with an exchange: %v", err)
	}
}

// A sold slot's impression (KindSale) carries its auction and its billing
// URL, and no line item, campaign or creative of ours; other kinds still
// need them, and a sale's billing URL must be an http(s) URL.
func TestSaleToken(t *testing.T) {
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	want := track.Token{Kind: track.KindSale, Decision: "01JDX8Q5ZK3M9T7A2B4C6D8E0F", Placement: "top", Price: 1_234_567,
		Expires: t0.Add(time.Hour), Exchange: "dsp-a", Auction: "01JDX8Q5ZK3M9T7A2B4C6D8E0F", Imp: "1", Currency: "USD",
		Click: "https://dsp-a.example/bill?p=1.5&id=b-1"}
	tok, err := s.Sign(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.VerifyKind(tok, track.KindSale, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got.LineItem != "" || got.Exchange != "dsp-a" || got.Auction != want.Auction || got.Click != want.Click || got.Price != want.Price {
		t.Fatalf("got %+v", got)
	}
	if _, err := s.VerifyKind(tok, track.KindImp, t0); err == nil {
		t.Fatal("a sale's token verified as a direct impression's")
	}
	want.Click = ""
	if _, err := s.Sign(want); err != nil {
		t.Fatalf("a sale without a billing URL: %v", err)
	}
	for _, bad := range []string{"javascript:alert(1)", "ftp://x.example/", "https://x.example/a b"} {
		want.Click = bad
		if _, err := s.Sign(want); err == nil {
			t.Errorf("a sale signed with billing URL %q", bad)
		}
	}
	imp := token(track.KindImp)
	imp.LineItem = ""
	if _, err := s.Sign(imp); err == nil {
		t.Fatal("an impression signed without a line item")
	}
}

// A bid's notice tokens signed by one NoticeSigner are the tokens Sign
// writes for each kind, each verifying as its kind only; a kind that is
// not a notice, a token Sign would refuse, and a closed signer sign
// nothing (TestNoticeSignerAllocations: and signing allocates nothing).
func TestNoticeSigner(t *testing.T) {
	kinds := []track.Kind{track.KindWin, track.KindBill, track.KindLoss, track.KindBidImp, track.KindWin}
	// Key ids and visitors of every length modulo 3: the kind's byte and
	// the MAC fall at every place in base64's groups of three.
	for _, id := range []string{"k", "k1", "k12", "k123"} {
		for _, user := range []string{"u-9f8e", "u-9f8e1", "u-9f8e12", ""} {
			s := newSigner(t, id, track.Key{ID: id, Secret: secret('a')})
			tk := token(track.KindWin)
			tk.User = user
			tk.Kind = track.KindClick // ignored: every notice kind carries the same fields
			ns, err := s.Notices(tk)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, kind := range kinds {
				got, err := ns.AppendSign([]byte("prefix/"), kind)
				if err != nil {
					t.Fatalf("%v: %v", kind, err)
				}
				tok, ok := strings.CutPrefix(string(got), "prefix/")
				if !ok {
					t.Fatalf("%v: the prefix is gone: %q", kind, got)
				}
				one := token(kind)
				one.User = user
				want, err := s.Sign(one)
				if err != nil {
					t.Fatal(err)
				}
				if tok != want {
					t.Errorf("key %s, user %q, %v: %s, Sign writes %s", id, user, kind, tok, want)
				}
				seen[tok] = true
				for _, other := range kinds[:4] {
					v, err := s.VerifyKind(tok, other, t0)
					if other == kind && (err != nil || v.Kind != kind || v.User != one.User || v.Auction != one.Auction) {
						t.Errorf("%v as itself: %+v, %v", kind, v, err)
					}
					if other != kind && err != track.ErrKind {
						t.Errorf("%v as %v: %v, want ErrKind", kind, other, err)
					}
				}
			}
			if len(seen) != 4 {
				t.Errorf("%d distinct tokens for 4 kinds", len(seen))
			}
			ns.Close()
		}
	}
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	ns, err := s.Notices(token(track.KindWin))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []track.Kind{track.KindImp, track.KindClick, track.KindSale, 0, 99} {
		if got, err := ns.AppendSign([]byte("x"), kind); err != track.ErrKind || string(got) != "x" {
			t.Errorf("kind %v: %q, %v; want nothing appended and ErrKind", kind, got, err)
		}
	}
	ns.Close()
	ns.Close() // twice is harmless
	if got, err := ns.AppendSign([]byte("x"), track.KindWin); err == nil || err == track.ErrKind || string(got) != "x" {
		t.Errorf("after Close: %q, %v; want nothing appended and an error of its own", got, err)
	}
	bad := token(track.KindWin)
	bad.Auction = ""
	if _, err := s.Notices(bad); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("a notice without its auction: %v, want EINVALID", err)
	}
	click := token(track.KindClick) // a destination is a click's only
	if _, err := s.Notices(click); tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("a notice with a destination: %v, want EINVALID", err)
	}
}

// The click tracker a NoticeSigner signs with its notices is the token
// Sign writes for the click of the same bid: the notices' ids, visitor,
// origin, expiry and test flag, the destination, and no price,
// reservation, holder or auction. A destination Sign would refuse, and a
// closed signer, sign nothing.
func TestNoticeSignerClick(t *testing.T) {
	dest := "https://advertiser.example/landing?utm_source=tsubame&x=%20y#top"
	for _, id := range []string{"k", "k1", "k12"} {
		for _, user := range []string{"u-9f8e", "u-9f8e1", ""} {
			for _, test := range []bool{false, true} {
				for _, holder := range []string{"", "node-1"} {
					s := newSigner(t, id, track.Key{ID: id, Secret: secret('a')})
					tk := token(track.KindWin)
					tk.User, tk.Test, tk.Holder = user, test, holder
					ns, err := s.Notices(tk)
					if err != nil {
						t.Fatal(err)
					}
					// Before and after the notices: the click does not
					// change what they sign.
					before, err := ns.AppendClick([]byte("prefix/"), dest)
					if err != nil {
						t.Fatal(err)
					}
					win, err := ns.AppendSign(nil, track.KindWin)
					if err != nil {
						t.Fatal(err)
					}
					after, err := ns.AppendClick(nil, dest)
					if err != nil {
						t.Fatal(err)
					}
					ns.Close()
					click := track.Token{Kind: track.KindClick, Decision: tk.Decision, LineItem: tk.LineItem, Campaign: tk.Campaign,
						Creative: tk.Creative, Placement: tk.Placement, User: user, Click: dest, Expires: tk.Expires,
						Origin: tk.Origin, Test: test}
					want, err := s.Sign(click)
					if err != nil {
						t.Fatal(err)
					}
					wantWin, err := s.Sign(tk)
					if err != nil {
						t.Fatal(err)
					}
					name := fmt.Sprintf("key %s, user %q, test %v, holder %q", id, user, test, holder)
					if string(before) != "prefix/"+want || string(after) != want {
						t.Errorf("%s: clicks %s and %s, Sign writes %s", name, before, after, want)
					}
					if string(win) != wantWin {
						t.Errorf("%s: the win after a click %s, Sign writes %s", name, win, wantWin)
					}
					v, err := s.VerifyKind(want, track.KindClick, t0)
					if err != nil || v.User != user || v.Click != dest || v.Price != 0 || !v.Reserved.IsZero() || v.Holder != "" ||
						v.Auction != "" || v.Test != test || v.Origin != tk.Origin {
						t.Errorf("%s: the click verifies as %+v, %v", name, v, err)
					}
				}
			}
		}
	}
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	ns, err := s.Notices(token(track.KindWin))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "javascript:alert(1)", "https://a.example/\\x", "/relative", "https://a.example/ space"} {
		if got, err := ns.AppendClick([]byte("x"), bad); tsubame.ErrorCode(err) != tsubame.EINVALID || string(got) != "x" {
			t.Errorf("destination %q: %q, %v; want nothing appended and EINVALID", bad, got, err)
		}
	}
	ns.Close()
	if got, err := ns.AppendClick([]byte("x"), dest); err == nil || string(got) != "x" {
		t.Errorf("after Close: %q, %v; want nothing appended and an error", got, err)
	}
}

// A decision's impression and click tokens signed together are those
// Sign writes for each: the click is the impression's token with
// KindClick, no holder and its destination, price and reservation kept.
// Another kind, a token Sign would refuse and a bad destination sign
// nothing.
func TestAppendImpClick(t *testing.T) {
	dest := "https://advertiser.example/landing?utm_source=tsubame&x=%20y#top"
	for _, id := range []string{"k", "k1", "k12"} {
		for _, user := range []string{"u-9f8e", "u-9f8e1", ""} {
			for _, holder := range []string{"", "node-1"} {
				for _, reserved := range []bool{false, true} {
					s := newSigner(t, id, track.Key{ID: id, Secret: secret('a')})
					tk := token(track.KindImp)
					tk.User, tk.Holder = user, holder
					if !reserved {
						tk.Reserved = time.Time{}
					}
					imp, click, err := s.AppendImpClick([]byte("i/"), []byte("c/"), tk, dest)
					if err != nil {
						t.Fatal(err)
					}
					wantImp, err := s.Sign(tk)
					if err != nil {
						t.Fatal(err)
					}
					ct := tk
					ct.Kind, ct.Holder, ct.Click = track.KindClick, "", dest
					wantClick, err := s.Sign(ct)
					if err != nil {
						t.Fatal(err)
					}
					name := fmt.Sprintf("key %s, user %q, holder %q, reserved %v", id, user, holder, reserved)
					if string(imp) != "i/"+wantImp || string(click) != "c/"+wantClick {
						t.Errorf("%s: %s and %s, Sign writes %s and %s", name, imp, click, wantImp, wantClick)
					}
					v, err := s.VerifyKind(wantClick, track.KindClick, t0)
					if err != nil || v.User != user || v.Click != dest || v.Price != tk.Price || !v.Reserved.Equal(tk.Reserved.Truncate(time.Second)) ||
						v.Holder != "" || v.Origin != tk.Origin {
						t.Errorf("%s: the click verifies as %+v, %v", name, v, err)
					}
				}
			}
		}
	}
	s := newSigner(t, "k1", track.Key{ID: "k1", Secret: secret('a')})
	for _, kind := range []track.Kind{track.KindClick, track.KindWin, track.KindSale} {
		if imp, click, err := s.AppendImpClick([]byte("i"), []byte("c"), token(kind), dest); err != track.ErrKind || string(imp) != "i" || string(click) != "c" {
			t.Errorf("kind %v: %q %q %v; want nothing appended and ErrKind", kind, imp, click, err)
		}
	}
	bad := token(track.KindImp)
	bad.LineItem = ""
	if imp, click, err := s.AppendImpClick([]byte("i"), []byte("c"), bad, dest); tsubame.ErrorCode(err) != tsubame.EINVALID || string(imp) != "i" || string(click) != "c" {
		t.Errorf("no line item: %q %q %v; want nothing appended and EINVALID", imp, click, err)
	}
	if imp, click, err := s.AppendImpClick([]byte("i"), []byte("c"), token(track.KindImp), "javascript:alert(1)"); tsubame.ErrorCode(err) != tsubame.EINVALID || string(imp) != "i" || string(click) != "c" {
		t.Errorf("a bad destination: %q %q %v; want nothing appended and EINVALID", imp, click, err)
	}
}

func BenchmarkNoticeSigner(b *testing.B) {
	s := newSigner(b, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tk := token(track.KindWin)
	buf := make([]byte, 0, 4*track.MaxTokenLen)
	b.ReportAllocs()
	for b.Loop() {
		ns, err := s.Notices(tk)
		if err != nil {
			b.Fatal(err)
		}
		out := buf[:0]
		for _, kind := range [...]track.Kind{track.KindWin, track.KindBill, track.KindLoss} {
			if out, err = ns.AppendSign(out, kind); err != nil {
				b.Fatal(err)
			}
		}
		ns.Close()
	}
}

func BenchmarkNoticeSignEach(b *testing.B) {
	s := newSigner(b, "k1", track.Key{ID: "k1", Secret: secret('a')})
	buf := make([]byte, 0, 4*track.MaxTokenLen)
	b.ReportAllocs()
	for b.Loop() {
		out := buf[:0]
		for _, kind := range [...]track.Kind{track.KindWin, track.KindBill, track.KindLoss} {
			tk := token(kind)
			var err error
			if out, err = s.AppendSign(out, tk); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkImpClick is a decision's impression and click tokens signed
// together (AppendImpClick); BenchmarkImpClickEach, the same two signed
// one by one.
func BenchmarkImpClick(b *testing.B) {
	s := newSigner(b, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tk, dest := token(track.KindImp), token(track.KindClick).Click
	imp, click := make([]byte, 0, track.MaxTokenLen), make([]byte, 0, track.MaxTokenLen)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.AppendImpClick(imp, click, tk, dest); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkImpClickEach(b *testing.B) {
	s := newSigner(b, "k1", track.Key{ID: "k1", Secret: secret('a')})
	tk := token(track.KindImp)
	ct := tk
	ct.Kind, ct.Click = track.KindClick, token(track.KindClick).Click
	imp, click := make([]byte, 0, track.MaxTokenLen), make([]byte, 0, track.MaxTokenLen)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.AppendSign(imp, tk); err != nil {
			b.Fatal(err)
		}
		if _, err := s.AppendSign(click, ct); err != nil {
			b.Fatal(err)
		}
	}
}
