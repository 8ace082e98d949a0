package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"tsubame"
	"tsubame/internal/config"
	"tsubame/internal/report"
)

// reportFlags are the flags of the report commands.
type reportFlags struct {
	from, to, by, tz, format string
}

// define defines the flags of "report" (sub "") or "report verify".
func (f *reportFlags) define(fs *flag.FlagSet, sub string) {
	fs.StringVar(&f.from, "from", "", "start of the period, inclusive (`T`: RFC 3339, a whole minute); default: all data")
	fs.StringVar(&f.to, "to", "", "end of the period, exclusive (`T`: RFC 3339, a whole minute); default: all data")
	if sub == "" {
		fs.StringVar(&f.by, "by", "", "group rows by these dimensions (`DIM,...`): minute, hour or day, and "+
			strings.Join(report.DimNames(), ", "))
	}
	fs.StringVar(&f.tz, "tz", "", "time `ZONE` of hours, days and the output (default report.timezone)")
	formats := "table|csv|json"
	if sub == "verify" {
		formats = "table|json"
	}
	fs.StringVar(&f.format, "format", report.FormatTable, "output `"+formats+"`")
}

// runReport implements "tsubame report": the delivery and billing reports
// from the access log's rollups (internal/report). While a server runs on
// the data directory it holds the rollups, and the command asks it through
// its control socket; else the command rolls up what the files hold beyond
// the rollups and answers itself.
func runReport(ctx context.Context, e *env, sub string, f *reportFlags) error {
	stdout, stderr := e.stdout, e.stderr
	cfg, err := e.load()
	if err != nil {
		return err
	}
	var q report.Query
	if sub != "rebuild" {
		if q, err = report.ParseQuery(f.from, f.to, f.by, f.tz, cfg.ReportLocation()); err != nil {
			return usagef("report: %v", err)
		}
		if f.format != report.FormatTable && f.format != report.FormatCSV && f.format != report.FormatJSON ||
			sub == "verify" && f.format == report.FormatCSV {
			return usagef("report: -format %q is not one of table, csv, json", f.format)
		}
	}

	opt := reportOptions(cfg, nil, nil)
	if cfg.Store.Type == "redis" {
		// Every node rolls up into the store: a server running here rolls
		// up this node's files, and is asked; without one, this command
		// rolls them up itself as the node would.
		if api, err := dialServer(ctx, cfg); err == nil {
			api.Close()
			return reportViaServer(ctx, cfg, sub, q, f.format, stdout, stderr)
		}
		backend, err := openStore(cfg, false)
		if err != nil {
			return err
		}
		defer backend.Close()
		opt = reportOptions(cfg, backend, nil)
	}
	roller, err := report.Open(opt)
	if errors.Is(err, report.ErrInUse) {
		return reportViaServer(ctx, cfg, sub, q, f.format, stdout, stderr)
	}
	if err != nil {
		return err
	}
	defer roller.Close()
	switch sub {
	case "rebuild":
		if err := roller.Rebuild(ctx); err != nil {
			return err
		}
		st := roller.Stats()
		fmt.Fprintf(stderr, "rebuilt the reports from the access log's files: %d lines read, %d counted\n", st.Lines, st.Events)
		return nil
	case "verify":
		if err := roller.CatchUp(ctx); err != nil {
			return err
		}
		v, err := roller.Verify(q)
		if err != nil {
			return err
		}
		return printVerification(v.Report(), f.format, stdout)
	}
	if err := roller.CatchUp(ctx); err != nil {
		return err
	}
	res, err := roller.Query(q)
	if err != nil {
		return usagef("report: %v", err)
	}
	return res.Write(stdout, f.format)
}

// reportViaServer runs the command through the running server's admin API.
func reportViaServer(ctx context.Context, cfg *config.Config, sub string, q report.Query, format string, stdout, stderr io.Writer) error {
	inUse := tsubame.Errorf(tsubame.ECONFLICT, "the reports (%s) are held by a running server", cfg.ReportPath())
	api, err := viaServerHolding(ctx, cfg, inUse, "read them through its admin API (GET /api/v1/reports)", "the reports are", stderr)
	if err != nil {
		return err
	}
	defer api.Close()
	v := url.Values{}
	if !q.From.IsZero() {
		v.Set("from", q.From.Format("2006-01-02T15:04:05Z07:00"))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.Format("2006-01-02T15:04:05Z07:00"))
	}
	if len(q.By) > 0 {
		v.Set("by", strings.Join(q.By, ","))
	}
	if q.Location != nil {
		v.Set("tz", q.Location.String())
	}
	switch sub {
	case "rebuild":
		if err := api.call(ctx, socketBulkTimeout, http.MethodPost, "/api/v1/reports/rebuild", nil, nil, "", nil); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "rebuilt the reports from the access log's files (by the running server)")
		return nil
	case "verify":
		var rep report.VerificationReport
		err := api.call(ctx, socketBulkTimeout, http.MethodGet, "/api/v1/reports/verify", v, nil, "", decodeInto(&rep))
		if err != nil {
			return err
		}
		return printVerification(rep, format, stdout)
	}
	v.Set("format", format)
	return api.call(ctx, socketBulkTimeout, http.MethodGet, "/api/v1/reports", v, nil, "", func(r io.Reader) error {
		_, err := io.Copy(stdout, r)
		return err
	})
}

// printVerification writes what Verify found; an error when the rollups
// differ from the files (the command's exit status says it).
func printVerification(rep report.VerificationReport, format string, stdout io.Writer) error {
	var err error
	if format == report.FormatJSON {
		var b []byte
		if b, err = json.Marshal(rep); err == nil {
			_, err = stdout.Write(append(b, '\n'))
		}
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if !rep.OK {
		return fmt.Errorf("the rollups differ from the files in %d counts", len(rep.Mismatches))
	}
	return nil
}
