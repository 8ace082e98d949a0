package render_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"tsubame"
	"tsubame/internal/render"
)

func TestValidCallback(t *testing.T) {
	good := []string{"cb", "Example.process", "$", "_a.$b.c9", "jQuery1234_5678", "a." + strings.Repeat("b", 126)}
	bad := []string{"", ".a", "a.", "a..b", "9a", "a.9b", "a-b", "a b", "alert(1)", "a;b", "a[0]", "a/*", "<script>",
		"a\x00", "é", "a." + strings.Repeat("b", 127)}
	for _, cb := range good {
		if !render.ValidCallback([]byte(cb)) {
			t.Errorf("ValidCallback(%q) = false, want true", cb)
		}
	}
	for _, cb := range bad {
		if render.ValidCallback([]byte(cb)) {
			t.Errorf("ValidCallback(%q) = true, want false", cb)
		}
	}
}

func TestWrite(t *testing.T) {
	p := &tsubame.Placement{ID: "1", URLs: []string{"http://ad1.example.com/tag.js", "http://ad2.example.com/tag.js"}}
	payload := render.AppendPayload(nil, p)
	var b bytes.Buffer
	render.Write(&b, render.FormatJSONP, []byte("Example.process"), payload)
	const want = `Example.process({"urls":["http://ad1.example.com/tag.js","http://ad2.example.com/tag.js"]});`
	if b.String() != want {
		t.Fatalf("JSONP = %s\nwant    %s", b.String(), want)
	}
	b.Reset()
	render.Write(&b, render.FormatJSON, nil, payload)
	if b.String() != want[len("Example.process("):len(want)-2] {
		t.Fatalf("JSON = %s", b.String())
	}
	if !json.Valid(render.NotFoundPayload) {
		t.Fatal("NotFoundPayload is not valid JSON")
	}
}

func TestPayloadEscapesForScript(t *testing.T) {
	p := &tsubame.Placement{URLs: []string{"http://a.example.com/?q=</script><b>&amp;\u2028\u2029\"\\"}}
	got := string(render.AppendPayload(nil, p))
	for _, raw := range []string{"<", ">", "&", "\u2028", "\u2029"} {
		if strings.Contains(got, raw) {
			t.Errorf("payload %s contains raw %q", got, raw)
		}
	}
	var back struct{ URLs []string }
	if err := json.Unmarshal([]byte(got), &back); err != nil || back.URLs[0] != p.URLs[0] {
		t.Fatalf("payload does not decode back: %v %q", err, back.URLs)
	}
}

func TestParseFormat(t *testing.T) {
	for ext, want := range map[string]render.Format{"js": render.FormatJSONP, "json": render.FormatJSON} {
		f, ok := render.ParseFormat([]byte(ext))
		if !ok || f != want || f.String() != ext {
			t.Errorf("ParseFormat(%q) = %v, %v", ext, f, ok)
		}
	}
	for _, ext := range []string{"", "JS", "html", "js.map"} {
		if _, ok := render.ParseFormat([]byte(ext)); ok {
			t.Errorf("ParseFormat(%q) accepted", ext)
		}
	}
	if render.FormatJSONP.ContentType() != "application/javascript; charset=utf-8" ||
		render.FormatJSON.ContentType() != "application/json; charset=utf-8" {
		t.Fatal("content types changed")
	}
}

func TestHTTPStatus(t *testing.T) {
	cases := map[string]int{
		tsubame.EINVALID: http.StatusBadRequest, tsubame.ENOTFOUND: http.StatusNotFound,
		tsubame.ECONFLICT: http.StatusConflict, tsubame.EUNAVAILABLE: http.StatusServiceUnavailable,
		tsubame.EINTERNAL: http.StatusInternalServerError,
	}
	for code, want := range cases {
		if got := render.HTTPStatus(tsubame.Errorf(code, "x")); got != want {
			t.Errorf("HTTPStatus(%s) = %d, want %d", code, got, want)
		}
	}
	if render.HTTPStatus(nil) != http.StatusOK {
		t.Fatal("nil error is not 200")
	}
}

