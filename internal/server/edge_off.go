//go:build noedge

package server

// edgeChecks is off in the benchmark's comparison build only (see
// edge_on.go): never ship a binary built with -tags noedge.
const edgeChecks = false
