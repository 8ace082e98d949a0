package report

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"tsubame"
)

// The time dimensions of -by: the rows' bucket, in the query's zone.
const (
	ByMinute = "minute"
	ByHour   = "hour"
	ByDay    = "day"
)

// The longest span a query grouped by minute or by hour may cover, from
// its start to its end (or to now, without one): a bound on the rows one
// answer holds (a year by minute is half a million rows for every
// combination of the other dimensions). By day, or without a time
// dimension, a span has no bound.
const (
	MaxMinuteSpan = 7 * 24 * time.Hour
	MaxHourSpan   = 92 * 24 * time.Hour
)

// Query selects and groups rows.
type Query struct {
	// From (inclusive) and To (exclusive) bound the rows' times; zero is
	// unbounded. Both must be whole minutes (quarter-hours before the
	// compaction point, where minutes are no longer kept).
	From, To time.Time
	// By are the dimensions rows are grouped by, in order (DimNames, and
	// at most one of minute, hour, day). The currency is always one: an
	// amount is never added across currencies.
	By []string
	// Location is the zone of hours and days. Default UTC.
	Location *time.Location
}

// DimNames are the dimensions -by takes beyond time.
func DimNames() []string { return slices.Clone(dimNames[:]) }

// ParseBy reads a -by list ("day,line_item"): known names, none twice, at
// most one time dimension.
func ParseBy(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	times := 0
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == ByMinute || name == ByHour || name == ByDay:
			times++
		case slices.Contains(dimNames[:], name):
		default:
			return nil, tsubame.Errorf(tsubame.EINVALID, "unknown dimension %q (known: minute, hour, day, %s)", name, strings.Join(dimNames[:], ", "))
		}
		if slices.Contains(out, name) {
			return nil, tsubame.Errorf(tsubame.EINVALID, "dimension %q given twice", name)
		}
		out = append(out, name)
	}
	if times > 1 {
		return nil, tsubame.Errorf(tsubame.EINVALID, "at most one of minute, hour and day")
	}
	return out, nil
}

// Row is one row of a result: its time bucket's start (when the query has
// a time dimension), its dimensions' values and its counts.
type Row struct {
	Time   time.Time
	Dims   Dims
	Counts Counts
}

// Result is a query's rows, ordered by the dimensions in the query's order
// (time ascending, then the values' bytes), the currency last.
type Result struct {
	Query Query
	Rows  []Row
	// Compacted is the time before which rows are quarter-hours (zero:
	// every row is a minute).
	Compacted time.Time
}

// Query returns the rows of q.
func (r *Roller) Query(q Query) (*Result, error) { return query(r.be, q) }

