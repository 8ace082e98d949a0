package render_test

import (
	"bytes"
	"strings"
	"testing"

	"tsubame"
	"tsubame/internal/render"
)

// Values cannot break out of a string, a comment or a script element,
// wherever a template puts them.
func TestTemplateValuesAreSafe(t *testing.T) {
	tmpl, err := render.CompileTemplate("t", `/* {{.Name}} */ var u = {{.URLsJSON}}; // {{.ID}}
x({{index .URLs 0}}, {{js "*/ </script>"}});`)
	if err != nil {
		t.Fatal(err)
	}
	p := &tsubame.Placement{ID: "1", Name: "*/ alert(1); /* </script>", URLs: []string{"http://a.example.com/*/</script>\u2028"}}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, render.NewTemplateData("1", "e", p, nil)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"*/ alert", "</script>", "\u2028", "*/</"} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q:\n%s", bad, out)
		}
	}
	if strings.Count(out, "*/") != 1 { // only the template's own comment end
		t.Errorf("a value ended the comment:\n%s", out)
	}
}

func TestCompileTemplateErrors(t *testing.T) {
	for _, text := range []string{"{{.Nope", "{{.Secret}}", "{{index .URLs 3}}", "{{call .ID}}"} {
		if _, err := render.CompileTemplate("t", text); err == nil {
			t.Errorf("%q compiled", text)
		}
	}
}
