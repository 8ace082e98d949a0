package main

import (
	"bufio"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tsubame/internal/admin"
)

// The docs as tests: every command line README.md, docs/ and deploy/ show
// (in code blocks and `code spans`), and every `tsubame ...` named in the
// configuration files' comments, is a command of commands.go with flags it
// has; one written out in full (no placeholder such as FILE or [-print])
// parses as the command line would. TestDocsCommandsRun runs them.

// docCommand is one command line of the docs.
type docCommand struct {
	where   string   // FILE:LINE
	words   []string // after "tsubame"
	mention bool     // a command named in a sentence, not a command line
}

func (d docCommand) String() string { return d.where + ": tsubame " + strings.Join(d.words, " ") }

// docFiles are the files whose commands are checked, from the repository's root.
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"README.md", "docs/*.md", "deploy/*/README.md", "deploy/*/*.yaml", "deploy/*/*.service",
		"internal/config/defaults.yaml", "Containerfile"} {
		m, err := filepath.Glob(filepath.Join("..", "..", pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 15 {
		t.Fatalf("found only %v", files)
	}
	return files
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	// In prose (comments of configuration files): "tsubame" and the next words.
	proseCommand = regexp.MustCompile(`\btsubame ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?`)
	envAssign    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	// What follows "tsubame" in a command line: a command, a flag or a
	// placeholder ("tsubame 1.5.0" in a program's output is none).
	commandWord = regexp.MustCompile(`^(-{0,2}[a-z][a-z-]*|\.\.\.|[A-Z]+)$`)
)

// proseWords are words that follow "tsubame" in prose without naming a command.
var proseWords = map[string]bool{"commands": true, "command": true, "server": true, "servers": true, "process": true,
	"binary": true, "image": true, "user": true, "node": true, "nodes": true, "is": true, "and": true, "on": true,
	"in": true, "as": true, "to": true, "writes": true, "reads": true, "runs": true, "the": true}

// docCommands extracts the command lines of the docs.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	var out []docCommand
	for _, file := range docFiles(t) {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(file), "../../")
		markdown := strings.HasSuffix(file, ".md")
		inBlock := false
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			where := name + ":" + strconv.Itoa(n)
			if markdown && strings.HasPrefix(strings.TrimSpace(line), "```") {
				inBlock = !inBlock
				continue
			}
			switch {
			case markdown && inBlock:
				out = append(out, shellCommands(where, line)...)
			case markdown:
				for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
					for _, d := range shellCommands(where, m[1]) {
						// `tsubame campaigns import` in a sentence names
						// the command; its arguments are elsewhere.
						if c, rest := findCommand(d.words); c != nil && len(rest) == 0 {
							d.mention = true
						}
						out = append(out, d)
					}
				}
			default: // comments of YAML, a unit file, the Containerfile: prose
				text := line
				if i := strings.Index(line, "#"); i >= 0 {
					text = line[i:]
				}
				for _, m := range proseCommand.FindAllStringSubmatch(text, -1) {
					if proseWords[m[1]] {
						continue
					}
					words := []string{m[1]}
					if m[2] != "" && len(group(m[1])) > 1 {
						words = append(words, m[2])
					}
					out = append(out, docCommand{where: where, words: words})
				}
			}
		}
		f.Close()
	}
	return out
}

// shellCommands returns the tsubame commands of a line of shell: each
// pipeline segment whose command (after "$", VAR=value, sudo -u USER, exec,
// env, "--" of kubectl exec) is tsubame, bin/tsubame or a path to it.
func shellCommands(where, line string) []docCommand {
	var out []docCommand
	words := shellWords(line)
	var seg []string
	flush := func() {
		if c, ok := tsubameCommand(seg); ok {
			out = append(out, docCommand{where: where, words: c})
		}
		seg = nil
	}
	for _, w := range words {
		switch w {
		case "&&", "||", ";", "|", "&", "(", ")":
			flush()
		default:
			seg = append(seg, w)
		}
	}
	flush()
	return out
}

