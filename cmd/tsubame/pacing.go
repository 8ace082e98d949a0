package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"tsubame"
	"tsubame/internal/budget"
	"tsubame/internal/bulk"
	"tsubame/internal/decision"
	"tsubame/internal/store/memory"
)

// webTraffic is the default day of requests per hour, hour 0 first: a news
// site's, quiet at night, up at lunch and highest in the evening.
var webTraffic = [24]int{300, 200, 120, 80, 80, 120, 300, 700, 900, 900, 900, 1000,
	1300, 1000, 900, 900, 900, 1000, 1300, 1500, 1600, 1400, 1000, 600}

// pacingFlags are the flags of `tsubame pacing simulate`.
type pacingFlags struct {
	format, line, date, traffic, png string
	show, nodes                      int
	every                            time.Duration
}

func (f *pacingFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.format, "format", "", "the campaign file's `FORMAT`: json or yaml (default: its extension)")
	fs.StringVar(&f.line, "line", "", "the line item to replay, by `ID` (default: the only one with a daily impression limit or a daily campaign budget)")
	fs.StringVar(&f.date, "date", "", "the day to replay, `YYYY-MM-DD` in the campaign's time zone (default: today)")
	fs.StringVar(&f.traffic, "traffic", joinInts(webTraffic[:]), "requests per hour: 24 numbers (`N,...`), hour 0 first, in the campaign's time zone")
	fs.IntVar(&f.show, "show", 100, "`PERCENT` of decisions whose impression is shown (the others come back when their reservation ends)")
	fs.IntVar(&f.nodes, "nodes", 3, "servers sharing the budget (`N`)")
	fs.DurationVar(&f.every, "every", time.Hour, "one row per this much (`DURATION`) of the day")
	fs.StringVar(&f.png, "png", "", "also draw delivery against the ideal curve into this PNG `FILE`")
}

// runPacing runs `tsubame pacing simulate` on the campaign file name ("-":
// standard input).
func runPacing(ctx context.Context, e *env, pf *pacingFlags, name string) error {
	stdout, stderr := e.stdout, e.stderr
	f, err := bulk.ParseCampaignFormat(pf.format)
	if err != nil {
		return usagef("%v", err)
	}
	sc := simConfig{line: pf.line, show: pf.show, nodes: pf.nodes, every: pf.every}
	if sc.traffic, err = parseTraffic(pf.traffic); err != nil {
		return usagef("-traffic: %v", err)
	}
	if sc.set, err = readCampaignFile(name, f); err != nil {
		return err
	}
	if pf.date != "" {
		if sc.date, err = time.Parse(time.DateOnly, pf.date); err != nil {
			return usagef("-date: %q is not YYYY-MM-DD", pf.date)
		}
	}
	res, err := simulatePacing(ctx, sc)
	if err != nil {
		return err
	}
	if err := res.writeCSV(stdout); err != nil {
		return err
	}
	if pf.png != "" {
		if err := res.plot(pf.png); err != nil {
			return fmt.Errorf("cannot draw %s: %w", pf.png, err)
		}
	}
	fmt.Fprintf(stderr, "%s on %s: %d requests, %d decisions, %d impressions shown, spend %s %s\n",
		res.line, res.date, res.requests, res.decisions, res.impressions, res.spend(), res.currency)
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseTraffic(s string) ([24]int, error) {
	var out [24]int
	parts := strings.Split(s, ",")
	if len(parts) != 24 {
		return out, fmt.Errorf("%d numbers, want 24 (requests in hours 0 to 23)", len(parts))
	}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 3_600_000 {
			return out, fmt.Errorf("hour %d: %q is not a count of requests from 0 to 3600000", i, p)
		}
		out[i] = n
	}
	return out, nil
}

// readCampaignFile reads and checks a campaign file on its own.
func readCampaignFile(name string, f bulk.CampaignFormat) (*tsubame.CampaignSet, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		file, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer file.Close()
		r = file
		if f == bulk.CampaignsAuto {
			f = bulk.CampaignFormatOf(name)
		}
	}
	cf, err := bulk.ReadCampaigns(r, name, f)
	if err != nil {
		return nil, err
	}
	return cf.Resolve(nil, true)
}

// simConfig is what simulatePacing replays.
type simConfig struct {
	set     *tsubame.CampaignSet
	line    string
	date    time.Time // the day (its date is read in the campaign's zone); zero: today
	traffic [24]int   // requests per hour of the day
	show    int       // percent of decisions shown
	nodes   int
	every   time.Duration
	// interval is the simulated servers' ads.budget.interval (1s when 0).
	interval time.Duration
}

// simRow is the day so far at one moment: what was asked, delivered and
// spent, and what the ideal curve allows by then (-1: no such limit).
type simRow struct {
	at                  time.Time
	requests            int64
	impressions, idealI int64
	spend, idealS       tsubame.Money // micro-units, rounded down
}

type simResult struct {
	line, date, currency string
	loc                  *time.Location
	dayStart, dayEnd     time.Time
	limitI               int64
	limitS               tsubame.Money
	rows                 []simRow
	requests, decisions  int64
	impressions          int64
	spendNanos           int64 // thousandths of a micro-unit
}

