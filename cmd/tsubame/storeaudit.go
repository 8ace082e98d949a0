package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"

	"tsubame"
	"tsubame/internal/report"
)

// runStoreAudit implements "tsubame store audit": what the store keeps, by
// family, with its size and how much never expires; with expire, the past
// days' budget keys still kept are given their drop time first. A running
// server is asked through its control socket (it holds the embedded
// store); else the command opens the store itself.
func runStoreAudit(ctx context.Context, e *env, expire bool, format string) error {
	cfg, err := e.load()
	if err != nil {
		return err
	}
	if format != report.FormatTable && format != report.FormatJSON {
		return usagef("store audit: -format %q is not one of table, json", format)
	}
	var a *tsubame.StoreAudit
	if api, err := dialServer(ctx, cfg); err == nil {
		defer api.Close()
		fmt.Fprintf(e.stderr, "tsubame: asking the running server (pid %d) through its control socket %s\n", api.pid, api.socket)
		method := http.MethodGet
		if expire {
			method = http.MethodPost
		}
		a = new(tsubame.StoreAudit)
		if err := api.call(ctx, socketBulkTimeout, method, "/api/v1/store/audit", nil, nil, "", decodeInto(a)); err != nil {
			return err
		}
	} else {
		backend, err := openStore(cfg, !expire)
		if err != nil {
			return err
		}
		defer backend.Close()
		au, ok := backend.(tsubame.Auditor)
		if !ok {
			return usagef("store audit: store.type %s keeps nothing beyond this process", cfg.Store.Type)
		}
		a, err = au.Audit(ctx, tsubame.AuditOptions{KeepDaily: cfg.Ads.Budget.KeepDaily, ExpirePastDays: expire})
		if err != nil {
			return err
		}
	}
	if format == report.FormatJSON {
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		_, err = e.stdout.Write(append(b, '\n'))
		return err
	}
	return writeStoreAudit(e.stdout, a, expire)
}

func writeStoreAudit(w io.Writer, a *tsubame.StoreAudit, expire bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "family\tkeys\tnever expire\tbytes\twhat\n")
	var keys, bytes int64
	for _, f := range a.Families {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", f.Name, f.Keys, f.NoExpiry, f.Bytes, f.What)
		keys, bytes = keys+f.Keys, bytes+f.Bytes
	}
	fmt.Fprintf(tw, "total\t%d\t\t%d\t%s store\n", keys, bytes, a.Store)
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case expire:
		_, err := fmt.Fprintf(w, "\n%d past days' budget keys were kept without a drop time: given theirs, %d\n", a.StaleDays, a.Expired)
		return err
	case a.StaleDays > 0:
		_, err := fmt.Fprintf(w, "\n%d past days' budget keys are kept without a drop time (made before days' keys expired, or their server could not tell the store): `tsubame store audit -expire-past-days` drops them\n", a.StaleDays)
		return err
	}
	return nil
}
