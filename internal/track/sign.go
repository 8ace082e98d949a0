package track

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"

	"tsubame"
)

// Kind is the event a signed URL reports.
type Kind uint8

// The event kinds. Their values are part of the signed wire form: never
// renumber one, only add.
const (
	KindImp   Kind = 1 // an impression
	KindClick Kind = 2 // a click; the only kind that carries a destination
	KindWin   Kind = 3 // an auction win notice
	KindBill  Kind = 4 // a billing notice
	KindLoss  Kind = 5 // an auction loss notice
	// KindBidImp is a bid's impression as its markup fires it: the VAST
	// impression a video player calls, the pixel of a banner's markup. A
	// viewer's browser calls it, not the exchange, so it carries the
	// bid's auction like a notice but its URL takes no clearing price.
	KindBidImp Kind = 6
	// KindSale is the impression of a sold slot: the page fires it (the
	// impression URL /api/decide answers with, as for a direct
	// decision's) when a demand partner's winning bid is shown. It
	// carries the auction (the partner as Exchange) and, in Click, the
	// bid's billing URL (burl), called once the impression is counted;
	// its line item, campaign and creative ids are empty (the partner's
	// creative is not ours).
	KindSale Kind = 7
)

// maxKind is the largest kind.
const maxKind = KindSale

var kindNames = [...]string{KindImp: "imp", KindClick: "click", KindWin: "win", KindBill: "bill", KindLoss: "loss",
	KindBidImp: "bid_imp", KindSale: "sale"}

// String returns the kind's name as the access log writes it.
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return "unknown"
}

func (k Kind) valid() bool { return k >= KindImp && k <= maxKind }

// Notice reports whether k is an event of a bid (an exchange's win,
// billing or loss notice, or the impression of the bid's markup), whose
// tokens carry their auction.
func (k Kind) Notice() bool { return k >= KindWin && k <= KindLoss || k == KindBidImp }

// auctioned reports whether k's tokens carry an auction: a notice's, and
// a sold slot's impression.
func (k Kind) auctioned() bool { return k.Notice() || k == KindSale }

// sold reports whether an id of a token of kind k may be empty: the line
// item, campaign and creative (i 1 to 3) of a sale.
func (k Kind) sold(i int) bool { return k == KindSale && i >= 1 && i <= 3 }

// Bounds of what a token carries. They are tighter than the model's
// (tsubame.MaxIDLength, tsubame.MaxURLLength) on purpose: a tracking URL is
// refused by its length before any work, so every field must fit in it.
const (
	MaxIDLen     = 64                     // bytes in a decision, line item, creative or placement id
	MaxSiteLen   = 253                    // bytes in a site's domain or an app's bundle (a DNS name's bound)
	MaxDeviceLen = 16                     // bytes in a device type (desktop, mobile, tablet, tv, ...)
	MaxClickLen  = tsubame.MaxClickLength // bytes in a click destination
	MaxKeyIDLen  = 8                      // bytes in a key id
	MinSecret    = 32                     // bytes in a key's secret, at least
	MaxSecret    = 256                    // bytes in a key's secret, at most
	MaxKeys      = 16                     // keys in a ring
)

// flagTest is the flags byte's bit of a test auction's or decision's
// token (every kind's since version 4, a notice's before).
const flagTest = 1

const (
	// version is the format Sign writes. Version 1 had no reservation
	// deadline, version 2 no origin (advertiser, site, country, device),
	// version 3 carried the visitor in clear and a flags byte only in a
	// notice's; Verify still reads them (the missing fields zero), so
	// that URLs made before an upgrade are honoured until they expire.
	version  = 5
	version4 = 4
	version3 = 3
	version2 = 2
	version1 = 1
	macLen   = sha256.Size
	// maxRaw is the longest decoded token: version, key id, kind, expiry,
	// price, reservation deadline, five ids and the visitor, the click
	// destination and the MAC (a click's destination is longer than what a
	// notice carries instead: its auction's four ids and currency), and
	// the origin: advertiser, site, country and device.
	maxRaw = 1 + 1 + MaxKeyIDLen + 1 + 8 + 8 + 8 + 6*(1+MaxIDLen) + 1 + 2 + MaxClickLen + macLen +
		(1 + MaxIDLen) + (1 + MaxSiteLen) + (1 + 2) + (1 + MaxDeviceLen) +
		(1 + tsubame.MaxHolderLength)
	// minRaw is the shortest, of version 1.
	minRaw = 1 + 1 + 1 + 1 + 8 + 8 + 5*(1+1) + 1 + 2 + macLen
)

// MaxTokenLen is the longest encoded token Verify looks at; anything longer is
// refused before it is decoded.
const MaxTokenLen = (maxRaw*8 + 5) / 6

