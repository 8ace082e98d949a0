package bidder

import (
	"net/netip"
	"time"

	"tsubame"
	"tsubame/internal/decision"
)

// PricePlain is the only clearing-price encoding today: the exchange
// substitutes ${AUCTION_PRICE} with the decimal price. The setting exists
// for the encrypted schemes exchanges use.
const PricePlain = "plain"

// What bills a bid (Exchange.BillOn): the event an exchange invoices an
// impression on. That event's notice is the bid's bill, billed once
// across nodes; the others are logged as what they are.
const (
	// BillOnBURL bills on the billing notice (burl), OpenRTB's: the
	// default.
	BillOnBURL = "burl"
	// BillOnNURL bills on the win notice (nurl): exchanges that invoice
	// every win. Its line is the win's and the bill's.
	BillOnNURL = "nurl"
	// BillOnMarkup bills on the impression the bid's markup fires (a
	// video's VAST impression, a banner's pixel): exchanges that invoice
	// rendered impressions and send no billing notice. A viewer's browser
	// calls it, so it bills the bid's own price, never one from its URL.
	BillOnMarkup = "markup"
)

// BillOns are the values of Exchange.BillOn.
var BillOns = []string{BillOnBURL, BillOnNURL, BillOnMarkup}

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
	// Shading lowers the bids of line items without deals in first-price
	// auctions (at=1): decision.Shading, read by ParseShading. Zero: none.
	Shading decision.Shading
	// BillOn is the event that bills a bid: BillOnBURL (the default when
	// empty), BillOnNURL or BillOnMarkup.
	BillOn string
	// WinWindow is how long after a bid its win notice may come: a bid
	// neither won nor lost by then gives its money back (a lost bid whose
	// loss notice never comes must not hold its price for the whole
	// Reservation). WinWindowAuto (0) measures it: twice the 99th
	// percentile of the exchange's win notice delays, plus a second, once
	// it has sent WinWindowSample of them (until then, and for an
	// exchange that sends none, bids hold until the Reservation);
	// WinWindowOff never gives money back early (an exchange whose win
	// notices are late or missing).
	WinWindow time.Duration
	// WinRateHolds is how a bid without a win window holds its price
	// until its reservation ends (HoldShareNow): WinRateHoldsAuto (the
	// default when empty), WinRateHoldsOn or WinRateHoldsOff.
	WinRateHolds string
	// KeepWon is what becomes of a bid that won and was not billed by the
	// end of its reservation (KeepWonNow): KeepWonAuto (the default when
	// empty), KeepWonOn or KeepWonOff.
	KeepWon string
}

// Values of Exchange.KeepWon.
const (
	// KeepWonAuto spends such a bid until the exchange has billed this
	// node KeepWonSample times with under 1 % of its bills late (after
	// the reservation and its grace), and gives its money back then: an
	// exchange that bills on time bills a won bid within the reservation
	// or never (an impression not rendered), while one that bills later
	// would have its bids' money sold again before their bills came.
	KeepWonAuto = "auto"
	// KeepWonOn always spends it: its bill, when it comes, is not spent
	// again.
	KeepWonOn = "on"
	// KeepWonOff always gives its money back: a bill after it is
	// debited past the limit (overage).
	KeepWonOff = "off"
)

// KeepWonValues are the values of Exchange.KeepWon.
var KeepWonValues = []string{KeepWonAuto, KeepWonOn, KeepWonOff}

// KeepWonSample is how many bills an exchange sends a node, almost all
// on time, before KeepWonAuto gives its won bids' money back at their end.
const KeepWonSample = 100

// KeepWonNow is the decision.Request.KeepWon of a bid of e made now, with
// the bills stats counted (Stats.Bills, Stats.Late). The bidder and
// `tsubame pacing simulate` both ask it.
func (e *Exchange) KeepWonNow(stats *Stats) bool {
	switch e.KeepWon {
	case KeepWonOn:
		return true
	case KeepWonOff:
		return false
	}
	bills := stats.Bills.Load()
	return bills < KeepWonSample || stats.Late.Load()*100 >= bills
}

// Values of Exchange.WinRateHolds.
const (
	// WinRateHoldsAuto holds a bid that has no win window by its line
	// item's measured win rate (decision.HoldByWinRate) while its
	// exchange has sent this node neither a win nor a loss notice: an
	// exchange that sends only billing notices. Once it sent one, its
	// bids hold their whole price: a loss notice gives it back at once,
	// and win notices make a win window (WinWindowAuto), so a whole hold
	// costs little and can never be passed.
	WinRateHoldsAuto = "auto"
	// WinRateHoldsOn holds every bid without a win window by the win
	// rate, notices or not: an exchange that sends loss notices for some
	// bids only.
	WinRateHoldsOn = "on"
	// WinRateHoldsOff holds every bid's whole price.
	WinRateHoldsOff = "off"
)

