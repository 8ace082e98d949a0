package ads

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/decision"
)

// answerFor is an answer of n banner decisions as decide leaves it.
func answerFor(n int, base string) *answer {
	a := new(answer)
	line := &decision.Line{ID: "li-sports-0042", Campaign: "camp-autumn:jp", Advertiser: "acme"}
	cr := &tsubame.Creative{ID: "cr-300x250@v2", Format: tsubame.FormatBanner, W: 300, H: 250,
		Image: "https://cdn.acme.example/ads/autumn-300x250.png?v=3&x=<y>"}
	for i := range n {
		a.out[i] = decision.Decision{Line: line, Creative: cr}
		a.ids[i] = "01M89R2K8WAF17JC42PBZTGCDE"
		a.imp[i] = base + PathImp + strings.Repeat("AQZreDFzNGIBAAAAAGsIXBIAAAAAACYloBow", 7)
		a.click[i] = base + PathClick + strings.Repeat("AQZreDFzNGICAAAAAGsIXBIAAAAAACYloBow", 9)
	}
	a.n = n
	return a
}

// The answer is valid JSON holding exactly the strings, escaped where a
// value needs it (a tracking base from a Host with a quote, an image URL
// with < and &), whatever shortcut the writer takes for ids and tokens.
func TestAppendJSONEscapes(t *testing.T) {
	s := &Service{}
	for _, base := range []string{"http://ads.example", `http://a"b\c<d>`} {
		a := answerFor(2, base)
		a.base = []byte(base)
		if base != "http://ads.example" { // and a store edited around the model
			a.out[1].Line = &decision.Line{ID: `li"</script>`, Campaign: "camp-autumn:jp"}
		}
		out := s.appendJSON(nil, a)
		var got struct {
			Decisions []map[string]any `json:"decisions"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if len(got.Decisions) != 2 {
			t.Fatalf("%s", out)
		}
		d := got.Decisions[1]
		if d["impression_url"] != a.imp[1] || d["click_url"] != a.click[1] || d["image"] != a.out[1].Creative.Image ||
			d["line_item"] != a.out[1].Line.ID || d["campaign"] != "camp-autumn:jp" || d["creative"] != "cr-300x250@v2" ||
			d["decision"] != a.ids[1] || d["w"] != 300.0 {
			t.Errorf("%s: %v", base, d)
		}
		if strings.Contains(string(out), "<") || strings.Contains(string(out), ">") {
			t.Errorf("< or > written raw: %s", out)
		}
	}
}

// BenchmarkAppendJSON is the answer of one decision written out.
func BenchmarkAppendJSON(b *testing.B) {
	s := &Service{}
	a := answerFor(1, "https://ads.example.com")
	a.base = []byte("https://ads.example.com")
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = s.appendJSON(buf[:0], a)
	}
	b.SetBytes(int64(len(buf)))
}

// The site a Referer names: the host of an http(s) URL, without user
// info or port; nothing for other schemes.
func TestRefererHost(t *testing.T) {
	for ref, want := range map[string]string{
		"https://News.Example.com/a/b?c=d#e": "News.Example.com",
		"http://news.example.com":            "news.example.com",
		"HTTPS://news.example.com:8443/x":    "news.example.com",
		"https://user:pw@news.example.com/":  "news.example.com",
		"https://news.example.com?q=a@b":     "news.example.com",
		"https://127.0.0.1:4000/page.html":   "127.0.0.1",
		"ftp://news.example.com/":            "",
		"javascript:alert(1)":                "",
		"news.example.com/x":                 "",
		"":                                   "",
	} {
		if got := string(refererHost([]byte(ref))); got != want {
			t.Errorf("%q: %q, want %q", ref, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { refererHost([]byte("https://news.example.com/a")) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// A sold VAST document gets this server's impression beside its own
// impressions, after its AdSystem when it has none, and is left alone
// without an ad.
func TestAddImpression(t *testing.T) {
	const imp = "https://ads.example/t/i/TOKEN"
	for _, tc := range []struct{ doc, want string }{
		{`<VAST version="4.2"><Ad><InLine><AdSystem>x</AdSystem><Impression>a</Impression></InLine></Ad></VAST>`,
			`<VAST version="4.2"><Ad><InLine><AdSystem>x</AdSystem><Impression><![CDATA[` + imp + `]]></Impression><Impression>a</Impression></InLine></Ad></VAST>`},
		{`<VAST version="3.0"><Ad><Wrapper><AdSystem>x</AdSystem><VASTAdTagURI>u</VASTAdTagURI></Wrapper></Ad></VAST>`,
			`<VAST version="3.0"><Ad><Wrapper><AdSystem>x</AdSystem><Impression><![CDATA[` + imp + `]]></Impression><VASTAdTagURI>u</VASTAdTagURI></Wrapper></Ad></VAST>`},
		{`<VAST version="4.2"/>`, `<VAST version="4.2"/>`},
	} {
		if got := string(addImpression(nil, tc.doc, imp)); got != tc.want {
			t.Errorf("addImpression(%s)\n got %s\nwant %s", tc.doc, got, tc.want)
		}
	}
}

// The uids cookie is the visitor's: its value is read back only as this
// server writes it, and an id that could not be sent on is refused.
func TestPartnerUIDs(t *testing.T) {
	v := encodeUIDs(map[string]string{"b": "B-2", "a": "A-1"})
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || string(raw) != `{"a":"A-1","b":"B-2"}` {
		t.Fatalf("encoded %q: %s %v", v, raw, err)
	}
	if encodeUIDs(nil) != "" {
		t.Fatal("an empty set is not an empty cookie")
	}
	for _, bad := range []string{"", "a b", "a;b", "a,b", `a"b`, `a\b`, strings.Repeat("x", 129), "é"} {
		if validPartnerUID([]byte(bad)) {
			t.Errorf("%q taken as a partner's id", bad)
		}
	}
	if !validPartnerUID([]byte("AbC-123_x.y:z=")) {
		t.Error("a plain id refused")
	}
}
