// Package ads serves the decisions and their tracking on the public
// listener: GET /api/decide, the endpoints with source: decide (JSONP, JSON
// and VAST answers of the same decisions), and the signed impression and
// click URLs every decision carries.
//
// It turns a request into a decision.Request (the placement, the site, the
// key-values, the visitor from uid or the cookie unless a privacy signal,
// or one that cannot be read, rules it out (internal/privacy's rule,
// shared with the bidder), the country and region from the client address,
// the device, OS and browser from the User-Agent), asks the live
// decision.Index (decision.Engine keeps it compiled from the CampaignStore), signs
// an impression and a click token per decision (internal/track), and writes
// one access-log event line per decision, impression and click through the
// request's own logger, before the answer goes: no ad is shown that the
// log does not hold. A repeated impression or click is logged with
// valid:false; the store's Deduper tells repeats apart across nodes.
//
// It imports the domain, the decision index, tracking tokens, the privacy
// rule, the access log and the listener's Route types; never the admin listener, config, the
// store backends or cmd (arch_test.go).
package ads
