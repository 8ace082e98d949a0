package bulk

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"tsubame"
)

// The CSV form of a campaign file holds line items alone, one a row, for
// spreadsheets (download, edit, upload, as ad servers' bulk sheets go): a
// header row naming the columns (csvColumns, in any order; those left out
// are left empty), then one row a line item. Lists are written with ';'
// between values, a frequency cap as IMPRESSIONS/PER ("3/1h;10/24h"),
// hours as FROM-TO ("9-18"), key-values as KEY=VALUE,VALUE;KEY=VALUE.
// Reading turns each row into the JSON object of its line item, on a line
// of its own, and decodes that as a JSON file is decoded: every problem of
// the rows is reported at once, by its row's line and path
// (line_items[3] (id "li-7").cpm), with the model's.
//
// A row is a whole line item: imported (merged by id), it replaces the
// stored line item of its id, columns left empty included. A CSV file
// cannot replace a set: it holds no other kind.

// csvColumns are the columns of a line item, in the order written.
var csvColumns = []string{"id", "name", "campaign", "status", "priority", "weight", "cpm", "creatives", "start", "end",
	"impressions_total", "impressions_daily", "frequency", "deals",
	"placements", "sites", "apps", "countries", "regions", "devices", "os", "browsers", "hours", "weekdays", "keyvalues",
	"exclude_placements", "exclude_sites", "exclude_apps", "exclude_countries", "exclude_regions", "exclude_devices",
	"exclude_os", "exclude_browsers", "exclude_hours", "exclude_weekdays", "exclude_keyvalues"}

// errCSVReplace refuses a CSV file in a replace import.
var errCSVReplace = tsubame.Errorf(tsubame.EINVALID,
	"a CSV file holds line items alone, so it can only be merged into the stored set (mode merge), never replace it")

// csvToJSON turns a CSV file into the JSON text of a campaign file of its
// line items, the CSV line of each of its lines, and the problems of its
// cells' forms (a frequency cap that is not IMPRESSIONS/PER), reported
// with the decoding's. Problems of the CSV's syntax or header are
// returned alone, as fatal.
func csvToJSON(data []byte) (text []byte, lines []int, cells, fatal []FileProblem) {
	r := csv.NewReader(bytes.NewReader(data))
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return nil, nil, nil, []FileProblem{csvProblem(err, 1)}
	}
	header = slices.Clone(header) // ReuseRecord
	cols := make([]string, len(header))
	var ps []FileProblem
	seen := map[string]bool{}
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(h))
		switch {
		case !slices.Contains(csvColumns, h):
			ps = append(ps, FileProblem{Line: 1, Path: "header", Message: fmt.Sprintf("column %d, %q, is not a line item column (%s)",
				i+1, clip(h, 64), strings.Join(csvColumns, ", "))})
		case seen[h]:
			ps = append(ps, FileProblem{Line: 1, Path: "header", Message: fmt.Sprintf("column %q is given twice", h)})
		}
		seen[h], cols[i] = true, h
	}
	if !seen["id"] {
		ps = append(ps, FileProblem{Line: 1, Path: "header", Message: "no id column: each row names its line item"})
	}
	if len(ps) > 0 {
		return nil, nil, nil, ps
	}
	out := []byte("{\"line_items\": [\n")
	lines = []int{1} // the CSV line of each JSON line: the first stands for the header
	idCol := slices.Index(cols, "id")
	for n := 0; ; n++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			return nil, nil, nil, []FileProblem{csvProblem(err, line)}
		}
		if n > 0 {
			out = append(out, ",\n"...)
		}
		lines = append(lines, line)
		li := map[string]any{}
		for i, cell := range rec {
			if cell = strings.TrimSpace(cell); cell != "" {
				if msg := setCSVCell(li, cols[i], cell); msg != "" {
					path := itemPath(tsubame.KindLineItem, n, strings.TrimSpace(rec[idCol])) + "." + cols[i]
					cells = append(cells, FileProblem{Line: line, Path: path, Message: msg})
				}
			}
		}
		b, _ := json.Marshal(li) // one line: maps of strings, numbers and lists
		out = append(out, b...)
	}
	lines = append(lines, lines[len(lines)-1]) // the closing line
	return append(out, "\n]}"...), lines, cells, nil
}

func csvProblem(err error, line int) FileProblem {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return FileProblem{Line: pe.Line, Col: pe.Column, Message: pe.Err.Error()}
	}
	if err == io.EOF {
		err = errors.New("an empty file: the first row names the columns")
	}
	return FileProblem{Line: line, Message: err.Error()}
}

