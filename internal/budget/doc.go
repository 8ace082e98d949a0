// Package budget keeps what a line item may still serve behind the
// decision engine's Counters port (decision.Counters): its impression
// limits and its campaign's budgets, in leases of the store's Quotas held
// by a Ledger, and its frequency caps, counted per visitor in the store
// through tsubame.FrequencyCounter.
//
// # Budgets and impression limits
//
// Each limited counter — a line item's impressions, a campaign's spend; in
// total and per day of the campaign's time zone — is a key of Quotas
// ("li/<id>/imp", "li/<id>/imp/2026-11-27", "camp/<id>/spend",
// "camp/<id>/spend/2026-11-27"). The Ledger holds a lease of each and
// takes from it in memory, so a decision costs no store round trip: the
// store guarantees that the leases of every node and the settled units
// never exceed the limit, and a node spends only what it holds.
//
// A decision or a bid takes one impression (and cpm/1000 of spend) from
// every account of its line item at once, or from none, and holds it: a
// count in a bucket per line item and end of the hold (holds.go), never a
// record per decision; the ends are few (decision.HoldEnd rounds them to
// a sixteenth of the reservation). Its tracking or notice URLs
// name this node (Holder), and what becomes of it — the bid's win, loss
// or bill, a decision's impression as its bill — is recorded once across
// nodes for this node (tsubame.Outcomes), wherever it comes; the loop
// reads the queue every round and applies it (Apply): a loss gives the
// hold back at once, a win keeps it for its bill, a bill spends it at the
// bill's price and gives the rest of the bid's price back. A hold nothing
// claims is given back a grace after its win window (a bid never won) or
// its reservation (won and never billed, a decision never shown), and
// only once the queue was read after that: an outcome recorded before the
// deadline always counts. A bill of no hold (late, after a loss, or of a
// process since restarted) was paid: spent from the hand, else debited
// in the store past the leases (Quotas.Debit), and counted as overage.
// Spend is kept on a node in thousandths of a micro-unit, so an
// impression's cost is exact; the store keeps micro-units, and a node
// rounds up when it gives a lease back.
//
// Run's loop, every Interval, applies the outcomes and the deadlines, gives
// back settled units and what the hand holds beyond need, renews leases
// half-way through their Lease, and tops hands up to twice what the last
// intervals asked for (at most a 64th of the limit); an account whose hand
// ran short is topped up at once, to twice what this interval asked for so
// far, and a decision that found it empty waits for that, at most
// LedgerOptions.Wait and once per request. Warm leases for a new index's
// line items before their first decision. The limit a lease asks with is
// the pacing target (pacing.go): the full limit for asap, for even the
// share of the period's expected traffic that has passed (the flight for a
// total, the day within it for a daily limit), as this node learned it
// (traffic.go), or weighted by hour_weights, 1.25 times that for
// frontloaded; and a limit behind its plan commits at most CatchUp percent
// of the hour's plan, or what is left re-paced over the rest of its period
// (catchUp). A lease not renewed within its Lease (the store gone) is
// no longer spent. When the store holds less of a lease than the node
// counts on — the lease ended there and it counted all of it as spent, or
// a failover to a replica lost the writes that granted it — the node drops
// the difference from what it was giving back and from its hand, and if
// that is not enough, lets the lease's holds go and releases all the
// store still holds of it as spent: no unit is spent twice, and what a
// failover forgot is spent past the limit at most once (Counts.Forgotten).
// A store that holds more than the node counts on is believed only after
// a Lease whose answer was lost; otherwise the surplus is released as
// spent. Close gives the hand back and counts
// the rest, open holds included, as spent.
//
// Lock order: Ledger.loopMu (one round of the loop, Close, Stats), then
// an adopted child's loopMu (the parent's round ticks its children), then
// Ledger.mu (the accounts map and the children), then an account's mu (a lost lease
// against takes); holdTable's shard locks are taken alone.
//
// # Frequency caps
//
// A cap is per visitor, so it cannot be handed out to nodes in slices
// ahead of time the way a budget can: it is counted in the store, in one
// record per visitor (tsubame.FrequencyCounter) holding, per capped line
// item, the impressions within its windows and the holds of bids awaiting
// their win. A request reads that record at most once whatever the number
// of capped line items it weighs, across its impressions and formats
// (decision.Request.Frequency), and checks every capped line item drawn
// against it in memory; it is the draw that asks (Decide asks Counters
// only about the line item it is about to serve, after targeting, floors
// and blocks), so a line item refused for another reason never costs a
// store call.
//
// A decision of /api/decide is an impression reserved: the first capped
// line item drawn is taken in the store at once, by an atomic check and
// count that also reads the visitor's record in the same call; the next
// ones drawn are checked in that record, and a take is sent only for one
// the record allows (a take the store then refuses, a concurrent request
// having taken the last one, draws again). One store call per request
// when the first capped line item drawn serves or none does, one more per
// capped line item that serves after the record refused another; and
// concurrent decisions for one visitor on any number of nodes cannot pass
// a cap together, since every count is the store's atomic check.
//
// An auction's bid is not an impression: it usually loses. With
// decision.Request.CapsOnWin the decision only checks (one read of the
// record per bid request); once the bid is sure to be made — after the
// floor, currency, id and log checks — the bidder holds the cap for it
// (HoldCap: an atomic check and hold, so that bids in flight count and
// concurrent requests of one visitor cannot bid past the cap), and the
// win counts it (CountCap, once per bid however many notices say so, past
// the cap too: a won impression was shown) and ends the hold; a loss
// releases it (ReleaseCap), and a hold nobody ends stops counting at its
// end. So at most cap − wins − holds bids are made for a visitor, and the
// visitor sees exactly the cap when the win notices come.
//
// A capped line item does not serve to a visitor it cannot count (no
// visitor id: none known, or a privacy signal ruled it out), and it stops
// serving while the store cannot answer (fail closed: a store error or a
// timeout is a refusal, counted by Counters.Errors and logged at most once
// per Options.LogEvery; a request whose read failed refuses its other
// capped line items without asking again). Line items without caps never
// ask the store and go on serving through any of this. What the store may
// have made all the same, answering late, is undone: a hold is released,
// a decision's take cancelled (by its decision's id), each sent again until
// the store takes it, as are the counts and releases of notices it missed
// (retry.go).
//
// It imports the domain and the decision engine only: never the listeners
// (server, admin), config, the store backends or cmd (arch_test.go).
package budget
