// Package bidder is an OpenRTB 2.6 bidder: the DSP side of an auction. It
// answers an exchange's bid requests (POST /rtb/<exchange>) with the
// decision engine's line items, and takes the win, billing and loss
// notices of its bids (/t/win/, /t/bill/, /t/loss/) and the impressions
// their markup fires (/t/bi/).
//
// A request is decoded by internal/openrtb; each impression becomes a
// decision.Request (the tag id as the placement, the site's domain or the
// app's bundle, the device type and User-Agent, the country and region of
// device.geo or of the address, the visitor from user.buyeruid or the
// advertising id unless a privacy signal, or one that cannot be read,
// rules it out (privacy.go), the request's blocked categories, advertisers and apps,
// its floors and deals) and is decided as /api/decide decides (a request
// whose wseat leaves our seat out, or whose bseat names it, gets none),
// but for value: every format the impression offers in one decision, the
// line item of the highest CPM within a priority (decision.Request's
// ByValue), https creatives only for imp.secure, and one bid per
// transaction (source.tid) across nodes (Bidder.decide). The line item's
// CPM, converted into a currency the request allows (Rates, exact and
// rounded down), is the bid; in a first-price auction an exchange's
// Shading lowers it (decision.Request.Price). A bid
// reserves its price in the budget ledger until the exchange's
// reservation ends, and the notice that bills it (Exchange.BillOn: the
// billing notice, the win notice or the markup's impression) settles it
// (bill:<bid> seen); test requests reserve nothing and nothing of theirs
// is billed. A capped line item's frequency cap counts wins, not bids
// (caps.go): the decisions of a request check it against the visitor's
// record, read once; a bid about to be made holds it; its win, bill or
// markup impression counts it, and its loss releases it.
//
// The notice URLs are signed (internal/track) over everything the bid
// said, the clearing price excepted: the exchange substitutes
// ${AUCTION_PRICE} (and ${AUCTION_LOSS}) in the query. The markup's
// impression URL (/t/bi/), which a viewer's player or page calls, takes
// nothing from its query: only the exchange's notices set a clearing
// price. Every notice whose token verifies is logged and answered (the
// price read leniently, notice.go); each kind is counted once per bid
// across nodes (tsubame.OutcomeKey of its outcome, Bidder.once), its
// repeats answered alike and logged as not valid; a bill after the
// reservation and the grace is billed and logged late. Every bid, win,
// bill, loss and markup impression is a line of the access log, before
// the answer goes.
//
// It imports the domain, the decision engine (internal/decision's Engine,
// which /api/decide reads too), the OpenRTB types and encoder, the privacy
// rule /api/decide shares (internal/privacy), tracking tokens and ids
// (internal/track), the access log and the listener's Route types; never
// the ads service, the admin listener, config, the store backends or cmd
// (arch_test.go).
package bidder
