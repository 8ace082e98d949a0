// Package openrtb holds the OpenRTB 2.6 objects a bidder reads and writes,
// and their decoding and encoding: one Go type per object of the specification (the
// fields a bidder that decides by placement, site or app, device,
// geography, visitor, seats, deals and blocks reads, the rest skipped;
// the ext of regs, user and source kept as raw JSON), read tolerantly as
// section 2.6 asks (unknown fields and enum values ignored) and as
// exchanges write them (integers and amounts as strings, 2.5's extension
// places for gdpr, us_privacy, consent and schain, privacy signals of any
// type: privacy.go keeps one that cannot be read as unreadable, never as
// absent and never as an error). Amounts are Price, micro-units read from
// the number's text, never through a float.
//
// Decode uses goccy/go-json, chosen by measurement on the specification's
// examples and two requests shaped as exchanges send them
// (BenchmarkDecode): about five times encoding/json's speed.
//
// AppendResponse encodes a BidResponse, byte for byte as encoding/json
// would, in one pass (encode.go).
//
// It imports the domain, and internal/render's string escaping, only:
// never the listeners (server, admin), config, the store backends or cmd
// (arch_test.go).
package openrtb