func query(be backend, q Query) (*Result, error) {
	if q.Location == nil {
		q.Location = time.UTC
	}
	for _, name := range q.By {
		if _, err := ParseBy(name); err != nil {
			return nil, err
		}
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return nil, tsubame.Errorf(tsubame.EINVALID, "the start (%s) is not before the end (%s)", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	if err := checkSpan(&q, time.Now()); err != nil {
		return nil, err
	}
	compacted, err := be.compacted()
	if err != nil {
		return nil, err
	}
	res := &Result{Query: q}
	if compacted > 0 {
		res.Compacted = time.Unix(compacted, 0).UTC()
	}
	for _, b := range []time.Time{q.From, q.To} {
		if b.IsZero() {
			continue
		}
		if b.Nanosecond() != 0 || b.Unix()%60 != 0 {
			return nil, tsubame.Errorf(tsubame.EINVALID, "%s is not a whole minute", b.Format(time.RFC3339Nano))
		}
		if b.Unix() < compacted && b.Unix()%int64(quarter/time.Second) != 0 {
			return nil, tsubame.Errorf(tsubame.EINVALID, "%s: rows before %s are kept per quarter-hour (report.minutes), so a bound there must be on a quarter-hour",
				b.Format(time.RFC3339), res.Compacted.Format(time.RFC3339))
		}
	}
	from, to := int64(-1<<63), int64(1<<63-1)
	if !q.From.IsZero() {
		from = q.From.Unix()
	}
	if !q.To.IsZero() {
		to = q.To.Unix()
	}
	var rows map[string]*Row
	var gk []byte
	for range 10 {
		rows = map[string]*Row{}
		err = be.scan(from, to, func(t int64, dims *Dims, c *Counts) error {
			row := project(&q, t, dims)
			gk = groupKey(gk[:0], &row)
			if cur := rows[string(gk)]; cur != nil {
				cur.Counts.Add(c)
			} else {
				row.Counts = *c
				rows[string(gk)] = &row
			}
			return nil
		})
		if !errors.Is(err, errCompactedMeanwhile) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	res.Rows = make([]Row, 0, len(rows))
	for _, row := range rows {
		res.Rows = append(res.Rows, *row)
	}
	order := dimOrder(q.By)
	slices.SortFunc(res.Rows, func(a, b Row) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		for _, d := range order {
			if c := cmp.Compare(a.Dims[d], b.Dims[d]); c != 0 {
				return c
			}
		}
		return 0
	})
	return res, nil
}

// checkSpan refuses a query by minute or by hour whose span (to now, when
// it has no end) is longer than MaxMinuteSpan or MaxHourSpan. A query with
// no start is the whole of the data, which the command line may ask for.
func checkSpan(q *Query, now time.Time) error {
	if q.From.IsZero() {
		return nil
	}
	to := q.To
	if to.IsZero() {
		to = now
	}
	for _, name := range q.By {
		max, unit := time.Duration(0), ""
		switch name {
		case ByMinute:
			max, unit = MaxMinuteSpan, "minute"
		case ByHour:
			max, unit = MaxHourSpan, "hour"
		}
		if max > 0 && to.Sub(q.From) > max {
			return tsubame.Errorf(tsubame.EINVALID, "a report by %s covers at most %d days (this one %s to %s): group by day, or ask for less",
				unit, int(max/(24*time.Hour)), q.From.Format(time.RFC3339), to.Format(time.RFC3339))
		}
	}
	return nil
}

// dimOrder is the dimensions of by (not time) in order, then the currency.
func dimOrder(by []string) []Dim {
	var out []Dim
	for _, name := range by {
		if i := slices.Index(dimNames[:], name); i >= 0 {
			out = append(out, Dim(i))
		}
	}
	if !slices.Contains(out, DimCurrency) {
		out = append(out, DimCurrency)
	}
	return out
}

// project keeps of a stored row what q groups by: its time bucket and the
// dimensions named, the currency always.
func project(q *Query, t int64, d *Dims) Row {
	var row Row
	for _, name := range q.By {
		switch name {
		case ByMinute:
			row.Time = time.Unix(t, 0).In(q.Location)
		case ByHour:
			lt := time.Unix(t, 0).In(q.Location)
			row.Time = lt.Add(-time.Duration(lt.Minute())*time.Minute - time.Duration(lt.Second())*time.Second)
		case ByDay:
			y, m, dd := time.Unix(t, 0).In(q.Location).Date()
			row.Time = time.Date(y, m, dd, 0, 0, 0, 0, q.Location)
		default:
			i := slices.Index(dimNames[:], name)
			row.Dims[i] = d[i]
		}
	}
	row.Dims[DimCurrency] = d[DimCurrency]
	return row
}

func groupKey(dst []byte, row *Row) []byte {
	var t int64
	if !row.Time.IsZero() {
		t = row.Time.Unix()
	}
	return rowKey(dst, t, &row.Dims)
}

// Amount formats an amount in thousandths of a micro-unit as a decimal of
// units: exact, with at least two decimals ("0.0025", "12.50").
func Amount(v int64) string {
	neg := v < 0
	u := uint64(v)
	if neg {
		u = -u
	}
	s := strconv.FormatUint(u/1e9, 10) + "." + fmt.Sprintf("%09d", u%1e9)
	s = strings.TrimRight(s, "0")
	if i := strings.IndexByte(s, '.'); len(s)-i-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-i-1))
	}
	if neg {
		s = "-" + s
	}
	return s
}

// CTR is clicks per impression as a decimal to six places, rounded half
// up ("0.012346"); "0" without impressions.
func CTR(clicks, impressions int64) string {
	if impressions <= 0 || clicks < 0 {
		return "0"
	}
	// Long division, digit by digit: exact, no float.
	q := clicks / impressions
	r := clicks % impressions
	frac := int64(0)
	for range 6 {
		r *= 10
		frac = frac*10 + r/impressions
		r %= impressions
	}
	if 2*r >= impressions {
		frac++
		if frac == 1e6 {
			q, frac = q+1, 0
		}
	}
	return strconv.FormatInt(q, 10) + "." + fmt.Sprintf("%06d", frac)
}

// ParseQuery reads a query's text form, the report command's flags and the
// admin API's parameters: from and to in RFC 3339 (empty: unbounded), by
// a comma-separated list of dimensions, tz an IANA zone (empty: def).
func ParseQuery(from, to, by, tz string, def *time.Location) (Query, error) {
	q := Query{Location: def}
	var err error
	for _, b := range []struct {
		name, text string
		dst        *time.Time
	}{{"from", from, &q.From}, {"to", to, &q.To}} {
		if b.text == "" {
			continue
		}
		if *b.dst, err = time.Parse(time.RFC3339, b.text); err != nil {
			return Query{}, tsubame.Errorf(tsubame.EINVALID, "%s: %q is not an RFC 3339 time such as 2026-11-27T00:00:00+09:00", b.name, b.text)
		}
	}
	if q.By, err = ParseBy(by); err != nil {
		return Query{}, err
	}
	if tz != "" {
		if q.Location, err = time.LoadLocation(tz); err != nil || tz == "Local" {
			return Query{}, tsubame.Errorf(tsubame.EINVALID, "tz: %q is not an IANA time zone such as Asia/Tokyo or UTC", tz)
		}
	}
	if q.Location == nil {
		q.Location = time.UTC
	}
	return q, nil
}