func tsubameCommand(seg []string) ([]string, bool) {
	for i := 0; i < len(seg); i++ {
		w := seg[i]
		switch {
		case w == "$" || w == "exec" || w == "env" || w == "nohup" || w == "time" || envAssign.MatchString(w):
			continue
		case w == "sudo":
			if i+2 < len(seg) && seg[i+1] == "-u" {
				i += 2
			}
			continue
		case w == "--" && i > 0:
			continue
		case filepath.Base(w) == "tsubame" && !strings.HasSuffix(w, "/") && i+1 < len(seg) && commandWord.MatchString(seg[i+1]):
			return seg[i+1:], true
		}
		// kubectl exec POD -- tsubame ...: look past the "--".
		if j := slices.Index(seg[i:], "--"); j > 0 && i+j+1 < len(seg) && filepath.Base(seg[i+j+1]) == "tsubame" {
			i += j
			continue
		}
		return nil, false
	}
	return nil, false
}

// shellWords splits a line of shell into words: quotes group, an
// unquoted # ends the line, and redirections and operators are words of
// their own ("2>file" is dropped with its target).
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote byte
	end := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote, inWord = c, true
		case c == '#' && !inWord:
			end()
			return dropRedirects(words)
		case c == ' ' || c == '\t':
			end()
		case c == ';' || c == '|' || c == '&' || c == '(' || c == ')':
			end()
			op := string(c)
			if i+1 < len(line) && (line[i+1] == c) && (c == '|' || c == '&') {
				op += string(c)
				i++
			}
			words = append(words, op)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	end()
	return dropRedirects(words)
}

// dropRedirects removes "< file", "> file", "2>file", "2>&1" and such.
var redirect = regexp.MustCompile(`^[0-9]?(>>?|<)(&?[0-9]+)?`)

func dropRedirects(words []string) []string {
	var out []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if m := redirect.FindString(w); m != "" && !strings.HasPrefix(w, "<") || w == "<" {
			if m == w && i+1 < len(words) {
				i++ // the target is the next word
			}
			continue
		}
		out = append(out, w)
	}
	return out
}

// placeholder says whether a word stands for something ("FILE", "[-print]",
// "json|yaml", "<zone>", "DIM,...") rather than being it.
func placeholder(w string) bool {
	if strings.ContainsAny(w, "[]<>|{}") || strings.Contains(w, "...") {
		return true
	}
	letters := strings.TrimLeft(w, "-")
	return regexp.MustCompile(`^[A-Z][A-Z0-9_]*(,[A-Z][A-Z0-9_]*)*$`).MatchString(letters) && len(letters) > 0
}

// checkDocCommand returns what is wrong with a documented command line, or "".
func checkDocCommand(d docCommand) string {
	words := d.words
	if len(words) == 0 {
		return "no command"
	}
	if isHelp(words[0]) || words[0] == "-v" || words[0] == "--version" || words[0] == "..." {
		return ""
	}
	c, rest := findCommand(words)
	if c == nil {
		if len(group(words[0])) > 0 && (len(words) == 1 || isHelp(words[1]) || placeholder(words[1])) {
			return "" // a group: "tsubame admin ..."
		}
		return "no such command (tsubame help lists them)"
	}
	concrete := true
	for _, w := range rest {
		if placeholder(w) {
			concrete = false
		}
	}
	fs := c.flagSet()
	for _, w := range rest {
		w = strings.Trim(w, "[]")
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if name == "h" || name == "help" {
			continue
		}
		if fs.Lookup(name) == nil {
			return "tsubame " + c.name + " has no flag -" + name
		}
	}
	if !concrete || d.mention {
		return ""
	}
	if _, _, err := c.parse(rest, &env{}); err != nil && err != flag.ErrHelp {
		return err.Error()
	}
	return ""
}

