package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A module whose tests pass, skip for a missing tool (two packages, the
// same reason), skip in -short mode, and fail: the report names each
// skipped test under its reason, prints the failing test's output and not
// the passing ones', and exits as go test did.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	write("a/a_test.go", `package a

import "testing"

func TestPasses(t *testing.T) { t.Log("quiet when it passes") }

func TestNeedsTool(t *testing.T) {
	t.Skip("frobnicator is not installed (apt-get install frobnicator)")
}

func TestSlow(t *testing.T) {
	if testing.Short() {
		t.Skip("slow; skipped in -short mode")
	}
}

func TestTable(t *testing.T) {
	t.Run("one", func(t *testing.T) {})
	t.Run("two", func(t *testing.T) { t.Skip("frobnicator is not installed (apt-get install frobnicator)") })
}
`)
	write("b/b_test.go", `package b

import "testing"

func TestAlsoNeedsTool(t *testing.T) {
	t.Log("looking for frobnicator")
	t.Skip("frobnicator is not installed (apt-get install frobnicator)")
}

func TestBroken(t *testing.T) {
	t.Log("the broken test's log")
	t.Fatal("it broke")
}
`)
	write("c/c.go", "package c\n")

	var out, errs bytes.Buffer
	status := run([]string{"-short", "-count=1", "./..."}, dir, &out, &errs)
	got := out.String()
	if status != 1 {
		t.Errorf("status %d, want go test's 1\n%s\n%s", status, got, errs.String())
	}
	for _, want := range []string{
		"--- FAIL: TestBroken",
		"the broken test's log",
		"it broke",
		"ok  \texample.com/m/a",
		"FAIL\texample.com/m/b",
		`
skipped 4 tests:
  frobnicator is not installed (apt-get install frobnicator)
      example.com/m/a: TestNeedsTool TestTable/two
      example.com/m/b: TestAlsoNeedsTool
`,
		"  slow; skipped in -short mode\n      example.com/m/a: TestSlow\n",
		"\n3 tests passed, 1 failed, 4 skipped in ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet when it passes") || strings.Contains(got, "=== RUN   TestPasses") || strings.Contains(got, "looking for") {
		t.Errorf("the report shows passing tests' output:\n%s", got)
	}
}

func TestSkipReason(t *testing.T) {
	for _, c := range []struct {
		lines []string
		want  string
	}{
		{[]string{"=== RUN   TestX\n", "    x_test.go:12: redis-server is not installed\n", "--- SKIP: TestX (0.00s)\n"}, "redis-server is not installed"},
		{[]string{"=== RUN   TestX/sub\n", "    redistest.go:38: needs a real Redis\n", "        and a second line\n", "    --- SKIP: TestX/sub (0.00s)\n"}, "needs a real Redis and a second line"},
		{[]string{"=== RUN   TestX\n", "    x_test.go:11: looking\n", "    x_test.go:12: not installed\n", "--- SKIP: TestX (0.00s)\n"}, "not installed"},
		{[]string{"=== RUN   TestX\n", "--- SKIP: TestX (0.00s)\n"}, "(no reason given)"},
	} {
		if got := skipReason(c.lines); got != c.want {
			t.Errorf("skipReason(%q) = %q, want %q", c.lines, got, c.want)
		}
	}
}

// A test binary that dies mid-test: the running test's output is shown.
func TestReportPanic(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	events := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestDies"}
{"Action":"output","Package":"p","Test":"TestDies","Output":"=== RUN   TestDies\n"}
{"Action":"output","Package":"p","Test":"TestDies","Output":"panic: boom\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}
{"Action":"fail","Package":"p","Elapsed":0.01}
`
	if err := r.read(strings.NewReader(events)); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?s)panic: boom\n.*FAIL\tp`).MatchString(out.String()) {
		t.Errorf("output:\n%s", out.String())
	}
}
