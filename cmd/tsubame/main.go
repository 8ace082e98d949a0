// Command tsubame is the Tsubame ad delivery server and its tools:
//
//	tsubame serve | check-config | health | restart | version
//	tsubame placements import|export|get|put|delete
//	tsubame campaigns import|export
//	tsubame admin create-user|delete-user|list-users|create-token|verify-audit
//	tsubame log reopen|export|ship
//	tsubame pacing simulate
//	tsubame report [verify|rebuild]
//
// commands.go is the table of them (cli.go reads it: the usage, each
// command's -h, the parsing of flags and arguments). The command is the
// only place where the packages of Tsubame are wired together.
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

// run executes one command line and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, environ []string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 { // tsubame help placements get
			return run(ctx, append(args[1:], "-h"), stdin, stdout, stderr, environ)
		}
		fmt.Fprint(stdout, usage())
		return exitOK
	case "-v", "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	err := dispatch(ctx, args, &env{stdin: stdin, stdout: stdout, stderr: stderr, environ: environ})
	if errors.Is(err, errHelpShown) {
		return exitOK
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

// loadConfigWarnings loads and validates the configuration, from -config
// or $TSUBAME_CONFIG, and returns its warnings: the loader's, then the
// configuration's risks (env.load writes them, serve and a reload log them).
func loadConfigWarnings(path string, environ []string) (*config.Config, []string, error) {
	if path == "" {
		path = lookupEnv(environ, config.EnvConfigFile)
	}
	cfg, warnings, err := config.LoadValid(path, environ)
	if err != nil {
		return nil, warnings, &usageError{msg: err.Error()}
	}
	return cfg, append(warnings, cfg.Risks()...), nil
}

func lookupEnv(environ []string, name string) string {
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], name+"="); ok {
			return v
		}
	}
	return ""
}
