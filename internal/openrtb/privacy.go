package openrtb

import (
	"bytes"

	json "github.com/goccy/go-json"
)

// The privacy signals of a bid request are read as exchanges send them,
// not only as the specification writes them, and a value that cannot be
// read is kept as such (never as absent, never as a decoding error): a
// bidder reads it as the strictest signal it could be, and the request
// still decodes, to be bid on without its visitor. Each type orders its
// readings so that the stricter of two is the greater: where a signal is
// sent twice (its 2.6 field and its 2.5 extension), the stricter counts.

// Flag is a privacy flag: regs.coppa, regs.gdpr, device.dnt, device.lmt.
// The specification writes 0 and 1; exchanges also send booleans and
// strings of either.
type Flag uint8

// Readings of a Flag, the stricter the greater.
const (
	// FlagAbsent: not sent, or null.
	FlagAbsent Flag = iota
	// FlagOff: 0, false, "0" or "false" (a whole number: 0.0 too).
	FlagOff
	// FlagOn: 1, true, "1" or "true" (1.0 too).
	FlagOn
	// FlagUnreadable: anything else, such as 2, "yes", "", an object or
	// an array.
	FlagUnreadable
)

// UnmarshalJSON reads any JSON value; it never fails.
func (f *Flag) UnmarshalJSON(b []byte) error {
	*f = readFlag(b)
	return nil
}

func readFlag(b []byte) Flag {
	switch string(b) {
	case "null":
		return FlagAbsent
	case "false", `"false"`:
		return FlagOff
	case "true", `"true"`:
		return FlagOn
	}
	if m, ok := parseDecimal(unquote(b), 0); ok && m.frac == 0 {
		switch m.whole {
		case 0:
			return FlagOff
		case 1:
			return FlagOn
		}
	}
	return FlagUnreadable
}

// Raised reports whether f is FlagOn or cannot be read: the signal is
// raised, or may be.
func (f Flag) Raised() bool { return f >= FlagOn }

// Text is a privacy string: regs.us_privacy, regs.gpp, user.consent. A
// value that is not a JSON string (a number, a boolean, an object, an
// array) is Unreadable, as are two places that send different strings.
type Text struct {
	// Value is the string sent; "" when absent, null, empty or Unreadable.
	Value string
	// Unreadable says a value was sent that is not one string.
	Unreadable bool
}

// UnmarshalJSON reads any JSON value; it never fails.
func (t *Text) UnmarshalJSON(b []byte) error {
	*t = Text{}
	switch {
	case string(b) == "null":
	case len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"':
		if bytes.IndexByte(b, '\\') < 0 {
			t.Value = string(b[1 : len(b)-1])
		} else if json.Unmarshal(b, &t.Value) != nil {
			*t = Text{Unreadable: true}
		}
	default:
		t.Unreadable = true
	}
	return nil
}

// merge is what t and u, one signal sent in two places, say together: the
// one that was sent, or Unreadable when they differ.
func (t Text) merge(u Text) Text {
	switch {
	case t.Unreadable || u.Unreadable:
		return Text{Unreadable: true}
	case u.Value == "" || u.Value == t.Value:
		return t
	case t.Value == "":
		return u
	}
	return Text{Unreadable: true}
}

// Sections is regs.gpp_sid, the GPP sections in force, read as a Flag
// (whether any is): FlagAbsent when not sent or null, FlagOff for an empty
// list or one of -1 alone (GPP's "none applies"), FlagOn for a list of
// section ids (integers, or strings of one), FlagUnreadable for anything
// else.
type Sections struct{ Flag }

// UnmarshalJSON reads any JSON value; it never fails.
func (s *Sections) UnmarshalJSON(b []byte) error {
	s.Flag = readSections(b)
	return nil
}

func readSections(b []byte) Flag {
	if string(b) == "null" {
		return FlagAbsent
	}
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return FlagUnreadable
	}
	list := bytes.TrimSpace(b[1 : len(b)-1])
	if len(list) == 0 {
		return FlagOff
	}
	f := FlagOff
	for len(list) > 0 {
		// A comma inside an element (an object, a nested list, a
		// string) splits it into parts that are not numbers: unreadable,
		// as the whole element is.
		item, rest, _ := bytes.Cut(list, []byte{','})
		list = rest
		m, ok := parseDecimal(unquote(bytes.TrimSpace(item)), 0)
		switch {
		case !ok || m.frac != 0:
			return FlagUnreadable
		case m.whole != -1:
			f = FlagOn
		}
	}
	return f
}
