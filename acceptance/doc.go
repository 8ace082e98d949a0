// Package acceptance holds tests that run the real tsubame binary at the
// scale its users run it (thousands of bids, several servers on one
// Redis, restarts). They are apart from cmd/tsubame's so that their
// minutes, mostly spent waiting on the time windows an exchange's notices
// follow, run beside the other packages' tests.
package acceptance
