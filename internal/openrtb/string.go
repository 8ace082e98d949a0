package openrtb

import (
	"bytes"

	"encoding/json"
)

// String is a string field of a bid request that the bidder did not read
// when its requests were first decoded: a JSON string is read as it is,
// and anything else (null, a number, an object) as "", never as an error.
// A request an exchange sends with "ref": 5 was accepted while ref was
// skipped, and is accepted still. It encodes as the string it holds.
type String string

// UnmarshalJSON reads a JSON string, or anything else as ""; it never
// fails.
func (s *String) UnmarshalJSON(b []byte) error {
	*s = ""
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return nil
	}
	if bytes.IndexByte(b, '\\') < 0 {
		*s = String(b[1 : len(b)-1])
		return nil
	}
	var v string
	if json.Unmarshal(b, &v) == nil {
		*s = String(v)
	}
	return nil
}
