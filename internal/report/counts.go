package report

import (
	"strconv"
	"unsafe"

	"tsubame/internal/accesslog"
)

// Counter names a counter of Counts; its value is its place in Counts'
// array and in the stored rows: never renumber one, only add.
type Counter int

// The counters.
const (
	Decisions          Counter = iota // ads chosen for a request (/api/decide)
	Impressions                       // impressions counted: impression URLs fetched, and exchanges' billing notices
	Clicks                            // clicks counted
	Bids                              // bids made in exchanges' auctions (not test ones)
	Wins                              // win notices counted: the first for its bid, not a test auction's
	Bills                             // bids billed (by the notice their exchange bills on): the first for its bid, in time
	Losses                            // loss notices counted: the first for its bid, not a test auction's
	Spend                             // what impressions and bills cost, in thousandths of a micro-unit
	Overage                           // impressions and bills past their reservation: shown, but not billed (see docs/reports.md)
	OverageSpend                      // their cost, in thousandths of a micro-unit
	InvalidImpressions                // impression URLs not counted (a decision's, a bid's markup's): repeats, crawlers, an unreachable store
	InvalidClicks                     // clicks not counted
	InvalidBids                       // test auctions' bids
	InvalidBills                      // billing notices not billed: repeats, test auctions, an unreachable store
	Rejected                          // tracking and notice requests refused: expired, tampered or foreign URLs
	InvalidWins                       // win notices not counted: repeats, test auctions, an unreachable store
	InvalidLosses                     // loss notices not counted: repeats, test auctions, an unreachable store
	BidImps                           // impressions bids' markup fired (bid_imp), counted: the first for its bid, not a crawler's
	Requests                          // an ad request's slots (its request line's slots): opportunities, filled or not
	Auctions                          // sell-side auctions held (auction lines, not test ones)
	PartnerRequests                   // bid requests sent to a demand partner (bid_received lines of a call made)
	PartnerBids                       // of them, answered with a bid
	PartnerWins                       // auctions a partner's bid won
	PartnerTimeouts                   // calls a partner did not answer by the auction's deadline
	Revenue                           // what sold impressions earned (after partners' bid adjustments), in thousandths of a micro-unit
	numCounters
)

var counterNames = [numCounters]string{
	Decisions: "decisions", Impressions: "impressions", Clicks: "clicks", Bids: "bids", Wins: "wins", Bills: "bills",
	Losses: "losses", Spend: "spend", Overage: "overage", OverageSpend: "overage_spend",
	InvalidImpressions: "invalid_impressions", InvalidClicks: "invalid_clicks", InvalidBids: "invalid_bids",
	InvalidBills: "invalid_bills", Rejected: "rejected", InvalidWins: "invalid_wins", InvalidLosses: "invalid_losses",
	BidImps: "bid_imps", Requests: "requests", Auctions: "auctions", PartnerRequests: "partner_requests",
	PartnerBids: "partner_bids", PartnerWins: "partner_wins", PartnerTimeouts: "partner_timeouts", Revenue: "revenue",
}

// String is the counter's name in reports.
func (c Counter) String() string { return counterNames[c] }

// Counts are the counters of one row. Amounts (Spend, OverageSpend) are in
// thousandths of a micro-unit of the row's currency: an impression costs
// its CPM divided by a thousand, kept exact.
type Counts [numCounters]int64

// Add adds o to c.
func (c *Counts) Add(o *Counts) {
	for i := range c {
		c[i] += o[i]
	}
}

// IsZero reports whether every counter is zero.
func (c *Counts) IsZero() bool { return *c == Counts{} }

// Dim names a dimension of the rows.
type Dim int

// The dimensions a row is keyed by, beyond its time. Their values are
// part of the stored keys: never renumber one, only add.
const (
	DimAdvertiser Dim = iota
	DimCampaign
	DimLineItem
	DimCreative
	DimPlacement
	DimSite
	DimExchange
	DimDeal
	DimCountry
	DimDevice
	DimCurrency
	DimNode    // the server that counted the event (report.node)
	DimPartner // the demand partner of a sell-side auction's lines
	numDims
)

var dimNames = [numDims]string{
	DimAdvertiser: "advertiser", DimCampaign: "campaign", DimLineItem: "line_item", DimCreative: "creative",
	DimPlacement: "placement", DimSite: "site", DimExchange: "exchange", DimDeal: "deal", DimCountry: "country",
	DimDevice: "device", DimCurrency: "currency", DimNode: "node", DimPartner: "partner",
}

// String is the dimension's name, as in -by and the rows.
func (d Dim) String() string { return dimNames[d] }

// Dims are a row's dimension values ("" where unknown or not applicable).
type Dims [numDims]string

// The endpoints whose refused requests are counted as Rejected: the
// tracking and notice URLs (internal/ads, internal/bidder route names).
var noticeEndpoints = map[string]bool{
	"track_imp": true, "track_click": true, "rtb_win": true, "rtb_bill": true, "rtb_loss": true, "rtb_bid_imp": true,
}

