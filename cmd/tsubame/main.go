// Command tsubame is the Tsubame ad delivery server and its tools.
//
//	tsubame serve [-config FILE] [-demo]      run the server
//	tsubame check-config [-config FILE] [-print]
//	tsubame placements import|export|get|put|delete ...
//	tsubame campaigns import|export ...
//	tsubame admin create-user|delete-user|list-users|create-token|verify-audit ...
//	tsubame log reopen|export|ship ...
//	tsubame restart
//	tsubame pacing simulate ...
//	tsubame version
//
// It is the only place where the packages of Tsubame are wired together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	// The zone database inside the binary (about 450 kB), used where the
	// system has none: every campaign names a zone (Asia/Tokyo by default)
	// that must load wherever a release archive is unpacked. The container
	// image carries Go's zoneinfo.zip as well (ZONEINFO).
	_ "time/tzdata"

	"tsubame"
	"tsubame/internal/bulk"
	"tsubame/internal/config"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Environ())
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and failed
	exitUsage  = 2 // the command line, the configuration or the input is wrong
)

const usage = `Tsubame: an ad delivery server.

Usage:
  tsubame serve [-config FILE] [-demo]
        Run the server. -demo loads placements 1..1000 into an empty store.
  tsubame check-config [-config FILE] [-print]
        Validate the configuration and report every problem; -print shows
        the effective configuration.
  tsubame placements import [-config FILE] [-format auto|jsonl|json|csv] [FILE|-]
  tsubame placements export [-config FILE] [FILE|-]
  tsubame placements get    [-config FILE] ID
  tsubame placements put    [-config FILE] [-name NAME] [-dep KEY]... ID URL...
  tsubame placements delete [-config FILE] ID
        Manage placements in the configured store. While a server holds the
        embedded store, they go through its control socket (admin.socket).
  tsubame campaigns import [-config FILE] [-format json|yaml] [-replace] FILE|-
  tsubame campaigns export [-config FILE] [-format json|yaml] [FILE|-]
        Import or export the campaign file: every advertiser, campaign,
        creative and line item, in JSON or YAML (-format, else the file's
        extension). An import is merged into the stored set (-replace: the
        store holds exactly the file), checked as a whole and written only
        if valid; every problem is listed as FILE:LINE: PATH: MESSAGE. While
        a server holds the embedded store, they go through its control
        socket (admin.socket).
  tsubame admin create-user  [-config FILE] [-no-totp] NAME
  tsubame admin delete-user  [-config FILE] NAME
  tsubame admin list-users   [-config FILE]
  tsubame admin create-token [-config FILE] -user NAME -name PURPOSE [-ttl 720h]
        Manage the admin listener's users (the password is read from the
        terminal, or the first line of standard input) and API tokens. A
        running server sees the change at once.
  tsubame admin verify-audit [-config FILE] [FILE...]
        Check the audit log's hash chain (the files in order, or the
        configured log) and report the first edited, removed or inserted line.
  tsubame log reopen
        Reopen the access log (after an external rotation).
  tsubame log export [-config FILE] [FILE|-]
        Write the lines of access_log: store endpoints kept in the store
        (compressed or not), oldest first. The embedded store can be used by
        one process at a time: stop the server first.
  tsubame log ship [-config FILE] -from FILE [FILE...]
        Ship closed access-log files (.log or .log.gz, or a log export) to
        access_log.kafka once, each line under the id the running shipper
        gives it, so consumers drop what they already have (backfill).
  tsubame restart
        Start a new server process that takes over the listeners.
  tsubame pacing simulate [-line ID] [-date YYYY-MM-DD] [-traffic N,...]
                          [-show PERCENT] [-nodes N] [-every DURATION] [-png FILE] FILE|-
        Replay a day of traffic (requests per hour) against a line item of
        a campaign file, on simulated servers running the budget code, and
        write its delivery beside the pacing's ideal curve (CSV; -png draws it).
  tsubame report [-config FILE] [-from T] [-to T] [-by DIM,...] [-tz ZONE]
                 [-format table|csv|json]
        Delivery and billing counts from the access log (docs/reports.md):
        -from inclusive, -to exclusive (RFC 3339); -by minute, hour or day
        and advertiser, campaign, line_item, creative, placement, site,
        exchange, deal, country, device, currency, node.
  tsubame report verify [-config FILE] [-from T] [-to T] [-format table|json]
        Recount the access log's files and compare with the reports.
  tsubame report rebuild [-config FILE]
        Count the reports again from the files kept.
  tsubame version [-v]

The configuration file is -config, else $TSUBAME_CONFIG, else none (built-in
defaults); TSUBAME_* variables override any key (see docs/configuration.md).
`

