package render

import (
	"bytes"
	"fmt"
	"text/template"

	"tsubame"
)

// A response template (text/template) writes JavaScript from a placement,
// e.g. a script that appends the ad tags to the page. Every value a
// template gets is already encoded for JavaScript: strings are JSON string
// literals (quotes included, with <, >, &, U+2028 and U+2029 escaped, so they
// cannot close a <script> or break out of a string), the callback is a
// checked identifier path. A template cannot write a raw request value.

// JSValue is text that is safe to write into JavaScript as it is.
type JSValue string

// TemplateData is what a response template renders.
type TemplateData struct {
	Found    bool      // the placement exists
	ID       JSValue   // "1"
	Name     JSValue   // "Top banner" ("" when unnamed)
	URLs     []JSValue // each a string literal: "http://ad1.example.com/tag.js"
	URLsJSON JSValue   // the array literal: ["http://...","http://..."]
	Callback JSValue   // the callback parameter, a checked identifier path, or "" when absent
	Endpoint JSValue   // "sample3"
}

// NewTemplateData encodes p (nil when not found) for a template.
func NewTemplateData(id, endpoint string, p *tsubame.Placement, callback []byte) *TemplateData {
	d := &TemplateData{ID: js(id), Endpoint: js(endpoint), Name: js(""), URLsJSON: "[]"}
	if ValidCallback(callback) {
		d.Callback = JSValue(callback)
	}
	if p == nil {
		return d
	}
	d.Found, d.Name = true, js(p.Name)
	arr := []byte{'['}
	for i, u := range p.URLs {
		d.URLs = append(d.URLs, js(u))
		if i > 0 {
			arr = append(arr, ',')
		}
		arr = AppendJSONString(arr, u)
	}
	d.URLsJSON = JSValue(escapeSlash(append(arr, ']')))
	return d
}

// js makes a string literal; it also escapes "/" (as \/), so a value cannot
// end a comment ("*/") or a script element even where a template puts it
// outside a string.
func js(s string) JSValue { return JSValue(escapeSlash(AppendJSONString(nil, s))) }

func escapeSlash(b []byte) []byte {
	if !bytes.Contains(b, []byte{'/'}) {
		return b
	}
	return bytes.ReplaceAll(b, []byte{'/'}, []byte(`\/`))
}

// templateFuncs are available to every response template.
var templateFuncs = template.FuncMap{
	// js encodes any string as a JavaScript string literal.
	"js": func(s string) JSValue { return js(s) },
}

// CompileTemplate parses a response template. The error names the template
// and says where it is wrong.
func CompileTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(templateFuncs).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	// Render once with sample data, so a template that refers to a field
	// that does not exist fails at load, not at the first request.
	sample := NewTemplateData("1", "e", &tsubame.Placement{ID: "1", URLs: []string{"http://a.example.com/"}}, []byte("cb"))
	if err := t.Execute(&bytes.Buffer{}, sample); err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return t, nil
}
