package main

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"tsubame"
	"tsubame/internal/bidder"
	"tsubame/internal/budget"
	"tsubame/internal/bulk"
	"tsubame/internal/decision"
	"tsubame/internal/forecast"
	"tsubame/internal/store/memory"
)

// webTraffic is the default day of requests per hour, hour 0 first: a news
// site's, quiet at night, up at lunch and highest in the evening.
var webTraffic = [24]int{300, 200, 120, 80, 80, 120, 300, 700, 900, 900, 900, 1000,
	1300, 1000, 900, 900, 900, 1000, 1300, 1500, 1600, 1400, 1000, 600}

// businessTraffic is a day of an office audience's requests per hour:
// nothing much before 8, a plateau from 9 to 18 with a lunch dip, little
// after 20. 18,750 requests in all.
var businessTraffic = [24]int{60, 40, 30, 30, 30, 50, 150, 500, 1400, 1800, 1850, 1800,
	1200, 1750, 1850, 1800, 1700, 1300, 700, 300, 180, 110, 80, 60}

// trafficCurves are the days -traffic names.
var trafficCurves = map[string][24]int{"web": webTraffic, "business": businessTraffic}

// pacingFlags are the flags of `tsubame pacing simulate`.
type pacingFlags struct {
	format, line, date, traffic, png string
	forecast, placement, subset      string
	show, nodes                      int
	every                            time.Duration
	// The days before: how many, and how their traffic varies.
	history, catchUp         int
	noise, trend, dayTraffic string
	// The exchange's: what it does with the bids.
	winRate, notices, billOn, winWindow, winRateHolds, keepWon string
	winDelay, billDelay, reservation                           time.Duration
}

func (f *pacingFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.format, "format", "", "the campaign file's `FORMAT`: json or yaml (default: its extension)")
	fs.StringVar(&f.line, "line", "", "the line item to replay, by `ID` (default: the only one with a daily impression limit or a daily campaign budget); several, comma-separated, compete for each request (the CSV follows the first)")
	fs.StringVar(&f.date, "date", "", "the day to replay, `YYYY-MM-DD` in the campaign's time zone (default: today)")
	fs.StringVar(&f.traffic, "traffic", "web", "requests per hour (`CURVE`): web (a news site's day), business (an office audience's), or 24 numbers, hour 0 first, in the campaign's time zone")
	fs.IntVar(&f.history, "history", 0, "`DAYS` replayed before the day, with the same traffic (varied by -noise and -trend), so that the servers learn its shape first (0 to 14)")
	fs.IntVar(&f.catchUp, "catch-up", budget.DefaultCatchUp, "the `PERCENT` of an hour's plan a limit behind it may commit in the hour, as ads.budget.catch_up (0: all at once)")
	fs.StringVar(&f.noise, "noise", "10%", "how much each hour of a day before varies, at random, up or down (`PERCENT`, 0% to 50%)")
	fs.StringVar(&f.trend, "trend", "0%", "how much each day before has more requests than the one before it (`PERCENT`, -20% to 20%)")
	fs.StringVar(&f.dayTraffic, "day-traffic", "100%", "the replayed day's requests, as a `PERCENT` of the traffic the days before forecast (10% to 1000%)")
	fs.IntVar(&f.show, "show", 100, "`PERCENT` of won bids whose ad is shown, and billed on burl or markup (the others come back when their reservation ends)")
	fs.IntVar(&f.nodes, "nodes", 3, "servers sharing the budget (`N`)")
	fs.DurationVar(&f.every, "every", time.Hour, "one row per this much (`DURATION`) of the day")
	fs.StringVar(&f.png, "png", "", "also draw delivery against the ideal curve into this PNG `FILE`")
	fs.StringVar(&f.forecast, "forecast", "", "also forecast the day from the days before (-history), as GET /api/v1/forecast does, and write each hour's forecast beside what it brought into this CSV `FILE`; the requests are for -placement, from desktops, phones and tablets (60, 30 and 10 %)")
	fs.StringVar(&f.placement, "placement", "top", "the placement the requests are for (`ID`)")
	fs.StringVar(&f.subset, "forecast-device", "desktop", "with -forecast, also forecast the requests of these devices (`DEVICE,...`) net of what the line items take")
	fs.StringVar(&f.winRate, "win-rate", "100%", "the share of bids that win their auction, a `PERCENT` such as 10% or 0.5% (100%: every decision wins, as on /api/decide)")
	fs.StringVar(&f.notices, "notices", "bill", "the notices the exchange sends, a `LIST` of win, loss and bill (the billing notice), or none")
	fs.StringVar(&f.billOn, "bill-on", bidder.BillOnBURL, "the `EVENT` that bills a bid, as the exchange's bill_on: burl, nurl or markup (the impression its markup fires)")
	fs.DurationVar(&f.winDelay, "win-delay", 0, "how long after its bid a win or loss notice comes (`DURATION`)")
	fs.DurationVar(&f.billDelay, "bill-delay", 0, "how long after its bid a shown ad is billed (`DURATION`): its billing notice, or its markup's impression")
	fs.StringVar(&f.winWindow, "win-window", "auto", "how long a bid waits for its win notice (`WINDOW`): auto, off or a duration, as the exchange's win_window")
	fs.StringVar(&f.keepWon, "keep-won", bidder.KeepWonAuto, "what becomes of a bid won and not billed by the end of its reservation (`KEEP`): auto (spent until the exchange is seen billing on time), on (spent) or off (given back), as the exchange's keep_won")
	fs.StringVar(&f.winRateHolds, "win-rate-holds", bidder.WinRateHoldsAuto, "how a bid with no win window holds its price (`HOLDS`): auto (a share, by the measured win rate, while the exchange sends no win or loss notices), on (a share always) or off (all of it), as the exchange's win_rate_holds")
	fs.DurationVar(&f.reservation, "reservation", budget.DefaultMaxHold, "how long a bid holds its price for its bill (`DURATION`), as the exchange's reservation")
}

