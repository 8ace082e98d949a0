package bidder

import (
	"net/netip"
	"time"

	"tsubame"
)

// PricePlain is the only clearing-price encoding today: the exchange
// substitutes ${AUCTION_PRICE} with the decimal price. The setting exists
// for the encrypted schemes exchanges use.
const PricePlain = "plain"

// Exchange is one exchange's settings (rtb.exchanges.<name>).
type Exchange struct {
	// Name is the exchange's name in the path (/rtb/<name>), the logs and
	// the metrics: 1 to 64 letters, digits and -_.
	Name string
	// Seat is the seat this server bids as: a deal's wseat must name it.
	Seat string
	// TokenHeader and Token, when Token is set, make a request without
	// TokenHeader: Token a 401 (compared in constant time).
	TokenHeader string
	Token       string
	// Sources, when given, are the only addresses requests may come from
	// (the connection's peer); others get a 403.
	Sources []netip.Prefix
	// QPS bounds the requests answered a second; past it a bare 204 (0: no
	// bound).
	QPS int
	// Network is taken off tmax for the way back to the exchange.
	Network time.Duration
	// PriceEncoding is how the exchange writes the clearing price:
	// PricePlain.
	PriceEncoding string
	// Reservation is how long a bid holds its price for its billing
	// notice: the exchange's billing delay.
	Reservation time.Duration
	// MarkupOnWin serves the markup on the win notice (nurl's answer)
	// rather than in the bid (adm).
	MarkupOnWin bool
	// BidEveryTID bids on every request of a transaction (source.tid);
	// by default only the first seen across nodes is bid on, the others
	// answered NoBidDuplicate.
	BidEveryTID bool
}

// Validate reports what is wrong with e, as one EINVALID error.
func (e *Exchange) Validate(maxHold time.Duration) error {
	var p []string
	if !validName(e.Name) {
		p = append(p, "name: 1 to 64 letters, digits and -_")
	}
	if e.Seat == "" || len(e.Seat) > 64 {
		p = append(p, "seat: 1 to 64 bytes")
	}
	if e.Token != "" && !validHeader(e.TokenHeader) {
		p = append(p, "token_header: a header name is needed with a token")
	}
	if e.QPS < 0 {
		p = append(p, "qps: not negative")
	}
	if e.Network < 0 || e.Network > 10*time.Second {
		p = append(p, "network_ms: 0 to 10000")
	}
	if e.PriceEncoding != PricePlain {
		p = append(p, `price_encoding: "plain" (the only one this server reads today)`)
	}
	if e.Reservation < time.Second || e.Reservation > maxHold {
		p = append(p, "reservation: 1s to the longest reservation the budget ledger keeps ("+maxHold.String()+")")
	}
	if len(p) > 0 {
		return tsubame.Errorf(tsubame.EINVALID, "exchange %q: %v", e.Name, p)
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func validHeader(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
