// Package decision decides which line items and creatives fill a request:
// an in-memory Index compiled from a tsubame.CampaignSet snapshot whenever
// the CampaignStore's version moves (Compile, off the request path), and a
// picker (Index.Decide) that reads no store and allocates nothing in its
// matching core. It declares its own port, Counters, through which budgets,
// impression limits, frequency caps and pacing are asked; it is
// transport-neutral (the request is a struct of already-parsed attributes).
//
// # The index
//
// Compile keeps approved creatives only, and line items that are not paused,
// with at least one of them, whose flight (the campaign's window narrowed by
// the line item's) has not ended. Every targeting value is interned into a small integer per
// dimension (placement, site, app, country, region, device, OS, browser;
// key-value pairs; deal ids; IAB categories), and each line item holds its
// include and exclude lists as sorted id slices, its hours and weekdays as
// bit masks (24 and 7 bits, the exclusions already taken out) and its time
// zone as an index into the few zones of the set.
//
// A request must not scan every line item, so each line item is filed in
// candidate lists keyed by the values of one dimension it targets, the
// first of placement, site, app, region, country, OS, browser and device
// (most selective first); a line item that targets none of them goes to
// one open list. For sites, a domain whose suffix the line item also
// targets is not filed, since the suffix reaches it. Each list is split by
// priority. A request resolves its strings to ids with one map lookup each
// (a site with one per suffix: news.example.com, example.com, com), which
// gathers one list per dimension (one per known suffix of the site) and
// the open list; a line item reached is in exactly one of them, so no
// deduplication is needed. Only those line items are checked, against their
// other dimensions, by sorted-list membership (linear for short lists,
// binary search otherwise).
//
// Per-value bitsets over all line items were the alternative: they cost
// len(lines)/64 words per dimension per request whatever the request, and
// make exclusions and "any value" lists awkward; candidate lists cost in
// proportion to what the request can match. With the benchmark's 10,000
// line items (BenchmarkDecide), a decision takes a few microseconds.
//
// # Deciding
//
// Priorities are taken from 1 (first) to 16. Within one, the line items
// that pass targeting and fit beside the decisions already made are drawn
// at random in proportion to their weights; the one drawn serves if
// Counters allows it, else it is set aside and the draw repeated among the
// rest (which keeps the weights' proportions among those allowed, and asks
// Counters only about line items about to serve). A request ByValue (an
// auction's bid) draws only among those of the highest CPM: a bid is worth
// its price, so an exchange's impression goes to the dearest line item of
// the first priority that has any, and weights share equal prices; the
// priority still ranks first (Google Ad Manager's and Kevel's rule: a
// priority-1 line item beats a priority-2 one whatever their prices). With Count > 1 the next
// slot is drawn from the rest, so that no two decisions share an advertiser
// or an IAB category; lower priorities fill the slots the higher left. A
// line item with deals is a candidate only when the request offers one of
// them; one without deals bids on every request. A creative fits when it is of the request's
// format and size (when the request names them), or of one of its Offers
// (an impression offering a banner and a video is one decision over both,
// not a banner first); a Secure request takes only creatives whose image,
// media and click URLs are https and whose HTML has no "http:" in it. A
// line item's creative is chosen at random among those that fit. Hours and weekdays are evaluated
// in each campaign's time zone, computed once per zone per request, and
// independently of each other: {22, 6} with Friday serves Friday from
// 00:00 to 06:00 and from 22:00 to midnight, not into Saturday morning.
//
// Decide takes its working space from a pool held by the Index, the
// caller's out slice for the answer, and a caller's *rand.Rand (or the
// runtime's goroutine-safe source when nil), so a decision allocates
// nothing; an Index is immutable and safe for concurrent use.
//
// It imports the domain only: never the listeners (server, admin), config,
// the store backends or cmd (arch_test.go).
package decision
