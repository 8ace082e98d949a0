// Command testreport runs go test -json with the given flags and packages
// and prints what a contributor reads: each package's result, the whole
// output of every failing test, and at the end every skipped test grouped
// by the reason it gave, so what a run without some tool (redis-server,
// chromium, podman...) or with -short left out is in plain sight. It exits
// with go test's status. make test-short runs it.
//
//	go run ./tools/testreport -short -count=1 ./...
//
// The go command is $GO, else go.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], "", os.Stdout, os.Stderr))
}

// run runs go test -json args in dir and returns the exit status.
func run(args []string, dir string, stdout, stderr io.Writer) int {
	goCmd := cmp.Or(os.Getenv("GO"), "go")
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, args...)...)
	cmd.Dir, cmd.Stderr = dir, stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testreport:", err)
		return 2
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testreport:", err)
		return 2
	}
	r := newReport(stdout)
	if err := r.read(events); err != nil {
		fmt.Fprintln(stderr, "testreport: reading go test -json:", err)
		_, _ = io.Copy(io.Discard, events)
	}
	status := 0
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			fmt.Fprintln(stderr, "testreport:", err)
			return 2
		}
		status = exit.ExitCode()
	}
	r.summary(time.Since(start).Round(time.Second))
	if status == 0 && r.failed > 0 {
		status = 1
	}
	return status
}

// event is one line of go test -json (go doc test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output
}

type key struct{ pkg, test string }

type skip struct {
	pkg, test, reason string
}

// report follows the event stream: it holds each running test's output
// until the test ends, prints it if the test failed, and keeps the reason
// of each skip.
type report struct {
	w              io.Writer
	output         map[key][]string
	skips          []skip
	passed, failed int
}

func newReport(w io.Writer) *report {
	return &report{w: w, output: map[key][]string{}}
}

func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Fprintf(r.w, "%s\n", line) // not an event: pass it on
			continue
		}
		r.event(e)
	}
	return sc.Err()
}

func (r *report) event(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
	case "output":
		r.output[k] = append(r.output[k], e.Output)
	case "pass":
		if e.Test == "" {
			r.printMatching(k, "ok ")
		} else {
			r.passed++
		}
		delete(r.output, k)
	case "fail":
		if e.Test != "" {
			r.failed++
		} else {
			r.unfinished(e.Package)
		}
		for _, line := range r.output[k] {
			fmt.Fprint(r.w, line)
		}
		delete(r.output, k)
	case "skip":
		if e.Test != "" {
			r.skips = append(r.skips, skip{e.Package, e.Test, skipReason(r.output[k])})
		}
		delete(r.output, k)
	}
}

// unfinished prints the output of the package's tests that never ended:
// the ones running when the test binary panicked or timed out.
func (r *report) unfinished(pkg string) {
	var tests []string
	for k := range r.output {
		if k.pkg == pkg && k.test != "" {
			tests = append(tests, k.test)
		}
	}
	slices.Sort(tests)
	for _, test := range tests {
		for _, line := range r.output[key{pkg, test}] {
			fmt.Fprint(r.w, line)
		}
		delete(r.output, key{pkg, test})
	}
}

func (r *report) printMatching(k key, prefix string) {
	for _, line := range r.output[k] {
		if strings.HasPrefix(line, prefix) {
			fmt.Fprint(r.w, line)
		}
	}
}

// position is the file:line that t.Skip puts before its message.
var position = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// skipReason is the last message a skipped test logged (t.Skip's), with
// its continuation lines, without the position of the call.
func skipReason(lines []string) string {
	var parts []string
	for _, line := range lines {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		if position.MatchString(line) { // a new message
			parts = parts[:0]
		}
		parts = append(parts, strings.TrimSpace(position.ReplaceAllString(line, "")))
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

// summary prints the skipped tests by reason, the reasons most tests gave
// first, then the counts.
func (r *report) summary(took time.Duration) {
	byReason := map[string][]skip{}
	for _, s := range r.skips {
		byReason[s.reason] = append(byReason[s.reason], s)
	}
	reasons := make([]string, 0, len(byReason))
	for reason := range byReason {
		reasons = append(reasons, reason)
	}
	slices.SortFunc(reasons, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(byReason[b]), len(byReason[a])), strings.Compare(a, b))
	})
	if len(reasons) > 0 {
		fmt.Fprintf(r.w, "\nskipped %d tests:\n", len(r.skips))
	}
	for _, reason := range reasons {
		fmt.Fprintf(r.w, "  %s\n", reason)
		skips := byReason[reason]
		slices.SortFunc(skips, func(a, b skip) int {
			return cmp.Or(strings.Compare(a.pkg, b.pkg), strings.Compare(a.test, b.test))
		})
		for i := 0; i < len(skips); {
			j := i
			var tests []string
			for ; j < len(skips) && skips[j].pkg == skips[i].pkg; j++ {
				tests = append(tests, skips[j].test)
			}
			fmt.Fprintf(r.w, "      %s: %s\n", skips[i].pkg, strings.Join(tests, " "))
			i = j
		}
	}
	fmt.Fprintf(r.w, "\n%d tests passed, %d failed, %d skipped in %s\n", r.passed, r.failed, len(r.skips), took)
}
