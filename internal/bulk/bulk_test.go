package bulk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/bulk"
	"tsubame/internal/store/memory"
)

func ids(ps []*tsubame.Placement) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

func TestReadFormats(t *testing.T) {
	cases := []struct {
		name, in string
		format   bulk.Format
	}{
		{"jsonl", "{\"id\":\"1\",\"urls\":[\"http://a.example.com/1.js\"]}\n\n{\"id\":\"2\",\"urls\":[\"http://a.example.com/2.js\",\"http://b.example.com/2.js\"],\"deps\":[\"campaign:1\"]}\n", bulk.Auto},
		{"array", "[\n {\"id\":\"1\",\"urls\":[\"http://a.example.com/1.js\"]},\n {\"id\":\"2\",\"urls\":[\"http://a.example.com/2.js\",\"http://b.example.com/2.js\"],\"deps\":[\"campaign:1\"]}\n]\n", bulk.Auto},
		{"csv-positional", "1,http://a.example.com/1.js\n2,http://a.example.com/2.js,http://b.example.com/2.js\n", bulk.Auto},
		{"csv-header", "id,urls,deps\n1,http://a.example.com/1.js,\n2,\"http://a.example.com/2.js http://b.example.com/2.js\",campaign:1\n", bulk.CSV},
		{"bom", "\ufeff{\"id\":\"1\",\"urls\":[\"http://a.example.com/1.js\"]}\n{\"id\":\"2\",\"urls\":[\"http://a.example.com/2.js\",\"http://b.example.com/2.js\"]}", bulk.Auto},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := bulk.Read(strings.NewReader(tc.in), tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(ps), []string{"1", "2"}) || len(ps[1].URLs) != 2 || ps[1].URLs[1] != "http://b.example.com/2.js" {
				t.Fatalf("read %+v", ps)
			}
		})
	}
}

func problems(t *testing.T, in string, format bulk.Format) []bulk.Problem {
	t.Helper()
	ps, err := bulk.Read(strings.NewReader(in), format)
	var be *bulk.Error
	if !errors.As(err, &be) {
		t.Fatalf("Read = %v, %v; want a *bulk.Error", ids(ps), err)
	}
	if ps != nil {
		t.Fatal("a bad input returned placements")
	}
	return be.Problems
}

func TestBadLinesReportedWithNumbers(t *testing.T) {
	in := `{"id":"1","urls":["http://a.example.com/1.js"]}
{"id":"2","urls":["javascript:alert(1)"]}
not json
{"id":"1","urls":["http://a.example.com/again.js"]}
{"id":"3","urls":["http://a.example.com/3.js"],"colour":"red"}
{"id":"has space","urls":["http://a.example.com/x.js"]}
`
	got := problems(t, in, bulk.Auto)
	var lines []int
	for _, p := range got {
		lines = append(lines, p.Line)
	}
	if !slices.Equal(lines, []int{2, 3, 4, 5, 6}) {
		t.Fatalf("bad lines = %v (%+v), want 2..6", lines, got)
	}
	if !strings.Contains(got[2].Msg, "line 1") {
		t.Fatalf("duplicate does not name the first line: %q", got[2].Msg)
	}
}

func TestArrayLineNumbers(t *testing.T) {
	in := "[\n{\"id\":\"1\",\"urls\":[\"http://a.example.com/1.js\"]},\n\n{\"id\":\"2\",\"urls\":[]}\n]"
	got := problems(t, in, bulk.Auto)
	if len(got) != 1 || got[0].Line != 4 {
		t.Fatalf("problems = %+v, want line 4", got)
	}
	for _, in := range []string{"[{\"id\":\"1\"", "[] []", "[1,"} {
		if _, err := bulk.Read(strings.NewReader(in), bulk.JSONArray); err == nil {
			t.Errorf("broken array %q accepted", in)
		}
	}
}

func TestCSVProblems(t *testing.T) {
	got := problems(t, "1,http://a.example.com/1.js\n2\n3,ftp://x.example.com/\n", bulk.CSV)
	if len(got) != 2 || got[0].Line != 2 || got[1].Line != 3 {
		t.Fatalf("problems = %+v", got)
	}
	if _, err := bulk.Read(strings.NewReader("id,urls,colour\n1,http://a.example.com/,red\n"), bulk.CSV); err == nil {
		t.Fatal("unknown CSV column accepted")
	}
}

func TestProblemListIsBounded(t *testing.T) {
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "{\"id\":\"%d\",\"urls\":[]}\n", i)
	}
	_, err := bulk.Read(strings.NewReader(b.String()), bulk.Auto)
	var be *bulk.Error
	if !errors.As(err, &be) || len(be.Problems) != 50 || be.More != 150 {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "200 bad line(s)") {
		t.Fatalf("summary: %v", err)
	}
}

func TestExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := memory.New()
	var in []*tsubame.Placement
	for i := range 2500 { // more than one List page
		p := &tsubame.Placement{ID: fmt.Sprintf("%05d", i), URLs: []string{fmt.Sprintf("http://ad.example.com/%d.js", i)}}
		if i%7 == 0 {
			p.Name, p.Deps = "n", []string{"campaign:7"}
		}
		in = append(in, p)
	}
	if err := src.PutMany(ctx, in); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := bulk.Write(ctx, &buf, src)
	if err != nil || n != 2500 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if lines := bytes.Count(buf.Bytes(), []byte("\n")); lines != 2500 {
		t.Fatalf("export has %d lines", lines)
	}
	back, err := bulk.Read(&buf, bulk.Auto)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2500 || back[7].Name != "n" || back[7].Deps[0] != "campaign:7" || back[2499].ID != "02499" {
		t.Fatalf("round trip lost data: %d placements, %+v", len(back), back[7])
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]bulk.Format{"": bulk.Auto, "auto": bulk.Auto, "jsonl": bulk.JSONLines, "ndjson": bulk.JSONLines, "json": bulk.JSONArray, "csv": bulk.CSV} {
		if got, err := bulk.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := bulk.ParseFormat("xml"); err == nil {
		t.Error("xml accepted")
	}
}