// run executes one command line and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, environ []string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "serve":
		err = runServe(ctx, rest, stdout, stderr, environ)
	case "check-config":
		err = runCheckConfig(rest, stdout, stderr, environ)
	case "placements":
		err = runPlacements(ctx, rest, stdin, stdout, stderr, environ)
	case "campaigns":
		err = runCampaigns(ctx, rest, stdin, stdout, stderr, environ)
	case "admin":
		err = runAdmin(ctx, rest, stdin, stdout, stderr, environ)
	case "log":
		err = runLog(ctx, rest, stdout, stderr, environ)
	case "restart":
		err = runRestart(rest, stderr, environ)
	case "pacing":
		err = runPacing(ctx, rest, stdout, stderr)
	case "report":
		err = runReport(ctx, rest, stdout, stderr, environ)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionString())
		if len(rest) > 0 && (rest[0] == "-v" || rest[0] == "--verbose") {
			fmt.Fprint(stdout, versionDetails())
		}
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "tsubame: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	return exitCode(err, stderr)
}

// usageError marks errors in the command line or configuration.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitUsage
	}
	fmt.Fprintf(stderr, "tsubame: %v\n", err)
	var (
		ue *usageError
		be *bulk.Error
	)
	if errors.As(err, &ue) || errors.As(err, &be) || tsubame.ErrorCode(err) == tsubame.EINVALID {
		return exitUsage
	}
	return exitFailed
}

// licenseNotice is the notice `tsubame version -v` prints; LICENSE at the
// repository's root holds the license's text.
const licenseNotice = `Copyright 2026 The Tsubame Authors.
Licensed under the Apache License, Version 2.0 (the "License"); you may not
use this software except in compliance with the License. You may obtain a copy
of the License at http://www.apache.org/licenses/LICENSE-2.0 (also the LICENSE
file distributed with it). Distributed on an "AS IS" BASIS, WITHOUT WARRANTIES
OR CONDITIONS OF ANY KIND, either express or implied.
`

// versionDetails lists what the binary was built from (module, settings,
// dependencies) and the license notice.
func versionDetails() string {
	var b strings.Builder
	if bi, ok := debug.ReadBuildInfo(); ok {
		fmt.Fprintf(&b, "module %s\n", bi.Main.Path)
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision", "vcs.time", "vcs.modified", "GOOS", "GOARCH", "CGO_ENABLED", "-tags":
				fmt.Fprintf(&b, "build %s=%s\n", s.Key, s.Value)
			}
		}
		for _, d := range bi.Deps {
			fmt.Fprintf(&b, "dep %s %s\n", d.Path, d.Version)
		}
	}
	b.WriteString("\n" + licenseNotice)
	return b.String()
}

func versionString() string {
	goVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
	}
	return fmt.Sprintf("tsubame %s (%s)", version, goVersion)
}

// newFlagSet returns a flag set for a command with the -config flag.
func newFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (default $"+config.EnvConfigFile+")")
	return fs, path
}

// loadConfig loads and validates the configuration, from -config or
// $TSUBAME_CONFIG, and writes warnings to stderr.
func loadConfig(path string, environ []string, stderr io.Writer) (*config.Config, error) {
	if path == "" {
		path = lookupEnv(environ, config.EnvConfigFile)
	}
	cfg, warnings, err := config.LoadValid(path, environ)
	for _, w := range warnings {
		fmt.Fprintf(stderr, "tsubame: warning: %s\n", w)
	}
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	for _, r := range cfg.Risks() {
		fmt.Fprintf(stderr, "tsubame: warning: %s\n", r)
	}
	return cfg, nil
}

func lookupEnv(environ []string, name string) string {
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], name+"="); ok {
			return v
		}
	}
	return ""
}
