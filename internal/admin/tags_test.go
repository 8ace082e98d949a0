package admin

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/render"
)

// The ad tag snippets of a placement: for viewers, with the public base
// URL (ads.tracking.url, else a guess from the request's host and the
// public port), the JSONP endpoint that writes the file log first, the
// decide form's credentials by ads.cors_origins, and every value escaped
// for where it goes.
func TestPlacementTag(t *testing.T) {
	setup := TagSetup{PublicPort: "4000", Script: []string{"sample4", "sample3"}, Decide: true}
	h := newHarness(t, true, func(o *Options) { o.Tags = func() TagSetup { return setup } })
	plain, _, err := h.accounts.CreateToken(testUser, "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	get := func(id string) (int, tagAnswer) {
		t.Helper()
		r := h.do("GET", "/api/v1/placements/"+id+"/tag", nil, "Authorization", "Bearer "+plain)
		var a tagAnswer
		if r.status == 200 {
			if err := json.Unmarshal(r.body, &a); err != nil {
				t.Fatal(err)
			}
		}
		return r.status, a
	}
	if r := h.do("GET", "/api/v1/placements/top/tag", nil); r.status != 401 {
		t.Errorf("no credentials: %d", r.status)
	}

	code, a := get("top")
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(h.base, "http://"))
	if code != 200 || a.BaseURL != "http://"+host+":4000" || !strings.Contains(a.BaseNote, "ads.tracking.url") {
		t.Fatalf("%d %+v", code, a)
	}
	if a.Script == nil || a.Script.Endpoint != "sample4" || a.Script.URL != a.BaseURL+"/api/sample4.js?callback=tsubameAd_top&id=top" ||
		!strings.Contains(a.Script.Snippet, `<script async src="`+a.BaseURL+`/api/sample4.js?callback=tsubameAd_top&amp;id=top"></script>`) ||
		!strings.Contains(a.Script.Snippet, `window.tsubameAd_top = function (answer) {`) {
		t.Errorf("script tag %+v", a.Script)
	}
	if a.Decide == nil || a.Decide.URL != a.BaseURL+"/api/decide?placement=top" ||
		!strings.Contains(a.Decide.Snippet, `fetch("`+a.BaseURL+`/api/decide?placement=top", {credentials: "include"})`) ||
		!strings.Contains(a.Decide.Note, "lists no origin") {
		t.Errorf("decide form %+v", a.Decide)
	}

	// Ids may hold -_.:@: escaped in the URL, a callback name of its own.
	setup.BaseURL, setup.CORSOrigins = "https://ads.example.com/", []string{"*"}
	code, a = get("side:bar@1")
	if code != 200 || a.BaseURL != "https://ads.example.com" || a.Script.URL != "https://ads.example.com/api/sample4.js?callback=tsubameAd_side_3abar_401&id=side%3Abar%401" ||
		!strings.Contains(a.Script.Snippet, `<div id="tsubame-side:bar@1"></div>`) ||
		!strings.Contains(a.Decide.Snippet, `{credentials: "omit"}`) {
		t.Errorf("%d %+v %+v", code, a.Script, a.Decide)
	}
	// The longest ids still get a callback the endpoint takes.
	for _, id := range []string{strings.Repeat("a", tsubame.MaxIDLength), strings.Repeat("-", tsubame.MaxIDLength), strings.Repeat("-", tsubame.MaxIDLength-1)} {
		cb := callbackName(id)
		if !render.ValidCallback([]byte(cb)) || cb == callbackName(id[1:]) {
			t.Errorf("callback of %q: %q", id, cb)
		}
	}
	// A value the validation would let through unescaped cannot break out:
	// quotes, angle brackets and ampersands are escaped in every snippet.
	for _, s := range []*tagSnippet{scriptTag(`https://x.example/"><script>`, "ep", `a"b<c>&d`), decideTag(`https://x.example/</script>`, `a"b<c>&d`, nil)} {
		for _, bad := range []string{`"><script>`, `a"b`, "<c>", "</script><", `/</script>`} {
			if strings.Contains(s.Snippet, bad) {
				t.Errorf("%q left unescaped in\n%s", bad, s.Snippet)
			}
		}
	}

	// Bad ids are refused with the reason; no JSONP endpoint, no decide:
	// neither snippet.
	if r := h.do("GET", "/api/v1/placements/a%20b/tag", nil, "Authorization", "Bearer "+plain); r.status != 400 || !strings.Contains(string(r.body), "placement id") {
		t.Errorf("a bad id: %d %s", r.status, r.body)
	}
	setup.Script, setup.Decide = nil, false
	if code, a = get("top"); code != 200 || a.Script != nil || a.Decide != nil {
		t.Errorf("nothing served: %d %+v", code, a)
	}
}
