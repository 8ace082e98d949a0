// Package decision will decide which line item and creative fill a request:
// an in-memory index compiled from a tsubame.CampaignSet snapshot whenever
// the CampaignStore's version moves, and a picker (targeting, priority then
// weight, caps, pacing) that reads no store on the request path and
// allocates nothing in its matching core. It declares its own ports (the
// counters of budgets and caps) and is transport-neutral.
//
// It imports the domain only: never the listeners (server, admin), config,
// the store backends or cmd (arch_test.go).
package decision