// WinRateHoldsValues are the values of Exchange.WinRateHolds.
var WinRateHoldsValues = []string{WinRateHoldsAuto, WinRateHoldsOn, WinRateHoldsOff}

// HoldShareNow is the decision.Request.HoldShare of a bid of e made now
// that has no win window, with the notices stats counted:
// decision.HoldByWinRate, or 0 (whole; see WinRateHolds). The bidder and
// `tsubame pacing simulate` both ask it.
func (e *Exchange) HoldShareNow(stats *Stats) int64 {
	switch e.WinRateHolds {
	case WinRateHoldsOff:
		return 0
	case WinRateHoldsOn:
		return decision.HoldByWinRate
	}
	if stats.Wins.Load() > 0 || stats.Losses.Load() > 0 {
		return 0
	}
	return decision.HoldByWinRate
}

// Values of Exchange.WinWindow besides a duration.
const (
	WinWindowAuto time.Duration = 0
	WinWindowOff  time.Duration = -1
)

// ParseWinWindow reads an exchange's win_window: "auto" (or empty),
// "off", or a duration of 1s to 1h.
func ParseWinWindow(s string) (time.Duration, error) {
	switch s {
	case "", "auto":
		return WinWindowAuto, nil
	case "off":
		return WinWindowOff, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second || d > time.Hour {
		return 0, tsubame.Errorf(tsubame.EINVALID, "win_window: %q is not auto, off or a duration from 1s to 1h, such as \"5s\"", s)
	}
	return d, nil
}

// WinWindowSample is how many win notices an exchange sends before its
// window is measured (WinWindowAuto).
const WinWindowSample = 100

// minWinWindow is the shortest measured window.
const minWinWindow = 2 * time.Second

// winWindow is how long the exchange's bids wait for their win notice now
// (Exchange.WinWindow); 0: until the Reservation.
func (x *exchange) winWindow() time.Duration { return x.WinWindowNow(x.stats) }

// WinWindowNow is how long a bid of e made now waits for its win notice,
// its WinWindow read with the win notices stats counted (Stats.WinDelayed);
// 0: until the Reservation. The bidder and `tsubame pacing simulate` both
// ask it, so a simulated exchange's window is the bidder's.
func (e *Exchange) WinWindowNow(stats *Stats) time.Duration {
	switch w := e.WinWindow; {
	case w == WinWindowOff:
		return 0
	case w > 0:
		return min(w, e.Reservation)
	}
	p99, n := stats.winDelayP99()
	if n < WinWindowSample {
		return 0
	}
	return min(max(2*p99+time.Second, minWinWindow), e.Reservation)
}

// DefaultShadingStep is how far over the floor a shaded bid stays when an
// exchange's shading names no step: a cent of a CPM.
const DefaultShadingStep = tsubame.Money(tsubame.MicrosPerUnit / 100)

// ParseShading reads an exchange's shading (rtb.exchanges.<name>.shading
// and shading_step): factor, the share of the CPM a first-price bid is, a
// decimal over 0 and at most 1 ("0.85"; "" or "1": none); step, how far
// over the floor a shaded bid stays, an amount of the account currency
// ("" DefaultShadingStep). An EINVALID error says what is wrong.
func ParseShading(factor, step string) (decision.Shading, error) {
	if factor == "" {
		return decision.Shading{}, nil
	}
	f, err := tsubame.ParseMoney(factor) // six decimals: parts per million
	if err != nil || f <= 0 || f > decision.MaxShadingFactor {
		return decision.Shading{}, tsubame.Errorf(tsubame.EINVALID, "shading: %q is not a share of the CPM over 0 and at most 1, such as \"0.85\"", factor)
	}
	s := DefaultShadingStep
	if step != "" {
		if s, err = tsubame.ParseMoney(step); err != nil || s < 0 || s > tsubame.MaxCPM {
			return decision.Shading{}, tsubame.Errorf(tsubame.EINVALID, "shading_step: %q is not an amount of at least 0, such as \"0.01\"", step)
		}
	}
	if f == decision.MaxShadingFactor {
		return decision.Shading{}, nil
	}
	return decision.Shading{Factor: int64(f), Step: s}, nil
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
	if e.Shading.Factor < 0 || e.Shading.Factor > decision.MaxShadingFactor || e.Shading.Step < 0 {
		p = append(p, "shading: a factor of 0 (none) to 1, a step of at least 0")
	}
	if e.WinRateHolds != "" && !contains(WinRateHoldsValues, e.WinRateHolds) {
		p = append(p, `win_rate_holds: "auto", "on" or "off"`)
	}
	if e.KeepWon != "" && !contains(KeepWonValues, e.KeepWon) {
		p = append(p, `keep_won: "auto", "on" or "off"`)
	}
	if e.BillOn != "" && !contains(BillOns, e.BillOn) {
		p = append(p, `bill_on: "burl", "nurl" or "markup"`)
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
