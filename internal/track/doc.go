// Package track signs and checks the impression and click URLs of decisions
// and the win, billing and loss notice URLs of bids and the impression URL
// of a bid's markup (sign.go: HMAC-SHA256,
// a ring of rotating keys, expiry). Counting each
// event once across nodes and writing it as an access-log line is
// internal/ads's, over the store's Deduper.
//
// A token is base64url without padding of: a version byte (4), the key id
// (length-prefixed), the event kind, the expiry (Unix seconds), the price
// (micro-units) and the reservation deadline (Unix seconds, 0 for none),
// each a big-endian int64, the decision, line item, campaign,
// creative and placement ids and the visitor's (each length-prefixed by one
// byte; the visitor's may be empty, and is enciphered: XOR with HMAC-SHA256
// blocks, under a key derived from the signing key's secret, of the
// decision id and the block's number), the origin the reports count it by
// (advertiser, site, country, device; each length-prefixed by one byte,
// each may be empty), for an event of a bid (win, bill,
// loss, bid_imp) the exchange, auction, impression and deal ids and the currency
// (each length-prefixed by one byte; the deal may be empty), a byte of
// flags (1: a test auction's), the click
// destination (prefixed by two bytes) and the HMAC-SHA256 of everything
// before it. A click
// leads only to the destination inside the signed part, so a click URL cannot
// be turned into an open redirect. The visitor is enciphered because the
// URLs sit in pages (a JSONP answer, a bid's markup) whose scripts must not
// read the id of an HttpOnly cookie. Tokens of version 1, without the
// reservation deadline, of version 2, without the origin, and of version
// 3, with the visitor in clear and flags only in a notice's, are still
// read.
//
// It imports the domain and its own ports only: never the listeners
// (server, admin), config, the store backends or cmd (arch_test.go).
package track
