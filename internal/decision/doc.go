// Package decision decides which line items and creatives fill a request:
// an in-memory Index compiled from a tsubame.CampaignSet snapshot (Compile,
// off the request path) and patched with each write after (Patch), and a
// picker (Index.Decide) that reads no store and allocates nothing in its
// matching core. It declares its own port, Counters, through which budgets,
// impression limits, frequency caps and pacing are asked; it is
// transport-neutral (the request is a struct of already-parsed attributes).
// Engine keeps the live Index compiled and patched from a CampaignStore;
// /api/decide (internal/ads) and the bidder both read it.
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
// A request must not scan every line item, nor every line item that shares
// one of its values: with 50,000 line items on desktops, a desktop request
// must find the few whose other targeting it satisfies too. Each line
// item's targeting is read as a conjunction of predicates: "the request's
// value of this attribute is one of these" (a dimension's include list,
// one key's values, the deals) and "is none of those" (the exclusions).
// Compile counts how many line items name each value, and files each line
// item under the values of its rarest predicate, the one whose values the
// fewest line items name: devices: [desktop] beside placements: [top]
// files it under top. A line item with no such predicate goes to its
// priority's zero list, and is also filed, as excluded, under every value
// it excludes. For sites, a domain whose suffix the line item also
// targets is not filed, since the suffix reaches it. Each list is split by
// priority. A request resolves its strings to ids with one map lookup each
// (a site with one per suffix: news.example.com, example.com, com), which
// gives its terms; for one priority it gathers the line items filed under
// them and the zero list, less those a term excludes, each once (a line
// item filed under two of the request's values, two deals it names both
// of, is taken once). Only those are checked, against the rest of their
// targeting, by sorted-list membership (linear for short lists, binary
// search otherwise). A decision so costs in proportion to the line items
// whose rarest predicate the request satisfies, whatever targeting they
// share (TestReachFollowsMatches: at most twice those that match, and a
// few).
//
// Per-value bitsets over all line items were an alternative: they cost
// len(lines)/64 words per dimension per request whatever the request.
// The conjunction index of Whang et al. (VLDB 2009) files a line item
// under every predicate and reaches only those found in as many lists as
// they have predicates, skipping through the lists; but the lists of a
// request's common values (a country, a device) make its walk step
// through nearly all their entries, sorting the lists at each step, and it
// measured 3× slower than the rarest predicate on BenchmarkDecide's mix.
// With the benchmark's 10,000 line items, a decision takes a couple of
// microseconds; with 50,000 that all share one value
// (BenchmarkDecideShared), about 15.
//
// # Patches
//
// A compile of a million line items takes seconds; a write changes one.
// Index.Patch builds the index of the set with a write's objects changed
// from the index in use: the line items the write touches (changed, or of
// a changed campaign or advertiser, or naming a changed creative) are
// compiled again and appended to the line items' array, into the room
// Compile left after them (an eighth), which the older index never reads;
// the ones they replace are marked dead; the posting lists they were or
// are filed in are copied with the change, and every other list, the
// line items and the dictionaries are shared. The dictionaries are two
// maps each, the compile's (never written again) and a small one of what
// patches added, which each patch copies. A line item is filed by the
// compile's counts of how many name each value (a value new since counts
// as named by none), so the same line item is always filed under the same
// terms and a patch finds the entries of the one it removes. At a million
// line items a patch takes about 2 ms where a compile takes 7 s. Once
// patches have used half the room (Index.Crowded), the engine compiles
// the set again off the request path, which takes the dead line items'
// room back (internal/ads); a patch that finds no room returns nil, for a
// compile. A patch for the clock alone (no change)
// takes out the line items whose flight ended and reports those whose
// flight started (Index.Fresh, for the budgets to lease ahead), when the
// first such edge since the index was built has passed (Index.Stale).
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
// # Explaining
//
// match and fits return the first rule a line item fails (a Why), not a
// bool, and Decide's loop takes an optional tracer (nil on the request
// path, which so allocates nothing more): Index.Explain runs the same loop
// with one, and tells for every candidate line item of a request's
// placement the rule that excluded it, that Counters refused it, that it
// lost the draw or a higher priority filled the slots, or the slot it won;
// given the same random source, its decisions are Decide's
// (TestExplainAgreesWithDecide). What leaves a line item out of the index
// (paused, no approved creative, its flight) comes from the helpers
// compileLine shares with Set.LeftOut. DecideWhy also tells the furthest
// an unfilled request got, for the no-fill counts by cause.
//
// It imports the domain only: never the listeners (server, admin), config,
// the store backends or cmd (arch_test.go).
package decision
