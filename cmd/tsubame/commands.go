package main

import (
	"context"
	"flag"
	"fmt"
	"time"
)

// commands is the command line, in the order the usage lists it.
var commands []command

func init() {
	// A package-level initializer would be an initialization cycle: the
	// usage and the help, which the setups' errors show, read this table.
	commands = []command{
		{
			name: "serve", config: true,
			summary: "Run the server. -demo loads placements 1..1000 and the demo campaigns into an empty store.",
			help: "It runs until SIGTERM or SIGINT (draining within server.shutdown_timeout); SIGHUP reopens " +
				"the access log and reloads the configuration, SIGUSR2 hands the listeners to a new process " +
				"(docs/operations.md).",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				demo := fs.Bool("demo", false, "load the demo placements (ids 1..1000) and campaigns if the store is empty")
				return func(ctx context.Context, _ []string) error { return runServe(ctx, e, *demo) }
			},
		},
		{
			name: "check-config", config: true, readOnly: true,
			summary: "Validate the configuration and report every problem and risk; -print shows the effective configuration.",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				show := fs.Bool("print", false, "print the effective configuration (secrets masked)")
				return func(context.Context, []string) error { return runCheckConfig(e, *show) }
			},
		},
		{
			name: "health", config: true, readOnly: true,
			summary: "Ask the running server's public listener whether it is ready (/readyz); exit 0 if it is, else 1.",
			help: "It asks the configuration's listen (on loopback when it names every interface); -url names " +
				"another listener (http://HOST:PORT). -live asks /healthz instead (the process runs), as a " +
				"liveness probe would. Only the server's own answer (\"ready\", \"ok\") counts. A container's " +
				"health check can run it: it needs no shell and no curl.",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				var f healthFlags
				fs.StringVar(&f.url, "url", "", "the public listener to ask, as `URL` http://HOST:PORT (default: from the configuration's listen)")
				fs.BoolVar(&f.live, "live", false, "ask /healthz (alive) instead of /readyz (ready to serve)")
				fs.DurationVar(&f.timeout, "timeout", 2*time.Second, "how long to wait for the answer (`DURATION`)")
				return func(ctx context.Context, _ []string) error { return runHealth(ctx, e, &f) }
			},
		},
		{
			name: "ssp ads-txt", config: true, readOnly: true,
			summary: "Print the ads.txt line each publisher of ssp.publishers adds for this seller: DOMAIN, SELLER_ID, DIRECT.",
			help: "One line per publisher, after a comment naming the publisher and the domain whose ads.txt " +
				"(or app-ads.txt) it goes in; RESELLER for an intermediary (docs/ssp.md).",
			setup: func(_ *flag.FlagSet, e *env) func(context.Context, []string) error {
				return func(context.Context, []string) error { return runAdsTxt(e) }
			},
		},
		placementsCommand("import", "[FILE|-]", 0, 1,
			"Import placements from JSON lines ({\"id\":\"1\",\"urls\":[\"https://...\"]} per line), one JSON "+
				"array of them, or CSV (id,url,url,... per row, or a header naming id,urls,name,deps), all or "+
				"nothing: every bad line is reported with its number.",
			func(fs *flag.FlagSet, f *placementFlags) {
				fs.StringVar(&f.format, "format", "auto", "the input's `FORMAT`: auto, jsonl, json or csv")
			}),
		placementsCommand("export", "[FILE|-]", 0, 1,
			"Write every placement as JSON lines, in the store's order of ids: byte order (10 before 2).", nil),
		placementsCommand("get", "ID", 1, 1, "Print one placement as JSON.", nil),
		placementsCommand("put", "ID URL...", 2, -1, "Create or replace a placement.",
			func(fs *flag.FlagSet, f *placementFlags) {
				fs.StringVar(&f.name, "name", "", "the placement's `NAME`")
				fs.Var(&f.deps, "dep", "a dependency `KEY` such as campaign:42 (repeat it for more)")
			}),
		placementsCommand("delete", "ID", 1, 1, "Delete a placement.", nil),
		campaignsCommand("import", "FILE|-", 1,
			"Import the campaign file (every advertiser, campaign, creative and line item, JSON or YAML), "+
				"merged into the stored set, checked as a whole and written only if valid; every problem is "+
				"listed as FILE:LINE: PATH: MESSAGE."),
		campaignsCommand("export", "[FILE|-]", 0, "Export the stored campaign set as a campaign file."),
		adminCommand("create-user", "NAME", 1,
			"Create an admin user; the password is read from the terminal, or the first line of standard input.",
			func(fs *flag.FlagSet, f *adminFlags) {
				fs.StringVar(&f.role, "role", "", "viewer, editor or admin (`ROLE`; default: admin for the first user, else viewer)")
				fs.BoolVar(&f.noTOTP, "no-totp", false, "no TOTP second factor (only with admin.require_totp: false)")
			}),
		adminCommand("delete-user", "NAME", 1, "Delete a user and their API tokens.", nil),
		adminCommand("list-users", "", 0, "List the users.", nil),
		adminCommand("create-token", "", 0,
			"Create an API token (shown once) for a user, to send as \"Authorization: Bearer TOKEN\".",
			func(fs *flag.FlagSet, f *adminFlags) {
				fs.StringVar(&f.user, "user", "", "the user the token acts as (`NAME`)")
				fs.StringVar(&f.name, "name", "", "what the token is for (`PURPOSE`)")
				fs.StringVar(&f.role, "role", "", "at most the user's `ROLE` (default: the user's)")
				fs.StringVar(&f.scope, "scope", "", "`metrics` limits the token to GET /metrics")
				fs.DurationVar(&f.ttl, "ttl", 0, "the token's lifetime (`DURATION`, e.g. 720h; 0: admin.max_token_ttl)")
			}, "user", "name"),
		adminCommand("set-password", "NAME", 1,
			"Replace a user's password (read as for create-user); -new-totp also enrols a new TOTP secret. "+
				"The user's dashboard sessions end; their API tokens stay.",
			func(fs *flag.FlagSet, f *adminFlags) {
				fs.BoolVar(&f.newTOTP, "new-totp", false, "also replace the TOTP secret (shown once)")
				fs.BoolVar(&f.noTOTP, "no-totp", false, "remove the TOTP second factor (only with admin.require_totp: false)")
			}),
		adminCommand("list-tokens", "", 0, "List the API tokens (never their secrets): id, user, name, role, scope, expiry.",
			func(fs *flag.FlagSet, f *adminFlags) {
				fs.StringVar(&f.user, "user", "", "only the tokens of this user (`NAME`)")
			}),
		adminCommand("delete-token", "ID", 1, "Revoke an API token by its id (list-tokens shows them).", nil),
		adminCommand("verify-audit", "[FILE...]", -1,
			"Check the audit log's hash chain (the files in order, or the configured log) and report the "+
				"first edited, removed or inserted line.", nil),
		{
			name: "log reopen", config: true, readOnly: true,
			summary: "Ask the running server to reopen its access log (after an external rotation).",
			setup: func(_ *flag.FlagSet, e *env) func(context.Context, []string) error {
				return func(context.Context, []string) error { return runLogReopen(e) }
			},
		},
		{
			name: "log tail", args: "[FILE]", max: 1, config: true, readOnly: true,
			summary: "Print the access log's last lines, and with -f the lines as they are written, through rotations.",
			help: "The live file is written through a memory mapping with its space allocated ahead (zero bytes): " +
				"grep calls it binary and tail prints the zeros. This prints its whole lines only. FILE is " +
				"access_log.dir/access_log.file_name unless given.",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				n := fs.Int("n", 10, "print the last `N` lines")
				follow := fs.Bool("f", false, "then print the lines as they are written, until interrupted")
				return func(ctx context.Context, args []string) error {
					return runLogTail(ctx, e, argOr(args, 0), *n, *follow)
				}
			},
		},
		{
			name: "log export", args: "[FILE|-]", max: 1, config: true,
			summary: "Write the lines of an access log kept in the store (access_log: store), oldest first.",
			help:    "The embedded store can be used by one process at a time: stop the server first.",
			setup: func(_ *flag.FlagSet, e *env) func(context.Context, []string) error {
				return func(ctx context.Context, args []string) error { return runLogExport(ctx, e, argOr(args, 0)) }
			},
		},
		{
			name: "log ship", args: "[FILE...]", max: -1, config: true,
			summary: "Ship closed access-log files (.log, .log.gz or a log export) to access_log.kafka once " +
				"(backfill), each line under the id the running shipper gives it.",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				var files stringList
				fs.Var(&files, "from", "a closed access-log `FILE` to ship; repeat it, or list more files as arguments")
				return func(ctx context.Context, args []string) error {
					files = append(files, args...)
					if len(files) == 0 {
						return usagef("log ship: no file to ship: give -from FILE")
					}
					return runLogShip(ctx, e, files)
				}
			},
		},
		{
			name: "restart", config: true, readOnly: true,
			summary: "Start a new server process that takes over the listeners, and wait until it has.",
			help: "The new process is the binary at the path the running one was started as (install a new " +
				"build there to upgrade), with the running one's arguments and environment: it reads the " +
				"same configuration file, changed or not. -config here only finds the running server (its " +
				"data_dir). If the new process fails, the running one keeps serving and the command says why " +
				"at once (exit 1).",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the new process (`DURATION`)")
				return func(context.Context, []string) error { return runRestart(e, *timeout) }
			},
		},
		{
			name: "pacing simulate", args: "FILE|-", min: 1, max: 1,
			summary: "Replay a day of traffic against a line item of a campaign file, on simulated servers " +
				"running the budget code, and write its delivery beside the pacing's ideal curve (CSV).",
			help: "By default every decision wins and is billed at once, as on /api/decide. -win-rate, -notices, " +
				"-bill-on, -win-delay, -bill-delay, -win-window and -reservation play an exchange instead: each " +
				"bid wins or loses by a seeded draw, and the notices the exchange sends are recorded on another " +
				"server at their delays, as the bidder records them (docs/ads.md#simulating-a-day).",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				var f pacingFlags
				f.define(fs)
				return func(ctx context.Context, args []string) error { return runPacing(ctx, e, &f, args[0]) }
			},
		},
		reportCommand("", "Delivery and billing counts from the access log (docs/reports.md).",
			"-from is inclusive, -to exclusive. While a server runs on the data directory, the command "+
				"asks it through its control socket."),
		reportCommand("verify", "Recount the access log's files and compare them with the reports.", ""),
		reportCommand("rebuild", "Count the reports again from the access log's files kept.", ""),
		{
			name: "store audit", config: true,
			summary: "What the store keeps, by family (placements, campaigns, days' and totals' budget keys, " +
				"frequency caps, ids counted, outcomes, reports): its keys, how many never expire and its size.",
			help: "-expire-past-days first gives the past days' budget keys still kept without a drop time " +
				"theirs (ads.budget.keep_daily after the day): those past it go at once. While a server runs " +
				"on the data directory, the command asks it through its control socket.",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				expire := fs.Bool("expire-past-days", false, "drop the past days' budget keys kept without a drop time")
				format := fs.String("format", "table", "output `table|json`")
				return func(ctx context.Context, _ []string) error { return runStoreAudit(ctx, e, *expire, *format) }
			},
		},
		{
			name: "forecast", config: true, readOnly: true,
			summary: "The impressions a placement, site, country or device is forecast to offer, hour by hour, " +
				"what booked line items take of them and what is left to sell (docs/reports.md#forecasts).",
			help: "Learned from the reports' ad requests over report.forecast_days. While a server runs on the " +
				"data directory, the command asks it through its control socket.",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				var f forecastFlags
				f.define(fs)
				return func(ctx context.Context, _ []string) error { return runForecast(ctx, e, &f) }
			},
		},
		{
			name:    "version",
			summary: "Print the version; -v adds the build settings, the modules and the license notice.",
			setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
				verbose := fs.Bool("v", false, "also the build settings, the modules and the license notice")
				return func(context.Context, []string) error {
					fmt.Fprintln(e.stdout, versionString())
					if *verbose {
						fmt.Fprint(e.stdout, versionDetails())
					}
					return nil
				}
			},
		},
	}
}

