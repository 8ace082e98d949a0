//go:build !noedge

package server

// edgeChecks turns on the strict framing check and the client-address
// walk. Only `make bench` builds without them (-tags noedge), to measure
// what they cost against the same binary.
const edgeChecks = true
