// Package ssp is the sell side: it sells a publisher's impressions in a
// unified auction of the placement's direct line item and OpenRTB 2.6
// demand partners, within the placement's tmax.
//
// An Auctioneer holds the partners (ssp.demand), the placements sold
// (ssp.placements) and their publishers (ssp.publishers), parsed from the
// module's own configuration section (Config, DefaultsYAML, Validate). For
// each auction, Run builds one bid request (request.go) per eligible
// partner and posts them all at once (partner.go: net/http, HTTP/2 where
// the partner speaks it, HTTP/1.1 keep-alive otherwise; a qps bound and a
// bound of calls in flight; answers cut at ssp.max_response, gunzipped
// too); it gathers the answers until the deadline, validates each bid
// (bids.go: the imp, price, markup, format, size, blocks, currency,
// floor, deals), ranks the valid ones with the direct line item, takes the
// winner (a direct line item takes its budget only then), prices it (first
// or second price), substitutes the auction macros, and queues the win
// and loss notices (notice.go: a bounded queue and a fixed set of
// workers). A partner that hangs, resets, answers garbage or too much is
// cut, counted (PartnerStats) and logged at a bounded rate; the auction
// still answers by its deadline with the others' bids.
//
// Money is exact: prices are micro-units (tsubame.Money), converted with
// tsubame.Rates and bid adjustments in parts per million, rounding so that
// a bid is never read as worth more than it bid and a floor never as less
// than it is.
//
// It imports the domain, decision, openrtb and privacy; never the
// listeners, config, the stores, ads or the bidder (arch_test.go). The
// ads service calls it from /api/decide.
package ssp
