package main

// docs/ads.md is checked against the code, so that the guide an ad-ops
// engineer works from cannot drift from the server: its example campaign
// file imports through the command, names every field of the model and
// decides as the guide walks it through; the names targeting compares,
// the parameters and headers the decide handler reads, the labels of event
// lines as the access log writes them, and the configuration keys of ads,
// geo and device all appear in it.

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/accesslog"
	"tsubame/internal/bulk"
	"tsubame/internal/config"
	"tsubame/internal/decision"
	"tsubame/internal/device"
	"tsubame/internal/render"
)

const adsDocPath = "../../docs/ads.md"

// decideParams are the query parameters of GET /api/decide (and of source:
// decide endpoints, whose id is the placement), as the guide writes them.
// TestAdsDocsDecideParameters also checks that the ads package reads no
// parameter this list leaves out.
var decideParams = []string{
	"placement", "uid", "site", "kv.KEY=VALUE", "count", "format", "w", "h", "vast",
	"gdpr", "gdpr_consent", "us_privacy", "gpp", "gpp_sid", "coppa",
	"page", "ref", "app", "schain", "test", "secure", // a sold placement's (sell.go)
}

// explainParams are the admin's explain's parameters beyond decideParams
// (internal/ads/explain.go), which the guide's explain section names.
var explainParams = []string{"ip", "country", "region", "time", "ua"}

// decideHeaders are the request headers the decide handler reads.
var decideHeaders = []string{"User-Agent", "Referer", "Cookie", "DNT", "Sec-GPC", "Accept-Language"}

// eventExtras are the fields the ads package adds after the fixed fields of
// an event line, and reasons the values of reason.
var (
	eventExtras  = []string{"advertiser", "site", "country", "device", "reason", "slots", "filled"}
	eventReasons = []string{"repeat", "crawler", "store_unavailable"}
	eventIDForms = []string{"r:<id>", "d:<decision>", "imp:<decision>", "click:<decision>"}
)

func readAdsDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(adsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docBlock returns the text of the fenced block that follows the marker
// <!-- example: name --> on the next line.
func docBlock(t *testing.T, doc, name string) string {
	t.Helper()
	marker := "<!-- example: " + name + " -->\n"
	_, rest, ok := strings.Cut(doc, marker)
	if !ok {
		t.Fatalf("%s has no %q", adsDocPath, strings.TrimSpace(marker))
	}
	fence, rest, ok := strings.Cut(rest, "\n")
	if !ok || !strings.HasPrefix(fence, "```") {
		t.Fatalf("%s: %q is not followed by a fenced block", adsDocPath, strings.TrimSpace(marker))
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("%s: the block after %q does not end", adsDocPath, strings.TrimSpace(marker))
	}
	return block + "\n"
}

// docSection returns the text of the section whose heading is title, up to
// the next heading of the same level or above outside fenced blocks.
func docSection(t *testing.T, doc, title string) string {
	t.Helper()
	level := len(title) - len(strings.TrimLeft(title, "#"))
	_, rest, ok := strings.Cut(doc, "\n"+title+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", adsDocPath, title)
	}
	var b strings.Builder
	fenced := false
	for _, line := range strings.SplitAfter(rest, "\n") {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			fenced = !fenced
		}
		if h := len(line) - len(strings.TrimLeft(line, "#")); !fenced && h > 0 && h <= level && strings.HasPrefix(line[h:], " ") {
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// mustName fails for each name that text does not show as `name`.
func mustName(t *testing.T, where, text string, names ...string) {
	t.Helper()
	for _, n := range names {
		if !strings.Contains(text, "`"+n+"`") {
			t.Errorf("%s does not name `%s`", where, n)
		}
	}
}

// TestAdsDocsExample imports the guide's example file as `tsubame campaigns
// import` does, checks that it uses every field of the model, and that it
// decides as the guide's walk-through says.
func TestAdsDocsExample(t *testing.T) {
	doc := readAdsDoc(t)
	text := docBlock(t, doc, "campaigns.yaml")

	file := filepath.Join(t.TempDir(), "campaigns.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t)
	code, _, stderr := runCmd(t, env, "", "campaigns", "import", file)
	if code != 0 {
		t.Fatalf("the example does not import: exit %d\n%s", code, stderr)
	}
	// The guide shows this command's output.
	if out := strings.ReplaceAll(stderr, file, "campaigns.yaml"); !strings.Contains(doc, out) {
		t.Errorf("the guide does not show the import's output:\n%s", out)
	}
	// And the problems of its file with mistakes, imported over it.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(docBlock(t, doc, "bad.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCmd(t, env, "", "campaigns", "import", bad)
	if out := strings.ReplaceAll(stderr, bad, "bad.yaml"); code != 2 || !strings.Contains(doc, out) {
		t.Errorf("the guide does not show what importing bad.yaml says (exit %d):\n%s", code, out)
	}

	f, err := bulk.ReadCampaigns(strings.NewReader(text), "campaigns.yaml", bulk.CampaignsYAML)
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Resolve(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Validate(); err != nil {
		t.Fatal(err)
	}

	// Every field of the model is in the example, somewhere.
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	collectKeys(tree, present)
	for _, name := range jsonFields(reflect.TypeFor[tsubame.CampaignSet](), nil) {
		if !present[name] {
			t.Errorf("the example file does not use the field %q", name)
		}
	}
	for _, p := range []string{tsubame.PacingASAP, tsubame.PacingEven} {
		if !strings.Contains(text, p) {
			t.Errorf("the example file does not use pacing %q", p)
		}
	}

	// The walk-through. At 09:00 UTC on 2 December 2026 it is Wednesday
	// 18:00 in Tokyo and Tuesday 23:00 in Honolulu.
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	ix, err := decision.Compile(set, decision.Options{Now: at})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Len() != 4 {
		t.Errorf("the index holds %d line items, want 4 (li-winter-mornings is paused)", ix.Len())
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	decide := func(req decision.Request) []string {
		req.Time = at
		var ids []string
		for _, d := range ix.Decide(&req, nil, rnd) {
			ids = append(ids, d.Line.ID)
		}
		return ids
	}
	chrome := decision.Request{Placement: "top", Device: "desktop", OS: "windows", Browser: "chrome", Count: 2}
	for _, tc := range []struct {
		name string
		req  decision.Request
		want []string
	}{
		{"news", with(chrome, func(r *decision.Request) { r.Site = "www.news.example" }), []string{"li-winter-news", "li-okinawa-run"}},
		{"sports", with(chrome, func(r *decision.Request) { r.Site = "sports.news.example" }), []string{"li-okinawa-run"}},
		{"obituaries", with(chrome, func(r *decision.Request) {
			r.Site, r.KeyValues = "www.news.example", []decision.KeyValue{{Key: "section", Value: "obituaries"}}
		}), []string{"li-okinawa-run"}},
		{"preroll", decision.Request{Placement: "preroll", Device: "mobile", OS: "ios", Browser: "safari", Format: "video"}, []string{"li-okinawa-preroll"}},
		{"preroll with the deal", decision.Request{Placement: "preroll", Device: "tv", Format: "video", Deals: []string{"deal-travel-q1"}}, []string{"li-okinawa-deal"}},
	} {
		for range 20 { // the draws are random; the priorities say who wins
			if got := decide(tc.req); !slices.Equal(got, tc.want) {
				t.Errorf("%s: decided %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

func with(r decision.Request, f func(*decision.Request)) decision.Request {
	f(&r)
	return r
}

// jsonFields returns the JSON names of t's fields and of the structs it
// holds, depth first.
func jsonFields(t reflect.Type, out []string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return out
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous {
			out = jsonFields(f.Type, out)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
		out = jsonFields(f.Type, out)
	}
	return out
}

func collectKeys(v any, keys map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			keys[k] = true
			collectKeys(x, keys)
		}
	case []any:
		for _, x := range v {
			collectKeys(x, keys)
		}
	}
}

// TestAdsDocsVocabulary checks that the guide lists every value targeting
// compares: devices, operating systems and browsers as the User-Agent
// parser names them, weekdays, VAST versions and privacy modes.
func TestAdsDocsVocabulary(t *testing.T) {
	doc := readAdsDoc(t)
	vocab := docSection(t, doc, "## Devices, operating systems, browsers and crawlers")
	mustName(t, "the devices section", vocab, tsubame.Devices...)
	mustName(t, "the devices section", vocab, device.OSes...)
	mustName(t, "the devices section", vocab, device.Browsers...)
	mustName(t, adsDocPath, doc, tsubame.Weekdays...)
	mustName(t, "the VAST section", docSection(t, doc, "### VAST versions"), render.VASTVersions[:]...)
	mustName(t, adsDocPath, doc, config.PrivacyModes...)
}

// TestAdsDocsDecideParameters checks that the guide documents every
// parameter and header in decideParams and decideHeaders, and that the ads
// package reads none they leave out.
func TestAdsDocsDecideParameters(t *testing.T) {
	doc := readAdsDoc(t)
	section := docSection(t, doc, "## Asking for ads: /api/decide")
	mustName(t, "the /api/decide section", section, decideParams...)
	mustName(t, "the /api/decide section", section, decideHeaders...)
	mustName(t, "the explain section", docSection(t, doc, "## Why not this ad? Explaining a decision"), explainParams...)

	files, err := filepath.Glob("../../internal/ads/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no ads sources: %v", err)
	}
	reads := []*regexp.Regexp{
		regexp.MustCompile(`\.Query\("([^"]+)"\)`),
		regexp.MustCompile(`\{"([a-z_]+)", &req\.\w+\}`), // parameters read in a loop (w, h)
		regexp.MustCompile(`CutPrefix\(k, \[\]byte\("([^"]+)"\)\)`),
		regexp.MustCompile(`case "([a-z_]+)":\n\t+sg\.`), // privacy parameters, read in one pass
	}
	header := regexp.MustCompile(`\.Header\("([^"]+)"\)`)
	params, headers := 0, 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") || filepath.Base(file) == "sync.go" {
			continue // sync.go serves the sell side's other routes (docs/ssp.md)
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range reads {
			for _, m := range re.FindAllSubmatch(src, -1) {
				params++
				name := string(m[1])
				if filepath.Base(file) == "explain.go" && slices.Contains(explainParams, name) {
					continue
				}
				if !slices.ContainsFunc(decideParams, func(p string) bool {
					return p == name || strings.HasSuffix(name, ".") && strings.HasPrefix(p, name)
				}) {
					t.Errorf("%s reads the parameter %q, which decideParams (and so the guide) leaves out", filepath.Base(file), name)
				}
			}
		}
		for _, m := range header.FindAllSubmatch(src, -1) {
			headers++
			if !slices.Contains(decideHeaders, string(m[1])) {
				t.Errorf("%s reads the header %q, which decideHeaders (and so the guide) leaves out", filepath.Base(file), m[1])
			}
		}
	}
	if params < len(decideParams)-1 || headers < 3 {
		// The patterns no longer find the reads: fix them rather than let
		// this check pass on nothing.
		t.Errorf("found %d parameter reads and %d header reads in the ads package: the patterns are stale", params, headers)
	}
}

// TestAdsDocsEventLines writes an event line through the access log and
// checks that the guide lists its fields, and that the guide's example lines
// have them in the order the log writes them.
func TestAdsDocsEventLines(t *testing.T) {
	doc := readAdsDoc(t)
	labels := eventLineLabels(t)
	section := docSection(t, doc, "## Event lines in the access log")
	mustName(t, "the event lines section", section, labels...)
	mustName(t, "the event lines section", section, eventExtras...)
	mustName(t, "the event lines section", section, eventReasons...)
	mustName(t, "the event lines section", section, eventIDForms...)
	mustName(t, "the event lines section", section, "remote")

	kinds := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(docBlock(t, doc, "event-lines"), "\n"), "\n") {
		fields := strings.Split(line, "\t")
		got := make([]string, len(fields))
		values := map[string]string{}
		for i, f := range fields {
			k, v, ok := strings.Cut(f, ":")
			if !ok {
				t.Fatalf("not an LTSV line: %q", line)
			}
			got[i], values[k] = k, v
		}
		if len(got) < 2 || got[1] != "event" {
			continue // the request's own line
		}
		kinds[values["event"]] = true
		if len(got) < len(labels) || !slices.Equal(got[:len(labels)], labels) {
			t.Errorf("an example event line has the fields %v, the log writes %v first", got, labels)
			continue
		}
		for _, extra := range got[len(labels):] {
			if !slices.Contains(eventExtras, extra) {
				t.Errorf("an example event line has the field %q, which the guide does not explain", extra)
			}
		}
		if r, ok := values["reason"]; ok && !slices.Contains(eventReasons, r) {
			t.Errorf("an example event line has reason %q", r)
		}
	}
	for _, k := range []string{"request", "decision", "imp", "click"} {
		if !kinds[k] {
			t.Errorf("the example lines have no %s line", k)
		}
	}
}

// eventLineLabels returns the labels of an LTSV event line as the access
// log writes it.
func eventLineLabels(t *testing.T) []string {
	t.Helper()
	sink := &memorySink{}
	log := accesslog.New(sink, accesslog.Options{Format: accesslog.LTSV, Sync: true})
	e := accesslog.Event{Kind: accesslog.EventImp, ID: accesslog.String("imp:d1"), Decision: accesslog.String("d1"),
		LineItem: accesslog.String("li"), Campaign: accesslog.String("c"), Creative: accesslog.String("cr"),
		Placement: accesslog.String("top"), UID: accesslog.String("u"), Price: 1, Currency: accesslog.String("USD"), Valid: true}
	rec := accesslog.Record{Time: time.Now(), Remote: netip.MustParseAddr("192.0.2.1"), RequestID: []byte("r1"), Event: &e}
	if err := log.Append(&rec, 0); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSuffix(sink.String(), "\n")
	if strings.Count(line, "\n") != 0 || line == "" {
		t.Fatalf("want one line, got %q", line)
	}
	var labels []string
	for _, f := range strings.Split(line, "\t") {
		k, _, _ := strings.Cut(f, ":")
		labels = append(labels, k)
	}
	return labels
}

// memorySink is an accesslog.Sink that keeps what is written.
type memorySink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *memorySink) Write(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	return nil
}

func (s *memorySink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func (*memorySink) Sync() error                 { return nil }
func (*memorySink) Boundary() time.Time         { return time.Time{} }
func (*memorySink) Tick(time.Time) error        { return nil }
func (*memorySink) Reopen() error               { return nil }
func (*memorySink) Recover() error              { return nil }
func (*memorySink) Close(context.Context) error { return nil }

// TestAdsDocsConfiguration checks that the guide names every key of the
// ads, geo and device sections.
func TestAdsDocsConfiguration(t *testing.T) {
	doc := readAdsDoc(t)
	section := docSection(t, doc, "## Configuration")
	var keys []string
	for _, s := range []struct {
		prefix string
		v      any
	}{{"ads", config.Ads{}}, {"geo", config.Geo{}}, {"device", config.Device{}}} {
		keys = koanfKeys(reflect.TypeOf(s.v), s.prefix, keys)
	}
	if len(keys) < 10 {
		t.Fatalf("found only %v", keys)
	}
	mustName(t, "the configuration section", section, keys...)
	mustName(t, "the configuration section", section, "vast.ad_system")

	// Its commands are checked with every doc's: TestDocsNameRealCommands.
}

func koanfKeys(t reflect.Type, prefix string, out []string) []string {
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("koanf")
		if name == "" {
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
			out = koanfKeys(f.Type, prefix+"."+name, out)
			continue
		}
		out = append(out, prefix+"."+name)
	}
	return out
}