// config reads the flags but the campaign file, the line item and the
// date into a simConfig, or says what is wrong as a usage error.
func (f *pacingFlags) config() (simConfig, error) {
	sc := simConfig{line: f.line, show: f.show, nodes: f.nodes, every: f.every, billOn: f.billOn,
		winDelay: f.winDelay, billDelay: f.billDelay, forecast: f.forecast != ""}
	var err error
	if sc.forecast {
		p, err := forecast.Params{Placements: f.placement, Devices: f.subset}.Parse(nil, time.Now())
		switch {
		case err != nil:
			return sc, usagef("-placement, -forecast-device: %v", err)
		case len(p.Filter.Placements) != 1:
			return sc, usagef("-placement: one placement")
		case len(p.Filter.Devices) == 0:
			return sc, usagef("-forecast-device: at least one device")
		case f.history < 1:
			return sc, usagef("-forecast needs days to learn from: -history 1 or more")
		}
		sc.placement, sc.subset = p.Filter.Placements[0], p.Filter.Devices
	}
	if c, ok := trafficCurves[f.traffic]; ok {
		sc.traffic = c
	} else if sc.traffic, err = parseTraffic(f.traffic); err != nil {
		return sc, usagef("-traffic: %v (or web, business)", err)
	}
	if f.history < 0 || f.history > 14 {
		return sc, usagef("-history must be 0 to 14 days")
	}
	sc.history = f.history
	if f.catchUp != 0 && (f.catchUp < 100 || f.catchUp > 1000) {
		return sc, usagef("-catch-up must be 0 (all at once) or a percent from 100 to 1000")
	}
	sc.catchUp = cmp.Or(f.catchUp, -1)
	if sc.noise, err = parseSignedPercent(f.noise, 0, 50); err != nil {
		return sc, usagef("-noise: %v", err)
	}
	if sc.trend, err = parseSignedPercent(f.trend, -20, 20); err != nil {
		return sc, usagef("-trend: %v", err)
	}
	if sc.dayTraffic, err = parseSignedPercent(f.dayTraffic, 10, 1000); err != nil {
		return sc, usagef("-day-traffic: %v", err)
	}
	if sc.winRate, err = parsePercent(f.winRate); err != nil {
		return sc, usagef("-win-rate: %v", err)
	}
	if sc.notices, err = parseNotices(f.notices); err != nil {
		return sc, usagef("-notices: %v", err)
	}
	if sc.window, err = bidder.ParseWinWindow(f.winWindow); err != nil {
		return sc, usagef("-win-window: %q is not auto, off or a duration from 1s to 1h", f.winWindow)
	}
	switch {
	case !slices.Contains(bidder.BillOns, f.billOn):
		return sc, usagef("-bill-on: %q is not burl, nurl or markup", f.billOn)
	case f.billOn == bidder.BillOnBURL && !sc.notices.Has(tsubame.OutcomeBill):
		return sc, usagef("-bill-on burl needs bill in -notices: an exchange billing on its billing notice sends it")
	case f.billOn == bidder.BillOnNURL && !sc.notices.Has(tsubame.OutcomeWin):
		return sc, usagef("-bill-on nurl needs win in -notices: an exchange billing on its win notice sends it")
	case f.winDelay < 0 || f.winDelay > 24*time.Hour || f.billDelay < 0 || f.billDelay > 24*time.Hour:
		return sc, usagef("-win-delay and -bill-delay must be from 0 to 24h")
	case !slices.Contains(bidder.WinRateHoldsValues, f.winRateHolds):
		return sc, usagef("-win-rate-holds: %q is not auto, on or off", f.winRateHolds)
	case !slices.Contains(bidder.KeepWonValues, f.keepWon):
		return sc, usagef("-keep-won: %q is not auto, on or off", f.keepWon)
	case f.reservation < time.Second || f.reservation > maxSimReservation:
		return sc, usagef("-reservation must be from 1s to %s", tsubame.Duration(maxSimReservation))
	}
	sc.reservation, sc.winRateHolds, sc.keepWon = f.reservation, f.winRateHolds, f.keepWon
	return sc, nil
}