// setCSVCell puts a cell's value where the line item's JSON has it, or
// returns what is wrong with its form. Values are passed on as text
// where the model reads text (the model checks them), and as numbers
// where it reads numbers: a cell that is no number is passed as text, for
// the decoder to report as a value of the wrong type.
func setCSVCell(li map[string]any, col, cell string) string {
	obj := func(m map[string]any, key string) map[string]any {
		o, _ := m[key].(map[string]any)
		if o == nil {
			o = map[string]any{}
			m[key] = o
		}
		return o
	}
	num := func(s string) any {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
		return s
	}
	criteria := func() map[string]any { return obj(li, "targeting") }
	name := col
	if rest, ok := strings.CutPrefix(col, "exclude_"); ok {
		criteria = func() map[string]any { return obj(obj(li, "targeting"), "exclude") }
		name = rest
	}
	switch name {
	case "id", "name", "campaign", "status", "cpm", "start", "end":
		li[col] = cell
	case "priority", "weight":
		li[col] = num(cell)
	case "impressions_total", "impressions_daily":
		obj(obj(li, "limits"), "impressions")[strings.TrimPrefix(col, "impressions_")] = num(cell)
	case "creatives", "deals":
		li[col] = splitList(cell)
	case "frequency":
		var caps []any
		for _, c := range splitList(cell) {
			n, per, ok := strings.Cut(c, "/")
			if !ok {
				return fmt.Sprintf("%q is not IMPRESSIONS/PER (3/1h)", clip(c, 64))
			}
			caps = append(caps, map[string]any{"impressions": num(strings.TrimSpace(n)), "per": strings.TrimSpace(per)})
		}
		li[col] = caps
	case "hours":
		from, to, ok := strings.Cut(cell, "-")
		f, err1 := strconv.Atoi(strings.TrimSpace(from))
		t, err2 := strconv.Atoi(strings.TrimSpace(to))
		if !ok || err1 != nil || err2 != nil {
			return fmt.Sprintf("%q is not FROM-TO (9-18)", clip(cell, 64))
		}
		criteria()["hours"] = map[string]any{"from": f, "to": t}
	case "keyvalues":
		kv := map[string]any{}
		for _, pair := range splitList(cell) {
			k, vs, ok := strings.Cut(pair, "=")
			if !ok {
				return fmt.Sprintf("%q is not KEY=VALUE,VALUE", clip(pair, 64))
			}
			var values []string
			for v := range strings.SplitSeq(vs, ",") {
				if v = strings.TrimSpace(v); v != "" {
					values = append(values, v)
				}
			}
			kv[strings.TrimSpace(k)] = values
		}
		criteria()["keyvalues"] = kv
	default: // the targeting lists
		criteria()[name] = splitList(cell)
	}
	return ""
}

// splitList splits a cell at ';', leaving out empty values.
func splitList(cell string) []string {
	var out []string
	for v := range strings.SplitSeq(cell, ";") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// writeCSV writes the line items of set (sorted by id) as CSV, every
// column in csvColumns' order: what csvToJSON reads back to the same
// line items.
func writeCSV(w io.Writer, set *tsubame.CampaignSet) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns); err != nil {
		return err
	}
	for _, l := range set.LineItems {
		if err := csvWritable(l); err != nil {
			return err
		}
		if err := cw.Write(csvRow(l)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// csvWritable refuses a line item with a list value holding a separator
// the CSV form splits at: its row would read back as another line item.
func csvWritable(l *tsubame.LineItem) error {
	lists := [][]string{l.Creatives, l.Deals}
	for _, c := range []*tsubame.Criteria{&l.Targeting.Criteria, l.Targeting.Exclude} {
		if c == nil {
			continue
		}
		lists = append(lists, c.Placements, c.Sites, c.Apps, c.Countries, c.Regions, c.Devices, c.OS, c.Browsers, c.Weekdays)
		for k, vs := range c.KeyValues {
			if strings.ContainsAny(k, ";,=") {
				return csvUnwritable(l.ID, k)
			}
			for _, v := range vs {
				if strings.ContainsAny(v, ";,") {
					return csvUnwritable(l.ID, v)
				}
			}
		}
	}
	for _, list := range lists {
		for _, v := range list {
			if strings.Contains(v, ";") {
				return csvUnwritable(l.ID, v)
			}
		}
	}
	return nil
}

func csvUnwritable(id, v string) error {
	return tsubame.Errorf(tsubame.EINVALID, "line item %q holds the value %q, whose ';', ',' or '=' the CSV form splits at: "+
		"export it as JSON or YAML", clip(id, 64), clip(v, 64))
}

func csvRow(l *tsubame.LineItem) []string {
	var caps []string
	for _, f := range l.Frequency {
		caps = append(caps, strconv.FormatInt(f.Impressions, 10)+"/"+f.Per.String())
	}
	row := []string{l.ID, l.Name, l.Campaign, l.Status, strconv.Itoa(l.Priority), strconv.Itoa(l.Weight), l.CPM.String(),
		strings.Join(l.Creatives, ";"), csvTime(l.Start), csvTime(l.End), csvCount(l.Limits.Impressions.Total),
		csvCount(l.Limits.Impressions.Daily), strings.Join(caps, ";"), strings.Join(l.Deals, ";")}
	row = append(row, csvCriteria(&l.Targeting.Criteria)...)
	ex := l.Targeting.Exclude
	if ex == nil {
		ex = &tsubame.Criteria{}
	}
	return append(row, csvCriteria(ex)...)
}

func csvCriteria(c *tsubame.Criteria) []string {
	hours := ""
	if c.Hours != nil {
		hours = strconv.Itoa(c.Hours.From) + "-" + strconv.Itoa(c.Hours.To)
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(c.KeyValues)) {
		kv = append(kv, k+"="+strings.Join(c.KeyValues[k], ","))
	}
	j := func(l []string) string { return strings.Join(l, ";") }
	return []string{j(c.Placements), j(c.Sites), j(c.Apps), j(c.Countries), j(c.Regions), j(c.Devices), j(c.OS),
		j(c.Browsers), hours, j(c.Weekdays), j(kv)}
}

func csvTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

func csvCount(n int64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}
