package render

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tsubame"
)

// xmllint validates a document against the IAB VAST 4.2 schema
// (testdata/vast_4.2.xsd, from the IAB Tech Lab's VAST repository) with
// libxml2's xmllint, and returns its complaint.
func xmllint(t *testing.T, doc []byte) error {
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
	out, err := exec.Command(bin, "--noout", "--schema", "testdata/vast_4.2.xsd", path).CombinedOutput()
	if err != nil {
		return &lintError{string(out)}
	}
	return nil
}

type lintError struct{ out string }

func (e *lintError) Error() string { return e.out }

type vastDoc struct {
	XMLName xml.Name `xml:"http://www.iab.com/VAST VAST"`
	Version string   `xml:"version,attr"`
	Ads     []struct {
		ID         string `xml:"id,attr"`
		Sequence   int    `xml:"sequence,attr"`
		AdSystem   string `xml:"Wrapper>AdSystem"`
		Impression string `xml:"Wrapper>Impression"`
		TagURI     string `xml:"Wrapper>VASTAdTagURI"`
	} `xml:"Ad"`
}

func TestVASTAgainstTheSchema(t *testing.T) {
	enc := Encoders(EncoderOptions{VAST: VASTOptions{AdSystem: `Ads & "Co" <1>`,
		ImpressionURL: "https://imp.example.com/i?id={id}&src=tsubame"}}, []Format{FormatVAST})[EncodingVAST]
	p := &tsubame.Placement{ID: "top banner/1", URLs: []string{
		"https://ads.example.com/vast?slot=1&size=640x360",
		"https://ads.example.com/v/2.xml",
		"http://ad2.example.com/tag.xml",
	}}
	doc := enc.Encode(nil, p)
	if err := xmllint(t, doc); err != nil {
		t.Fatalf("not valid VAST 4.2:\n%s\n%s", doc, err)
	}
	var got vastDoc
	if err := xml.Unmarshal(doc, &got); err != nil {
		t.Fatal(err)
	}
	if got.Version != VASTVersion || len(got.Ads) != 3 {
		t.Fatalf("%+v", got)
	}
	for i, ad := range got.Ads {
		if ad.Sequence != i+1 || ad.ID != p.ID+"-"+string(rune('1'+i)) || ad.TagURI != p.URLs[i] || ad.AdSystem != `Ads & "Co" <1>` ||
			ad.Impression != "https://imp.example.com/i?id=top+banner%2F1&src=tsubame" {
			t.Errorf("ad %d: %+v", i, ad)
		}
	}
	// A URL holding "]]>" (not a valid URI, but the document stays well
	// formed and carries it whole); VAST macros ([TIMESTAMP]) are kept for
	// the player to fill in.
	odd := enc.Encode(nil, &tsubame.Placement{ID: "o", URLs: []string{"https://ads.example.com/odd]]>path?t=[TIMESTAMP]"}})
	var oddDoc vastDoc
	if err := xml.Unmarshal(odd, &oddDoc); err != nil || len(oddDoc.Ads) != 1 || oddDoc.Ads[0].TagURI != "https://ads.example.com/odd]]>path?t=[TIMESTAMP]" {
		t.Fatalf("%s: %v %+v", odd, err, oddDoc)
	}
	// No ads: the placement unknown, or without URLs.
	for _, empty := range [][]byte{enc.NotFound, enc.Encode(nil, &tsubame.Placement{ID: "e"})} {
		if err := xmllint(t, empty); err != nil {
			t.Fatalf("%s: %v", empty, err)
		}
		var none vastDoc
		if err := xml.Unmarshal(empty, &none); err != nil || len(none.Ads) != 0 {
			t.Fatalf("%s: %v", empty, err)
		}
	}
	// Without an impression URL: about:blank, as VAST 4 asks.
	plain := Encoders(EncoderOptions{}, []Format{FormatVAST})[EncodingVAST].Encode(nil, &tsubame.Placement{ID: "1", URLs: []string{"https://a.example/v.xml"}})
	if err := xmllint(t, plain); err != nil || !strings.Contains(string(plain), "<AdSystem>Tsubame</AdSystem><Impression><![CDATA[about:blank]]></Impression>") {
		t.Fatalf("%s: %v", plain, err)
	}
	// The schema is really checked: a Wrapper without its Impression fails.
	broken := strings.Replace(string(plain), "<Impression><![CDATA[about:blank]]></Impression>", "", 1)
	if err := xmllint(t, []byte(broken)); err == nil {
		t.Fatal("a Wrapper without Impression passed the schema")
	}
}

func TestFormatTable(t *testing.T) {
	for _, tc := range []struct {
		ext      string
		f        Format
		ct       string
		enc      Encoding
		callback bool
	}{
		{"js", FormatJSONP, ContentTypeJS, EncodingJSON, true},
		{"json", FormatJSON, ContentTypeJSON, EncodingJSON, false},
		{"xml", FormatVAST, ContentTypeXML, EncodingVAST, false},
	} {
		f, ok := ParseFormat([]byte(tc.ext))
		if !ok || f != tc.f || f.String() != tc.ext || f.ContentType() != tc.ct || f.Encoding() != tc.enc || f.Callback() != tc.callback {
			t.Errorf("%s: %v %v", tc.ext, f, ok)
		}
	}
	if _, ok := ParseFormat([]byte("html")); ok {
		t.Error("html is not a format")
	}
	if got := strings.Join(FormatNames(), ","); got != "js,json,xml" {
		t.Errorf("formats %s", got)
	}
	encs := Encoders(EncoderOptions{}, []Format{FormatJSON})
	if encs[EncodingJSON].Encode == nil || encs[EncodingVAST].Encode != nil {
		t.Error("Encoders builds only the encodings the formats serve")
	}
}
