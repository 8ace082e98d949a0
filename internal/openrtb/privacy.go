package openrtb

import (
	"bytes"
	"slices"
	"strconv"

	"encoding/json"

	"tsubame/internal/render"
)

// The privacy signals of a bid request are read as exchanges send them,
// not only as the specification writes them, and a value that cannot be
// read is kept as such (never as absent, never as a decoding error): a
// bidder reads it as the strictest signal it could be, and the request
// still decodes, to be bid on without its visitor. Each type orders its
// readings so that the stricter of two is the greater: where a signal is
// sent twice (its 2.6 field and its 2.5 extension), the stricter counts.
//
// Encoded (AppendRequest, or encoding/json through MarshalJSON), a signal
// is written as the specification writes it, and one that cannot be read
// as the strictest value that can be written: a Flag as 1, a Text or
// Sections, which have no strictest value, not at all. A caller that
// forwards a request must therefore act on an unreadable Text or Sections
// itself (as the bidder does, reading it as raised) before it sends it on:
// left out, it reads downstream as absent.

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

// IsZero reports whether f is FlagAbsent: an omitzero field is then left
// out.
func (f Flag) IsZero() bool { return f == FlagAbsent }

// MarshalJSON writes f as the specification does: 0 for FlagOff, 1 for
// FlagOn and for FlagUnreadable (and any other value), the strictest
// reading; null for FlagAbsent, which an omitzero field leaves out instead.
func (f Flag) MarshalJSON() ([]byte, error) { return f.appendJSON(nil), nil }

func (f Flag) appendJSON(dst []byte) []byte {
	switch f {
	case FlagAbsent:
		return append(dst, "null"...)
	case FlagOff:
		return append(dst, '0')
	}
	return append(dst, '1')
}

// Text is a privacy string: regs.us_privacy, regs.gpp, user.consent. A
// value that is not a JSON string (a number, a boolean, an object, an
// array) is Unreadable, as are two places that send different strings.
type Text struct {
	// Value is the string sent; "" when absent, null, empty or Unreadable.
	Value string
	// Unreadable says a value was sent that is not one string.
	Unreadable bool
}

// IsZero reports whether t has no value to write (absent, empty or
// Unreadable): an omitzero field is then left out. An Unreadable text is
// left out because nothing written in its place would be as strict: any
// string is a reading of its own, and one that cannot be parsed downstream
// is read there as absent too.
func (t Text) IsZero() bool { return t.Value == "" }

// MarshalJSON writes t's Value as a JSON string.
func (t Text) MarshalJSON() ([]byte, error) { return render.AppendJSONString(nil, t.Value), nil }

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

// MaxSections bounds the section ids a Sections keeps: GPP defines about
// twenty sections, and a list longer than this is read as unreadable.
const MaxSections = 32

// Sections is regs.gpp_sid, the GPP sections in force: the ids sent and
// their reading as a Flag (whether any section is in force): FlagAbsent
// when not sent or null, FlagOff for an empty list or one of -1 alone
// (GPP's "none applies"), FlagOn for a list of section ids (integers, or
// strings of one), FlagUnreadable for anything else and for a list of
// more than MaxSections ids. IDs are the ids read, in their order, when
// Flag is FlagOff or FlagOn (nil for an empty list), nil otherwise. Build
// one with NewSections: the encoder writes IDs only where Flag says
// there is a list.
type Sections struct {
	Flag
	IDs []Int
}

// NewSections returns the Sections that sending ids reads as: FlagOff for
// none or -1 alone, FlagOn for others, FlagUnreadable (and no ids) for
// more than MaxSections.
func NewSections(ids ...Int) Sections {
	if len(ids) > MaxSections {
		return Sections{Flag: FlagUnreadable}
	}
	s := Sections{Flag: FlagOff}
	if len(ids) > 0 {
		s.IDs = append([]Int(nil), ids...)
	}
	for _, id := range ids {
		if id != -1 {
			s.Flag = FlagOn
		}
	}
	return s
}

// IsZero reports whether s has no list to write: FlagAbsent, or
// FlagUnreadable, for which no list would be as strict as the reading (the
// sections in force are not known); an omitzero field is then left out.
func (s Sections) IsZero() bool { return s.Flag == FlagAbsent || s.Flag == FlagUnreadable }

// MarshalJSON writes s as a JSON array of its ids ([] for none), or null
// when IsZero (which an omitzero field leaves out instead).
func (s Sections) MarshalJSON() ([]byte, error) { return s.appendJSON(nil), nil }

func (s Sections) appendJSON(dst []byte) []byte {
	if s.IsZero() {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, id := range s.IDs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(id), 10)
	}
	return append(dst, ']')
}

// UnmarshalJSON reads any JSON value; it never fails.
func (s *Sections) UnmarshalJSON(b []byte) error {
	*s = readSections(b, nil)
	return nil
}

// readSections reads b, the ids appended to buf (nil: a list of their
// own), which it returns grown.
func readSections(b []byte, buf *[]Int) Sections {
	if string(b) == "null" {
		return Sections{Flag: FlagAbsent}
	}
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return Sections{Flag: FlagUnreadable}
	}
	list := bytes.TrimSpace(b[1 : len(b)-1])
	if len(list) == 0 {
		return Sections{Flag: FlagOff}
	}
	n := bytes.Count(list, []byte{','}) + 1
	if n > MaxSections {
		// Counted by commas: a longer list of readable ids is read as
		// unreadable here, and a list with an unreadable element is so
		// anyway.
		return Sections{Flag: FlagUnreadable}
	}
	if buf == nil {
		buf = new([]Int)
	}
	from := len(*buf)
	*buf = slices.Grow(*buf, n)
	s := Sections{Flag: FlagOff}
	for len(list) > 0 {
		// A comma inside an element (an object, a nested list, a
		// string) splits it into parts that are not numbers: unreadable,
		// as the whole element is.
		item, rest, _ := bytes.Cut(list, []byte{','})
		list = rest
		m, ok := parseDecimal(unquote(bytes.TrimSpace(item)), 0)
		switch {
		case !ok || m.frac != 0:
			return Sections{Flag: FlagUnreadable}
		case m.whole != -1:
			s.Flag = FlagOn
		}
		*buf = append(*buf, Int(m.whole))
	}
	s.IDs = (*buf)[from:len(*buf):len(*buf)]
	return s
}

// merge is what s and t, one signal sent in two places, say together: the
// one sent, when the other was not; the stricter, when their readings
// differ; when they agree, both lists together (the sections either says
// are in force), unreadable past MaxSections.
func (s Sections) merge(t Sections) Sections {
	switch {
	case t.Flag == FlagAbsent:
		return s
	case s.Flag == FlagAbsent:
		return t
	case s.Flag == FlagUnreadable || t.Flag == FlagUnreadable:
		return Sections{Flag: FlagUnreadable}
	case s.Flag != t.Flag:
		if s.Flag > t.Flag {
			return s
		}
		return t
	}
	ids := s.IDs
	for _, id := range t.IDs {
		if !slices.Contains(ids, id) {
			if len(ids) == len(s.IDs) {
				ids = slices.Clone(s.IDs) // s's list is not written to
			}
			ids = append(ids, id)
		}
	}
	if len(ids) > MaxSections {
		return Sections{Flag: FlagUnreadable}
	}
	return Sections{Flag: s.Flag, IDs: ids}
}