const minTokenLen = (minRaw*8 + 5) / 6

// Token is what a signed tracking URL says. Verify returns it only from the
// signed part, so every field is as the signer wrote it.
type Token struct {
	Kind      Kind
	Decision  string
	LineItem  string
	Campaign  string
	Creative  string
	Placement string
	// User is the visitor the decision was made for: empty when unknown
	// (or ruled out by a privacy signal), else an id like the others. It
	// travels enciphered: a tracking URL sits in pages that must not learn
	// a visitor id the browser keeps from their scripts (an HttpOnly
	// cookie's), and two URLs of one visitor do not look alike.
	User string
	// Click is the absolute http(s) URL a click leads to; set for KindClick
	// and empty for every other kind.
	Click string
	// Price is the CPM in micro-units of the account currency.
	Price tsubame.Money
	// Expires is when the token stops verifying. It is kept to the second
	// (truncated); a token is expired from that instant on.
	Expires time.Time
	// Reserved is when the money the decision reserved for this event is
	// released, kept to the second (truncated): an impression from that
	// instant on is late, still counted but past its reservation (see
	// internal/budget). Zero: nothing was reserved (a line item without a
	// budget or a limit, or a token of version 1).
	Reserved time.Time

	// The auction of a notice (KindWin, KindBill, KindLoss, KindBidImp;
	// empty for the other kinds): the exchange's name, the bid request's and the
	// impression's ids, the deal (empty for an open auction's bid) and the
	// bid's currency (ISO 4217), in which Price is then the bid's price.
	// Decision is the bid's id.
	Exchange, Auction, Imp, Deal string
	Currency                     string
	// Test marks an event of a test auction (OpenRTB's test=1), a notice
	// or the click of its markup: never counted or billed.
	Test bool
	// Holder is the node holding the money the decision or bid reserved
	// (the budget ledger's holder), to whose queue its outcomes go
	// (tsubame.Outcomes); empty when nothing is held.
	Holder string

	// Origin is where the event comes from, for the reports.
	Origin
}

// Origin is where an event comes from, as the decision or the bid saw it:
// the reports' dimensions that the ids do not give. An impression or a
// billing notice may reach any node, and its line then says where it came
// from without a lookup. Each field may be empty (unknown).
type Origin struct {
	Advertiser string // the id of the advertiser the campaign belongs to
	Site       string // the site's domain or the app's bundle
	Country    string // the visitor's, ISO 3166-1 alpha-2, upper case
	Device     string // the device type (desktop, mobile, tablet, tv)
}

// Clean returns o with each value a token cannot carry emptied: Sign
// refuses such values, and an origin is told, not checked, by callers
// (a device parser's, an exchange's).
func (o Origin) Clean() Origin {
	if o.Advertiser != "" && !validID(o.Advertiser) {
		o.Advertiser = ""
	}
	if !ValidSite(o.Site) {
		o.Site = ""
	}
	if !ValidCountry(o.Country) {
		o.Country = ""
	}
	if !ValidDevice(o.Device) {
		o.Device = ""
	}
	return o
}

// The refusals of Verify. Each is a *tsubame.Error whose kind maps to a 4xx
// status; compare with errors.Is. They are shared values: do not modify them.
var (
	// ErrMalformed: not a token of ours (bad length, alphabet, encoding or layout).
	ErrMalformed = &tsubame.Error{Code: tsubame.EINVALID, Message: "malformed tracking token"}
	// ErrVersion: a token of a format version this build does not know.
	ErrVersion = &tsubame.Error{Code: tsubame.EINVALID, Message: "unknown tracking token version"}
	// ErrUnknownKey: signed with a key not in the ring (foreign, or rotated out).
	ErrUnknownKey = &tsubame.Error{Code: tsubame.EINVALID, Message: "tracking token signed with an unknown key"}
	// ErrSignature: the MAC does not match; the token was altered.
	ErrSignature = &tsubame.Error{Code: tsubame.EINVALID, Message: "bad tracking token signature"}
	// ErrKind: a valid token, but for another event kind than the caller expects.
	ErrKind = &tsubame.Error{Code: tsubame.EINVALID, Message: "tracking token for another event kind"}
	// ErrExpired: a valid token past its expiry; ours, but no longer honoured.
	ErrExpired = &tsubame.Error{Code: tsubame.EUNAUTHORIZED, Message: "tracking token expired"}
)

var errNoClock = &tsubame.Error{Code: tsubame.EINTERNAL, Message: "track: Verify called without the time"}

