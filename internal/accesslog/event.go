package accesslog

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"tsubame/internal/render"
)

// Money events (a decision, an impression, a click; a bid, an exchange's
// win, billing and loss notices, a bid's markup impression), and each ad
// request decided for (the slots it asked, filled or not), are lines of
// the access log like the requests that carry them: they go through the
// same Append, buffers or mapped file, rotation, crash-clean and Kafka
// shipper, so the lines that are the invoice are kept by the path that
// loses nothing. A request's own line
// stays as it is; its events are lines in addition, appended through the
// same Logger with Record.Event set.
//
// An Event holds its values typed (text, int64, bool, an address) and
// unformatted: each is escaped once, as the line is written, by the rules
// the request fields follow. Its fields are a fixed struct and a bounded
// array, so building and appending one allocates nothing.

// EventKind says what an event line records.
type EventKind uint8

// The event kinds. The zero value is no kind, written as an empty value.
const (
	EventDecision    EventKind = iota + 1 // an ad chosen for a request
	EventImp                              // its impression URL was fetched
	EventClick                            // its click URL was followed
	EventWin                              // an exchange's win notice
	EventBill                             // an exchange's billing notice
	EventBid                              // a bid made in an exchange's auction
	EventLoss                             // an exchange's loss notice
	EventBidImp                           // a bid's markup fired its impression (a viewer's player or page)
	EventRequest                          // an ad request decided for: the slots it asked, filled or not
	EventAuction                          // a sell-side auction: the partners asked, answered, timed out, and its winner
	EventBidReceived                      // one partner's part in a sell-side auction: its status, latency and best bid
)

var eventKinds = [...]string{EventDecision: "decision", EventImp: "imp", EventClick: "click", EventWin: "win", EventBill: "bill",
	EventBid: "bid", EventLoss: "loss", EventBidImp: "bid_imp", EventRequest: "request",
	EventAuction: "auction", EventBidReceived: "bid_received"}

// String is the kind's name as written in the event field ("" for none).
func (k EventKind) String() string {
	if int(k) < len(eventKinds) {
		return eventKinds[k]
	}
	return ""
}

// ParseEventKind maps an event field's value to its kind.
func ParseEventKind(s string) (EventKind, bool) {
	for k, name := range eventKinds {
		if name != "" && name == s {
			return EventKind(k), true
		}
	}
	return 0, false
}

// Text is a text value of an event field, held without a copy: made by
// String or Bytes. The zero Text is empty (written "-" in LTSV, "" in JSON).
type Text struct{ s string }

// String makes a Text of s.
func String(s string) Text { return Text{s} }

// Bytes makes a Text that reads b in place: b must not change until the
// Append it is logged by returns (as a Record's byte slices).
func Bytes(b []byte) Text { return Text{unsafeString(b)} }

// String returns the text.
func (t Text) String() string { return t.s }

// Event is the money event of an event line (see Record.Event). Its fields
// are those every event line has, in the order they are written; AddText,
// AddInt, AddBool and AddAddr add up to MaxExtra more, written after them.
// An Event is not safe for concurrent use; Append only reads it.
type Event struct {
	Kind EventKind
	// ID is the event's id (event_id): unique to the event, and the same
	// when the same event is logged again, so a consumer keeps it once.
	ID        Text
	Decision  Text // the decision the event belongs to
	LineItem  Text
	Campaign  Text
	Creative  Text
	Placement Text
	UID       Text // the visitor
	// Price is in micro-units of Currency (1,000,000 = one unit), never
	// a float: the CPM of a decision or impression, 0 for a click.
	Price    int64
	Currency Text
	// Valid is false for an event that must not be billed: a repeat, a
	// crawler, a rejected notice.
	Valid bool

	extra  [MaxExtra]field
	nextra uint8
}

// MaxExtra bounds the extra fields of an Event, so that an Event is a
// fixed size (about 1 KiB) that lives on its caller's stack. An auction's
// lines carry the most: the origin's four, exchange, seat, auction, imp,
// deal, publisher, supply chain and test, with room for a reason, a
// missing price and a late flag.
const MaxExtra = 16

// The origin of an event (AddOrigin): what the reports count it by beyond
// its ids.
var (
	KeyAdvertiser = MustKey("advertiser")
	KeySite       = MustKey("site")
	KeyCountry    = MustKey("country")
	KeyDevice     = MustKey("device")
)

// AddOrigin adds the event's origin: the advertiser's id, the site's domain
// or app's bundle, the country and the device type (each may be empty).
// Every kind of event line carries them, in this order, so that a report
// counts an impression or a bill by where its decision or bid came from.
func (e *Event) AddOrigin(advertiser, site, country, device string) {
	e.AddText(KeyAdvertiser, String(advertiser))
	e.AddText(KeySite, String(site))
	e.AddText(KeyCountry, String(country))
	e.AddText(KeyDevice, String(device))
}

