package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"strings"

	"tsubame"
	"tsubame/internal/render"
)

// TagSetup is what a publisher's ad tag needs to know of the public
// listener: where it answers and what it serves.
type TagSetup struct {
	// BaseURL is the public scheme and host pages ask (ads.tracking.url);
	// empty: the admin request's host name on PublicPort, over http.
	BaseURL    string
	PublicPort string
	// Script lists the endpoints that answer .js as JSONP of a placement's
	// ad tag URLs (source store, no template), the one to use first.
	Script []string
	// Decide says /api/decide is served; CORSOrigins are its
	// ads.cors_origins.
	Decide      bool
	CORSOrigins []string
}

// tagAnswer is GET /api/v1/placements/{id}/tag's answer: the snippets a
// publisher pastes into a page, as text.
type tagAnswer struct {
	Placement string `json:"placement"`
	BaseURL   string `json:"base_url"`
	// BaseNote says where BaseURL came from.
	BaseNote string      `json:"base_note"`
	Script   *tagSnippet `json:"script,omitempty"`
	Decide   *tagSnippet `json:"decide,omitempty"`
}

type tagSnippet struct {
	Endpoint string `json:"endpoint,omitempty"`
	URL      string `json:"url"`
	Snippet  string `json:"snippet"`
	Note     string `json:"note,omitempty"`
}

func (s *Server) tagRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/placements/{id}/tag", s.requireRole(RoleViewer, s.placementTag))
}

// placementTag answers GET /api/v1/placements/{id}/tag: the <script> ad tag
// of a JSONP endpoint and the /api/decide fetch form for the placement.
// Every value is escaped for where it goes (a URL's query, an HTML
// attribute, a JavaScript string), though ids are validated.
func (s *Server) placementTag(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := tsubame.ValidID(id); err != nil {
		s.writeStoreError(w, tsubame.Errorf(tsubame.EINVALID, "placement id: %s", tsubame.ErrorMessage(err)))
		return
	}
	var setup TagSetup
	if s.opt.Tags != nil {
		setup = s.opt.Tags()
	}
	ans := tagAnswer{Placement: id}
	ans.BaseURL, ans.BaseNote = publicBase(r, setup)
	if len(setup.Script) > 0 {
		ans.Script = scriptTag(ans.BaseURL, setup.Script[0], id)
	}
	if setup.Decide {
		ans.Decide = decideTag(ans.BaseURL, id, setup.CORSOrigins)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, ans)
}

// publicBase is the scheme and host pages ask the public listener at
// (ads.tracking.url), or a guess from the admin request's host and the
// public listener's port; and a note saying which.
func publicBase(r *http.Request, setup TagSetup) (base, note string) {
	if base := strings.TrimSuffix(setup.BaseURL, "/"); base != "" {
		return base, "ads.tracking.url: the public address pages ask"
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return "http://" + host + ":" + setup.PublicPort,
		"a guess from this page's host and the public listener's port: set ads.tracking.url to the public address pages ask"
}

// jsString is s as a JavaScript string literal that is safe inside a
// <script> element: json.Marshal escapes <, > and &, so no </script> can
// close it, and U+2028 and U+2029.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// callbackName is a JavaScript identifier for the placement's callback,
// one per id: letters and digits kept, any other byte as _ and its hex;
// past the callback's length limit (render.MaxCallbackLength), a hash of
// the id instead.
func callbackName(id string) string {
	var b strings.Builder
	b.WriteString("tsubameAd_")
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	if b.Len() > render.MaxCallbackLength {
		sum := sha256.Sum256([]byte(id))
		return "tsubameAd_h" + hex.EncodeToString(sum[:16])
	}
	return b.String()
}

func scriptTag(base, endpoint, id string) *tagSnippet {
	cb := callbackName(id)
	u := base + "/api/" + url.PathEscape(endpoint) + ".js?" + url.Values{"id": {id}, "callback": {cb}}.Encode()
	slot := "tsubame-" + id
	snippet := fmt.Sprintf(`<div id="%s"></div>
<script>
window.%s = function (answer) {
  var slot = document.getElementById(%s);
  (answer.urls || []).forEach(function (url) {
    var s = document.createElement("script");
    s.async = true;
    s.src = url;
    slot.appendChild(s);
  });
};
</script>
<script async src="%s"></script>
`, html.EscapeString(slot), cb, jsString(slot), html.EscapeString(u))
	return &tagSnippet{Endpoint: endpoint, URL: u, Snippet: snippet,
		Note: "JSONP: the endpoint calls the function with the placement's ad tag URLs, each loaded as a script; no CORS needed"}
}

func decideTag(base, id string, origins []string) *tagSnippet {
	u := base + "/api/decide?" + url.Values{"placement": {id}}.Encode()
	slot := "tsubame-" + id
	creds, note := "include", "the visitor cookie rides along (frequency caps count per visitor): the page's origin must be in ads.cors_origins"
	switch {
	case len(origins) == 1 && origins[0] == "*":
		creds, note = "omit", `ads.cors_origins is ["*"]: no cookie is sent, and each request is a new visitor to the frequency caps`
	case len(origins) == 0:
		note = "ads.cors_origins lists no origin: a browser keeps this answer from the page until the page's origin is listed (or use the script tag)"
	}
	snippet := fmt.Sprintf(`<div id="%s"></div>
<script>
fetch(%s, {credentials: %s})
  .then(function (r) { return r.status === 200 ? r.json() : null; }) // 204: no ad
  .then(function (answer) {
    var d = answer && answer.decisions[0];
    if (!d) return;
    var slot = document.getElementById(%s);
    if (d.image) {
      var a = document.createElement("a");
      a.href = d.click_url;
      var img = document.createElement("img");
      img.src = d.image;
      img.width = d.w;
      img.height = d.h;
      a.appendChild(img);
      slot.appendChild(a);
    } else if (d.html) {
      slot.innerHTML = d.html;
    }
    new Image().src = d.impression_url; // counts the impression
  });
</script>
`, html.EscapeString(slot), jsString(u), jsString(creds), jsString(slot))
	return &tagSnippet{URL: u, Snippet: snippet, Note: note}
}
