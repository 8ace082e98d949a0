package openrtb

import (
	"bytes"
	"errors"

	json "github.com/goccy/go-json"

	"tsubame"
)

// MaxBids bounds the bids of one bid response, all its seats' together;
// past it the response is refused.
const MaxBids = 64

// DecodeResponse reads a buyer's bid response, for a seller: JSON as
// OpenRTB 2.6 describes it, decoded by goccy/go-json, fields
// it does not know ignored, integers read as Int reads them (a number or a
// string of one). A body that is empty or only spaces is the
// specification's no-bid: a BidResponse with no SeatBid and a nil error
// (an HTTP 204, which has no body to give, is the caller's to read as
// the same). Cur absent means USD, as the specification says: it is left
// empty here, for the caller to default.
//
// Prices are read exactly, from a number or a string holding one ("1.25"
// and 1.25 are both 1_250_000), and, where a floor is rounded up (Price),
// rounded down to the micro-unit: a bid is never read above what the
// buyer wrote. A null, empty or absent price reads 0.
//
// It refuses, with an EINVALID error, the whole response when its
// structure is broken: a body that is not one JSON object, or a value of
// the wrong type for a field; no id; more than MaxBids bids; a bid
// without an impid; an id, a bid's id or impid over MaxIDLength bytes; a
// price that is not a decimal number, or negative. What is wrong with one
// bid that is well formed (its size, markup, category, advertiser, price
// against the floor, an impid the request did not offer, a currency not
// asked for) is the caller's to check, bid by bid; so is the size of the
// body, which the caller has already read.
func DecodeResponse(body []byte) (*BidResponse, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return &BidResponse{}, nil
	}
	if body[0] != '{' {
		return nil, errRespNotObject
	}
	var w responseWire
	if err := json.Unmarshal(body, &w); err != nil {
		if errors.Is(err, errPrice) {
			return nil, tsubame.WrapError(tsubame.EINVALID, err, "bid response: a bid's price is not a decimal number of at least 0")
		}
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "bid response: not OpenRTB JSON")
	}
	switch {
	case w.ID == "":
		return nil, errRespNoID
	case len(w.ID) > MaxIDLength:
		return nil, errRespLongID
	}
	n := 0
	for _, s := range w.SeatBid {
		n += len(s.Bid)
	}
	if n > MaxBids {
		return nil, errRespTooMany
	}
	r := &BidResponse{ID: w.ID, BidID: w.BidID, Cur: w.Cur, NBR: w.NBR}
	if w.SeatBid != nil {
		r.SeatBid = make([]SeatBid, len(w.SeatBid))
	}
	bids := make([]Bid, n) // one array for every seat's bids
	for i, s := range w.SeatBid {
		r.SeatBid[i].Seat = s.Seat
		if s.Bid == nil {
			continue
		}
		seat := bids[:len(s.Bid):len(s.Bid)]
		bids = bids[len(s.Bid):]
		for j := range s.Bid {
			b := &s.Bid[j]
			switch {
			case b.ImpID == "":
				return nil, errBidNoImpID
			case len(b.ID) > MaxIDLength || len(b.ImpID) > MaxIDLength:
				return nil, errBidLongID
			}
			seat[j] = b.Bid
			seat[j].Price = Price(b.Price)
		}
		r.SeatBid[i].Bid = seat
	}
	return r, nil
}

var (
	errRespNotObject = tsubame.Errorf(tsubame.EINVALID, "bid response: not a JSON object")
	errRespNoID      = tsubame.Errorf(tsubame.EINVALID, "bid response: no id")
	errRespLongID    = tsubame.Errorf(tsubame.EINVALID, "bid response: the id is too long")
	errRespTooMany   = tsubame.Errorf(tsubame.EINVALID, "bid response: more bids than a response may carry")
	errBidNoImpID    = tsubame.Errorf(tsubame.EINVALID, "bid response: a bid without an impid")
	errBidLongID     = tsubame.Errorf(tsubame.EINVALID, "bid response: a bid's id or impid is too long")
)

// The response as it is read: a Bid whose price is a bidPrice, rounded
// down, which DecodeResponse copies into a Bid. The Price field of
// bidWire, shallower than the embedded Bid's, is the one "price" decodes
// into.
type (
	responseWire struct {
		ID      string        `json:"id"`
		SeatBid []seatBidWire `json:"seatbid"`
		BidID   string        `json:"bidid"`
		Cur     string        `json:"cur"`
		NBR     *Int          `json:"nbr"`
	}
	seatBidWire struct {
		Bid  []bidWire `json:"bid"`
		Seat string    `json:"seat"`
	}
	bidWire struct {
		Bid
		Price bidPrice `json:"price"`
	}
)

// bidPrice is a bid's price: read as Price is, but rounded down to the
// micro-unit.
type bidPrice int64

// UnmarshalJSON reads a number, a string holding one, or null.
func (p *bidPrice) UnmarshalJSON(b []byte) error {
	*p = 0
	b = unquote(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	m, ok := parseDecimal(b, 6)
	if !ok || m.neg && (m.whole != 0 || m.frac != 0) {
		return errPrice
	}
	*p = bidPrice(m.whole) // m.frac, below the micro-unit, dropped
	return nil
}