// maxSimReservation bounds -reservation: with the ledger's grace and lease
// it must fit in the longest lease a store keeps.
const maxSimReservation = 12 * time.Hour

// parsePercent reads a share of bids such as "10%", "0.5%" or "100" into
// millionths of a percent.
func parsePercent(s string) (int64, error) {
	m, err := tsubame.ParseMoney(strings.TrimSuffix(strings.TrimSpace(s), "%")) // six decimals
	if err != nil || m <= 0 || m > 100*tsubame.MicrosPerUnit {
		return 0, fmt.Errorf("%q is not a percent over 0 and at most 100, such as 10%% or 0.5%%", s)
	}
	return int64(m), nil
}

// parseSignedPercent reads a percent from lo to hi such as "10%" or
// "-2.5%" into millionths of a percent.
func parseSignedPercent(s string, lo, hi int64) (int64, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	m, err := tsubame.ParseMoney(strings.TrimSuffix(strings.TrimPrefix(s, "-"), "%")) // six decimals
	v := int64(m)
	if neg {
		v = -v
	}
	if err != nil || m < 0 || v < lo*tsubame.MicrosPerUnit || v > hi*tsubame.MicrosPerUnit {
		return 0, fmt.Errorf("%q is not a percent from %d%% to %d%%", s, lo, hi)
	}
	return v, nil
}

// parseNotices reads a list of the notices an exchange sends: win, loss,
// bill, comma-separated; "none" or "" for none.
func parseNotices(s string) (tsubame.OutcomeKinds, error) {
	var set tsubame.OutcomeKinds
	if s = strings.TrimSpace(s); s == "" || s == "none" {
		return set, nil
	}
	for _, name := range strings.Split(s, ",") {
		k := tsubame.OutcomeWin // the kinds' names are theirs: win, loss, bill
		for k.Valid() && k.String() != strings.TrimSpace(name) {
			k++
		}
		if !k.Valid() {
			return 0, fmt.Errorf("%q is not win, loss or bill", name)
		}
		set = set.With(k)
	}
	return set, nil
}

