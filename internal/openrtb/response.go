package openrtb

import (
	"encoding/json"
	"strconv"
)

// The bid response objects (section 4.2), with the fields a bid of this
// server sets.

// BidResponse is the top-level response object (4.2.1).
type BidResponse struct {
	ID      string    `json:"id"`
	SeatBid []SeatBid `json:"seatbid,omitempty"`
	BidID   string    `json:"bidid,omitempty"`
	Cur     string    `json:"cur,omitempty"`
	NBR     *Int      `json:"nbr,omitempty"`
}

// SeatBid is one seat's bids (4.2.2).
type SeatBid struct {
	Bid  []Bid  `json:"bid"`
	Seat string `json:"seat,omitempty"`
}

// Bid is one bid on one impression (4.2.3). Price is written as a decimal
// number of the response's currency, exactly.
type Bid struct {
	ID       string   `json:"id"`
	ImpID    string   `json:"impid"`
	Price    Price    `json:"price"`
	NURL     string   `json:"nurl,omitempty"`
	BURL     string   `json:"burl,omitempty"`
	LURL     string   `json:"lurl,omitempty"`
	AdM      string   `json:"adm,omitempty"`
	AdID     string   `json:"adid,omitempty"`
	ADomain  []string `json:"adomain,omitempty"`
	Bundle   string   `json:"bundle,omitempty"`
	CID      string   `json:"cid,omitempty"`
	CrID     string   `json:"crid,omitempty"`
	Cat      []string `json:"cat,omitempty"`
	Protocol Int      `json:"protocol,omitempty"`
	DealID   string   `json:"dealid,omitempty"`
	W        Int      `json:"w,omitempty"`
	H        Int      `json:"h,omitempty"`
	Dur      Int      `json:"dur,omitempty"`
	MType    Int      `json:"mtype,omitempty"`
	Exp      Int      `json:"exp,omitempty"`

	// Plain names the URLs (PlainNURL, PlainBURL, PlainLURL) their maker
	// built of bytes JSON writes as they are but '&' (render.IsPlainJSON):
	// the encoder copies them without looking at each byte. A bidder's
	// notice URLs are its own host, a base64url token hundreds of bytes
	// long and its macros. With EscapedAdM, AdM holds the markup as JSON
	// writes it (render.AppendJSONString's bytes between the quotes),
	// escaped by its maker, and is copied as it is.
	Plain Plain `json:"-"`
}

// Plain is a set of a Bid's strings that need no escaping in JSON.
type Plain uint8

// The strings of a Bid that can be Plain.
const (
	PlainNURL Plain = 1 << iota
	PlainBURL
	PlainLURL
	EscapedAdM
)

// The values of Bid.MType.
const (
	MTypeBanner Int = 1
	MTypeVideo  Int = 2
)

// MarshalJSON writes p as a decimal number of the currency (1.25): the
// micro-units' digits with a point, trailing zeros dropped.
func (p Price) MarshalJSON() ([]byte, error) { return p.AppendDecimal(nil), nil }

// AppendDecimal appends p as MarshalJSON writes it.
func (p Price) AppendDecimal(dst []byte) []byte {
	v := int64(p)
	if v < 0 {
		dst = append(dst, '-')
		v = -v
	}
	dst = strconv.AppendInt(dst, v/1_000_000, 10)
	if frac := v % 1_000_000; frac != 0 {
		var d [7]byte
		d[0] = '.'
		for i := 6; i >= 1; i-- {
			d[i] = byte('0' + frac%10)
			frac /= 10
		}
		n := 7
		for d[n-1] == '0' {
			n--
		}
		dst = append(dst, d[:n]...)
	}
	return dst
}

// ensure the encoders the response uses see Price as a JSON number.
var _ json.Marshaler = Price(0)