// Key is one signing key of a ring. Its String and GoString never show the
// secret, so a Key printed by mistake leaks nothing.
type Key struct {
	ID     string // 1 to 8 bytes of [a-z0-9]; not secret, it travels in every token
	Secret []byte // at least MinSecret bytes
}

// String returns the key id only.
func (k Key) String() string { return "key " + k.ID + " (secret redacted)" }

// GoString returns the key id only.
func (k Key) GoString() string { return k.String() }

type ringKey struct {
	id     string
	secret []byte
	// macs holds hmac hashes of this key for reuse: hmac.New allocates, and
	// Verify is on the request path.
	macs sync.Pool
	// visitor is the key of the visitor's cipher, derived from the
	// secret; visitors holds hmac hashes of it.
	visitor  []byte
	visitors sync.Pool
}

// visitorLabel derives a key's visitor cipher key from its secret.
const visitorLabel = "tsubame track visitor v4"

// cipherVisitor enciphers or deciphers (the same XOR) the visitor id u
// of the token of decision d in place: a keystream of HMAC-SHA256 blocks
// of the visitor key over the decision and the block's number. Decision
// ids are unique (random), so no two visitors share a keystream, and the
// token's MAC covers the result. The keystream is kept in sc for the next
// token of the same decision and key: a bid lays out its notices' token
// (NoticeSigner) and then its click's, one after the other on one
// goroutine, which the pool most often hands the same scratch. u is at
// most MaxIDLen bytes.
func (k *ringKey) cipherVisitor(u, d []byte, sc *scratch) {
	if sc.ksKey != k || string(sc.ksDecision[:sc.ksDecisionLen]) != string(d) {
		sc.ksKey, sc.ksDecisionLen, sc.ksLen = k, copy(sc.ksDecision[:], d), 0
	}
	if sc.ksLen < len(u) {
		h, _ := k.visitors.Get().(hash.Hash)
		if h == nil {
			h = hmac.New(sha256.New, k.visitor)
		}
		for ; sc.ksLen < len(u); sc.ksLen += macLen {
			h.Reset()
			h.Write(d)
			sc.block[0] = byte(sc.ksLen / macLen)
			h.Write(sc.block[:])
			h.Sum(sc.ks[sc.ksLen:sc.ksLen])
		}
		k.visitors.Put(h)
	}
	for i := range u {
		u[i] ^= sc.ks[i]
	}
}

func (k *ringKey) mac(dst, msg []byte) []byte {
	h, _ := k.macs.Get().(hash.Hash)
	if h == nil {
		h = hmac.New(sha256.New, k.secret)
	} else {
		h.Reset()
	}
	h.Write(msg)
	dst = h.Sum(dst)
	k.macs.Put(h)
	return dst
}

// scratch is the working memory of one Sign or Verify. It is pooled rather
// than on the stack because the hash takes its input through an interface,
// which would move a stack buffer to the heap on every call.
type scratch struct {
	raw   [maxRaw]byte
	click [maxRaw]byte // a click's message, made from raw's notices (NoticeSigner.AppendClick)
	enc   [MaxTokenLen]byte
	sum   [macLen]byte
	block [1]byte
	// The keystream of the last visitor ciphered (cipherVisitor): its
	// first ksLen bytes, for the decision and key it was derived for.
	ksKey         *ringKey
	ksDecision    [MaxIDLen]byte
	ksDecisionLen int
	ks            [(MaxIDLen + macLen - 1) / macLen * macLen]byte
	ksLen         int
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// Signer signs and verifies tracking tokens with a ring of keys: it signs with
// the current key and verifies with any key in the ring, so a key is rotated
// by adding the new one as current and dropping the old one only after the
// longest expiry it signed has passed. A Signer is immutable and safe for
// concurrent use; Sign and Verify return strings the caller may keep.
type Signer struct {
	keys    []*ringKey
	current *ringKey
}

// NewSigner returns a Signer over keys that signs with the key named current.
// It copies the secrets. Errors name keys by position and id, never by secret.
func NewSigner(current string, keys ...Key) (*Signer, error) {
	if len(keys) == 0 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "no signing keys")
	}
	if len(keys) > MaxKeys {
		return nil, tsubame.Errorf(tsubame.EINVALID, "more than %d signing keys", MaxKeys)
	}
	s := &Signer{keys: make([]*ringKey, 0, len(keys))}
	for i, k := range keys {
		if !validKeyID(k.ID) {
			// The bad id is not echoed: a secret pasted in the wrong field
			// must not reach a log.
			return nil, tsubame.Errorf(tsubame.EINVALID, "signing key %d: id must be 1 to %d characters of a-z and 0-9", i+1, MaxKeyIDLen)
		}
		if len(k.Secret) < MinSecret || len(k.Secret) > MaxSecret {
			return nil, tsubame.Errorf(tsubame.EINVALID, "signing key %q: secret must be %d to %d bytes", k.ID, MinSecret, MaxSecret)
		}
		for _, o := range s.keys {
			if o.id == k.ID {
				return nil, tsubame.Errorf(tsubame.EINVALID, "signing key %q given twice", k.ID)
			}
		}
		rk := &ringKey{id: k.ID, secret: append([]byte(nil), k.Secret...)}
		vk := hmac.New(sha256.New, rk.secret)
		vk.Write([]byte(visitorLabel))
		rk.visitor = vk.Sum(nil)
		s.keys = append(s.keys, rk)
		if k.ID == current {
			s.current = rk
		}
	}
	if s.current == nil {
		return nil, tsubame.Errorf(tsubame.EINVALID, "current signing key is not in the ring")
	}
	return s, nil
}

