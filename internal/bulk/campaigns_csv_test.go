package bulk_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/bulk"
)

// A set's line items written as CSV read back, merged into the set, to the
// same line items, every field included; the export is a function of the
// set; a spreadsheet's shapes read the same (columns in another order or
// left out, spaces, CRLF, a byte order mark).
func TestCampaignFileCSVRoundTrip(t *testing.T) {
	base := storedSet(t)
	li := base.Object(tsubame.KindLineItem, "li-1").(*tsubame.LineItem)
	li.Name = `Top, "news" — 冬`
	li.Status = tsubame.StatusPaused
	li.Start = time.Date(2026, 3, 2, 9, 30, 0, 0, time.FixedZone("", 9*3600))
	li.End = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	li.Deals = []string{"d-1", "d-2"}
	li.Frequency = []tsubame.FrequencyCap{{Impressions: 3, Per: tsubame.Duration(time.Hour)}, {Impressions: 10, Per: tsubame.Duration(24 * time.Hour)}}
	li.Targeting.Placements, li.Targeting.Devices, li.Targeting.Weekdays = []string{"top", "side"}, []string{"mobile"}, []string{"mon", "fri"}
	li.Targeting.Exclude.Hours = &tsubame.HourRange{From: 22, To: 6}
	li.Targeting.Exclude.KeyValues = map[string][]string{"kids": {"1"}, "age": {"0-12", "13-17"}}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	out := write(t, base, bulk.CampaignsCSV)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "id,name,campaign,status,") {
		t.Fatalf("the CSV:\n%s", out)
	}
	f, err := bulk.ReadCampaigns(strings.NewReader(out), "li.csv", bulk.CampaignFormatOf("li.csv"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Resolve(base, false)
	if err != nil {
		t.Fatal(err)
	}
	want := base.Clone()
	want.Sort()
	set.Sort()
	if !reflect.DeepEqual(set.LineItems, want.LineItems) {
		t.Fatalf("read back other line items:\n%s", out)
	}
	shuffled := base.Clone()
	slices.Reverse(shuffled.LineItems)
	if write(t, shuffled, bulk.CampaignsCSV) != out {
		t.Fatal("the export depends on the order of the set")
	}

	// A spreadsheet's file: a BOM, CRLF, columns reordered, some left out
	// (a row is a whole line item: li-2 loses its frequency cap).
	sheet := "\ufeffcpm , ID,campaign,priority,weight,creatives\r\n 99.5 ,li-2,camp-2,6,1,cr-2\r\n"
	f, err = bulk.ReadCampaigns(strings.NewReader(sheet), "sheet.csv", bulk.CampaignsCSV)
	if err != nil {
		t.Fatal(err)
	}
	set, err = f.Resolve(base, false)
	if err != nil {
		t.Fatal(err)
	}
	got := set.Object(tsubame.KindLineItem, "li-2").(*tsubame.LineItem)
	if got.CPM != 99_500_000 || got.Frequency != nil || set.Object(tsubame.KindLineItem, "li-1") == nil {
		t.Fatalf("li-2 read as %+v", got)
	}
}

// Every problem of a CSV file is reported at once, by its row's line: the
// forms of cells, values of the wrong type, the model's rules; a header
// naming an unknown or repeated column, or no id, is refused alone; a CSV
// never replaces a set; a value holding a separator is not exported.
func TestCampaignFileCSVProblems(t *testing.T) {
	base := storedSet(t)
	in := "id,campaign,priority,weight,cpm,creatives,frequency,hours\n" +
		"li-5,camp-1,4,1,1.5,cr-1,3/1h,9-18\n" +
		"li-6,camp-1,4,1,1.5,cr-1,three a day,\n" +
		"li-7,camp-1,first,1,1.5,cr-1,,\n" +
		"li-8,camp-9,4,1,-2,cr-1,,25-26\n"
	got := problemLines(t, in, "li.csv", bulk.CampaignsCSV, base, false)
	want := []string{
		`li.csv:3: line_items[1] (id "li-6").frequency: "three a day" is not IMPRESSIONS/PER (3/1h)`,
		`li.csv:4: line_items[2] (id "li-7").priority: must be a whole number, not a string`,
		`li.csv:5: line_items[3] (id "li-8").cpm: must not be negative`,
		`li.csv:5: line_items[3] (id "li-8").targeting.hours.from: must be 0 to 23`,
		`li.csv:5: line_items[3] (id "li-8").targeting.hours.to: must be 1 to 24`,
		`li.csv:5: line_items[3] (id "li-8").campaign: campaign "camp-9" does not exist`,
	}
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d: %q, want it to start %q", i, got[i], want[i])
		}
	}

	for in, msg := range map[string]string{
		"id,colour\nli-1,red\n":  `li.csv:1: header: column 2, "colour", is not a line item column`,
		"id,cpm,CPM\nli-1,1,2\n": `li.csv:1: header: column "cpm" is given twice`,
		"campaign\ncamp-1\n":     `li.csv:1: header: no id column`,
		"id,cpm\nli-1,\"1\n":     `li.csv:2:`,
		"":                       `li.csv:1: an empty file`,
		"id,cpm\nli-1,1,extra\n": `li.csv:2:`,
	} {
		_, err := bulk.ReadCampaigns(strings.NewReader(in), "li.csv", bulk.CampaignsCSV)
		if fe := (*bulk.FileError)(nil); !errors.As(err, &fe) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want %q", in, err, msg)
		}
	}

	f, err := bulk.ReadCampaigns(strings.NewReader("id,campaign,priority,weight,cpm,creatives\nli-1,camp-1,4,1,1,cr-1\n"), "li.csv", bulk.CampaignsCSV)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Resolve(base, true); err == nil || !strings.Contains(err.Error(), "can only be merged") {
		t.Fatalf("a CSV replacing the set: %v", err)
	}

	li := base.Object(tsubame.KindLineItem, "li-1").(*tsubame.LineItem)
	li.Targeting.KeyValues = map[string][]string{"section": {"a;b"}}
	if err := bulk.WriteCampaigns(&strings.Builder{}, base, bulk.CampaignsCSV); err == nil || !strings.Contains(err.Error(), `"a;b"`) {
		t.Fatalf("a value with a separator exported: %v", err)
	}
}