func (r *simResult) spend() string { return tsubame.Money(r.spendNanos / 1000).String() }

// simulatePacing replays one day of traffic against one line item on
// sc.nodes ledgers sharing an in-memory store, on a simulated clock that
// steps a second at a time (each ledger ticking every sc.interval, as a
// server does), and records the day every sc.every. It runs the code a server
// runs: the Ledger, its leases and reservations, and the pacing target.
func simulatePacing(ctx context.Context, sc simConfig) (*simResult, error) {
	li, camp, err := simLine(sc.set, sc.line)
	if err != nil {
		return nil, err
	}
	switch {
	case sc.nodes < 1 || sc.nodes > 64:
		return nil, usagef("-nodes must be 1 to 64")
	case sc.show < 0 || sc.show > 100:
		return nil, usagef("-show must be a percent, 0 to 100")
	case sc.every < time.Minute:
		return nil, usagef("-every must be at least 1m")
	}
	loc, err := camp.Location()
	if err != nil {
		return nil, err
	}
	day := sc.date
	if day.IsZero() {
		day = time.Now()
	} else {
		day = time.Date(day.Year(), day.Month(), day.Day(), 12, 0, 0, 0, loc)
	}
	ds, de, date := budget.Day(day, loc)
	res := &simResult{line: li.ID, date: date, currency: cmp.Or(sc.set.Currency, tsubame.DefaultCurrency), loc: loc,
		dayStart: time.Unix(0, ds), dayEnd: time.Unix(0, de), limitI: li.Limits.Impressions.Daily, limitS: camp.Budget.Daily}

	interval := cmp.Or(sc.interval, budget.DefaultInterval)
	st := memory.New()
	defer st.Close()
	now := res.dayStart
	clock := func() time.Time { return now }
	type simNode struct {
		ledger   *budget.Ledger
		counters *budget.Counters
		line     *decision.Line
	}
	var nodes []simNode
	for i := range sc.nodes {
		g, err := budget.NewLedger(st, st, budget.LedgerOptions{Holder: fmt.Sprint("sim-", i), Now: clock, Interval: interval})
		if err != nil {
			return nil, err
		}
		c := budget.New(st, budget.Options{Ledger: g})
		ix, err := decision.Compile(sc.set, decision.Options{Now: res.dayStart, Counters: c})
		if err != nil {
			return nil, err
		}
		var l *decision.Line
		for j := range ix.Len() {
			if ix.Line(j).ID == li.ID {
				l = ix.Line(j)
			}
		}
		if l == nil {
			return nil, usagef("line item %q does not serve on %s: paused, without an approved creative, or its flight is over", li.ID, date)
		}
		nodes = append(nodes, simNode{g, c, l})
	}
	rnd := rand.New(rand.NewPCG(1, 2)) // the same replay every time
	nextTick := now.Add(interval)
	hold := budget.DefaultMaxHold
	var acc int64
	next := res.dayStart.Add(sc.every)
	res.rows = append(res.rows, res.row(now, li, camp))
	for now.Before(res.dayEnd) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		acc += int64(sc.traffic[now.In(loc).Hour()])
		for n := acc / 3600; n > 0; n-- {
			node := nodes[res.requests%int64(len(nodes))]
			res.requests++
			id := "s" + strconv.FormatInt(res.requests, 36)
			req := &decision.Request{User: id, Reserve: []string{id}, ReserveUntil: now.Add(hold)}
			if !node.counters.Allow(node.line, req, 0, now) {
				continue
			}
			res.decisions++
			if rnd.IntN(100) >= sc.show {
				continue
			}
			// The impression bills the decision, as its tracking URL does.
			o := tsubame.Outcome{Kind: tsubame.OutcomeBill, Bid: id, LineItem: li.ID, Due: req.ReserveUntil.Unix(), Price: li.CPM}
			if _, err := st.Record(ctx, node.ledger.Holder(), &o, 48*time.Hour); err != nil {
				return nil, err
			}
			res.impressions++
			res.spendNanos += int64(li.CPM)
		}
		acc %= 3600
		now = now.Add(time.Second)
		if !now.Before(nextTick) {
			for _, n := range nodes {
				n.ledger.Tick(ctx)
			}
			nextTick = nextTick.Add(interval)
		}
		if !now.Before(next) || !now.Before(res.dayEnd) {
			res.rows = append(res.rows, res.row(now, li, camp))
			next = next.Add(sc.every)
		}
	}
	for _, n := range nodes {
		_ = n.ledger.Close(ctx)
	}
	return res, nil
}

// row is the day at now.
func (r *simResult) row(now time.Time, li *tsubame.LineItem, camp *tsubame.Campaign) simRow {
	row := simRow{at: now, requests: r.requests, impressions: r.impressions, idealI: -1,
		spend: tsubame.Money(r.spendNanos / 1000), idealS: -1}
	ds, de := r.dayStart.UnixNano(), r.dayEnd.UnixNano()
	ls, le := window(camp.Start, li.Start, camp.End, li.End)
	if r.limitI > 0 {
		row.idealI = budget.Target(camp.Pacing, r.loc, r.limitI, max(ds, ls), min(de, le), now)
	}
	if r.limitS > 0 {
		cs, ce := window(camp.Start, time.Time{}, camp.End, time.Time{})
		row.idealS = tsubame.Money(budget.Target(camp.Pacing, r.loc, int64(r.limitS), max(ds, cs), min(de, ce), now))
	}
	return row
}