type valueType uint8

const (
	textValue valueType = iota
	intValue
	boolValue
	addrValue
)

type field struct {
	key  string
	typ  valueType
	s    string
	n    int64 // intValue; boolValue: 0 or 1
	addr netip.Addr
}

// Key names an extra field of event lines. Keys are made once, at
// start-up (MustKey in a package variable), and checked then: a label
// cannot need escaping, nor repeat a label a line already has.
type Key struct{ name string }

// String is the key's label.
func (k Key) String() string { return k.name }

// reservedLabels are the labels of request and event lines, in both
// formats: an extra field may not take one, so that a reader mapping
// labels to values (and LinePlacement) cannot be misled.
var reservedLabels = map[string]bool{
	"time": true, "host": true, "peer": true, "remote": true, "vhost": true, "method": true, "uri": true,
	"endpoint": true, "id": true, "callback": true, "status": true, "size": true, "reqtime_microsec": true,
	"ua": true, "referer": true, "reqid": true,
	"event": true, "event_id": true, "decision": true, "line_item": true, "campaign": true, "creative": true,
	"placement": true, "uid": true, "price": true, "currency": true, "valid": true,
}

// maxKeyLen bounds an extra field's label.
const maxKeyLen = 32

var errKey = errors.New("an event field label is 1 to 32 of a-z, 0-9 and _, starting with a letter")

// NewKey checks name and returns it as a Key.
func NewKey(name string) (Key, error) {
	if len(name) == 0 || len(name) > maxKeyLen || name[0] < 'a' || name[0] > 'z' {
		return Key{}, fmt.Errorf("%q: %w", name, errKey)
	}
	for i := range len(name) {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return Key{}, fmt.Errorf("%q: %w", name, errKey)
		}
	}
	if reservedLabels[name] {
		return Key{}, fmt.Errorf("%q is a label every log line of its kind has already", name)
	}
	return Key{name}, nil
}

// MustKey is NewKey for package variables: it panics on a bad name.
func MustKey(name string) Key {
	k, err := NewKey(name)
	if err != nil {
		panic(err)
	}
	return k
}

// add appends an extra field. It refuses (false) the zero Key, a key the
// event has already and one past MaxExtra: a caller's bug, which its tests
// see (the field would not be in the line).
func (e *Event) add(f field) bool {
	if f.key == "" || int(e.nextra) >= MaxExtra {
		return false
	}
	for i := range e.nextra {
		if e.extra[i].key == f.key {
			return false
		}
	}
	e.extra[e.nextra] = f
	e.nextra++
	return true
}

// AddText adds an extra text field; false if it was not added (see add).
func (e *Event) AddText(k Key, v Text) bool { return e.add(field{key: k.name, typ: textValue, s: v.s}) }

// AddInt adds an extra integer field; false if it was not added.
func (e *Event) AddInt(k Key, v int64) bool { return e.add(field{key: k.name, typ: intValue, n: v}) }

// AddBool adds an extra true/false field; false if it was not added.
func (e *Event) AddBool(k Key, v bool) bool {
	var n int64
	if v {
		n = 1
	}
	return e.add(field{key: k.name, typ: boolValue, n: n})
}

// AddAddr adds an extra address field (an invalid one is written "-");
// false if it was not added.
func (e *Event) AddAddr(k Key, v netip.Addr) bool {
	return e.add(field{key: k.name, typ: addrValue, addr: v})
}

// Extras is the number of extra fields added.
func (e *Event) Extras() int { return int(e.nextra) }

// Extra returns the value of the extra field labelled name as text, as
// an LTSV line writes it but unescaped (true, false; an invalid address
// is "-"), and false when e has no such field: for a reader of an Event
// that is not a line yet (a test's logger).
func (e *Event) Extra(name string) (string, bool) {
	for i := range e.nextra {
		f := &e.extra[i]
		if f.key != name {
			continue
		}
		switch f.typ {
		case intValue:
			return strconv.FormatInt(f.n, 10), true
		case boolValue:
			return strconv.FormatBool(f.n != 0), true
		case addrValue:
			if !f.addr.IsValid() {
				return "-", true
			}
			return f.addr.String(), true
		}
		return f.s, true
	}
	return "", false
}

// Reset empties e for reuse.
func (e *Event) Reset() { *e = Event{} }

// Clone returns a copy of e whose strings are its own. A logger writes an
// event before the call returns; a caller keeping one past the call (a
// test's recorder) clones it: its strings may be views of a request's
// buffer that is reused (the bidder's decoded bid request).
func (e *Event) Clone() Event {
	c := *e
	for _, t := range []*Text{&c.ID, &c.Decision, &c.LineItem, &c.Campaign, &c.Creative, &c.Placement, &c.UID, &c.Currency} {
		t.s = strings.Clone(t.s)
	}
	for i := range c.extra[:c.nextra] {
		c.extra[i].s = strings.Clone(c.extra[i].s)
	}
	return c
}

