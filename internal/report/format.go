package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// The formats of a result.
const (
	FormatTable = "table"
	FormatCSV   = "csv"
	FormatJSON  = "json"
)

// Formats are the formats Write takes.
var Formats = []string{FormatTable, FormatCSV, FormatJSON}

// column is one column of a result: a dimension, a counter, or the CTR.
type column struct {
	name  string
	value func(*Row) string
	// num marks a JSON number (a count); the rest are strings.
	num bool
}

// columns are the result's columns: its dimensions in the query's order,
// the currency, then the counts (amounts as decimals, with the CTR after
// the clicks; the requests beside the decisions that filled them). table
// keeps the counts an overview needs.
func (res *Result) columns(table bool) []column {
	var cols []column
	loc := res.Query.Location
	for _, name := range res.Query.By {
		switch name {
		case ByMinute, ByHour:
			cols = append(cols, column{name: name, value: func(r *Row) string { return r.Time.In(loc).Format(time.RFC3339) }})
		case ByDay:
			cols = append(cols, column{name: name, value: func(r *Row) string { return r.Time.In(loc).Format(time.DateOnly) }})
		default:
			d := Dim(slices.Index(dimNames[:], name))
			cols = append(cols, column{name: name, value: func(r *Row) string { return r.Dims[d] }})
		}
	}
	if !slices.Contains(res.Query.By, DimCurrency.String()) {
		cols = append(cols, column{name: "currency", value: func(r *Row) string { return r.Dims[DimCurrency] }})
	}
	count := func(c Counter) column {
		if c == Spend || c == OverageSpend || c == Revenue {
			return column{name: c.String(), value: func(r *Row) string { return Amount(r.Counts[c]) }}
		}
		return column{name: c.String(), num: true, value: func(r *Row) string { return strconv.FormatInt(r.Counts[c], 10) }}
	}
	order := []Counter{Impressions, Clicks}
	if table {
		cols = append(cols, count(Requests), count(Decisions), count(Impressions), count(Clicks))
	} else {
		cols = append(cols, count(Impressions), count(Clicks))
	}
	cols = append(cols, column{name: "ctr", value: func(r *Row) string { return CTR(r.Counts[Clicks], r.Counts[Impressions]) }}, count(Spend))
	// By partner: the sell side's calls, their rates (a share, as ctr
	// is) and the revenue.
	rates := []column{
		{name: "bid_rate", value: func(r *Row) string { return CTR(r.Counts[PartnerBids], r.Counts[PartnerRequests]) }},
		{name: "win_rate", value: func(r *Row) string { return CTR(r.Counts[PartnerWins], r.Counts[PartnerBids]) }},
	}
	if slices.Contains(res.Query.By, DimPartner.String()) {
		if table {
			cols = append(cols, count(PartnerRequests), count(PartnerBids), rates[0], count(PartnerWins), rates[1],
				count(PartnerTimeouts), count(Revenue))
		} else {
			cols = append(cols, rates...)
		}
	}
	if table {
		cols = append(cols, count(Bids), count(Wins), count(Losses), count(Bills), count(Overage),
			column{name: "invalid", num: true, value: func(r *Row) string {
				return strconv.FormatInt(r.Counts[InvalidImpressions]+r.Counts[InvalidClicks]+r.Counts[InvalidBids]+r.Counts[InvalidBills], 10)
			}}, count(Rejected))
		return cols
	}
	for c := range numCounters {
		switch {
		case c == Decisions:
			cols = append(cols, count(Requests), count(Decisions))
		case !slices.Contains(order, c) && c != Spend && c != Requests:
			cols = append(cols, count(c))
		}
	}
	return cols
}

// Write writes res in format (table, csv, json). JSON is
// {"rows":[{...}]}, each row's fields in the columns' order.
func (res *Result) Write(w io.Writer, format string) error {
	switch format {
	case FormatJSON:
		return res.writeJSON(w)
	case FormatCSV:
		bw := bufio.NewWriter(w)
		cols := res.columns(false)
		for i, c := range cols {
			writeCell(bw, i, c.name)
		}
		bw.WriteByte('\n')
		for i := range res.Rows {
			for j, c := range cols {
				v := c.value(&res.Rows[i])
				if !c.num {
					v = csvSafe(v)
				}
				writeCell(bw, j, v)
			}
			bw.WriteByte('\n')
		}
		return bw.Flush()
	case FormatTable, "":
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		cols := res.columns(true)
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.name
		}
		fmt.Fprintln(tw, strings.Join(names, "\t")+"\t")
		for i := range res.Rows {
			vals := make([]string, len(cols))
			for j, c := range cols {
				vals[j] = tableSafe(c.value(&res.Rows[i]))
				if vals[j] == "" {
					vals[j] = "-"
				}
			}
			fmt.Fprintln(tw, strings.Join(vals, "\t")+"\t")
		}
		if len(res.Rows) == 0 {
			fmt.Fprintln(tw, "(no rows)\t")
		}
		return tw.Flush()
	}
	return fmt.Errorf("unknown format %q (one of %s)", format, strings.Join(Formats, ", "))
}

func (res *Result) writeJSON(w io.Writer) error {
	cols := res.columns(false)
	b := []byte(`{"rows":[`)
	for i := range res.Rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		for j, c := range cols {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, c.name) // names are plain ASCII
			b = append(b, ':')
			v := c.value(&res.Rows[i])
			if c.num {
				b = append(b, v...)
			} else {
				s, _ := json.Marshal(v) // escapes <, >, & and invalid UTF-8
				b = append(b, s...)
			}
		}
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	_, err := w.Write(b)
	return err
}

// csvSafe keeps a spreadsheet from reading a value as a formula (a site,
// a placement or a publisher id is the page's or the exchange's, not
// ours), as OWASP's CSV injection advice says: a value whose first
// character, or first after spaces (which importers may trim), is =, +,
// -, @, a tab, a carriage return or a line feed (or the full-width =, +,
// -, @ some spreadsheets take alike) gets a single quote before it. A
// plain decimal number (-1.5) is left as it is: it is no formula.
func csvSafe(v string) string {
	t := strings.TrimLeft(v, " ")
	if t == "" || plainNumber.MatchString(v) {
		return v
	}
	if strings.ContainsRune("=+-@\t\r\n", rune(t[0])) {
		return "'" + v
	}
	if r, _ := utf8.DecodeRuneInString(t); strings.ContainsRune("＝＋－＠", r) {
		return "'" + v
	}
	return v
}

var plainNumber = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// writeCell writes the cell v of column i of a CSV line (RFC 4180): after
// a comma unless first; quoted, its quotes doubled, when it holds a
// separator (a comma, and the semicolon and tab that spreadsheets of
// other locales split on), a quote, a line break, or spaces at an end
// (which importers may trim). encoding/csv quotes commas only: a
// semicolon-separated import would split a value it left bare, and read
// its second half as a cell of its own (and a formula).
func writeCell(w *bufio.Writer, i int, v string) {
	if i > 0 {
		w.WriteByte(',')
	}
	if !strings.ContainsAny(v, ",;\t\"\r\n") && strings.TrimSpace(v) == v {
		w.WriteString(v)
		return
	}
	w.WriteByte('"')
	w.WriteString(strings.ReplaceAll(v, `"`, `""`))
	w.WriteByte('"')
}

// tableSafe shows control characters of a value as escapes, so a site's
// or an exchange's id cannot move the terminal's cursor.
func tableSafe(v string) string {
	q := strconv.Quote(v)
	if q[1:len(q)-1] == v {
		return v
	}
	return q
}