// window intersects two flights in Unix nanoseconds (a zero time: no bound).
func window(s1, s2, e1, e2 time.Time) (start, end int64) {
	start, end = -1<<63, 1<<63-1
	for _, t := range []time.Time{s1, s2} {
		if !t.IsZero() {
			start = max(start, t.UnixNano())
		}
	}
	for _, t := range []time.Time{e1, e2} {
		if !t.IsZero() {
			end = min(end, t.UnixNano())
		}
	}
	return start, end
}

// simLine finds the line item to replay and its campaign.
func simLine(set *tsubame.CampaignSet, id string) (*tsubame.LineItem, *tsubame.Campaign, error) {
	camps := map[string]*tsubame.Campaign{}
	for _, c := range set.Campaigns {
		camps[c.ID] = c
	}
	paced := func(li *tsubame.LineItem) bool {
		return li.Limits.Impressions.Daily > 0 || camps[li.Campaign].Budget.Daily > 0 && li.CPM > 0
	}
	var found []*tsubame.LineItem
	for _, li := range set.LineItems {
		if id == li.ID || id == "" && paced(li) {
			found = append(found, li)
		}
	}
	switch {
	case len(found) == 0 && id != "":
		return nil, nil, usagef("no line item %q in the file", id)
	case len(found) == 0:
		return nil, nil, usagef("no line item has a daily impression limit or a daily campaign budget: nothing is paced over a day")
	case len(found) > 1:
		ids := make([]string, len(found))
		for i, li := range found {
			ids[i] = li.ID
		}
		return nil, nil, usagef("several line items are paced over a day (%s): choose one with -line", strings.Join(ids, ", "))
	case !paced(found[0]):
		return nil, nil, usagef("line item %q has no daily impression limit and its campaign no daily budget: nothing is paced over a day", id)
	}
	return found[0], camps[found[0].Campaign], nil
}

// writeCSV writes one row per line: the local time, the requests, the
// impressions and the spend so far, each beside its ideal (empty without
// such a limit).
func (r *simResult) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"time", "requests", "impressions", "ideal_impressions", "spend", "ideal_spend"})
	for _, row := range r.rows {
		rec := []string{row.at.In(r.loc).Format("2006-01-02T15:04:05Z07:00"), strconv.FormatInt(row.requests, 10),
			strconv.FormatInt(row.impressions, 10), "", row.spend.String(), ""}
		if row.idealI >= 0 {
			rec[3] = strconv.FormatInt(row.idealI, 10)
		}
		if row.idealS >= 0 {
			rec[5] = row.idealS.String()
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}

// plot draws the day's delivery against its ideal: impressions when the
// line item has a daily limit, else spend (in currency units: floats are
// only coordinates here).
func (r *simResult) plot(path string) error {
	p := plot.New()
	spend := r.limitI == 0
	what := "impressions"
	if spend {
		what = "spend (" + r.currency + ")"
	}
	p.Title.Text = fmt.Sprintf("%s on %s: %s delivered against the ideal curve", r.line, r.date, what)
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text = "hour of the day (" + r.loc.String() + ")"
	p.Y.Label.Text = what
	var got, ideal plotter.XYs
	for _, row := range r.rows {
		x := row.at.Sub(r.dayStart).Hours()
		if spend {
			got = append(got, plotter.XY{X: x, Y: float64(row.spend) / tsubame.MicrosPerUnit})
			ideal = append(ideal, plotter.XY{X: x, Y: float64(row.idealS) / tsubame.MicrosPerUnit})
		} else {
			got = append(got, plotter.XY{X: x, Y: float64(row.impressions)})
			ideal = append(ideal, plotter.XY{X: x, Y: float64(row.idealI)})
		}
	}
	il, err := plotter.NewLine(ideal)
	if err != nil {
		return err
	}
	il.Color, il.Dashes, il.Width = color.Gray{Y: 120}, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1.5)
	gl, err := plotter.NewLine(got)
	if err != nil {
		return err
	}
	gl.Color, gl.Width = color.RGBA{R: 31, G: 100, B: 196, A: 255}, vg.Points(2)
	p.Add(plotter.NewGrid(), il, gl)
	p.Legend.Add("ideal (pacing target)", il)
	p.Legend.Add("delivered", gl)
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Min, p.X.Max = 0, r.dayEnd.Sub(r.dayStart).Hours()
	p.X.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick {
		var ts []plot.Tick
		for h := 0.0; h <= max; h += 3 {
			ts = append(ts, plot.Tick{Value: h, Label: strconv.Itoa(int(h))})
		}
		return ts
	})
	p.Y.Min = 0
	p.Legend.TextStyle.XAlign = draw.XLeft
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}
