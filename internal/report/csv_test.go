package report_test

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"

	"tsubame/internal/report"
)

// A CSV report is read back cell for cell by an RFC 4180 reader, and no
// cell can split or run as a formula in a spreadsheet: every cell that
// holds a separator (a comma, or the semicolon and tab other locales
// split on), a quote or a line break is quoted, and one that starts
// with =, +, -, @, a tab or a carriage return (after spaces too, and in
// the full-width forms) gets a single quote before it, as OWASP's CSV
// injection advice says. Values are a page's and an exchange's: a site, a
// placement, a deal.
func TestCSVQuotesAndNeutralises(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"news.example", "news.example"},
		{"a,b", "a,b"},
		{"x;=HYPERLINK(\"http://evil.example\")", "x;=HYPERLINK(\"http://evil.example\")"},
		{"x;=1+1", "x;=1+1"},
		{"x\t=1+1", "x\t=1+1"},
		{"say \"hi\"", "say \"hi\""},
		{"two\nlines", "two\nlines"},
		{"=1+1", "'=1+1"},
		{"+1+1", "'+1+1"},
		{"-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"},
		{"@SUM(A1)", "'@SUM(A1)"},
		{"\t=1", "'\t=1"},
		{"\r=1", "'\r=1"},
		{"  =1+1", "'  =1+1"},
		{"＝1+1", "'＝1+1"},
		{"-1.5", "-1.5"},
		{"", ""},
	} {
		q := report.Query{By: []string{"site", "placement"}}
		res := &report.Result{Query: q, Rows: []report.Row{{Dims: report.Dims{report.DimSite: tc.value, report.DimPlacement: "p,1",
			report.DimCurrency: "USD"}, Counts: report.Counts{report.Impressions: 3}}}}
		var b bytes.Buffer
		if err := res.Write(&b, report.FormatCSV); err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
		if err != nil || len(recs) != 2 {
			t.Fatalf("%q: not read back: %v\n%s", tc.value, err, b.String())
		}
		if recs[0][0] != "site" || recs[1][0] != tc.want || recs[1][1] != "p,1" || recs[1][2] != "USD" || recs[1][3] != "3" {
			t.Errorf("%q read back as %q", tc.value, recs[1])
		}
		// A spreadsheet of a semicolon or tab locale splits bare cells on
		// those: every cell holding one must be quoted.
		line := strings.SplitN(b.String(), "\n", 2)[1]
		if strings.ContainsAny(tc.value, ";\t") && !strings.HasPrefix(line, `"`) {
			t.Errorf("%q: left bare in %q", tc.value, line)
		}
	}
}
