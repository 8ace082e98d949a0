package render

import (
	"bytes"
	"encoding/xml"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden documents in testdata")

// The IAB's schemas for the versions before 4 (from the IAB Tech Lab's VAST
// repository, as published there): 2.0.1, and the 3.0 schema it names a
// draft. 4.2 is checked by xmllint in vast_test.go.
var vastInlineSchemas = map[string]string{
	VASTInline2: "testdata/vast_2.0.1.xsd",
	VASTInline3: "testdata/vast3_draft.xsd",
	VASTInline4: "testdata/vast_4.2.xsd",
}

// lintVersion validates doc against the schema of version.
func lintVersion(t *testing.T, version string, doc []byte) error {
	t.Helper()
	if version == VASTInline4 {
		return xmllint(t, doc)
	}
	return xmllintSchema(t, vastInlineSchemas[version], doc)
}

// xmllintSchema is xmllint against another schema.
func xmllintSchema(t *testing.T, schema string, doc []byte) error {
	t.Helper()
	bin, err := exec.LookPath("xmllint")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("xmllint is not installed (make test-tools installs Debian's libxml2-utils): the VAST schema checks need it")
		}
		t.Fatal("xmllint is not installed (make test-tools installs Debian's libxml2-utils)")
	}
	path := filepath.Join(t.TempDir(), "vast.xml")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "--noout", "--schema", schema, path).CombinedOutput(); err != nil {
		return &lintError{string(out)}
	}
	return nil
}

// inlineDoc reads back what AppendVASTInline writes, in any version (a
// tag without a namespace matches any).
type inlineDoc struct {
	XMLName xml.Name   `xml:"VAST"`
	Version string     `xml:"version,attr"`
	Ads     []inlineAd `xml:"Ad"`
}

type inlineAd struct {
	ID          string `xml:"id,attr"`
	Sequence    string `xml:"sequence,attr"`
	AdSystem    string `xml:"InLine>AdSystem"`
	Impression  string `xml:"InLine>Impression"`
	AdServingID string `xml:"InLine>AdServingId"`
	Title       string `xml:"InLine>AdTitle"`
	Advertiser  string `xml:"InLine>Advertiser"`
	Categories  []struct {
		Authority string `xml:"authority,attr"`
		Value     string `xml:",chardata"`
	} `xml:"InLine>Category"`
	Creatives []inlineCreative `xml:"InLine>Creatives>Creative"`
}

type inlineCreative struct {
	ID       string `xml:"id,attr"`
	AdID4    string `xml:"adId,attr"`
	AdID2    string `xml:"AdID,attr"`
	Duration string `xml:"Linear>Duration"`
	Media    []struct {
		Delivery string `xml:"delivery,attr"`
		Type     string `xml:"type,attr"`
		W        string `xml:"width,attr"`
		H        string `xml:"height,attr"`
		URL      string `xml:",chardata"`
	} `xml:"Linear>MediaFiles>MediaFile"`
	ClickThrough string `xml:"Linear>VideoClicks>ClickThrough"`
	UniversalAd  []struct {
		Registry string `xml:"idRegistry,attr"`
		Value    string `xml:",chardata"`
	} `xml:"UniversalAdId"`
}

func readInline(t *testing.T, doc []byte) inlineDoc {
	t.Helper()
	var d inlineDoc
	if err := xml.Unmarshal(doc, &d); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, doc)
	}
	return d
}

