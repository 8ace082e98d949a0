package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// A variant scenario measures a fresh Tsubame against a variant of itself,
// interleaved in the same rounds (alternating which runs first): the cost
// of one feature, as a ratio, on a box where rounds a minute apart move
// more than that cost.
type variant struct {
	Name   string   // the variant's label in the results
	What   string   // what the pair differs in, for the report
	Check  float64  // the ratio (measured ÷ variant) the report wants at least
	Tags   string   // build tags for the variant's binary; "" runs the same binary
	Env    []string // environment of both
	Other  []string // environment of the variant only
	Script string   // a wrk script for the pair's runs ("" for none)
}

// edgeVariant: the strict framing check and the client-address walk
// against the same source built without them (-tags noedge), behind a
// trusted proxy that sends X-Forwarded-For on every request.
var edgeVariant = variant{
	Name:   "no-edge",
	What:   "the edge checks (strict framing, client address behind a trusted proxy) against the build without them (`-tags noedge`)",
	Check:  0.98,
	Tags:   "noedge",
	Env:    []string{"TSUBAME_SERVER_TRUSTED_PROXIES=127.0.0.1/32"},
	Script: `wrk.headers["X-Forwarded-For"] = "203.0.113.7, 198.51.100.23"` + "\n",
}

// bufferedVariant: the mapped access-log writer (durability: process, the
// default) against the buffered one it replaced (durability: async).
var bufferedVariant = variant{
	Name:  "buffered",
	What:  "the mapped access log (`durability: process`) against the buffered writer (`durability: async`)",
	Check: 0.97,
	Other: []string{"TSUBAME_ACCESS_LOG_DURABILITY=async"},
}

// pair is a running variant pair.
type pair struct {
	base, other string // their public addresses
	script      string
}

// startPair starts the measured Tsubame and its variant on four ports from
// first (each with its admin listener).
func startPair(ctx context.Context, p *procs, v *variant, bin, dir string, first int, apiURL, cbEnv string) (*pair, error) {
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(first+i) }
	for i := range 4 {
		if err := portFree(addr(i)); err != nil {
			return nil, err
		}
	}
	otherBin := bin
	if v.Tags != "" {
		otherBin = filepath.Join(dir, "tsubame-"+v.Name)
		cmd := exec.Command("go", "build", "-trimpath", "-tags", v.Tags, "-ldflags", "-s -w", "-o", otherBin, "./cmd/tsubame")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("building the %s variant: %w", v.Name, err)
		}
	}
	base := append([]string{cbEnv}, v.Env...)
	if _, err := startTsubame(ctx, p, bin, filepath.Join(dir, v.Name+"-base"), addr(0), addr(2), apiURL, base...); err != nil {
		return nil, err
	}
	if _, err := startTsubame(ctx, p, otherBin, filepath.Join(dir, v.Name), addr(1), addr(3), apiURL, append(base, v.Other...)...); err != nil {
		return nil, err
	}
	if err := checkBodies(addr(0), addr(1)); err != nil {
		return nil, err
	}
	pr := &pair{base: addr(0), other: addr(1)}
	if v.Script != "" {
		pr.script = filepath.Join(dir, v.Name+".lua")
		if err := os.WriteFile(pr.script, []byte(v.Script), 0o600); err != nil {
			return nil, err
		}
	}
	return pr, nil
}