// AppendJSONString must produce exactly what encoding/json produces (which
// escapes for HTML and JavaScript too), for any input.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "<>&\"\\", "\x00\x1f\b\f\n\r\t", "\u2028\u2029", "\xff\xfe", "日本語", "a\xc3",
		"https://ads.example/t/win/AQJrMQEAAAAA?price=${AUCTION_PRICE}", "0123456\x7f89abcdef\u0085", "abcdefgh<abcdefgh>abcdefg&",
		"abcdefg\"", "\\bcdefgh", "abcdefgh\x1f", "abcdefgh\x80abcdefgh"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got := render.AppendJSONString(nil, s)
		if !bytes.Equal(got, want) {
			t.Fatalf("AppendJSONString(%q) = %s, encoding/json gives %s", s, got, want)
		}
		if !utf8.Valid(got) {
			t.Fatalf("output is not UTF-8: %q", got)
		}
		// The log's: the same, DEL and the C1 controls escaped too.
		var logWant []byte
		for _, r := range string(want) {
			if r == 0x7f || r >= 0x80 && r <= 0x9f {
				logWant = fmt.Appendf(logWant, `\u%04x`, r)
			} else {
				logWant = utf8.AppendRune(logWant, r)
			}
		}
		if got := render.AppendJSONLogString(nil, s); !bytes.Equal(got, logWant) {
			t.Fatalf("AppendJSONLogString(%q) = %s, want %s", s, got, logWant)
		}
	})
}

func BenchmarkAppendPayload(b *testing.B) {
	p := &tsubame.Placement{URLs: []string{"http://ad1.example.com/tag.js", "http://ad2.example.com/tag.js"}}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = render.AppendPayload(buf[:0], p)
	}
}

// BenchmarkAppendJSONString escapes what a bid response is mostly made
// of: signed notice URLs (base64url) and an HTML snippet.
func BenchmarkAppendJSONString(b *testing.B) {
	s := `https://ads.example.com/t/win/AQJrMQEAAAAAaVq3xwAAAAAADbugAAAAAAAAAAAQOGdLY1B3Y1hTTXl0ZFFRZw?price=${AUCTION_PRICE}` +
		`<a href="https://ads.example.com/t/c/AQJrMQMAAAAAaVq3xw" target="_blank" rel="noopener"><img src="https://cdn.example/728x90.png" width="728" height="90" alt="" style="border:0"></a>`
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = render.AppendJSONString(buf[:0], s)
	}
}

// IsPlainJSON is true of exactly the strings AppendJSONString writes as
// they are but for '&', and AppendPlainJSON writes those as it does.
func TestIsPlainJSON(t *testing.T) {
	for c := range 256 {
		s := "&a" + string([]byte{byte(c)}) + "z&"
		esc := string(render.AppendJSONString(nil, s))
		want := strings.ReplaceAll(esc, `\u0026`, "&") == `"`+s+`"`
		if got := render.IsPlainJSON(s); got != want {
			t.Errorf("byte %#x: IsPlainJSON %v, written as it is %v", c, got, want)
		}
		if want {
			if got := string(render.AppendPlainJSON(nil, s)); got != esc {
				t.Errorf("byte %#x: AppendPlainJSON %s, AppendJSONString %s", c, got, esc)
			}
		}
	}
	for s, want := range map[string]bool{"": true, "https://ads.example.com/t/win/AQ-_z?price=${AUCTION_PRICE}&loss=1": true,
		"&&": true, "a<b": false, "é": false, "\u2028": false} {
		if got := render.IsPlainJSON(s); got != want {
			t.Errorf("IsPlainJSON(%q) = %v", s, got)
		}
		if want && string(render.AppendPlainJSON(nil, s)) != string(render.AppendJSONString(nil, s)) {
			t.Errorf("AppendPlainJSON(%q) = %s", s, render.AppendPlainJSON(nil, s))
		}
	}
}
