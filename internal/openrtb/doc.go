// Package openrtb holds the OpenRTB 2.6 objects a bidder reads and
// writes, and a seller writes and reads, and their decoding and encoding:
// one Go type per object of the specification (the fields a bidder that
// decides by placement, site or app, device, geography, visitor, seats,
// deals and blocks reads, and those a seller sends; the rest skipped; the
// ext of regs, user and source kept as raw JSON), read tolerantly as
// section 2.6 asks (unknown fields and enum values ignored) and as
// exchanges write them (integers and amounts as strings, 2.5's extension
// places for gdpr, us_privacy, consent and schain, privacy signals of any
// type: privacy.go keeps one that cannot be read as unreadable, never as
// absent and never as an error; the string fields added for the seller,
// String, read a value of another type as empty). Amounts are Price,
// micro-units read from the number's text, never through a float.
//
// Decode reads a request in one pass over its text (Decoder, decoder.go):
// what it does not read is checked and skipped, never built, and a
// Decoder reused decodes a request with one allocation, the copy of its
// text that its strings are views of. It reads every body as encoding/json
// does into the same types (FuzzDecoderAgreesWithEncodingJSON), at about
// goccy/go-json's speed, which it replaced, without its 24 to 109
// allocations a request (BenchmarkDecode).
//
// AppendResponse encodes a BidResponse, byte for byte as encoding/json
// would, in one pass (encode.go).
//
// For the sell side (an SSP building bid requests for its buyers and
// reading their answers), the package also encodes requests and decodes
// responses. The request objects carry the fields a seller sends (site
// and app ids, names and referrer, device OS and language, user id,
// interstitial and expiry, video placement and linearity, fd, the supply
// chain's ver and each node's rid, name and domain); AppendRequest
// (encode_request.go) encodes a BidRequest as encoding/json would, in one
// pass and without allocating, privacy signals written as the
// specification writes them (privacy.go says how an unreadable one is).
// DecodeResponse (decode_response.go) reads a buyer's BidResponse,
// refusing only a broken structure: each bid's own checks are the
// caller's. ParseSupplyChain and AppendSupplyChain (schain.go) read and
// write the supply chain's form outside OpenRTB, an ad tag's schain
// parameter.
//
// It imports the domain, and internal/render's string escaping, only:
// never the listeners (server, admin), config, the store backends or cmd
// (arch_test.go).
package openrtb
