package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The edge's cost: the sample4-edge scenario measures Tsubame behind a
// trusted proxy, every request carrying X-Forwarded-For (so the strict
// framing check and the client-address walk both run), interleaved with
// the same source built with -tags noedge, which compiles both out.

// noEdgeName labels the comparison build in the results.
const noEdgeName = "no-edge"

// buildNoEdge builds the comparison binary beside the measured one's
// temporary files. It must be built from the same source as bin.
func buildNoEdge(bin, dir string) (string, error) {
	out := filepath.Join(dir, "tsubame-noedge")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "noedge", "-ldflags", "-s -w", "-o", out, "./cmd/tsubame")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the no-edge comparison binary: %w", err)
	}
	return out, nil
}

// xffScript makes every wrk request come from a client behind a proxy.
const xffScript = `wrk.headers["X-Forwarded-For"] = "203.0.113.7, 198.51.100.23"
`

func writeXFFScript(dir string) (string, error) {
	p := filepath.Join(dir, "xff.lua")
	return p, os.WriteFile(p, []byte(xffScript), 0o600)
}