// checkAd compares what was read back of one ad with what ad says for
// version, sequence seq ("" for none).
func checkAd(t *testing.T, version, seq string, got inlineAd, ad VASTAd) {
	t.Helper()
	v4, v3 := version == VASTInline4, version == VASTInline3
	impression := ad.Impression
	if impression == "" {
		impression = "about:blank"
	}
	if got.ID != ad.ID || got.Sequence != seq || got.AdSystem != ad.AdSystem || got.Title != ad.Title || got.Impression != impression {
		t.Errorf("%s: ad %+v, want %+v sequence %q", version, got, ad, seq)
	}
	if want := when(v4, ad.ID); got.AdServingID != want {
		t.Errorf("%s: AdServingId %q, want %q", version, got.AdServingID, want)
	}
	if want := when(v4 || v3, ad.Advertiser); got.Advertiser != want {
		t.Errorf("%s: Advertiser %q, want %q", version, got.Advertiser, want)
	}
	var cats []string
	for _, c := range got.Categories {
		if c.Authority != VASTCategoryAuthority {
			t.Errorf("%s: category authority %q", version, c.Authority)
		}
		cats = append(cats, c.Value)
	}
	var wantCats []string
	for _, c := range ad.Categories {
		if v4 && c != "" {
			wantCats = append(wantCats, c)
		}
	}
	if strings.Join(cats, "|") != strings.Join(wantCats, "|") {
		t.Errorf("%s: categories %q, want %q", version, cats, wantCats)
	}
	if len(got.Creatives) != 1 || len(got.Creatives[0].Media) != 1 {
		t.Fatalf("%s: creatives %+v", version, got.Creatives)
	}
	c, m := got.Creatives[0], got.Creatives[0].Media[0]
	adID4, adID2 := ad.CreativeID, ""
	if !v4 {
		adID4, adID2 = "", ad.CreativeID
	}
	if c.ID != ad.CreativeID || c.AdID4 != adID4 || c.AdID2 != adID2 || c.ClickThrough != ad.ClickThrough {
		t.Errorf("%s: creative %+v, want %+v", version, c, ad)
	}
	if m.Delivery != "progressive" || m.Type != ad.MIME || m.URL != ad.Media {
		t.Errorf("%s: media file %+v, want %+v", version, m, ad)
	}
	switch {
	case v4 && (len(c.UniversalAd) != 1 || c.UniversalAd[0].Registry != "unknown" || c.UniversalAd[0].Value != ad.CreativeID):
		t.Errorf("%s: UniversalAdId %+v, want %q", version, c.UniversalAd, ad.CreativeID)
	case !v4 && len(c.UniversalAd) != 0:
		t.Errorf("%s: UniversalAdId in a version without it", version)
	}
}

// when is s if the version has the element, else "" (absent).
func when(has bool, s string) string {
	if has {
		return s
	}
	return ""
}

var (
	inlineAd1 = VASTAd{
		ID: "d-1f2e", AdSystem: "Tsubame", Title: "cr-42", Advertiser: "Acme Shoes", CreativeID: "cr-42",
		Duration: 15, Media: "https://cdn.example.com/v/cr-42_640x360.mp4", MIME: "video/mp4", W: 640, H: 360,
		Impression:   "https://t.example.com/i?d=d-1f2e&sig=Zm9v",
		ClickThrough: "https://t.example.com/c?d=d-1f2e&sig=YmFy",
		Categories:   []string{"IAB1", "", "IAB2-3"},
	}
	inlineAd2 = VASTAd{
		ID: "d-77aa", AdSystem: "Tsubame", Title: "cr-7", CreativeID: "cr-7",
		Duration: 3725, Media: "https://cdn.example.com/v/cr-7.webm", MIME: "video/webm", W: 1920, H: 1080,
		Impression: "https://t.example.com/i?d=d-77aa&sig=cXV4",
	}
)