// classify reads what line adds to the reports: its dimensions and
// counts, ok false for a line that adds nothing (a request's own line, an
// event of a kind the reports do not count). l is scratch space; when ok,
// l.Time is the line's time, and dims are views of line's bytes (or of
// l's, for a value that had escapes): the caller is done with them before
// line's bytes change or classify runs again.
func classify(line []byte, l *accesslog.Line, dims *Dims, c *Counts) (ok bool, err error) {
	*c = Counts{}
	// The last line's views go before l reads again: a string's bytes
	// must not change while it is held (unsafe.String).
	node := dims[DimNode]
	*dims = Dims{DimNode: node}
	if !accesslog.IsEventLine(line) {
		return rejected(line, l, dims, c)
	}
	// Viewed, not parsed: the values are not copied out of line, only
	// unescaped where they have an escape (an event line's values rarely
	// do).
	if err := l.View(line); err != nil {
		return false, err
	}
	// One pass over the fields reads the dimensions (each from the field
	// of its name; the node is the roller's, not the line's) and the
	// fields that count. A field named twice counts as Get reads it: the
	// first. The dimensions are views, not copies: valid as long as a
	// caller uses them (a row's key is made of them before the next line
	// is read); those the line does not name stay empty.
	var (
		f    [numEventFields][]byte
		has  [numEventFields]bool
		seen [numDims]bool
	)
	for i := range l.Len() {
		label, v := l.Field(i)
		if d, ok := dimOf(label); ok {
			if !seen[d] {
				seen[d] = true
				dims[d] = unsafe.String(unsafe.SliceData(v), len(v))
			}
			continue
		}
		if k, ok := eventFieldOf(label); ok && !has[k] {
			f[k], has[k] = v, true
		}
	}
	kind, _ := accesslog.ParseEventKind(string(f[fieldEvent]))
	valid, late := string(f[fieldValid]) == "true", string(f[fieldLate]) == "true"
	price := accesslog.Int(f[fieldPrice])
	switch kind {
	case accesslog.EventDecision:
		c[Decisions] = 1
	case accesslog.EventRequest:
		// The slots asked, whether its decisions filled them or not:
		// what a placement was offered (decisions are what was filled).
		c[Requests] = accesslog.Int(f[fieldSlots])
	case accesslog.EventImp, accesslog.EventBill:
		switch {
		case valid && late:
			c[Overage], c[OverageSpend] = 1, price
		case valid:
			c[Impressions], c[Spend] = 1, price
			if kind == accesslog.EventBill {
				c[Bills] = 1
			} else if p := dims[DimPartner]; p != "" && p != "-" {
				c[Revenue] = price // a sold slot's
			}
		case kind == accesslog.EventImp:
			c[InvalidImpressions] = 1
		default:
			c[InvalidBills] = 1
		}
	case accesslog.EventClick:
		if valid {
			c[Clicks] = 1
		} else {
			c[InvalidClicks] = 1
		}
	case accesslog.EventBid:
		if valid {
			c[Bids] = 1
		} else {
			c[InvalidBids] = 1
		}
	case accesslog.EventWin:
		if valid {
			c[Wins] = 1
		} else {
			c[InvalidWins] = 1
		}
	case accesslog.EventLoss:
		if valid {
			c[Losses] = 1
		} else {
			c[InvalidLosses] = 1
		}
	case accesslog.EventBidImp:
		// Not an impression billed (its exchange's bill is, whichever
		// notice that is): what viewers' players and pages showed.
		if valid {
			c[BidImps] = 1
		} else {
			c[InvalidImpressions] = 1
		}
	case accesslog.EventAuction:
		if !valid {
			return false, nil // a test auction's
		}
		c[Auctions] = 1
	case accesslog.EventBidReceived:
		if !valid {
			return false, nil
		}
		switch string(f[fieldOutcome]) {
		case "throttled", "not_called":
			// Not asked: counted by the partner's metrics, not here.
		case "bid":
			c[PartnerRequests], c[PartnerBids] = 1, 1
		case "timeout":
			c[PartnerRequests], c[PartnerTimeouts] = 1, 1
		default:
			c[PartnerRequests] = 1
		}
		if string(f[fieldWon]) == "true" {
			c[PartnerWins] = 1
		}
		if c.IsZero() {
			return false, nil
		}
	default:
		return false, nil
	}
	return true, nil
}

// The fields of an event line classify reads besides the dimensions.
const (
	fieldEvent = iota
	fieldValid
	fieldLate
	fieldPrice
	fieldSlots
	fieldOutcome
	fieldWon
	numEventFields
)

// eventFieldOf is the field of label classify reads, if it reads it.
func eventFieldOf(label []byte) (int, bool) {
	switch string(label) {
	case "event":
		return fieldEvent, true
	case "valid":
		return fieldValid, true
	case "late":
		return fieldLate, true
	case "price":
		return fieldPrice, true
	case "slots":
		return fieldSlots, true
	case "outcome":
		return fieldOutcome, true
	case "won":
		return fieldWon, true
	}
	return 0, false
}

// dimOf is the dimension a field of label is read into (never DimNode).
func dimOf(label []byte) (Dim, bool) {
	switch string(label) {
	case "advertiser":
		return DimAdvertiser, true
	case "campaign":
		return DimCampaign, true
	case "line_item":
		return DimLineItem, true
	case "creative":
		return DimCreative, true
	case "placement":
		return DimPlacement, true
	case "site":
		return DimSite, true
	case "exchange":
		return DimExchange, true
	case "deal":
		return DimDeal, true
	case "country":
		return DimCountry, true
	case "device":
		return DimDevice, true
	case "currency":
		return DimCurrency, true
	case "partner":
		return DimPartner, true
	}
	return 0, false
}

// rejected counts a request line of a tracking or notice endpoint that was
// refused (4xx): its URL was expired, tampered with or not ours, so it
// has no event line and no dimensions.
func rejected(line []byte, l *accesslog.Line, dims *Dims, c *Counts) (bool, error) {
	if !noticeEndpoints[string(accesslog.LineEndpoint(line))] {
		return false, nil // the common case, decided without reading the line
	}
	if err := l.View(line); err != nil {
		return false, err
	}
	ep, _ := l.Get("endpoint")
	st, _ := l.Get("status")
	status, _ := strconv.Atoi(string(st))
	if !noticeEndpoints[string(ep)] || status < 400 || status > 499 {
		return false, nil
	}
	*dims = Dims{}
	c[Rejected] = 1
	return true, nil
}