func TestDocsNameRealCommands(t *testing.T) {
	cmds := docCommands(t)
	if len(cmds) < 60 {
		t.Fatalf("found only %d command lines in the docs", len(cmds))
	}
	seen := map[string]bool{}
	for _, d := range cmds {
		if msg := checkDocCommand(d); msg != "" {
			t.Errorf("%s\n\t%s", d, strings.ReplaceAll(msg, "\n", "\n\t"))
		}
		if c, _ := findCommand(d.words); c != nil {
			seen[c.name] = true
		}
	}
	// Every command is shown somewhere.
	for i := range commands {
		if !seen[commands[i].name] {
			t.Errorf("no doc shows tsubame %s", commands[i].name)
		}
	}
}

// The checker finds what the docs used to get wrong.
func TestDocsCheckerCatches(t *testing.T) {
	for _, tc := range []struct {
		line string
		bad  bool
	}{
		{"tsubame check -config FILE", true},
		{"tsubame access-log export", true},
		{"tsubame log export lines.log", false},
		{"bin/tsubame admin create-user -scope metrics bob", true},
		{"bin/tsubame admin create-token -user NAME -name prometheus -role viewer -scope metrics", false},
		{"bin/tsubame placements get", true},
		{"bin/tsubame placements get 1 -config tsubame.yaml", false},
		{"sudo -u tsubame tsubame report -by day,line_item -tz UTC", false},
		{"kubectl exec tsubame-0 -- tsubame report -by hour -format csv > day.csv", false},
		{"kubectl -n tsubame get pods", false}, // not a command of ours
		{"tsubame report [-from T] [-frob X]", true},
		{"TSUBAME_LISTEN=:8080 bin/tsubame serve -demo 2>err.log &", false},
		{"tsubame serve -demo extra", true},
		{"cmd/tsubame/   the binary", false},
		{"restarted: process 6968 (tsubame 1.5.0, /usr/local/bin/tsubame) replaced", false},
		{"tsubame frob", true},
	} {
		var bad []string
		for _, d := range shellCommands("test", tc.line) {
			if msg := checkDocCommand(d); msg != "" {
				bad = append(bad, msg)
			}
		}
		if (len(bad) > 0) != tc.bad {
			t.Errorf("%q: problems %q, want bad=%v", tc.line, bad, tc.bad)
		}
	}
	if got := shellCommands("test", "kubectl -n tsubame get pods"); len(got) != 0 {
		t.Errorf("kubectl -n tsubame get pods taken for %v", got)
	}
}

// docFailures are the documented command lines the docs show failing, by
// a part of the line, with the exit code they show.
var docFailures = map[string]int{
	"bad.yaml":   exitUsage,  // docs/ads.md: a campaign file's problems, listed
	"edited.log": exitFailed, // docs/admin.md: an edited audit log, found
}

// docsNotRun are the commands whose documented lines are checked but not
// run here: each needs what another test sets up.
var docsNotRun = map[string]string{
	"serve":      "TestMainServesDemoPlacements and the binary's tests",
	"log ship":   "needs Kafka: TestLogShipBackfillWithSCRAM",
	"log export": "needs a server stopped on a store log: TestAccessLogLinesEqualResponsesAcrossRotationsAndSIGTERM",
	"restart":    "replaces the test process's server: TestRestartUnderLoad",
	"log reopen": "signals the server of the pid file: TestLogReopenCommand",
}