// TestVASTInlineAgainstTheSchemas writes a pod of two ads and a single ad
// in each version, validates them against that version's IAB schema,
// compares the pod with its golden document and reads both back.
func TestVASTInlineAgainstTheSchemas(t *testing.T) {
	for _, version := range VASTVersions {
		t.Run(version, func(t *testing.T) {
			pod := AppendVASTInline(nil, version, []VASTAd{inlineAd1, inlineAd2})
			if err := lintVersion(t, version, pod); err != nil {
				t.Fatalf("pod not valid VAST %s:\n%s\n%s", version, pod, err)
			}
			golden := filepath.Join("testdata", "vastinline_"+version+".xml")
			if *updateGolden {
				if err := os.WriteFile(golden, pod, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run TestVASTInlineAgainstTheSchemas -update writes it)", err)
			}
			if !bytes.Equal(pod, want) {
				t.Errorf("pod differs from %s:\n got %s\nwant %s", golden, pod, want)
			}
			d := readInline(t, pod)
			if d.Version != version || d.XMLName.Space != when(version == VASTInline4, "http://www.iab.com/VAST") || len(d.Ads) != 2 {
				t.Fatalf("%+v", d)
			}
			seq1, seq2 := "1", "2"
			if version == VASTInline2 {
				seq1, seq2 = "", "" // 2.0 has no Ad@sequence
			}
			checkAd(t, version, seq1, d.Ads[0], inlineAd1)
			checkAd(t, version, seq2, d.Ads[1], inlineAd2)
			if c := d.Ads[1].Creatives[0]; c.Duration != "01:02:05" || c.Media[0].W != "1920" || c.Media[0].H != "1080" || c.ClickThrough != "" {
				t.Errorf("second ad's creative %+v", c)
			}
			if bytes.Count(pod, []byte("<VideoClicks>")) != 1 {
				t.Error("an ad without a click URL has VideoClicks")
			}

			one := AppendVASTInline([]byte("keep"), version, []VASTAd{inlineAd1})
			if !bytes.HasPrefix(one, []byte("keep<?xml")) {
				t.Fatalf("does not append: %q", one)
			}
			one = one[len("keep"):]
			if err := lintVersion(t, version, one); err != nil {
				t.Fatalf("single ad not valid VAST %s:\n%s\n%s", version, one, err)
			}
			if d := readInline(t, one); len(d.Ads) != 1 {
				t.Fatalf("%s", one)
			} else {
				checkAd(t, version, "", d.Ads[0], inlineAd1)
			}
		})
	}
	// The schemas are really checked: each version's pod breaks an older
	// version's schema (4.2: the namespace; 3.0: Advertiser and sequence).
	for _, tc := range []struct{ doc, schema string }{{VASTInline4, VASTInline3}, {VASTInline3, VASTInline2}, {VASTInline4, VASTInline2}} {
		pod := AppendVASTInline(nil, tc.doc, []VASTAd{inlineAd1, inlineAd2})
		if err := lintVersion(t, tc.schema, pod); err == nil {
			t.Errorf("a %s document passed the %s schema", tc.doc, tc.schema)
		}
	}
	// And the element order: 4.2 wants AdServingId after Impression.
	bad := strings.Replace(string(AppendVASTInline(nil, VASTInline4, []VASTAd{inlineAd2})),
		"<AdServingId>d-77aa</AdServingId>", "", 1)
	bad = strings.Replace(bad, "<AdSystem>Tsubame</AdSystem>", "<AdSystem>Tsubame</AdSystem><AdServingId>d-77aa</AdServingId>", 1)
	if err := xmllint(t, []byte(bad)); err == nil {
		t.Errorf("AdServingId before Impression passed the schema:\n%s", bad)
	}
}