// String names the keys, never their secrets.
func (s *Signer) String() string {
	ids := make([]string, len(s.keys))
	for i, k := range s.keys {
		ids[i] = k.id
	}
	return fmt.Sprintf("track.Signer{current: %s, keys: %v}", s.current.id, ids)
}

// GoString names the keys, never their secrets.
func (s *Signer) GoString() string { return s.String() }

func validKeyID(id string) bool {
	if len(id) == 0 || len(id) > MaxKeyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Sign returns t as a URL-safe token (base64url without padding) signed with
// the current key. It refuses, as EINVALID, a token that Verify would not
// accept: an unknown kind, an id out of bounds, a missing or negative value,
// or a click destination that is not an absolute http(s) URL.
func (s *Signer) Sign(t Token) (string, error) {
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	enc, err := s.AppendSign(sc.enc[:0], t)
	if err != nil {
		return "", err
	}
	return string(enc), nil
}

// AppendSign is Sign appending the token to dst: a caller building a whole
// tracking URL in a buffer makes one string of it, not two.
func (s *Signer) AppendSign(dst []byte, t Token) ([]byte, error) {
	if err := checkToken(&t); err != nil {
		return dst, err
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	msg, _ := s.layout(sc, &t)
	return base64.RawURLEncoding.AppendEncode(dst, s.current.mac(msg, msg)), nil
}

// laidOut is where layout put a token's parts in its message.
type laidOut struct {
	kind   int // the kind's byte; the expiry, price and reservation follow it
	origin int // the end of the ten ids and origin fields (the auction's follow a notice's)
	flags  int // the flags' byte; the holder and the destination follow it
}

// layout writes t's signed part into sc.raw, with the current key, and
// returns it and where its parts are.
func (s *Signer) layout(sc *scratch, t *Token) (msg []byte, at laidOut) {
	b := sc.raw[:0]
	b = append(b, version, byte(len(s.current.id)))
	b = append(b, s.current.id...)
	at.kind = len(b)
	b = append(b, byte(t.Kind))
	b = binary.BigEndian.AppendUint64(b, uint64(t.Expires.Unix()))
	b = binary.BigEndian.AppendUint64(b, uint64(t.Price))
	var reserved int64
	if !t.Reserved.IsZero() {
		reserved = t.Reserved.Unix()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(reserved))
	decision := len(b) + 1 // where the decision id starts
	for i, f := range [...]string{t.Decision, t.LineItem, t.Campaign, t.Creative, t.Placement, t.User,
		t.Advertiser, t.Site, t.Country, t.Device} {
		b = append(b, byte(len(f)))
		b = append(b, f...)
		if i == 5 && f != "" {
			s.current.cipherVisitor(b[len(b)-len(f):], b[decision:decision+len(t.Decision)], sc)
		}
	}
	at.origin = len(b)
	if t.Kind.auctioned() {
		for _, f := range [...]string{t.Exchange, t.Auction, t.Imp, t.Deal, t.Currency} {
			b = append(b, byte(len(f)))
			b = append(b, f...)
		}
	}
	var flags byte
	if t.Test {
		flags |= flagTest
	}
	at.flags = len(b)
	b = append(b, flags)
	b = append(b, byte(len(t.Holder)))
	b = append(b, t.Holder...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(t.Click)))
	b = append(b, t.Click...)
	return b, at
}

// NoticeSigner signs one bid's token for each of its notices (its win,
// billing and loss URLs, its markup's impression): the token is checked
// and laid out once, and each kind costs only its MAC and encoding. The
// tokens are those AppendSign writes. It holds pooled memory until Close,
// is not safe for concurrent use, and must not be copied (go vet says
// so): a copy would sign into memory the pool has handed on.
type NoticeSigner struct {
	_   noCopy
	s   *Signer
	sc  *scratch
	msg []byte
	at  laidOut
	// The base64url of the token's bytes up to the group of 3 its MAC
	// starts in, in sc.enc once the first kind is signed: the same for
	// every kind but the group of the kind's byte, which is encoded anew.
	encoded int
}

// Notices checks t for signing as a notice (its Kind is ignored: every
// notice kind carries the same fields) and lays it out.
func (s *Signer) Notices(t Token) (NoticeSigner, error) {
	t.Kind = KindWin
	if err := checkToken(&t); err != nil {
		return NoticeSigner{}, err
	}
	sc := scratches.Get().(*scratch)
	msg, at := s.layout(sc, &t)
	return NoticeSigner{s: s, sc: sc, msg: msg, at: at}, nil
}

// noCopy makes go vet's copylocks check refuse a copy of what holds it.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// errSignerClosed is a NoticeSigner used after Close (or never opened): a
// caller's bug, not the token's.
var errSignerClosed = errors.New("track: NoticeSigner used after Close")

// AppendSign appends the token of kind, a notice kind (Kind.Notice), to
// dst; another kind is ErrKind.
func (n *NoticeSigner) AppendSign(dst []byte, kind Kind) ([]byte, error) {
	if n.sc == nil {
		return dst, errSignerClosed
	}
	if !kind.Notice() {
		return dst, ErrKind
	}
	n.msg[n.at.kind] = byte(kind)
	raw := n.s.current.mac(n.msg, n.msg)
	enc := base64.RawURLEncoding
	g, h := n.at.kind/3, len(n.msg)/3 // the groups of the kind's byte and of the MAC's first
	if g >= h {
		return enc.AppendEncode(dst, raw), nil
	}
	if n.encoded == 0 {
		n.encoded = 4 * h
		enc.Encode(n.sc.enc[:n.encoded], raw[:3*h])
	}
	dst = append(dst, n.sc.enc[:n.encoded]...)
	at := len(dst) - n.encoded + 4*g
	enc.Encode(dst[at:at+4], raw[3*g:3*g+3])
	return enc.AppendEncode(dst, raw[3*h:]), nil
}

// AppendClick appends the token of the click tracker that goes with the
// notices (a bid's markup's): the token AppendSign writes for a Token of
// KindClick with the notices' decision, line item, campaign, creative,
// placement, visitor, origin, expiry and test flag, destination click,
// and no price, reservation, holder or auction. Those fields were checked
// and the visitor enciphered once, by Notices: only click is checked
// (checkClick), and the click's message is the notices' with its kind,
// price and reservation rewritten and its auction and holder left out.
func (n *NoticeSigner) AppendClick(dst []byte, click string) ([]byte, error) {
	if n.sc == nil {
		return dst, errSignerClosed
	}
	if err := checkClick(click); err != nil {
		return dst, err
	}
	b := clickMessage(n.sc.click[:0], n.msg, n.at, click, false)
	return base64.RawURLEncoding.AppendEncode(dst, n.s.current.mac(b, b)), nil
}

// clickMessage appends to dst the message of the click token that goes
// with msg (a token laid out at at): msg up to the end of its origin with
// kind KindClick, its price and reservation kept or zeroed, msg's flags,
// no holder and destination click.
func clickMessage(dst, msg []byte, at laidOut, click string, keepPrice bool) []byte {
	b := append(dst, msg[:at.origin]...)
	b[at.kind] = byte(KindClick)
	if !keepPrice {
		clear(b[at.kind+1+8 : at.kind+1+8+8+8]) // the price and the reservation, after the expiry
	}
	b = append(b, msg[at.flags], 0) // the flags; no holder
	b = binary.BigEndian.AppendUint16(b, uint16(len(click)))
	return append(b, click...)
}

// AppendImpClick appends to imp the token of t, an impression's (KindImp),
// and to click the token of its click: t with KindClick, no holder and
// destination dest, its price and reservation kept (a decision's
// impression and click URLs). The tokens are those AppendSign writes for
// each; t is checked, laid out and its visitor enciphered once.
func (s *Signer) AppendImpClick(imp, click []byte, t Token, dest string) ([]byte, []byte, error) {
	if t.Kind != KindImp {
		return imp, click, ErrKind
	}
	if err := checkToken(&t); err != nil {
		return imp, click, err
	}
	if err := checkClick(dest); err != nil {
		return imp, click, err
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	msg, at := s.layout(sc, &t)
	b := clickMessage(sc.click[:0], msg, at, dest, true)
	enc := base64.RawURLEncoding
	return enc.AppendEncode(imp, s.current.mac(msg, msg)), enc.AppendEncode(click, s.current.mac(b, b)), nil
}

// Close gives back n's memory; n signs nothing after it.
func (n *NoticeSigner) Close() {
	if n.sc != nil {
		scratches.Put(n.sc)
		n.sc, n.msg = nil, nil
	}
}

func checkToken(t *Token) error {
	if !t.Kind.valid() {
		return tsubame.Errorf(tsubame.EINVALID, "unknown event kind %d", t.Kind)
	}
	for i, f := range [...]struct{ name, v string }{
		{"decision", t.Decision}, {"line item", t.LineItem}, {"campaign", t.Campaign}, {"creative", t.Creative}, {"placement", t.Placement},
	} {
		if !validID(f.v) && !(t.Kind.sold(i) && f.v == "") {
			return tsubame.Errorf(tsubame.EINVALID, "%s id must be 1 to %d bytes of letters, digits and -_.:@", f.name, MaxIDLen)
		}
	}
	if t.User != "" && !validID(t.User) {
		return tsubame.Errorf(tsubame.EINVALID, "user id must be 1 to %d bytes of letters, digits and -_.:@", MaxIDLen)
	}
	if t.Advertiser != "" && !validID(t.Advertiser) {
		return tsubame.Errorf(tsubame.EINVALID, "advertiser id must be 1 to %d bytes of letters, digits and -_.:@", MaxIDLen)
	}
	if !ValidSite(t.Site) {
		return tsubame.Errorf(tsubame.EINVALID, "site must be up to %d bytes of printable ASCII without spaces", MaxSiteLen)
	}
	if !ValidCountry(t.Country) {
		return tsubame.Errorf(tsubame.EINVALID, "country must be empty or two upper-case letters")
	}
	if !ValidDevice(t.Device) {
		return tsubame.Errorf(tsubame.EINVALID, "device must be up to %d bytes of a-z and -", MaxDeviceLen)
	}
	if t.Price < 0 {
		return tsubame.Errorf(tsubame.EINVALID, "negative price")
	}
	if t.Holder != "" && !validHolder(t.Holder) {
		return tsubame.Errorf(tsubame.EINVALID, "holder must be up to %d bytes of printable ASCII without spaces or '|'", tsubame.MaxHolderLength)
	}
	if t.Expires.Unix() <= 0 {
		return tsubame.Errorf(tsubame.EINVALID, "missing expiry")
	}
	if !t.Reserved.IsZero() && t.Reserved.Unix() <= 0 {
		return tsubame.Errorf(tsubame.EINVALID, "reservation deadline before 1970")
	}
	if t.Kind.auctioned() {
		for _, f := range [...]struct{ name, v string }{{"exchange", t.Exchange}, {"auction", t.Auction}, {"impression", t.Imp}} {
			if !validAuctionID(f.v) {
				return tsubame.Errorf(tsubame.EINVALID, "%s id must be 1 to %d bytes of printable ASCII without spaces", f.name, MaxIDLen)
			}
		}
		if t.Deal != "" && !validAuctionID(t.Deal) {
			return tsubame.Errorf(tsubame.EINVALID, "deal id must be 1 to %d bytes of printable ASCII without spaces", MaxIDLen)
		}
		if !validCurrency(t.Currency) {
			return tsubame.Errorf(tsubame.EINVALID, "currency must be an ISO 4217 code")
		}
	} else if t.Exchange != "" || t.Auction != "" || t.Imp != "" || t.Deal != "" || t.Currency != "" {
		return tsubame.Errorf(tsubame.EINVALID, "only a notice token carries an auction")
	}
	if t.Kind == KindSale {
		if t.Click != "" && (len(t.Click) > MaxClickLen || !clickChars(t.Click) || !httpURL(t.Click)) {
			return tsubame.Errorf(tsubame.EINVALID, "a sale's billing URL must be an http(s) URL of at most %d bytes", MaxClickLen)
		}
		return nil
	}
	if t.Kind != KindClick {
		if t.Click != "" {
			return tsubame.Errorf(tsubame.EINVALID, "only a click token carries a destination")
		}
		return nil
	}
	return checkClick(t.Click)
}

// checkClick admits a click destination by the model's rule,
// tsubame.CheckClickURL: the one import and every store write apply, so
// that nothing a store holds fails here.
func checkClick(s string) error {
	if s == "" {
		return tsubame.Errorf(tsubame.EINVALID, "missing click destination")
	}
	if err := tsubame.CheckClickURL(s); err != nil {
		return tsubame.WrapError(tsubame.EINVALID, err, "click destination %s", tsubame.ErrorMessage(err))
	}
	return nil
}

func httpURL(s string) bool {
	return len(s) > len("https://") && (s[:7] == "http://" || s[:8] == "https://")
}

func clickChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

// validAuctionID admits an exchange's id: 1 to MaxIDLen bytes of printable
// ASCII without spaces. Exchanges' ids are theirs (base64 with '/' and
// '+', paths): the access log escapes what it writes.
func validAuctionID(id string) bool { return len(id) > 0 && len(id) <= MaxIDLen && printable(id) }

// printable reports whether s is printable ASCII without spaces.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// ValidSite reports whether s may be a token's site: empty, or up to
// MaxSiteLen bytes of printable ASCII without spaces (a domain, or an app's
// bundle, whose spellings vary by store).
func ValidSite(s string) bool { return len(s) <= MaxSiteLen && printable(s) }

// ValidCountry reports whether c may be a token's country: empty, or two
// upper-case letters.
func ValidCountry(c string) bool {
	return c == "" || len(c) == 2 && c[0] >= 'A' && c[0] <= 'Z' && c[1] >= 'A' && c[1] <= 'Z'
}

// ValidDevice reports whether d may be a token's device type: empty, or up
// to MaxDeviceLen bytes of a-z and '-'.
func ValidDevice(d string) bool {
	if len(d) > MaxDeviceLen {
		return false
	}
	for i := 0; i < len(d); i++ {
		if c := d[i]; !(c >= 'a' && c <= 'z' || c == '-') {
			return false
		}
	}
	return true
}

// ValidAuctionID reports whether id may be a notice token's exchange,
// auction, impression or deal id.
func ValidAuctionID(id string) bool { return validAuctionID(id) }

func validCurrency(c string) bool {
	return len(c) == 3 && c[0] >= 'A' && c[0] <= 'Z' && c[1] >= 'A' && c[1] <= 'Z' && c[2] >= 'A' && c[2] <= 'Z'
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !tsubame.IDChar(id[i]) {
			return false
		}
	}
	return true
}

// Verify checks s and returns the token it carries. It refuses, before any
// decoding, a string longer than MaxTokenLen; then anything that is not
// canonical base64url of a token of this version (ErrMalformed, ErrVersion), a
// key not in the ring (ErrUnknownKey), a MAC that does not match, compared in
// constant time (ErrSignature), and a token whose expiry is at or before now
// (ErrExpired). Only the returned strings are allocated, in one piece.
func (s *Signer) Verify(tok string, now time.Time) (Token, error) {
	if now.IsZero() {
		// A zero clock would accept every expiry: a caller's bug, refused.
		return Token{}, errNoClock
	}
	if len(tok) > MaxTokenLen || len(tok) < minTokenLen {
		return Token{}, ErrMalformed
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	// The standard decoder skips \r and \n; a token has one spelling only.
	enc := &sc.enc
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return Token{}, ErrMalformed
		}
		enc[i] = c
	}
	n, err := base64.RawURLEncoding.Strict().Decode(sc.raw[:], enc[:len(tok)])
	if err != nil || n < minRaw {
		return Token{}, ErrMalformed
	}
	raw := sc.raw[:n]
	if raw[0] != version && raw[0] != version4 && raw[0] != version3 && raw[0] != version2 && raw[0] != version1 {
		return Token{}, ErrVersion
	}
	kl := int(raw[1])
	if kl == 0 || kl > MaxKeyIDLen {
		return Token{}, ErrMalformed
	}
	var key *ringKey
	for _, k := range s.keys {
		if k.id == string(raw[2:2+kl]) {
			key = k
			break
		}
	}
	if key == nil {
		return Token{}, ErrUnknownKey
	}
	signed, got := raw[:n-macLen], raw[n-macLen:]
	if !hmac.Equal(key.mac(sc.sum[:0], signed), got) {
		return Token{}, ErrSignature
	}
	t, ok := parse(signed[2+kl:], raw[0], key, sc)
	if !ok {
		return Token{}, ErrMalformed
	}
	if !now.Before(t.Expires) {
		return Token{}, ErrExpired
	}
	return t, nil
}

