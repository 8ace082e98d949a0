package ads_test

import (
	"bytes"
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
)

var trackingToken = regexp.MustCompile(`/t/[ic]/([A-Za-z0-9_-]+)`)

// The answer of a .js endpoint is a script any page may include, and read:
// it must not give a page the visitor id of the HttpOnly cookie, in clear
// or in a token that decodes to it. The event lines still name the
// visitor.
func TestAnswerDoesNotExposeTheVisitor(t *testing.T) {
	f := newFixture(t)
	n := f.start(t, nodeOpts{})
	const uid = "01M89NT1MMEGHRWX2XX0N7AA6T" // one of ours, as the cookie carries it
	var imps []string
	for _, tc := range []struct {
		name, path string
		header     []string
	}{
		{"JSONP of the cookie's visitor", "/api/ad.js?id=top&callback=cb", []string{"Cookie", "tsubame_uid=" + uid}},
		{"JSON of the cookie's visitor", "/api/ad.json?id=top", []string{"Cookie", "tsubame_uid=" + uid}},
		{"/api/decide of the cookie's visitor", "/api/decide?placement=top", []string{"Cookie", "tsubame_uid=" + uid}},
		{"a new visitor", "/api/ad.js?id=top&callback=cb", nil},
	} {
		resp, body := get(t, n.url+tc.path, tc.header...)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", tc.name, resp.StatusCode, body)
		}
		visitor := uid
		if tc.header == nil {
			c := resp.Header.Get("Set-Cookie")
			v, _, _ := strings.Cut(strings.TrimPrefix(c, "tsubame_uid="), ";")
			if len(v) != len(uid) {
				t.Fatalf("%s: Set-Cookie %q", tc.name, c)
			}
			visitor = v
		}
		if bytes.Contains(body, []byte(visitor)) {
			t.Errorf("%s: the visitor in the answer: %s", tc.name, body)
		}
		toks := trackingToken.FindAllSubmatch(body, -1)
		if len(toks) != 2 {
			t.Fatalf("%s: %d tracking URLs in %s", tc.name, len(toks), body)
		}
		for _, m := range toks {
			raw, err := base64.RawURLEncoding.DecodeString(string(m[1]))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(raw, []byte(visitor)) || bytes.Contains(raw, []byte(visitor[10:])) {
				t.Errorf("%s: a tracking token decodes to the visitor: %q", tc.name, raw)
			}
		}
		imps = append(imps, string(trackingToken.Find(body)))
	}
	for _, imp := range imps {
		if resp, _ := get(t, n.url+imp); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", imp, resp.StatusCode)
		}
	}
	lines := n.lines(t)
	got := events(lines, "imp")
	if len(got) != len(imps) {
		t.Fatalf("%d impressions logged", len(got))
	}
	for _, e := range got[:3] {
		if e["uid"] != uid || e["valid"] != "true" {
			t.Errorf("an impression of the cookie's visitor logged %v", e)
		}
	}
}
