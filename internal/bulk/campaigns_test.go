package bulk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/bulk"
)

// exampleYAML is a small but complete campaign file: every kind, amounts
// as strings and numbers, pacing both ways, targeting with an exclusion.
const exampleYAML = `currency: JPY
advertisers:
  - id: adv-b
    name: Kaze Travel
    domains: [kaze.example]
  - id: adv-a
    name: Sakura Coffee
campaigns:
  - id: camp-1
    advertiser: adv-a
    start: 2026-03-01T00:00:00+09:00
    end: 2026-06-01T00:00:00+09:00
    budget: {total: "1500000", daily: 50000.25}
    pacing: even
  - id: camp-2
    advertiser: adv-b
    pacing:
      mode: frontloaded
      hour_weights: [1, 1, 1, 1, 1, 1, 2, 4, 6, 6, 5, 5, 6, 5, 4, 4, 5, 6, 8, 9, 9, 7, 4, 2]
creatives:
  - id: cr-1
    advertiser: adv-a
    format: banner
    w: 300
    h: 250
    html: |
      <a href="https://a.example/"><img src="https://cdn.a.example/1.png"></a>
    click: https://a.example/
    status: approved
  - id: cr-2
    advertiser: adv-b
    format: video
    w: 1280
    h: 720
    duration: 15
    mimes: [video/mp4]
    media: https://cdn.kaze.example/15s.mp4
    click: https://kaze.example/
line_items:
  - id: li-2
    campaign: camp-2
    priority: 6
    weight: 1
    cpm: 1200
    creatives: [cr-2]
    frequency: [{impressions: 1, per: 1h}]
  - id: li-1
    campaign: camp-1
    priority: 4
    weight: 3
    cpm: "350.5"
    creatives: [cr-1]
    limits: {impressions: {total: 2000000, daily: 80000}}
    targeting:
      countries: [JP]
      hours: {from: 7, to: 23}
      keyvalues: {section: [news, business]}
      exclude: {sites: [competitor.example]}
`