// VerifyKind is Verify for a caller that expects one event kind: a valid token
// of another kind is refused with ErrKind.
func (s *Signer) VerifyKind(tok string, kind Kind, now time.Time) (Token, error) {
	t, err := s.Verify(tok, now)
	if err != nil {
		return Token{}, err
	}
	if t.Kind != kind {
		return Token{}, ErrKind
	}
	return t, nil
}

// readStrings reads len(dst) strings of all from off, each prefixed by its
// length in one byte, and returns where they end; false past the end.
func readStrings(all string, off int, dst []string) (int, bool) {
	for i := range dst {
		if off >= len(all) {
			return off, false
		}
		l := int(all[off])
		off++
		if l > len(all)-off {
			return off, false
		}
		dst[i] = all[off : off+l]
		off += l
	}
	return off, true
}

// parse reads the signed fields after the key id, deciphering the visitor
// with key (of versions 4 and 5). It runs only on bytes whose MAC matched, and
// still checks every bound: a layout error is a bug or a leaked key, never
// a reason to read past the end. sc is scratch for the cipher.
func parse(b []byte, v byte, key *ringKey, sc *scratch) (Token, bool) {
	fixed := 1 + 8 + 8
	if v >= version2 {
		fixed += 8
	}
	if len(b) < fixed {
		return Token{}, false
	}
	kind := Kind(b[0])
	exp := int64(binary.BigEndian.Uint64(b[1:]))
	price := int64(binary.BigEndian.Uint64(b[9:]))
	var reserved int64
	if v >= version2 {
		reserved = int64(binary.BigEndian.Uint64(b[17:]))
	}
	b = b[fixed:]
	if v >= version4 {
		// The visitor, 6th of the ids, deciphered in place before the
		// string is made.
		off := 0
		for range 5 {
			if off >= len(b) {
				return Token{}, false
			}
			off += 1 + int(b[off])
		}
		if off >= len(b) || int(b[off]) > len(b)-off-1 || int(b[off]) > MaxIDLen || int(b[0]) > len(b)-1 {
			return Token{}, false
		}
		key.cipherVisitor(b[off+1:off+1+int(b[off])], b[1:1+int(b[0])], sc)
	}
	// One string for all fields: the only allocation of a Verify.
	all := string(b)
	var ids [6]string // the last, the user, may be empty
	off, ok := readStrings(all, 0, ids[:])
	if !ok {
		return Token{}, false
	}
	for i, id := range ids {
		if !validID(id) && (i < len(ids)-1 || id != "") && !(kind.sold(i) && id == "") {
			return Token{}, false
		}
	}
	var origin [4]string // advertiser, site, country, device
	if v >= version3 {
		if off, ok = readStrings(all, off, origin[:]); !ok ||
			origin[0] != "" && !validID(origin[0]) || !ValidSite(origin[1]) || !ValidCountry(origin[2]) || !ValidDevice(origin[3]) {
			return Token{}, false
		}
	}
	var auction [5]string // exchange, auction, imp, deal, currency
	var test bool
	if kind.auctioned() && v >= version2 {
		if off, ok = readStrings(all, off, auction[:]); !ok {
			return Token{}, false
		}
		if !validAuctionID(auction[0]) || !validAuctionID(auction[1]) || !validAuctionID(auction[2]) ||
			auction[3] != "" && !validAuctionID(auction[3]) || !validCurrency(auction[4]) {
			return Token{}, false
		}
	}
	if kind.Notice() && v >= version2 || v >= version4 {
		if off >= len(all) || all[off]&^flagTest != 0 {
			return Token{}, false
		}
		test = all[off]&flagTest != 0
		off++
	}
	var holder [1]string
	if v >= version {
		if off, ok = readStrings(all, off, holder[:]); !ok || holder[0] != "" && !validHolder(holder[0]) {
			return Token{}, false
		}
	}
	if len(all)-off < 2 {
		return Token{}, false
	}
	cl := int(binary.BigEndian.Uint16(b[off:]))
	off += 2
	if cl != len(all)-off {
		return Token{}, false
	}
	click := all[off:]
	if !kind.valid() || price < 0 || exp <= 0 || reserved < 0 || (kind == KindClick) != (click != "") && kind != KindSale ||
		len(click) > MaxClickLen || !clickChars(click) {
		return Token{}, false
	}
	t := Token{
		Kind: kind, Decision: ids[0], LineItem: ids[1], Campaign: ids[2], Creative: ids[3], Placement: ids[4], User: ids[5],
		Click: click, Price: tsubame.Money(price), Expires: time.Unix(exp, 0).UTC(),
		Exchange: auction[0], Auction: auction[1], Imp: auction[2], Deal: auction[3], Currency: auction[4], Test: test, Holder: holder[0],
		Origin: Origin{Advertiser: origin[0], Site: origin[1], Country: origin[2], Device: origin[3]},
	}
	if reserved > 0 {
		t.Reserved = time.Unix(reserved, 0).UTC()
	}
	return t, true
}

// validHolder reports whether h is a holder a token may carry: printable
// ASCII without spaces or '|', at most tsubame.MaxHolderLength bytes.
func validHolder(h string) bool {
	if tsubame.ValidateHolder(h) != nil {
		return false
	}
	for i := 0; i < len(h); i++ {
		if h[i] <= ' ' || h[i] > '~' {
			return false
		}
	}
	return true
}