func TestVASTInlineEmpty(t *testing.T) {
	for _, version := range VASTVersions {
		for _, ads := range [][]VASTAd{nil, {}} {
			doc := AppendVASTInline(nil, version, ads)
			ns := ""
			if version == VASTInline4 {
				ns = ` xmlns="http://www.iab.com/VAST"`
			}
			if want := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<VAST version="` + version + `"` + ns + `/>`; string(doc) != want {
				t.Errorf("%s: %s, want %s", version, doc, want)
			}
			if err := lintVersion(t, version, doc); err != nil {
				t.Errorf("%s: %v", version, err)
			}
			if d := readInline(t, doc); d.Version != version || len(d.Ads) != 0 {
				t.Errorf("%s: %+v", version, d)
			}
		}
	}
	// A version not written is 4.2.
	if got, want := AppendVASTInline(nil, "4.1", nil), AppendVASTInline(nil, VASTInline4, nil); !bytes.Equal(got, want) {
		t.Errorf("version 4.1: %s", got)
	}
}

// TestVASTInlineHostile feeds markup, CDATA ends, quotes and ampersands
// through every field: each version's document stays well-formed and reads
// back the same values. With hostile text and URLs that are URIs (quotes,
// ampersands, escapes) it is valid too; URLs holding "]]>" or markup are
// not URIs, so the schema refuses them, but they cannot break out.
func TestVASTInlineHostile(t *testing.T) {
	const evil = `x]]><script>alert("1" + '2')</script>&amp;&lt;]]]]>>`
	text := VASTAd{
		ID:           `id"><Ad id="2` + evil,
		AdSystem:     "Sys & <Co>" + evil,
		Title:        "Title ]]> & \"quoted\" 'single' <b>" + evil,
		Advertiser:   "A&B <Ads>" + evil,
		CreativeID:   `cr"'<>&` + evil,
		Duration:     -5,
		Media:        "https://cdn.example.com/v.mp4?a=1&b=%3C%5D%5D%3E&c='x'",
		MIME:         `video/mp4; codecs="avc1"` + evil,
		W:            -1,
		H:            720,
		Impression:   "https://t.example.com/i?d=1&amp;x=&q=%22'&lt;",
		ClickThrough: "https://t.example.com/c?d=1&u=https%3A%2F%2Fadv.example%2F&z=%5D%5D%3E",
		Categories:   []string{"IAB1 & <IAB2>" + evil, "]]>"},
	}
	urls := text
	urls.Media = "https://cdn.example.com/v.mp4?a=1&b=]]>&c=<script>" + evil
	urls.Impression = "https://t.example.com/i?d=1&x=]]]]>>&q=\"'" + evil
	urls.ClickThrough = "https://t.example.com/c?d=1&z=]]>" + evil
	for _, version := range VASTVersions {
		for _, tc := range []struct {
			name  string
			ad    VASTAd
			valid bool
		}{{"hostile text", text, true}, {"hostile URLs", urls, false}} {
			doc := AppendVASTInline(nil, version, []VASTAd{tc.ad, tc.ad})
			if err := lintVersion(t, version, doc); (err == nil) != tc.valid {
				t.Errorf("%s, %s: schema says %v\n%s", version, tc.name, err, doc)
			}
			d := readInline(t, doc)
			if len(d.Ads) != 2 {
				t.Fatalf("%s, %s: the strings broke out of their element: %d ads\n%s", version, tc.name, len(d.Ads), doc)
			}
			seq := [2]string{"1", "2"}
			if version == VASTInline2 {
				seq = [2]string{}
			}
			for i, got := range d.Ads {
				checkAd(t, version, seq[i], got, tc.ad)
				if c := got.Creatives[0]; c.Duration != "00:00:00" || c.Media[0].W != "0" || c.Media[0].H != "720" {
					t.Errorf("%s: negative duration and width: %+v", version, c)
				}
			}
		}
	}

	// What XML 1.0 cannot carry: control characters, invalid UTF-8, U+FFFE.
	// Tab, newline and carriage return survive in text and attributes.
	ctl := VASTAd{
		ID: "a\tb\nc\r\nd", AdSystem: "nul\x00 bel\x07", Title: "bad \xff\xfe utf8 \uFFFE ok \uFFFD é 日本",
		CreativeID: "c\x01", Media: "https://cdn.example.com/a\x00\t\r\n\xff/é.mp4", MIME: "video/mp4",
		Impression: "\x00", ClickThrough: "https://t.example.com/c\x1f?q=1\x1f",
	}
	for _, version := range VASTVersions {
		doc := AppendVASTInline(nil, version, []VASTAd{ctl})
		if err := lintVersion(t, version, doc); err != nil {
			t.Errorf("%s not valid:\n%q\n%s", version, doc, err)
		}
		got := readInline(t, doc).Ads
		want := inlineAd{ID: "a\tb\nc\r\nd", AdSystem: "nul\uFFFD bel\uFFFD", Title: "bad \uFFFD\uFFFD utf8 \uFFFD ok \uFFFD é 日本", Impression: "%00"}
		if len(got) != 1 || got[0].ID != want.ID || got[0].AdSystem != want.AdSystem || got[0].Title != want.Title || got[0].Impression != want.Impression {
			t.Fatalf("%s: %q, want %q", version, got, want)
		}
		c := got[0].Creatives[0]
		if c.ID != "c\uFFFD" || c.Media[0].URL != "https://cdn.example.com/a%00%09%0D%0A%FF/é.mp4" || c.ClickThrough != "https://t.example.com/c%1F?q=1%1F" {
			t.Errorf("%s: %+v", version, c)
		}
		// A percent-encoded byte between "]]" and ">" splits the CDATA
		// there: still no "]]>" inside a section.
		odd := ctl
		odd.ClickThrough = "a]]\x00>]]>b"
		if c := readInline(t, AppendVASTInline(nil, version, []VASTAd{odd})).Ads[0].Creatives[0]; c.ClickThrough != "a]]%00>]]>b" {
			t.Errorf("%s: %q", version, c.ClickThrough)
		}
	}
}

func FuzzAppendVASTInline(f *testing.F) {
	for _, s := range []string{"", "plain", "]]>", "]]]]>>", "<a href=\"x\">&amp;</a>", "\x00\x1f\t\r\n", "\xff\xfe", "\uFFFE\uFFFF\uFFFD", "日本語", "a\xc3"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, text, url string) {
		ad := VASTAd{ID: text, AdSystem: text, Title: text, Advertiser: text, CreativeID: text,
			Media: url, MIME: text, Impression: url, ClickThrough: url, Categories: []string{text}}
		for _, version := range VASTVersions {
			doc := AppendVASTInline(nil, version, []VASTAd{ad, ad})
			if !utf8.Valid(doc) {
				t.Fatalf("%s: not UTF-8: %q", version, doc)
			}
			var d inlineDoc
			if err := xml.Unmarshal(doc, &d); err != nil || len(d.Ads) != 2 {
				t.Fatalf("%s: %v %d ads\n%q", version, err, len(d.Ads), doc)
			}
			// What XML carries reads back whole; the rest never adds an element.
			if clean(text) && (d.Ads[0].Title != text || d.Ads[1].ID != text) {
				t.Fatalf("%s: title %q id %q, want %q", version, d.Ads[0].Title, d.Ads[1].ID, text)
			}
			if clean(url) && url != "" && (d.Ads[0].Impression != url || d.Ads[1].Creatives[0].Media[0].URL != url) {
				t.Fatalf("%s: impression %q, want %q", version, d.Ads[0].Impression, url)
			}
		}
	})
}