func readSet(t *testing.T, in, name string, format bulk.CampaignFormat) *tsubame.CampaignSet {
	t.Helper()
	f, err := bulk.ReadCampaigns(strings.NewReader(in), name, format)
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Resolve(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func write(t *testing.T, set *tsubame.CampaignSet, format bulk.CampaignFormat) string {
	t.Helper()
	var b bytes.Buffer
	if err := bulk.WriteCampaigns(&b, set, format); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestCampaignFileRoundTrip(t *testing.T) {
	set := readSet(t, exampleYAML, "example.yaml", bulk.CampaignsYAML)
	if got := set.LineItems[1].CPM; got != 350_500_000 {
		t.Fatalf("cpm %q read as %d micros", "350.5", got)
	}
	if got := set.Campaigns[0].Budget.Daily; got != 50_000_250_000 {
		t.Fatalf("daily budget 50000.25 read as %d micros", got)
	}
	sorted := set.Clone()
	sorted.Sort()
	for _, format := range []bulk.CampaignFormat{bulk.CampaignsJSON, bulk.CampaignsYAML} {
		t.Run(string(format), func(t *testing.T) {
			out := write(t, set, format)
			back := readSet(t, out, "export", format)
			if !reflect.DeepEqual(back, sorted) {
				t.Fatalf("read back a different set:\n%s", out)
			}
			if again := write(t, back, format); again != out {
				t.Fatalf("the export of the read-back set differs:\n%s\n---\n%s", out, again)
			}
			// The order of the input does not show in the output.
			shuffled := set.Clone()
			slices.Reverse(shuffled.LineItems)
			slices.Reverse(shuffled.Advertisers)
			if write(t, shuffled, format) != out {
				t.Fatal("the export depends on the order of the set")
			}
			// Auto tells the formats apart.
			if auto := readSet(t, out, "-", bulk.CampaignsAuto); !reflect.DeepEqual(auto, sorted) {
				t.Fatal("auto read a different set")
			}
		})
	}
	if out := write(t, &tsubame.CampaignSet{}, bulk.CampaignsJSON); !strings.Contains(out, `"line_items": []`) {
		t.Fatalf("an empty set exports null lists:\n%s", out)
	}
	if out := write(t, set, bulk.CampaignsJSON); !strings.Contains(out, `<a href=`) {
		t.Fatalf("HTML escaped in the export:\n%s", out)
	}
}

// Amounts are read from their text in both formats, never through a float:
// 8999999999.999999 through a float64 is 8999999999999998 micro-units.
func TestCampaignFileAmountsExact(t *testing.T) {
	base := `{"advertisers":[{"id":"a","name":"A"}],"campaigns":[{"id":"c","advertiser":"a","budget":{"total":AMOUNT}}],"creatives":[],"line_items":[]}`
	for _, tc := range []struct {
		format bulk.CampaignFormat
		amount string
		want   tsubame.Money
	}{
		{bulk.CampaignsJSON, `8999999999.999999`, 8999999999_999999},
		{bulk.CampaignsJSON, `"8999999999.999999"`, 8999999999_999999},
		{bulk.CampaignsYAML, `8999999999.999999`, 8999999999_999999},
		{bulk.CampaignsYAML, `"0.000001"`, 1},
		{bulk.CampaignsYAML, `0.000001`, 1},
		{bulk.CampaignsYAML, `9_000`, 9000_000000},
	} {
		in := strings.Replace(base, "AMOUNT", tc.amount, 1)
		if tc.format == bulk.CampaignsYAML {
			in = "advertisers: [{id: a, name: A}]\ncampaigns: [{id: c, advertiser: a, budget: {total: " + tc.amount + "}}]\n"
		}
		set := readSet(t, in, "f", tc.format)
		if got := set.Campaigns[0].Budget.Total; got != tc.want {
			t.Errorf("%s %s: %d micros, want %d", tc.format, tc.amount, got, tc.want)
		}
	}
}

// problemLines reads in and returns the problems Resolve (or ReadCampaigns)
// reports, one string each.
func problemLines(t *testing.T, in, name string, format bulk.CampaignFormat, base *tsubame.CampaignSet, replace bool) []string {
	t.Helper()
	f, err := bulk.ReadCampaigns(strings.NewReader(in), name, format)
	var set *tsubame.CampaignSet
	if err == nil {
		set, err = f.Resolve(base, replace)
	}
	var fe *bulk.FileError
	if !errors.As(err, &fe) || set != nil {
		t.Fatalf("got %v, %v; want a *bulk.FileError", set, err)
	}
	if tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Errorf("error kind %q, want invalid", tsubame.ErrorCode(err))
	}
	lines := strings.Split(err.Error(), "\n")
	if want := len(fe.Problems); !strings.HasSuffix(lines[0], "nothing imported:") || len(lines) != want+1 {
		t.Fatalf("%d lines for %d problems: %s", len(lines), want, err)
	}
	return lines[1:]
}

func TestCampaignFileReportsEveryProblem(t *testing.T) {
	in := `currency: JPY
colour: red
advertisers:
  - id: adv-a
    name: Sakura Coffee
campaigns:
  - id: camp-1
    advertiser: adv-a
    pacing: {mode: even, hour_wieghts: [1]}
    budget: {total: "12.3456789"}
creatives:
  - id: cr-1
    advertiser: adv-a
    format: banner
    w: 300
    h: 250
    image: https://cdn.a.example/1.png
    click: https://a.example/
line_items:
  - id: li-1
    campaign: camp-1
    priority: high
    weight: 1
    cpm: 1
    creatives: [cr-1]
    targeting:
      countries: [JP, jp]
      postcode: ["100-0001"]
  - id: li-2
    campaign: camp-9
    priority: 1
    weight: 1
    cpm: 1
    creatives: [cr-1]
  - id: li-1
    campaign: camp-1
    priority: 1
    weight: 1
    cpm: 1
    creatives: [cr-1]
    start: tomorrow
`
	got := problemLines(t, in, "campaigns.yaml", bulk.CampaignsYAML, nil, true)
	want := []string{
		`campaigns.yaml:2: colour: unknown field`,
		`campaigns.yaml:9: campaigns[0] (id "camp-1").pacing.hour_wieghts: unknown field`,
		`campaigns.yaml:10: campaigns[0] (id "camp-1").budget.total: amount "12.3456789": more than 6 decimals (the smallest amount is 0.000001)`,
		`campaigns.yaml:22: line_items[0] (id "li-1").priority: must be a whole number, not a string`,
		`campaigns.yaml:27: line_items[0] (id "li-1").targeting.countries[1]: "jp": not an ISO 3166-1 alpha-2 code (two capital letters, such as JP)`,
		`campaigns.yaml:28: line_items[0] (id "li-1").targeting.postcode: unknown field`,
		`campaigns.yaml:30: line_items[1] (id "li-2").campaign: campaign "camp-9" does not exist`,
		`campaigns.yaml:35: line_items[2] (id "li-1").id: the same id as line_items[0]`,
		`campaigns.yaml:41: line_items[2] (id "li-1").start: must be a time as RFC 3339 writes it, such as "2026-04-01T00:00:00+09:00"`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The same file as JSON names the same paths on the JSON's lines.
	jsonIn := `{
  "advertisers": [{"id": "adv-a", "name": "A", "domain": "a.example"}],
  "campaigns": [{"id": "camp-1", "advertiser": "adv-a", "budget": {"daily": 1e3}}],
  "creatives": [],
  "line_items": [
    {"id": "li-1", "campaign": "camp-1", "priority": 1.5, "weight": 1, "cpm": 1, "creatives": ["cr-x"], "creatives": []}
  ]
}`
	got = problemLines(t, jsonIn, "c.json", bulk.CampaignsJSON, nil, true)
	want = []string{
		`c.json:2: advertisers[0] (id "adv-a").domain: unknown field`,
		`c.json:3: campaigns[0] (id "camp-1").budget.daily: amount "1e3": exponents are not allowed: write the amount as a plain decimal`,
		`c.json:6: line_items[0] (id "li-1").priority: must be a whole number, not the number 1.5`,
		`c.json:6: line_items[0] (id "li-1").creatives: given twice`, // and nothing about what the first gave
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCampaignFileSyntax(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		format   bulk.CampaignFormat
		want     string
	}{
		{"json", "{\n  \"advertisers\": [\n    {\"id\": \"a\",, }\n  ]\n}", bulk.CampaignsJSON, `f:3:16: invalid JSON: invalid character ',' looking for beginning of object key string`},
		{"json truncated", "{\n\"advertisers\": [", bulk.CampaignsJSON, `f:2:17: invalid JSON: the input ends inside a value`},
		{"json trailing", "{}\n{}", bulk.CampaignsJSON, `f:2:1: data after the JSON value`},
		{"json not an object", "[]", bulk.CampaignsJSON, `f:1: must be an object, not a list`},
		{"json empty", " \n", bulk.CampaignsJSON, `f: empty: no JSON value`},
		{"yaml", "advertisers:\n  - id: a\n    name: \"x\n", bulk.CampaignsYAML, `f:3: advertisers[0]: invalid YAML: found unexpected end of stream`},
		{"yaml empty", "# nothing\n", bulk.CampaignsYAML, `f: empty: no YAML document`},
		{"yaml two documents", "currency: JPY\n---\ncurrency: USD\n", bulk.CampaignsYAML, `f:2: a second YAML document: a campaign file is one document`},
		{"yaml infinity", "advertisers: []\ncampaigns:\n  - budget: {total: .inf}\n", bulk.CampaignsYAML, `f:3: ".inf" is not a finite number`},
		{"yaml tag", "currency: !!binary SlBZ\n", bulk.CampaignsYAML, `f:1: the tag !!binary is not supported: write a plain value`},
		{"yaml key", "? [a, b]\n: 1\n", bulk.CampaignsYAML, `f:1: a key must be a plain name, not a list or mapping`},
		{"yaml alias bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
			bulk.CampaignsYAML, `f:1: aliases expand the file beyond ...`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := problemLines(t, tc.in, "f", tc.format, nil, true)
			prefix, cut := strings.CutSuffix(tc.want, "...")
			if len(got) != 1 || got[0] != tc.want && !(cut && strings.HasPrefix(got[0], prefix)) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// YAML's anchors, aliases and merge keys work; numbers in other notations
// are read as YAML reads them.
func TestCampaignFileYAMLFeatures(t *testing.T) {
	in := `advertisers: [{id: a, name: A}]
campaigns: [{id: c, advertiser: a}]
creatives:
  - {id: cr, advertiser: a, format: banner, w: 0x12c, h: 250, image: "https://a.example/i.png", click: "https://a.example/"}
line_items:
  - &base
    id: li-1
    campaign: c
    priority: 010
    weight: 1
    cpm: +2.5
    creatives: [cr]
  - <<: *base
    id: li-2
    weight: 2
`
	set := readSet(t, in, "f.yaml", bulk.CampaignsYAML)
	if len(set.LineItems) != 2 || set.LineItems[1].ID != "li-2" || set.LineItems[1].Weight != 2 || set.LineItems[1].CPM != 2_500_000 ||
		set.LineItems[1].Campaign != "c" || set.LineItems[0].Priority != 10 || set.Creatives[0].W != 300 {
		t.Fatalf("read %+v %+v %+v", set.LineItems[0], set.LineItems[1], set.Creatives[0])
	}
}

func storedSet(t *testing.T) *tsubame.CampaignSet {
	t.Helper()
	return readSet(t, exampleYAML, "stored", bulk.CampaignsYAML)
}

func TestCampaignFileMerge(t *testing.T) {
	base := storedSet(t)
	in := `currency: JPY
line_items:
  - {id: li-1, campaign: camp-1, priority: 1, weight: 9, cpm: 1, creatives: [cr-1]}
  - {id: li-3, campaign: camp-2, priority: 1, weight: 1, cpm: 1, creatives: [cr-2]}
`
	f, err := bulk.ReadCampaigns(strings.NewReader(in), "f.yaml", bulk.CampaignsYAML)
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Resolve(base, false)
	if err != nil {
		t.Fatal(err)
	}
	if n := bulk.CampaignCounts(set); n["line_items"] != 3 || n["advertisers"] != 2 || n["creatives"] != 2 {
		t.Fatalf("merged counts %v", n)
	}
	if li := set.Object(tsubame.KindLineItem, "li-1").(*tsubame.LineItem); li.Weight != 9 || li.Targeting.Countries != nil {
		t.Fatalf("li-1 not replaced by the file's: %+v", li)
	}
	if base.Object(tsubame.KindLineItem, "li-3") != nil || base.Object(tsubame.KindLineItem, "li-1").(*tsubame.LineItem).Weight != 3 {
		t.Fatal("the merge changed the stored set")
	}
	if got := bulk.DescribeCounts(bulk.CampaignCounts(set)); got != "2 advertisers, 2 campaigns, 2 creatives, 3 line_items" {
		t.Fatalf("DescribeCounts: %q", got)
	}
	// Replace: the file alone, so its references must all be in it.
	got := problemLines(t, in, "f.yaml", bulk.CampaignsYAML, base, true)
	if len(got) != 4 || got[0] != `f.yaml:3: line_items[0] (id "li-1").campaign: campaign "camp-1" does not exist` {
		t.Fatalf("replace: %q", got)
	}

	// A file moving a creative to another advertiser breaks a stored line
	// item: the problem names it as stored. Another currency is refused.
	in = `currency: USD
creatives:
  - {id: cr-2, advertiser: adv-a, format: banner, w: 1, h: 1, image: "https://a.example/i.png", click: "https://a.example/"}
`
	got = problemLines(t, in, "f.yaml", bulk.CampaignsYAML, base, false)
	want := []string{
		`f.yaml:1: currency: "USD" differs from the stored set's "JPY": the stored amounts would change meaning (import with replace to change the currency)`,
		`f.yaml: stored line_items (id "li-2").creatives[0]: creative "cr-2" belongs to advertiser "adv-a", not to the campaign's advertiser "adv-b"`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCampaignFormats(t *testing.T) {
	for in, want := range map[string]bulk.CampaignFormat{"": bulk.CampaignsAuto, "auto": bulk.CampaignsAuto, "json": bulk.CampaignsJSON,
		"YAML": bulk.CampaignsYAML, "yml": bulk.CampaignsYAML, "CSV": bulk.CampaignsCSV} {
		if got, err := bulk.ParseCampaignFormat(in); err != nil || got != want {
			t.Errorf("ParseCampaignFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := bulk.ParseCampaignFormat("toml"); err == nil {
		t.Error("toml accepted")
	}
	for name, want := range map[string]bulk.CampaignFormat{"a.json": bulk.CampaignsJSON, "dir.x/a.YAML": bulk.CampaignsYAML,
		"a.yml": bulk.CampaignsYAML, "sheet.csv": bulk.CampaignsCSV, "a.txt": bulk.CampaignsAuto, "-": bulk.CampaignsAuto} {
		if got := bulk.CampaignFormatOf(name); got != want {
			t.Errorf("CampaignFormatOf(%q) = %q", name, got)
		}
	}
}

func TestDecodeStrict(t *testing.T) {
	var li tsubame.LineItem
	err := bulk.DecodeStrict([]byte(`{"id": "li-1", "priority": "1", "weight": 1,
  "cpm": "x", "targeting": {"countries": "JP", "hours": {"from": 1, "until": 2}}}`), "body", &li)
	var fe *bulk.FileError
	if !errors.As(err, &fe) || tsubame.ErrorCode(err) != tsubame.EINVALID {
		t.Fatalf("DecodeStrict: %v", err)
	}
	want := `4 problems, nothing imported:
body:1: priority: must be a whole number, not a string
body:2: cpm: amount "x": not a decimal number (digits, optionally a point and up to 6 decimals)
body:2: targeting.countries: must be a list, not a string
body:2: targeting.hours.until: unknown field`
	if err.Error() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", err, want)
	}
	li = tsubame.LineItem{}
	if err := bulk.DecodeStrict([]byte(`{"id":"li-1","cpm":"2.5","creatives":["a"],"targeting":{"hours":{"from":1,"to":2}}}`), "body", &li); err != nil ||
		li.CPM != 2_500_000 || li.Targeting.Hours.To != 2 || li.Creatives[0] != "a" {
		t.Fatalf("DecodeStrict: %+v, %v", li, err)
	}
}

// Every shape of URL that signing refuses (internal/track checks a click
// destination at every Sign) is refused at import, naming the creative and
// its field: stored, it would make /api/decide answer 500 for the
// placement and the bidder pass (issue 48). One rule, tsubame.CheckWebURL,
// applies to the image and the media too.
func TestCampaignFileRefusesURLsSigningRefuses(t *testing.T) {
	for _, tc := range []struct{ name, url, want string }{
		{"user info", "https://advertiser.example@evil.example/", "must not carry user info"},
		{"user and password", "https://u:p@advertiser.example/", "must not carry user info"},
		{"user info in an IPv6 host", "https://x@[2001:db8::1]/", "must not carry user info"},
		{"IDN", "https://bücher.example/", "printable ASCII"},
		{"IDN full-width dot", "https://example。com/", "printable ASCII"},
		{"non-ASCII path", "https://shop.example/商品/1", "percent-encode"},
		{"non-ASCII query", "https://shop.example/?q=café", "printable ASCII"},
		{"underscore host", "https://my_shop.example/", "no '_'"},
		{"backslash", "https://evil.example\\@advertiser.example/", "without spaces or backslashes"},
		{"backslash path", "https://advertiser.example\\landing", "backslashes"},
		{"space", "https://advertiser.example/a b", "without spaces"},
		{"tab", "https://advertiser.example/a\tb", "without spaces"},
		{"percent host", "https://evil%2eexample/", "host must be"},
		{"bad escape", "https://advertiser.example/100%", "'%25'"},
		{"bad escape in query", "https://advertiser.example/?a=%zz", "two hex digits"},
		{"empty port", "https://advertiser.example:/", "port must be"},
		{"port zero", "https://advertiser.example:0/", "port must be"},
		{"port too big", "https://advertiser.example:65536/", "port must be"},
		{"port letters", "https://advertiser.example:http/", "port must be"},
		{"two colons", "https://advertiser.example:80:80/", "port must be"},
		{"bracket unclosed", "https://[2001:db8::1/", "host must be"},
		{"bracket not IPv6", "https://[advertiser.example]/", "host must be"},
		{"IPv6 zone", "https://[fe80::1%25eth0]/", "host must be"},
		{"dots only", "https://../", "host must be"},
		{"no host", "https:///landing", "absolute http or https"},
		{"port only", "https://:443/", "absolute http or https"},
		{"opaque", "https:evil.example", "absolute http or https"},
		{"scheme-relative", "//evil.example/", "absolute http or https"},
		{"javascript", "javascript:alert(1)", "absolute http or https"},
		{"ftp", "ftp://files.example/", "absolute http or https"},
		{"too long", "https://a.example/" + strings.Repeat("p", tsubame.MaxClickLength), "longer than"},
	} {
		for _, field := range []string{"click", "image"} {
			if field == "image" && tc.name == "too long" {
				continue // an image may be longer (tsubame.MaxURLLength)
			}
			cr := map[string]any{"id": "cr-x", "advertiser": "adv-a", "format": "banner", "w": 300, "h": 250,
				"image": "https://cdn.a.example/1.png", "click": "https://a.example/"}
			cr[field] = tc.url
			b, err := json.Marshal(map[string]any{"advertisers": []any{map[string]any{"id": "adv-a", "name": "A"}}, "creatives": []any{cr}})
			if err != nil {
				t.Fatal(err)
			}
			lines := problemLines(t, string(b), "f.json", bulk.CampaignsJSON, nil, false)
			prefix := `f.json:1: creatives[0] (id "cr-x").` + field + ": "
			if len(lines) != 1 || !strings.HasPrefix(lines[0], prefix) || !strings.Contains(lines[0], tc.want) {
				t.Errorf("%s %s %q: %q, want one problem %q...%q", tc.name, field, tc.url, lines, prefix, tc.want)
			}
		}
	}
}

// countingContext counts the calls of Err, the conversion's look at its
// context every yamlCheckEvery (1024) visits: a measure of the work done
// that no load on the machine changes. From call cancelAt on (when set),
// Err says the request is gone.
type countingContext struct {
	context.Context
	calls, cancelAt int
}

func (c *countingContext) Err() error {
	c.calls++
	if c.cancelAt > 0 && c.calls >= c.cancelAt {
		return context.Canceled
	}
	return nil
}

// mergeBomb is a YAML file whose merge keys ask for width^levels visits
// from the mapping at level 0 (levels+1 lines).
func mergeBomb(levels, width int, level0 string) string {
	var b strings.Builder
	b.WriteString("a0: &a0 " + level0 + "\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "a%d: &a%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), width), ", "))
	}
	return b.String()
}

// A YAML file whose merge keys (<<: [*a, *a, ...]) expand exponentially is
// refused after a bounded number of steps, naming the bound: 512 bytes of
// them cost 8 s of CPU (issue 48), and a few more bytes, years. The work is
// measured in steps (the context's Err is called every 1,024), never in
// time.
func TestCampaignFileYAMLExpansionBounded(t *testing.T) {
	list := "l: &l [" + strings.TrimSuffix(strings.Repeat("*a0, ", 100), ", ") + "]\n"
	for _, tc := range []struct{ name, in string }{
		{"merge lists", mergeBomb(12, 10, "{k: v}")},                 // 10^12 visits asked
		{"merge lists, 512 bytes", mergeBomb(8, 12, "{k: v, l: w}")}, // the size
		{"empty mappings merged", mergeBomb(12, 10, "{}")},           // no key is ever written
		{"a merge of an aliased list", "a0: &a0 {k: v}\n" + list + "a1: &a1 {<<: *l}\na2: &a2 {<<: [*a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1]}\n" +
			"a3: &a3 {<<: [*a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2]}\na4: {<<: [*a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3]}\n"},
		{"a merge of scalars", "s: &s [" + strings.TrimSuffix(strings.Repeat("1, ", 100), ", ") + "]\na1: &a1 {<<: *s}\n" +
			"a2: &a2 {x: [*a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1]}\na3: [*a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2]\n"},
		{"merged values with aliases", "v: &v [x, x, x, x, x, x, x, x, x, x]\n" + mergeBomb(6, 10, "{k: [*v, *v, *v, *v, *v, *v, *v, *v, *v, *v]}")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := &countingContext{Context: context.Background()}
			_, err := bulk.ReadCampaignsContext(ctx, strings.NewReader(tc.in), "bomb.yaml", bulk.CampaignsYAML)
			var fe *bulk.FileError
			if !errors.As(err, &fe) || tsubame.ErrorCode(err) != tsubame.EINVALID {
				t.Fatalf("a %d-byte bomb: %v, want a *bulk.FileError", len(tc.in), err)
			}
			want := fmt.Sprintf("merge keys (<<) expand the file beyond %d merged mappings and keys: they may merge %d", bulk.MaxYAMLExpansion, bulk.MaxYAMLExpansion)
			if len(fe.Problems) > 3 || !strings.Contains(err.Error(), want) {
				t.Errorf("the problems do not name the bound (%q): %s", want, err)
			}
			// The file holds a few hundred nodes: the conversion takes
			// MaxYAMLExpansion merge steps and writes little, and looks at
			// its context every 1,024 steps and between its stages.
			if maxCalls := 2*bulk.MaxYAMLExpansion/1024 + 3; ctx.calls > maxCalls {
				t.Errorf("%d looks at the context: %d steps or more, want at most %d", ctx.calls, (ctx.calls-3)*1024, 2*bulk.MaxYAMLExpansion)
			}
		})
	}
}

// Anchors and merge keys used as files use them are read: here 300 line
// items merge defaults whose targeting lists 60 countries, 21,000 nodes
// written beyond the file's own 2,200, from 1,800 merge steps.
func TestCampaignFileYAMLExpansionScalesWithTheFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("advertisers: [{id: a, name: A}]\ncampaigns: [{id: c, advertiser: a}]\n")
	b.WriteString("creatives: [{id: cr, advertiser: a, format: banner, w: 1, h: 1, image: \"https://a.example/i.png\", click: \"https://a.example/\"}]\n")
	b.WriteString("defaults: &d\n  campaign: c\n  priority: 1\n  cpm: 1\n  creatives: [cr]\n  targeting:\n    countries: [")
	for i := range 60 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%c%c", 'A'+i/26, 'A'+i%26)
	}
	b.WriteString("]\nline_items:\n")
	for i := range 300 {
		fmt.Fprintf(&b, "  - {<<: *d, id: li-%d, weight: %d}\n", i, 1+i)
	}
	f, err := bulk.ReadCampaigns(strings.NewReader(b.String()), "f.yaml", bulk.CampaignsYAML)
	if err != nil {
		t.Fatal(err)
	}
	set := f.Set
	if len(set.LineItems) != 300 || set.LineItems[299].Weight != 300 || len(set.LineItems[299].Targeting.Countries) != 60 {
		t.Fatalf("read %d line items: %+v", len(set.LineItems), set.LineItems[len(set.LineItems)-1])
	}
}

// The conversion stops as soon as the request is gone: it looks at the
// context every 1,024 steps and does no more once it is done, and the
// import ends with the context's error, not a problem of the file.
func TestCampaignFileStopsWhenTheRequestIsGone(t *testing.T) {
	var b strings.Builder
	b.WriteString("advertisers:\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "  - {id: adv-%d, name: A, domains: [a.example, b.example]}\n", i)
	}
	ctx := &countingContext{Context: context.Background()}
	if _, err := bulk.ReadCampaignsContext(ctx, strings.NewReader(b.String()), "f.yaml", bulk.CampaignsYAML); err != nil {
		t.Fatal(err)
	}
	if ctx.calls < 10 {
		t.Fatalf("the context was looked at %d times in %d advertisers", ctx.calls, 5000)
	}
	for _, at := range []int{1, 2, 3, 5} {
		gone := &countingContext{Context: context.Background(), cancelAt: at}
		_, err := bulk.ReadCampaignsContext(gone, strings.NewReader(b.String()), "f.yaml", bulk.CampaignsYAML)
		if !errors.Is(err, context.Canceled) || tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE {
			t.Errorf("gone at look %d: %v, want the context's error", at, err)
		}
		if gone.calls != at {
			t.Errorf("gone at look %d: looked %d times, so went on working", at, gone.calls)
		}
	}
}

// A budget written as 0 in a campaign file is refused on its line, saying
// how to write no cap, and a misspelt budget field named by its path, both
// at once.
func TestCampaignFileBudgetOfZero(t *testing.T) {
	in := `advertisers:
  - {id: adv-a, name: A}
campaigns:
  - id: camp-1
    advertiser: adv-a
    budget:
      total: 0
  - id: camp-2
    advertiser: adv-a
    budget: {dialy: "5"}
`
	got := problemLines(t, in, "campaigns.yaml", bulk.CampaignsYAML, nil, true)
	want := []string{
		`campaigns.yaml:7: campaigns[0] (id "camp-1").budget.total: 0 is no budget: for no cap, leave total out; to stop spending, pause the campaign`,
		`campaigns.yaml:10: campaigns[1] (id "camp-2").budget.dialy: unknown field`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = problemLines(t, strings.Replace(in, `{dialy: "5"}`, `{daily: "5"}`, 1), "campaigns.yaml", bulk.CampaignsYAML, nil, true)
	want = []string{
		`campaigns.yaml:7: campaigns[0] (id "camp-1").budget.total: 0 is no budget: for no cap, leave total out; to stop spending, pause the campaign`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// An indentation mistake names its line and the keys it is read under.
func TestCampaignFileIndentationMistake(t *testing.T) {
	in := "advertisers:\n  - id: a\n    name: A\ncampaigns:\n  - id: c0\n    advertiser: a\n  - id: c1\n    advertiser: a\n     budget: {total: \"5\"}\n"
	got := problemLines(t, in, "campaigns.yaml", bulk.CampaignsYAML, nil, true)
	want := []string{`campaigns.yaml:9: campaigns[1].advertiser: invalid YAML: mapping values are not allowed in this context`}
	if !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
