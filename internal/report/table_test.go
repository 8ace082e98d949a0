package report_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"tsubame/internal/report"
)

// The table an operator reads shows an auction's whole life: bids, wins,
// losses and bills side by side (a win rate is wins over bids); JSON has
// every counter, the notices' repeats and the markup's impressions too.
func TestTableShowsAuctions(t *testing.T) {
	res := &report.Result{Query: report.Query{By: []string{"exchange"}}, Rows: []report.Row{{
		Dims: report.Dims{report.DimExchange: "ssp", report.DimCurrency: "USD"},
		Counts: report.Counts{report.Bids: 30, report.Wins: 3, report.Losses: 27, report.Bills: 2, report.Impressions: 2,
			report.Spend: 2_400_000, report.InvalidWins: 4, report.InvalidLosses: 5, report.BidImps: 1}}}}
	var b bytes.Buffer
	if err := res.Write(&b, report.FormatTable); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("table:\n%s", b.String())
	}
	head, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	if len(head) != len(row) {
		t.Fatalf("table:\n%s", b.String())
	}
	got := map[string]string{}
	for i, h := range head {
		got[h] = row[i]
	}
	for k, want := range map[string]string{"bids": "30", "wins": "3", "losses": "27", "bills": "2", "spend": "0.0024"} {
		if got[k] != want {
			t.Errorf("table %s = %q, want %q:\n%s", k, got[k], want, b.String())
		}
	}
	b.Reset()
	if err := res.Write(&b, report.FormatJSON); err != nil {
		t.Fatal(err)
	}
	var out struct{ Rows []map[string]any }
	if err := json.Unmarshal(b.Bytes(), &out); err != nil || len(out.Rows) != 1 {
		t.Fatalf("%v: %s", err, b.String())
	}
	for k, want := range map[string]float64{"wins": 3, "losses": 27, "invalid_wins": 4, "invalid_losses": 5, "bid_imps": 1} {
		if out.Rows[0][k] != want {
			t.Errorf("json %s = %v, want %v: %s", k, out.Rows[0][k], want, b.String())
		}
	}
}

// A placement's requests (the slots asked, filled or not) stand beside
// its decisions (those filled) in every format: the fill rate is read
// across one row.
func TestRequestsBesideDecisions(t *testing.T) {
	res := &report.Result{Query: report.Query{By: []string{"placement"}}, Rows: []report.Row{{
		Dims:   report.Dims{report.DimPlacement: "top", report.DimCurrency: "JPY"},
		Counts: report.Counts{report.Requests: 12, report.Decisions: 9, report.Impressions: 7}}}}
	for _, format := range report.Formats {
		var b bytes.Buffer
		if err := res.Write(&b, format); err != nil {
			t.Fatal(err)
		}
		var names, values []string
		switch format {
		case report.FormatJSON:
			// Field order is the columns' order: read the names in turn.
			dec := json.NewDecoder(strings.NewReader(strings.TrimPrefix(strings.TrimSpace(b.String()), `{"rows":[`)))
			if _, err := dec.Token(); err != nil {
				t.Fatalf("%v: %s", err, b.String())
			}
			for dec.More() {
				k, _ := dec.Token()
				v, _ := dec.Token()
				names, values = append(names, k.(string)), append(values, fmt.Sprint(v))
			}
		case report.FormatCSV:
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			names, values = strings.Split(lines[0], ","), strings.Split(lines[1], ",")
		default:
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			names, values = strings.Fields(lines[0]), strings.Fields(lines[1])
		}
		i := slices.Index(names, "requests")
		if i < 0 || i+1 >= len(names) || names[i+1] != "decisions" || values[i] != "12" || values[i+1] != "9" {
			t.Errorf("%s: requests not beside decisions (12, 9):\n%s", format, b.String())
		}
		if n := len(slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s != "requests" })); n != 1 {
			t.Errorf("%s: %d requests columns:\n%s", format, n, b.String())
		}
	}
}