// appendEventLTSV writes r's event line:
//
//	time event event_id decision line_item campaign creative placement uid
//	price currency valid host reqid [extras...]
//
// host and reqid are the request's (as in its own line), which ties each
// event to the request that carried it.
func appendEventLTSV(dst []byte, r *Record, t time.Time, tc *timeCache) []byte {
	e := r.Event
	dst = append(dst, ltsvTimePrefix...)
	dst = tc.append(dst, t)
	dst = append(dst, "\tevent:"...)
	dst = appendLTSVValue(dst, e.Kind.String())
	dst = textLTSV(dst, "\tevent_id:", e.ID)
	dst = textLTSV(dst, "\tdecision:", e.Decision)
	dst = textLTSV(dst, "\tline_item:", e.LineItem)
	dst = textLTSV(dst, "\tcampaign:", e.Campaign)
	dst = textLTSV(dst, "\tcreative:", e.Creative)
	dst = textLTSV(dst, "\tplacement:", e.Placement)
	dst = textLTSV(dst, "\tuid:", e.UID)
	dst = append(dst, "\tprice:"...)
	dst = strconv.AppendInt(dst, e.Price, 10)
	dst = textLTSV(dst, "\tcurrency:", e.Currency)
	dst = append(dst, "\tvalid:"...)
	dst = strconv.AppendBool(dst, e.Valid)
	dst = append(dst, "\thost:"...)
	dst = appendAddr(dst, r.Remote)
	dst = ltsvField(dst, "\treqid:", r.RequestID)
	for i := range e.nextra {
		f := &e.extra[i]
		dst = append(dst, '\t')
		dst = append(dst, f.key...)
		dst = append(dst, ':')
		switch f.typ {
		case textValue:
			dst = appendLTSVValue(dst, f.s)
		case intValue:
			dst = strconv.AppendInt(dst, f.n, 10)
		case boolValue:
			dst = strconv.AppendBool(dst, f.n != 0)
		case addrValue:
			dst = appendAddr(dst, f.addr)
		}
	}
	return append(dst, '\n')
}

func textLTSV(dst []byte, label string, v Text) []byte {
	dst = append(dst, label...)
	return appendLTSVValue(dst, v.s)
}

// appendEventJSON writes r's event line as JSON, with the fields of
// appendEventLTSV in the same order (the client address is "remote", as
// in a request's JSON line). price and the extra integers are JSON
// numbers, valid and the extra booleans true or false.
func appendEventJSON(dst []byte, r *Record, t time.Time, tc *timeCache) []byte {
	e := r.Event
	dst = append(dst, jsonTimePrefix...)
	dst = tc.append(dst, t)
	dst = append(dst, `","event":`...)
	dst = render.AppendJSONLogString(dst, e.Kind.String())
	dst = textJSON(dst, `,"event_id":`, e.ID)
	dst = textJSON(dst, `,"decision":`, e.Decision)
	dst = textJSON(dst, `,"line_item":`, e.LineItem)
	dst = textJSON(dst, `,"campaign":`, e.Campaign)
	dst = textJSON(dst, `,"creative":`, e.Creative)
	dst = textJSON(dst, `,"placement":`, e.Placement)
	dst = textJSON(dst, `,"uid":`, e.UID)
	dst = append(dst, `,"price":`...)
	dst = strconv.AppendInt(dst, e.Price, 10)
	dst = textJSON(dst, `,"currency":`, e.Currency)
	dst = append(dst, `,"valid":`...)
	dst = strconv.AppendBool(dst, e.Valid)
	dst = append(dst, `,"remote":"`...)
	dst = appendAddr(dst, r.Remote)
	dst = append(dst, '"')
	dst = jsonField(dst, `,"reqid":`, r.RequestID)
	for i := range e.nextra {
		f := &e.extra[i]
		dst = append(dst, ',', '"')
		dst = append(dst, f.key...)
		dst = append(dst, '"', ':')
		switch f.typ {
		case textValue:
			dst = render.AppendJSONLogString(dst, f.s)
		case intValue:
			dst = strconv.AppendInt(dst, f.n, 10)
		case boolValue:
			dst = strconv.AppendBool(dst, f.n != 0)
		case addrValue:
			dst = append(dst, '"')
			dst = appendAddr(dst, f.addr)
			dst = append(dst, '"')
		}
	}
	return append(dst, "}\n"...)
}

func textJSON(dst []byte, key string, v Text) []byte {
	dst = append(dst, key...)
	return render.AppendJSONLogString(dst, v.s)
}
