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
	"text/tabwriter"
	"time"

	"tsubame"
	"tsubame/internal/decision"
	"tsubame/internal/forecast"
	"tsubame/internal/report"
)

// forecastFlags are the flags of "tsubame forecast".
type forecastFlags struct {
	p      forecast.Params
	format string
}

func (f *forecastFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.p.From, "from", "", "start of the range, inclusive (`T`: a date such as 2026-12-01, or RFC 3339 on a whole hour); default: the current hour")
	fs.StringVar(&f.p.To, "to", "", "end of the range, exclusive (`T`, as -from); default: a day after -from")
	fs.StringVar(&f.p.TZ, "tz", "", "time `ZONE` of dates and hours (default report.timezone)")
	fs.StringVar(&f.p.Placements, "placement", "", "only these placements (`ID,...`)")
	fs.StringVar(&f.p.Sites, "site", "", "only these sites and their subdomains (`DOMAIN,...`)")
	fs.StringVar(&f.p.Countries, "country", "", "only visitors from these countries (`CC,...`: ISO 3166-1 alpha-2)")
	fs.StringVar(&f.p.Devices, "device", "", "only these devices (`DEVICE,...`: "+strings.Join(tsubame.Devices, ", ")+")")
	fs.StringVar(&f.format, "format", report.FormatTable, "output `table|json`")
}

// runForecast implements "tsubame forecast": the impressions a selection of
// traffic is forecast to offer, what booked line items take of them and
// what is left (internal/forecast). A running server is asked through its
// control socket; without one the command reads the reports and the
// campaigns itself.
func runForecast(ctx context.Context, e *env, f *forecastFlags) error {
	cfg, err := e.load()
	if err != nil {
		return err
	}
	if f.format != report.FormatTable && f.format != report.FormatJSON {
		return usagef("forecast: -format %q is not one of table, json", f.format)
	}
	req, err := f.p.Parse(cfg.ReportLocation(), time.Now())
	if err != nil {
		return usagef("forecast: %v", err)
	}
	var res *forecast.Result
	if api, err := dialServer(ctx, cfg); err == nil {
		defer api.Close()
		fmt.Fprintf(e.stderr, "tsubame: asking the running server (pid %d) through its control socket %s\n", api.pid, api.socket)
		v := url.Values{"from": {req.From.Format(time.RFC3339)}, "to": {req.To.Format(time.RFC3339)}, "tz": {req.Location.String()},
			"placement": {strings.Join(req.Filter.Placements, ",")}, "site": {strings.Join(req.Filter.Sites, ",")},
			"country": {strings.Join(req.Filter.Countries, ",")}, "device": {strings.Join(req.Filter.Devices, ",")}}
		res = new(forecast.Result)
		if err := api.call(ctx, socketBulkTimeout, http.MethodGet, "/api/v1/forecast", v, nil, "", decodeInto(res)); err != nil {
			return err
		}
	} else if res, err = forecastHere(ctx, e, req); err != nil {
		return err
	}
	if f.format == report.FormatJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		_, err = e.stdout.Write(append(b, '\n'))
		return err
	}
	return writeForecast(e.stdout, res)
}

// forecastHere makes a forecast without a server: from the reports (rolled
// up first from what the files hold beyond them) and the store's campaigns.
func forecastHere(ctx context.Context, e *env, req forecast.Request) (*forecast.Result, error) {
	cfg, err := e.load()
	if err != nil {
		return nil, err
	}
	backend, err := openStore(cfg, true)
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	cs, ok := backend.(tsubame.CampaignStore)
	if !ok {
		return nil, tsubame.Errorf(tsubame.EINVALID, "store.type %s keeps no campaigns", cfg.Store.Type)
	}
	set, _, err := cs.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	ix, err := decision.Compile(set, decision.Options{})
	if err != nil {
		return nil, err
	}
	var shared tsubame.Store
	if cfg.Store.Type == "redis" {
		shared = backend
	}
	roller, err := report.Open(reportOptions(cfg, shared, nil))
	if errors.Is(err, report.ErrInUse) {
		return nil, tsubame.Errorf(tsubame.ECONFLICT, "the reports (%s) are held by a running server whose control socket does not answer (admin.socket)", cfg.ReportPath())
	}
	if err != nil {
		return nil, err
	}
	defer roller.Close()
	if err := roller.CatchUp(ctx); err != nil {
		return nil, err
	}
	fc := forecast.New(forecast.Options{Reports: roller.Query, Index: func() *decision.Index { return ix }, Days: cfg.Report.ForecastDays})
	res, err := fc.Forecast(req)
	if tsubame.ErrorCode(err) == tsubame.EINVALID {
		return nil, usagef("forecast: %v", err)
	}
	return res, err
}

// writeForecast writes res as a table: the hours, the total, and the line
// items that take from it.
func writeForecast(w io.Writer, res *forecast.Result) error {
	loc, err := time.LoadLocation(res.Timezone)
	if err != nil {
		loc = time.UTC
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "hour\tavailable\tbooked\tnet\t\n")
	for _, h := range res.Hours {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", h.Time.In(loc).Format(time.RFC3339), h.Available, h.Booked, h.Net)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t\n", res.Available, res.Booked, res.Net)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nlearned from %d days with traffic in %s to %s\n", res.HistoryDays,
		res.HistoryFrom.In(loc).Format(time.DateOnly), res.HistoryTo.In(loc).AddDate(0, 0, -1).Format(time.DateOnly))
	if len(res.LineItems) == 0 {
		_, err := fmt.Fprintln(w, "no booked line item takes from it")
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "line_item\tcampaign\tpriority\twants\ttakes\tshort\t\n")
	for _, b := range res.LineItems {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t\n", b.LineItem, b.Campaign, b.Priority, b.Wants, b.Takes, b.Short)
	}
	return tw.Flush()
}