// Every command line the Markdown docs show written out in full is run, in
// each file's order, against a server with the demo data, in a directory
// holding the files the lines name. It must succeed, or fail as the docs
// say (docFailures).
func TestDocsCommandsRun(t *testing.T) {
	byFile := map[string][]docCommand{}
	var files []string
	for _, d := range docCommands(t) {
		c, rest := findCommand(d.words)
		if c == nil || d.mention || slices.ContainsFunc(rest, placeholder) || docsNotRun[c.name] != "" ||
			slices.ContainsFunc(rest, filepath.IsAbs) {
			continue // checked by TestDocsNameRealCommands; a path such as /backup is the reader's
		}
		file, _, _ := strings.Cut(d.where, ":")
		if !strings.HasSuffix(file, ".md") {
			continue // prose of configuration files
		}
		if byFile[file] == nil {
			files = append(files, file)
		}
		byFile[file] = append(byFile[file], d)
	}
	ran := 0
	for _, file := range files {
		t.Run(strings.ReplaceAll(file, "/", "_"), func(t *testing.T) {
			dir := t.TempDir()
			writeDocFixtures(t, dir)
			env := append(testEnv(t), "TSUBAME_LISTEN=127.0.0.1:"+freePort(t))
			m := openMain(t, env, true)
			createAssumedUsers(t, m, byFile[file])
			t.Chdir(dir)
			for _, d := range byFile[file] {
				stdin := "{\"id\":\"5\",\"urls\":[\"http://ad5.example.com/a.js\"]}\n"
				if d.words[0] == "admin" {
					stdin = "a long and unusual passphrase 71\n"
				}
				if slices.Contains(d.words, "edited.log") {
					editAuditLog(t, lookupEnv(env, "TSUBAME_DATA_DIR"), filepath.Join(dir, "edited.log"))
				}
				code, out, stderr := runCmd(t, env, stdin, d.words...)
				want := exitOK
				for part, c := range docFailures {
					if strings.Contains(strings.Join(d.words, " "), part) {
						want = c
					}
				}
				if code != want {
					t.Errorf("%s\n\texit %d, want %d\n\tstdout: %s\n\tstderr: %s", d, code, want, out, stderr)
				}
				ran++
			}
		})
	}
	t.Logf("ran %d documented command lines", ran)
	if ran < 25 {
		t.Errorf("ran only %d documented command lines", ran)
	}
}

// writeDocFixtures writes the files the docs' command lines name.
func writeDocFixtures(t *testing.T, dir string) {
	t.Helper()
	campaigns, err := os.ReadFile("demo_campaigns.json") // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	pacing, err := os.ReadFile("testdata/pacing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pacingRTB, err := os.ReadFile("testdata/pacing-rtb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"placements.jsonl":                     "{\"id\":\"1\",\"urls\":[\"http://ad1.example.com/a.js\"]}\n{\"id\":\"2\",\"urls\":[\"http://ad2.example.com/a.js\"]}\n",
		"tsubame.yaml":                         "# every key at its default; the test's environment sets the rest\n",
		"campaigns.yaml":                       string(campaigns),
		"bad.yaml":                             "advertisers:\n  - {id: adv, name: Advertiser}\ncampaigns:\n  - {id: c1, advertiser: nobody}\n",
		"cmd/tsubame/testdata/pacing.yaml":     string(pacing),
		"cmd/tsubame/testdata/pacing-rtb.yaml": string(pacingRTB),
	} {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// editAuditLog copies the server's audit log to path with one word of its
// first line changed, as docs/admin.md shows verify-audit finding.
func editAuditLog(t *testing.T, dataDir, path string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "admin", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), "alice", "mallory", 1)
	if edited == string(b) {
		t.Fatalf("the audit log does not name alice:\n%s", b)
	}
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
}

// createAssumedUsers creates the users a file's lines use (-user NAME,
// delete-user NAME) before any line creates them: the reader has them.
func createAssumedUsers(t *testing.T, m *Main, lines []docCommand) {
	t.Helper()
	created := map[string]bool{}
	var assumed []string
	for _, d := range lines {
		w := d.words
		for i := 0; i+1 < len(w); i++ {
			switch {
			case w[i] == "create-user":
				created[w[len(w)-1]] = true
			case w[i] == "-user" || w[i] == "delete-user":
				if !created[w[i+1]] && !slices.Contains(assumed, w[i+1]) {
					assumed = append(assumed, w[i+1])
				}
			}
		}
	}
	if len(assumed) == 0 {
		return
	}
	accounts, err := admin.OpenAccounts(m.Config.AdminDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range assumed {
		if err := accounts.CreateUserWithRole(name, "a long and unusual passphrase 71", "", admin.RoleAdmin, admin.PasswordPolicy{MinLength: 12}); err != nil {
			t.Fatal(err)
		}
	}
}
