// Package track will sign and check the impression and click URLs of
// decisions (HMAC, rotating keys, expiry), count each event once across
// nodes and settle spend, writing every event as a typed access-log line.
//
// It imports the domain and its own ports only: never the listeners
// (server, admin), config, the store backends or cmd (arch_test.go).
package track