// runPacing runs `tsubame pacing simulate` on the campaign file name ("-":
// standard input).
func runPacing(ctx context.Context, e *env, pf *pacingFlags, name string) error {
	stdout, stderr := e.stdout, e.stderr
	f, err := bulk.ParseCampaignFormat(pf.format)
	if err != nil {
		return usagef("%v", err)
	}
	sc, err := pf.config()
	if err != nil {
		return err
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
	if res.forecast != nil {
		if _, err := writeFileAtomically(pf.forecast, func(w io.Writer) (int, error) { return 0, res.forecast.writeCSV(w) }); err != nil {
			return fmt.Errorf("cannot write %s: %w", pf.forecast, err)
		}
		fmt.Fprintln(stderr, res.forecast.summary())
	}
	fmt.Fprintf(stderr, "%s on %s: %d requests, %d bids, %d won, %d impressions billed, spend %s %s",
		res.line, res.date, res.requests, res.bids, res.wins, res.impressions, res.spend(), res.currency)
	for _, id := range res.competing {
		fmt.Fprintf(stderr, "; %s: %d impressions billed", id, res.billed[id])
	}
	if c := res.counts; c.Late > 0 || c.Overage > 0 {
		fmt.Fprintf(stderr, "; %d bills late, %d bills debited past the leases", c.Late, c.Overage)
	}
	if c := res.counts; c.Kept > 0 {
		fmt.Fprintf(stderr, "; %d won bids spent unbilled at their end (keep_won), %d of their bills came later", c.Kept, c.KeptBilled)
	}
	if c := res.counts; c.PastHold > 0 {
		fmt.Fprintf(stderr, "; %d bills past their holds (bids held by the win rate)", c.PastHold)
	}
	if over, what := res.over(); over > 0 {
		fmt.Fprintf(stderr, "; %d %s over the daily limit", over, what)
	}
	fmt.Fprintln(stderr)
	return nil
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
	// history is the days replayed before it, each hour's traffic varied
	// at random by up to noise and each day trend more than the one before
	// (millionths of a percent); dayTraffic is the day's traffic as a share
	// of that (likewise; 0: 100 %).
	history                  int
	noise, trend, dayTraffic int64
	// catchUp is the servers' LedgerOptions.CatchUp.
	catchUp int
	// forecast forecasts the day from the days before (simForecast):
	// requests are for placement, subset the devices forecast net.
	forecast  bool
	placement string
	subset    []string
	show      int // percent of won bids shown
	nodes     int
	every     time.Duration
	// interval is the simulated servers' ads.budget.interval (1s when 0).
	interval time.Duration

	// The exchange: winRate is the share of bids that win, in millionths
	// of a percent; notices are the notices it sends, billOn the event that
	// bills (bidder.BillOnBURL, BillOnNURL, BillOnMarkup); a bid's win or
	// loss notice comes winDelay after it, its bill billDelay after it;
	// window is its win_window (bidder.WinWindowAuto, WinWindowOff or a
	// duration), reservation how long a bid holds its price, winRateHolds
	// its win_rate_holds (bidder.WinRateHoldsValues; "": auto), keepWon
	// its keep_won (bidder.KeepWonValues; "": auto).
	winRate             int64
	notices             tsubame.OutcomeKinds
	billOn              string
	winDelay, billDelay time.Duration
	window, reservation time.Duration
	winRateHolds        string
	keepWon             string
}

// allWin is a win rate of 100 %, in millionths of a percent.
const allWin = 100 * tsubame.MicrosPerUnit

// exchange describes the simulated exchange, "" for the default one (every
// decision wins and its impression bills at once, as on /api/decide).
func (sc *simConfig) exchange() string {
	if sc.winRate == allWin && sc.notices == tsubame.OutcomeKinds(0).With(tsubame.OutcomeBill) && sc.billOn == bidder.BillOnBURL &&
		sc.winDelay == 0 && sc.billDelay == 0 {
		return ""
	}
	var names []string
	for k := tsubame.OutcomeWin; k.Valid(); k++ {
		if sc.notices.Has(k) {
			names = append(names, k.String())
		}
	}
	d := fmt.Sprintf("win rate %s%%, notices %s, billed on %s", tsubame.Money(sc.winRate), cmp.Or(strings.Join(names, ","), "none"), sc.billOn)
	if sc.billDelay > 0 {
		d += ", bills " + tsubame.Duration(sc.billDelay).String() + " after the bid"
	}
	return d
}

// simRow is the day so far at one moment: what was asked, bid, won,
// billed and spent, and what the ideal curve allows by then (-1: no such
// limit); and the ledgers' counts of the holds given back (Lost by a loss
// notice, Expired at a deadline) and of the bills no hold covered (Late,
// and the store units of them debited past the leases, Overage).
type simRow struct {
	at                  time.Time
	requests, bids      int64
	wins                int64
	impressions, idealI int64         // impressions billed
	spend, idealS       tsubame.Money // micro-units, rounded down
	lost, expired       uint64
	late, overage       uint64
}

type simResult struct {
	line, date, currency string
	// competing are the other line items replayed, billed the impressions
	// billed of each.
	competing            []string
	billed               map[string]int64
	exchange             string // the simulated exchange, "" for the default
	loc                  *time.Location
	dayStart, dayEnd     time.Time
	limitI               int64
	limitS               tsubame.Money
	rows                 []simRow
	requests, bids, wins int64
	impressions          int64 // billed
	spendNanos           int64 // thousandths of a micro-unit
	counts               budget.Counts
	forecast             *simForecast // with sc.forecast
}

func (r *simResult) spend() string { return tsubame.Money(r.spendNanos / 1000).String() }

// over is how far the day's bills passed its limit: impressions beyond a
// daily impression limit, or else spend beyond a daily budget, in the
// limit's units (0: within it).
func (r *simResult) over() (int64, string) {
	if r.limitI > 0 {
		return max(r.impressions-r.limitI, 0), "impressions"
	}
	return max(r.spendNanos/1000-int64(r.limitS), 0), "micro-units of spend"
}

// simNotice is a notice on its way: the outcome it records for the bid's
// node (from), sent to another node (to) at at; bid is when the bid was
// made. seq orders notices due at once as they were sent.
type simNotice struct {
	at, bid  time.Time
	seq      int64
	from, to int
	o        tsubame.Outcome
}

// noticeQueue is the notices on their way, soonest first (container/heap).
type noticeQueue []simNotice

func (q noticeQueue) Len() int { return len(q) }
func (q noticeQueue) Less(i, j int) bool {
	return q[i].at.Before(q[j].at) || q[i].at.Equal(q[j].at) && q[i].seq < q[j].seq
}
func (q noticeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *noticeQueue) Push(x any)   { *q = append(*q, x.(simNotice)) }
func (q *noticeQueue) Pop() any {
	old := *q
	n := old[len(old)-1]
	*q = old[:len(old)-1]
	return n
}

// simOutcomeTTL is how long the simulated store remembers a bid's
// outcomes: past the day and its last notices.
const simOutcomeTTL = 48 * time.Hour

// simNode is one server of a simulation.
type simNode struct {
	ledger   *budget.Ledger
	counters *budget.Counters
	ix       *decision.Index
	line     *decision.Line // the first line item replayed (the CSV's)
	// stats count the notices this node received: its measure of the
	// exchange's win window, and of its notices and late bills.
	stats bidder.Stats
}

// simulatePacing replays one day of traffic against one line item on
// sc.nodes ledgers sharing an in-memory store, on a simulated clock that
// steps a second at a time (each ledger ticking every sc.interval, as a
// server does), and records the day every sc.every. It runs the code a server
// runs: the Ledger, its leases, holds and outcomes, the pacing target, and
// the exchange's win window (bidder.Exchange.WinWindowNow).
//
// Each bid is an auction the exchange plays with seeded draws (the same
// replay every time): it wins at sc.winRate, and a won bid's ad is shown at
// sc.show. The exchange sends the notices of sc.notices to the node after
// the bidder's, each recorded there as the bidder records it: a loss's and
// a win's sc.winDelay after the bid (a win billing on nurl bills with
// it), a shown ad's bill sc.billDelay after it, on burl (the billing
// notice) or markup (the ad's impression, at the bid's price). Notices due
// after midnight are delivered too, and the last row is when the last came.
func simulatePacing(ctx context.Context, sc simConfig) (*simResult, error) {
	ids := strings.Split(sc.line, ",")
	li, camp, err := simLine(sc.set, ids[0])
	if err != nil {
		return nil, err
	}
	ids[0] = li.ID // the only one paced over a day, when none is named
	// Several line items compete for each request: the index decides
	// among them (priority, weight, and what the budget code allows).
	set := sc.set
	if len(ids) > 1 {
		set = sc.set.Clone()
		set.LineItems = nil
		for _, id := range ids {
			l, _, err := simLine(sc.set, id)
			if err != nil {
				return nil, err
			}
			set.LineItems = append(set.LineItems, l)
		}
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
	res := &simResult{line: li.ID, competing: ids[1:], billed: map[string]int64{}, date: date, currency: cmp.Or(sc.set.Currency, tsubame.DefaultCurrency), exchange: sc.exchange(), loc: loc,
		dayStart: time.Unix(0, ds), dayEnd: time.Unix(0, de), limitI: li.Limits.Impressions.Daily, limitS: camp.Budget.Daily}

	interval := cmp.Or(sc.interval, budget.DefaultInterval)
	st := memory.New()
	defer st.Close()
	days := sc.days(res.dayStart, loc)
	now := days[0].start
	clock := func() time.Time { return now }
	var nodes []*simNode
	for i := range sc.nodes {
		g, err := budget.NewLedger(st, st, budget.LedgerOptions{Holder: fmt.Sprint("sim-", i), Now: clock, Interval: interval,
			MaxHold: sc.reservation, CatchUp: sc.catchUp})
		if err != nil {
			return nil, err
		}
		c := budget.New(st, budget.Options{Ledger: g})
		ix, err := decision.Compile(set, decision.Options{Now: res.dayStart, Counters: c})
		if err != nil {
			return nil, err
		}
		n := &simNode{ledger: g, counters: c, ix: ix}
		for _, id := range ids {
			l, ok := ix.LineByID(id)
			if !ok {
				return nil, usagef("line item %q does not serve on %s: paused, without an approved creative, or its flight is over", id, date)
			}
			if n.line == nil {
				n.line = l
			}
		}
		c.Warm(ctx, ix, nil) // as a server does with its first index
		nodes = append(nodes, n)
	}
	ex := bidder.Exchange{WinWindow: sc.window, Reservation: sc.reservation, WinRateHolds: sc.winRateHolds, KeepWon: sc.keepWon}
	var queue noticeQueue
	var seq int64
	var sent [4]int64 // notices sent, by kind
	send := func(delay time.Duration, kind tsubame.OutcomeKind, o tsubame.Outcome, from int) {
		o.Kind = kind
		if kind != tsubame.OutcomeBill {
			o.Price = 0
		}
		seq++
		to := from
		if len(nodes) > 1 { // another node, each in turn for each kind
			sent[kind]++
			to = (from + 1 + int(sent[kind]%int64(len(nodes)-1))) % len(nodes)
		}
		heap.Push(&queue, simNotice{at: now.Add(delay), bid: now, seq: seq, from: from, to: to, o: o})
	}
	rnd := rand.New(rand.NewPCG(1, 2)) // the same replay every time
	nextTick := now.Add(interval)
	rounds := 0
	var acc, made int64
	next := res.dayStart.Add(sc.every)
	d := 0                         // the day of now in days
	auction := sc.exchange() != "" // bids, as the bidder makes them; else /api/decide's decisions
	decided := make([]decision.Decision, 0, 1)
	if sc.forecast {
		res.forecast = newSimForecast(sc.placement, sc.subset, loc, days[0].start, res.dayStart)
	}
	var before budget.Counts // the days before the day's: not the day's
	counts := func() budget.Counts {
		var c budget.Counts
		for _, n := range nodes {
			nc := n.ledger.Counts()
			c.Lost, c.Expired, c.Late, c.Overage = c.Lost+nc.Lost, c.Expired+nc.Expired, c.Late+nc.Late, c.Overage+nc.Overage
			c.PastHold, c.Kept, c.KeptBilled = c.PastHold+nc.PastHold, c.Kept+nc.Kept, c.KeptBilled+nc.KeptBilled
		}
		c.Lost, c.Expired, c.Late, c.Overage = c.Lost-before.Lost, c.Expired-before.Expired, c.Late-before.Late, c.Overage-before.Overage
		c.PastHold, c.Kept, c.KeptBilled = c.PastHold-before.PastHold, c.Kept-before.Kept, c.KeptBilled-before.KeptBilled
		return c
	}
	for now.Before(res.dayEnd) || len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if now.Equal(res.dayStart) {
			if res.forecast != nil {
				if err := res.forecast.forecast(nodes[0].ix, sc.history); err != nil {
					return nil, err
				}
			}
			before = counts()
			res.rows = append(res.rows, res.row(now, nodes[0], li, camp, counts()))
		}
		for d < len(days)-1 && !now.Before(days[d].end) {
			d++
		}
		today := !now.Before(res.dayStart) // the day replayed, not one before it
		if now.Before(res.dayEnd) {
			acc += days[d].hours[now.In(loc).Hour()]
		}
		for n := acc / 3600; n > 0; n-- {
			i := int(made % int64(len(nodes)))
			node := nodes[i]
			made++
			if today {
				res.requests++
			}
			id := "s" + strconv.FormatInt(made, 36)
			// As the bidder holds a bid: see decision.HoldEnd.
			req := &decision.Request{User: id, Reserve: []string{id}, ReserveUntil: decision.HoldEnd(now, sc.reservation),
				KeepWon: ex.KeepWonNow(&node.stats), CapsOnWin: auction}
			if res.forecast != nil {
				req.Placement, req.Device = sc.placement, res.forecast.request(now)
				id += "." + req.Device // the bills tell whose it was
				req.User, req.Reserve = id, []string{id}
			}
			if win := ex.WinWindowNow(&node.stats); win > 0 {
				req.ReserveUntil, req.WinBy = decision.RoundUp(now.Add(sc.reservation), time.Second), now.Add(win)
			} else {
				req.HoldShare = ex.HoldShareNow(&node.stats)
			}
			l := node.line
			if len(ids) > 1 {
				req.Time = now
				ds := node.ix.Decide(req, decided[:0], rnd)
				if len(ds) == 0 {
					continue
				}
				l = ds[0].Line
			} else if !node.counters.Allow(l, req, 0, now) {
				continue
			}
			if today && l == node.line {
				res.bids++
			}
			o := tsubame.Outcome{Bid: id, LineItem: l.ID, Due: req.ReserveUntil.Unix(), Price: l.CPM}
			if sc.winRate < allWin && rnd.Int64N(allWin) >= sc.winRate {
				if sc.notices.Has(tsubame.OutcomeLoss) {
					send(sc.winDelay, tsubame.OutcomeLoss, o, i)
				}
				continue
			}
			if today && l == node.line {
				res.wins++
			}
			if sc.notices.Has(tsubame.OutcomeWin) {
				send(sc.winDelay, tsubame.OutcomeWin, o, i)
				if sc.billOn == bidder.BillOnNURL {
					send(sc.winDelay, tsubame.OutcomeBill, o, i)
				}
			}
			if rnd.IntN(100) >= sc.show || sc.billOn == bidder.BillOnNURL {
				continue // never shown: no billing notice, no impression
			}
			send(sc.billDelay, tsubame.OutcomeBill, o, i)
		}
		acc %= 3600
		for len(queue) > 0 && !queue[0].at.After(now) {
			nt := heap.Pop(&queue).(simNotice)
			first, err := st.Record(ctx, nodes[nt.from].ledger.Holder(), &nt.o, simOutcomeTTL)
			if err != nil {
				return nil, err
			}
			switch {
			case !first: // each notice is sent once
			case nt.o.Kind == tsubame.OutcomeWin:
				nodes[nt.to].stats.Wins.Add(1)
				nodes[nt.to].stats.WinDelayed(now.Sub(nt.bid))
			case nt.o.Kind == tsubame.OutcomeLoss:
				nodes[nt.to].stats.Losses.Add(1)
			case nt.o.Kind == tsubame.OutcomeBill:
				// Late as the bidder counts it: after the bid's hold and
				// the grace.
				nodes[nt.to].stats.Bills.Add(1)
				if !now.Before(time.Unix(nt.o.Due, 0).Add(budget.DefaultGrace)) {
					nodes[nt.to].stats.Late.Add(1)
				}
				if res.forecast != nil {
					res.forecast.billed(nt.bid, nt.o.LineItem, nt.o.Bid[strings.LastIndexByte(nt.o.Bid, '.')+1:])
				}
				if !nt.bid.Before(res.dayStart) {
					res.billed[nt.o.LineItem]++
					if nt.o.LineItem == li.ID {
						res.impressions++
						res.spendNanos += int64(nt.o.Price)
					}
				}
			}
		}
		now = now.Add(time.Second)
		if !now.Before(nextTick) {
			// Each node in turn first: the first to ask the store for
			// what the pacing freed would otherwise always get it.
			for k := range nodes {
				nodes[(rounds+k)%len(nodes)].ledger.Tick(ctx)
			}
			rounds++
			nextTick = nextTick.Add(interval)
		}
		if now.Equal(res.dayEnd) || now.After(res.dayStart) && now.Before(res.dayEnd) && !now.Before(next) {
			res.rows = append(res.rows, res.row(now, nodes[0], li, camp, counts()))
			next = next.Add(sc.every)
		}
	}
	if now.After(res.dayEnd) {
		res.rows = append(res.rows, res.row(now, nodes[0], li, camp, counts()))
	}
	res.counts = counts()
	for _, n := range nodes {
		_ = n.ledger.Close(ctx)
	}
	return res, nil
}

// row is the day at now, with the ledgers' counts c: its ideal is the
// plan of the first node (n), by the traffic it learned.
func (r *simResult) row(now time.Time, n *simNode, li *tsubame.LineItem, camp *tsubame.Campaign, c budget.Counts) simRow {
	row := simRow{at: now, requests: r.requests, bids: r.bids, wins: r.wins, impressions: r.impressions, idealI: -1,
		spend: tsubame.Money(r.spendNanos / 1000), idealS: -1, lost: c.Lost, expired: c.Expired, late: c.Late, overage: c.Overage}
	at := now
	if !now.Before(r.dayEnd) {
		at = r.dayEnd.Add(-time.Nanosecond) // the day's plan, also for notices after it
	}
	imp, spend := n.ledger.Plan(n.line, at)
	if now.Before(r.dayEnd) {
		row.idealI, row.idealS = imp, tsubame.Money(spend)
	} else {
		row.idealI, row.idealS = r.limitI, r.limitS // the day over: all of it
	}
	if r.limitI <= 0 {
		row.idealI = -1
	}
	if r.limitS <= 0 {
		row.idealS = -1
	}
	return row
}

// simDay is one day replayed: its bounds and its requests per hour.
type simDay struct {
	start, end time.Time
	hours      [24]int64
}

// days are the days replayed: sc.history days before day (each hour's
// traffic varied at random by up to sc.noise, each day sc.trend more than
// the one before, the last of them as sc.traffic), then day itself, whose
// traffic is sc.dayTraffic of that.
func (sc *simConfig) days(day time.Time, loc *time.Location) []simDay {
	rnd := rand.New(rand.NewPCG(3, 4)) // the same days every time
	const pct = 100 * tsubame.MicrosPerUnit
	out := make([]simDay, sc.history+1)
	for k := range out {
		y, m, dd := day.In(loc).Date()
		ds, de, _ := budget.Day(time.Date(y, m, dd-(sc.history-k), 12, 0, 0, 0, loc), loc)
		out[k].start, out[k].end = time.Unix(0, ds), time.Unix(0, de)
		for h, n := range sc.traffic {
			// Requests are counted, not money: a float scales them.
			v := float64(n)
			if k == sc.history {
				v *= float64(cmp.Or(sc.dayTraffic, pct)) / pct
			} else {
				v /= math.Pow(1+float64(sc.trend)/pct, float64(sc.history-k)) // back from the last day before
				if sc.noise > 0 {
					v *= 1 + float64(rnd.Int64N(2*sc.noise+1)-sc.noise)/pct
				}
			}
			out[k].hours[h] = int64(math.Round(max(v, 0)))
		}
	}
	return out
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
	_ = cw.Write([]string{"time", "requests", "bids", "wins", "impressions", "ideal_impressions", "spend", "ideal_spend",
		"lost", "expired", "late", "overage"})
	for _, row := range r.rows {
		rec := []string{row.at.In(r.loc).Format("2006-01-02T15:04:05Z07:00"), strconv.FormatInt(row.requests, 10),
			strconv.FormatInt(row.bids, 10), strconv.FormatInt(row.wins, 10),
			strconv.FormatInt(row.impressions, 10), "", row.spend.String(), "",
			strconv.FormatUint(row.lost, 10), strconv.FormatUint(row.expired, 10), strconv.FormatUint(row.late, 10), strconv.FormatUint(row.overage, 10)}
		if row.idealI >= 0 {
			rec[5] = strconv.FormatInt(row.idealI, 10)
		}
		if row.idealS >= 0 {
			rec[7] = row.idealS.String()
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
	p.Title.Text = fmt.Sprintf("%s on %s: %s delivered against the plan", r.line, r.date, what)
	if r.exchange != "" {
		p.Title.Text += "\n" + r.exchange
	}
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
	p.Legend.Add("plan (pacing target, by the traffic learned)", il)
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
