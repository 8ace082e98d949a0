// Package budget keeps what a line item may still serve behind the
// decision engine's Counters port (decision.Counters): today its frequency
// caps, counted per visitor in the store through tsubame.FrequencyCounter;
// budgets, impression limits and pacing are to join them here.
//
// # Frequency caps
//
// A cap is per visitor, so it cannot be handed out to nodes in slices
// ahead of time the way a budget can: every decision of a capped line item
// costs one atomic Take in the store, within a short timeout, and
// concurrent decisions for one visitor on any number of nodes cannot pass
// the cap together. What is counted is the decision: Decide asks only
// about the line item it is about to serve, so a decision is a
// reservation of its impression, taken before the answer goes.
//
// A capped line item does not serve to a visitor it cannot count (no
// visitor id: none known, or a privacy signal ruled it out), and it stops
// serving while the store cannot answer (fail closed: a store error or a
// timeout is a refusal, counted by Counters.Errors and logged at most once
// per Options.LogEvery). Line items without caps never ask the store and
// go on serving through any of this.
//
// It imports the domain and the decision engine only: never the listeners
// (server, admin), config, the store backends or cmd (arch_test.go).
package budget
