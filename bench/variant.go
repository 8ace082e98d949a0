package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	Rev    string   // a git revision to build the variant's binary from (with Tags)
	Redis  bool     // both on the bench's Redis instead of the embedded store
	Env    []string // environment of both
	Base   []string // environment of the measured one only ({kafka}: the broker's address)
	Kafka  bool     // needs the bench's Kafka broker
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

// baselineVariant measures this build against an earlier revision of the
// source (make bench BENCH_BASELINE=<rev>): what a change costs, same run.
func baselineVariant(rev string) *variant {
	return &variant{
		Name:  "baseline",
		What:  fmt.Sprintf("this build against revision %s, both on Redis", rev),
		Check: 0.98,
		Rev:   rev,
		Redis: true,
	}
}

// pair is a running variant pair.
type pair struct {
	base, other string // their public addresses
	script      string
}

// startPair starts the measured Tsubame and its variant on four ports from
// first (each with its admin listener).
func startPair(ctx context.Context, p *procs, v *variant, bin, dir string, first int, apiURL, cbEnv, redisAddr, kafkaAddr string) (*pair, error) {
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(first+i) }
	for i := range 4 {
		if err := portFree(addr(i)); err != nil {
			return nil, err
		}
	}
	otherBin := bin
	if v.Tags != "" || v.Rev != "" {
		otherBin = filepath.Join(dir, "tsubame-"+v.Name)
		if err := buildVariant(v, dir, otherBin); err != nil {
			return nil, fmt.Errorf("building the %s variant: %w", v.Name, err)
		}
	}
	base := append([]string{cbEnv}, v.Env...)
	if v.Redis {
		base = append(base, "TSUBAME_STORE=redis", "TSUBAME_REDIS_ADDRS="+redisAddr)
	}
	measured := slices.Clone(base)
	for _, e := range v.Base {
		measured = append(measured, strings.ReplaceAll(e, "{kafka}", kafkaAddr))
	}
	if _, err := startTsubame(ctx, p, bin, filepath.Join(dir, v.Name+"-base"), addr(0), addr(2), apiURL, measured...); err != nil {
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

// buildVariant builds the variant's binary: with its tags, from its
// revision (checked out in a temporary worktree) or this tree.
func buildVariant(v *variant, dir, out string) error {
	src := "."
	if v.Rev != "" {
		src = filepath.Join(dir, "src-"+v.Name)
		add := exec.Command("git", "worktree", "add", "--detach", src, v.Rev)
		add.Stdout, add.Stderr = os.Stderr, os.Stderr
		if err := add.Run(); err != nil {
			return fmt.Errorf("git worktree add %s: %w", v.Rev, err)
		}
		defer func() { _ = exec.Command("git", "worktree", "remove", "--force", src).Run() }()
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-ldflags", "-s -w", "-o", abs}
	if v.Tags != "" {
		args = append(args, "-tags", v.Tags)
	}
	cmd := exec.Command("go", append(args, "./cmd/tsubame")...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = src, os.Stderr, os.Stderr
	return cmd.Run()
}