// argOr returns args[i], or "" when there are fewer.
func argOr(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

func placementsCommand(sub, args string, min, max int, summary string, define func(*flag.FlagSet, *placementFlags)) command {
	return command{
		name: "placements " + sub, args: args, min: min, max: max, config: true, readOnly: sub == "get" || sub == "export",
		summary: summary,
		help: "Placements live in the configured store. While a server holds the embedded store, the " +
			"command goes through its control socket (admin.socket).",
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			var f placementFlags
			if define != nil {
				define(fs, &f)
			}
			return func(ctx context.Context, args []string) error { return runPlacements(ctx, e, sub, &f, args) }
		},
	}
}

func campaignsCommand(sub, args string, min int, summary string) command {
	return command{
		name: "campaigns " + sub, args: args, min: min, max: 1, config: true, readOnly: sub == "export",
		summary: summary,
		help: "The format is -format, else the file's extension (.json, .yaml, .yml, .csv: line items alone, " +
			"merged); standard input is read as JSON or YAML, standard output written as JSON. While a server holds the embedded store, the " +
			"command goes through its control socket (admin.socket).",
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			format := fs.String("format", "", "the file's `FORMAT`: json, yaml or csv (default: its extension)")
			replace := new(bool)
			if sub == "import" {
				replace = fs.Bool("replace", false, "make the store hold exactly the file's objects (default: merge the file into the stored set)")
			}
			return func(ctx context.Context, args []string) error {
				return runCampaigns(ctx, e, sub, *format, *replace, argOr(args, 0))
			}
		},
	}
}

// adminCommand is one of "tsubame admin": n arguments (-1: any).
func adminCommand(sub, args string, n int, summary string, define func(*flag.FlagSet, *adminFlags), required ...string) command {
	min, max := n, n
	if n < 0 {
		min = 0
	}
	return command{
		name: "admin " + sub, args: args, min: min, max: max, config: true, required: required,
		summary: summary,
		help:    "A running server sees the change at once; each change is written to the audit log.",
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			var f adminFlags
			if define != nil {
				define(fs, &f)
			}
			return func(_ context.Context, args []string) error { return runAdmin(e, sub, &f, args) }
		},
	}
}

func reportCommand(sub, summary, help string) command {
	name := "report"
	if sub != "" {
		name += " " + sub
	}
	return command{
		name: name, config: true, summary: summary, help: help,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			var f reportFlags
			if sub != "rebuild" {
				f.define(fs, sub)
			}
			return func(ctx context.Context, _ []string) error { return runReport(ctx, e, sub, &f) }
		},
	}
}