// clean reports whether s holds only characters XML 1.0 carries as they
// are (tab, newline and carriage return excluded: URLs percent-encode
// them).
func clean(s string) bool {
	for i := 0; i < len(s); {
		n, ok := xmlCharAt(s, i)
		if !ok {
			return false
		}
		i += n
	}
	return true
}

func TestXMLCharAt(t *testing.T) {
	for _, tc := range []struct {
		s  string
		n  int
		ok bool
	}{
		{"a", 1, true}, {" ", 1, true}, {"\x7f", 1, true}, {"\x00", 1, false}, {"\t", 1, false}, {"\x1f", 1, false},
		{"é", 2, true}, {"\u0085", 2, true}, {"日", 3, true}, {"\uFFFD", 3, true}, {"\U0001F600", 4, true},
		{"\uFFFE", 3, false}, {"\uFFFF", 3, false}, {"\xff", 1, false}, {"\xc3", 1, false}, {"\xed\xa0\x80", 1, false},
	} {
		if n, ok := xmlCharAt(tc.s, 0); n != tc.n || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.s, n, ok, tc.n, tc.ok)
		}
	}
}

func TestParseVASTVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"2", "2.0"}, {"2.0", "2.0"}, {"2.0.1", "2.0"}, {"2.9", "2.0"},
		{"3", "3.0"}, {"3.0", "3.0"}, {"3.1", "3.0"},
		{"4.0", "3.0"}, {"4.1", "3.0"}, {"4.1.9", "3.0"}, {"04.1", "3.0"},
		{"4", "4.2"}, {"4.2", "4.2"}, {"4.2.0", "4.2"}, {"4.3", "4.2"}, {"4.10", "4.2"}, {"5", "4.2"}, {"5.0", "4.2"},
		{"99999999999999999999999", "4.2"}, {"4.99999999999999999999999", "4.2"},
		{"", ""}, {"1", ""}, {"1.9", ""}, {"0", ""}, {"0.4", ""}, {"abc", ""}, {"4.", ""}, {".4", ""}, {"4..2", ""},
		{"4.2x", ""}, {"4.2.0.1", ""}, {"-3", ""}, {"+3", ""}, {" 4", ""}, {"4 ", ""}, {"4,2", ""}, {"v4", ""}, {"4.a", ""},
	} {
		got, ok := ParseVASTVersion([]byte(tc.in))
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("ParseVASTVersion(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	// Every version written maps to itself.
	for _, v := range VASTVersions {
		if got, ok := ParseVASTVersion([]byte(v)); !ok || got != v {
			t.Errorf("ParseVASTVersion(%q) = %q, %v", v, got, ok)
		}
	}
}

func TestVASTInlineAllocatesNothing(t *testing.T) {
	ads := []VASTAd{inlineAd1, inlineAd2}
	buf := make([]byte, 0, 4096)
	in := []byte("4")
	for _, version := range VASTVersions {
		if a := testing.AllocsPerRun(100, func() {
			v, _ := ParseVASTVersion(in)
			buf = AppendVASTInline(buf[:0], v, ads)
			buf = AppendVASTInline(buf[:0], version, ads)
		}); a != 0 {
			t.Errorf("%s: %v allocations per document, want 0", version, a)
		}
	}
}

var vastInlineSink []byte

func BenchmarkAppendVASTInline(b *testing.B) {
	for _, version := range VASTVersions {
		b.Run(version, func(b *testing.B) {
			ads := []VASTAd{inlineAd1, inlineAd2}
			buf := make([]byte, 0, 4096)
			b.SetBytes(int64(len(AppendVASTInline(nil, version, ads))))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendVASTInline(buf[:0], version, ads)
			}
			vastInlineSink = buf
		})
	}
}
