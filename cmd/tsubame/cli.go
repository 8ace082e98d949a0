package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tsubame/internal/config"
)

// A command is one verb of the command line ("serve", "placements get"):
// its flags, its arguments and what it does. The table of commands
// (commands) is the only description of the command line: the usage, each
// group's and command's help, the parsing and the docs' test all read it.
type command struct {
	name string // words after "tsubame": "placements get"
	args string // the arguments' synopsis: "ID URL..."
	// min and max bound the count of arguments (max -1: any).
	min, max int
	// config adds -config FILE, and env.load reads the configuration.
	config bool
	// readOnly commands write nothing under data_dir: root may run them
	// on another user's data directory (see env.load).
	readOnly bool
	// required names the flags that must be given ("user" for -user).
	required []string
	summary  string // one line, for the usage
	help     string // more, for the command's help (-h); may be empty
	// setup defines the command's flags on fs and returns what runs it,
	// with the arguments left once the flags are parsed.
	setup func(fs *flag.FlagSet, e *env) func(ctx context.Context, args []string) error
}

// env is what a command runs with: its standard streams, the process
// environment and, for commands with -config, the flag's value.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        []string
	configPath     string
	readOnly       bool // the command's readOnly
	// logWarnings keeps the configuration's warnings in warnings for the
	// command's own log (serve) instead of writing them to stderr.
	logWarnings bool
	warnings    []string
}

// load reads and validates the configuration named by -config, else by
// $TSUBAME_CONFIG, and writes its warnings to stderr. Run by root, a
// command that writes under data_dir refuses a directory another user
// owns: the files it wrote (the accounts, the audit log, a store) would be
// root's, and the server, running as that user, could not read them.
func (e *env) load() (*config.Config, error) {
	cfg, warnings, err := loadConfigWarnings(e.configPath, e.environ)
	if e.logWarnings {
		e.warnings = warnings
	} else {
		for _, w := range warnings {
			fmt.Fprintf(e.stderr, "tsubame: warning: %s\n", w)
		}
	}
	if err != nil || e.readOnly || os.Geteuid() != 0 {
		return cfg, err
	}
	// Each directory the commands write in, which a key may put outside
	// data_dir: one that does not exist yet is root's own.
	for _, dir := range []struct{ key, path string }{{"data_dir", cfg.DataDir}, {"admin.dir", cfg.AdminDir()},
		{"admin.audit_log", filepath.Dir(cfg.AuditLogPath())}, {"store.embedded.path", filepath.Dir(cfg.StorePath())}} {
		fi, err := os.Stat(dir.path)
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
			name := userName(strconv.FormatUint(uint64(st.Uid), 10))
			return nil, usagef("running as root on %s %s, which belongs to %s: files written now would be root's, "+
				"and a server running as %s could not read them; run the command as that user (sudo -u %s tsubame ...)",
				dir.key, dir.path, name, name, name)
		}
	}
	return cfg, nil
}

// stringList is a flag that may be given more than once.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// findCommand returns the command named by the first words of args (the
// longest name that matches) and the arguments after its name.
func findCommand(args []string) (*command, []string) {
	if len(args) >= 2 {
		if c := lookupCommand(args[0] + " " + args[1]); c != nil {
			return c, args[2:]
		}
	}
	if len(args) >= 1 {
		if c := lookupCommand(args[0]); c != nil {
			return c, args[1:]
		}
	}
	return nil, args
}

func lookupCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// group returns the commands whose name starts with word: "placements"
// gives placements import, export, get, put and delete.
func group(word string) []*command {
	var out []*command
	for i := range commands {
		if first, _, _ := strings.Cut(commands[i].name, " "); first == word {
			out = append(out, &commands[i])
		}
	}
	return out
}

// isHelp says whether an argument asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// errHelpShown says that help was asked for and written: the exit code is 0.
var errHelpShown = errors.New("help shown")

// dispatch finds the command of args and runs it. It writes help where
// help is asked for, and the group's commands where a subcommand is
// missing or unknown.
func dispatch(ctx context.Context, args []string, e *env) error {
	c, rest := findCommand(args)
	if c == nil {
		cmds := group(args[0])
		if len(cmds) == 0 {
			return usagef("unknown command %q (tsubame help lists them)", args[0])
		}
		if len(args) == 1 {
			return usagef("%s needs a subcommand:\n%s", args[0], groupUsage(cmds))
		}
		if isHelp(args[1]) {
			fmt.Fprint(e.stdout, groupUsage(cmds))
			return errHelpShown
		}
		return usagef("unknown %s subcommand %q; the %s commands are:\n%s", args[0], args[1], args[0], groupUsage(cmds))
	}
	run, rest, err := c.parse(rest, e)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, c.longHelp())
		return errHelpShown
	}
	if err != nil {
		return err
	}
	return run(ctx, rest)
}

// parse defines the command's flags and parses args: flags may come
// before, between or after the arguments ("placements get 1 -config F"),
// and "--" ends the flags. It checks the required flags and the count of
// arguments, and returns what runs the command and its arguments.
func (c *command) parse(args []string, e *env) (func(context.Context, []string) error, []string, error) {
	fs := flag.NewFlagSet("tsubame "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, help is written by dispatch
	fs.Usage = func() {}
	run := c.define(fs, e)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, err
			}
			return nil, nil, c.usageErr("%v%s", err, valueHint(fs, err))
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range c.required {
		if !set[name] {
			return nil, nil, c.usageErr("-%s is required", name)
		}
	}
	switch {
	case len(pos) < c.min && c.min == 1:
		return nil, nil, c.usageErr("missing argument %s", c.args)
	case len(pos) < c.min:
		return nil, nil, c.usageErr("needs at least %d arguments (%s), got %d", c.min, c.args, len(pos))
	case c.max >= 0 && len(pos) > c.max:
		extra := pos[c.max:]
		if c.max == 0 {
			if sub := group(c.name); len(sub) > 1 {
				return nil, nil, usagef("%s: unexpected argument %q; the %s commands are:\n%s", c.name, extra[0], c.name, groupUsage(sub))
			}
			return nil, nil, c.usageErr("takes no arguments, got %q", extra)
		}
		return nil, nil, c.usageErr("too many arguments: %q", extra)
	}
	return run, pos, nil
}

// valueHint says what a flag's value is written as, for a value the flag
// package refused with no more than "parse error".
var refusedValue = regexp.MustCompile(`for flag -([a-z-]+): parse error`)

func valueHint(fs *flag.FlagSet, err error) string {
	m := refusedValue.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	f := fs.Lookup(m[1])
	if f == nil {
		return ""
	}
	switch f.Value.(flag.Getter).Get().(type) {
	case time.Duration:
		return " (a number and a unit: 500ms, 30s, 2m, 720h)"
	case int, int64, uint, uint64:
		return " (a whole number)"
	case bool:
		return " (true or false)"
	}
	return ""
}

func (c *command) usageErr(format string, args ...any) error {
	return usagef("%s: %s\n%s(tsubame %s -h describes it)", c.name, fmt.Sprintf(format, args...), c.synopsis("usage: "), c.name)
}

// define defines the command's flags on fs, -config among them, and
// returns what runs it with e.
func (c *command) define(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
	if c.config {
		fs.StringVar(&e.configPath, "config", "", "configuration `FILE` (default $"+config.EnvConfigFile+", else none: the built-in defaults)")
	}
	e.readOnly = c.readOnly
	return c.setup(fs, e)
}

// flagSet returns the command's flags, defined on a set of their own.
func (c *command) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.define(fs, &env{})
	return fs
}

// synopsis is the command's one-line form, wrapped at 80 columns:
// "tsubame placements put [-config FILE] [-name NAME] [-dep KEY]... ID URL...".
func (c *command) synopsis(prefix string) string {
	var required, optional []string
	c.flagSet().VisitAll(func(f *flag.Flag) {
		w := "-" + f.Name
		if name, _ := flag.UnquoteUsage(f); name != "" {
			w += " " + name
		}
		if slices.Contains(c.required, f.Name) {
			required = append(required, w)
			return
		}
		w = "[" + w + "]"
		if _, ok := f.Value.(*stringList); ok {
			w += "..."
		}
		optional = append(optional, w)
	})
	words := append(append([]string{"tsubame " + c.name}, required...), optional...)
	if c.args != "" {
		words = append(words, c.args)
	}
	var b strings.Builder
	indent := strings.Repeat(" ", len(prefix)+len("tsubame ")+len(c.name)+1)
	line := prefix + words[0]
	for _, w := range words[1:] {
		if len(line)+1+len(w) > 80 {
			b.WriteString(line + "\n")
			line = indent + w
			continue
		}
		line += " " + w
	}
	b.WriteString(line + "\n")
	return b.String()
}

// longHelp is what -h writes: the synopsis, what the command does, its
// flags and, for a command with subcommands ("report"), those.
func (c *command) longHelp() string {
	var b strings.Builder
	b.WriteString(c.synopsis("usage: "))
	b.WriteString("\n" + indentText(c.summary, "  "))
	if c.help != "" {
		b.WriteString("\n" + indentText(c.help, "  "))
	}
	fs := c.flagSet()
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		b.WriteString("\nFlags (before or after the arguments):\n")
		fs.SetOutput(&b)
		fs.PrintDefaults()
	}
	if sub := group(c.name); len(sub) > 1 && !strings.Contains(c.name, " ") {
		b.WriteString("\nSubcommands:\n")
		for _, s := range sub[1:] {
			b.WriteString(s.synopsis("  "))
		}
	}
	return b.String()
}

// groupUsage lists commands with their synopses and summaries.
func groupUsage(cmds []*command) string {
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString(c.synopsis("  "))
		b.WriteString(indentText(c.summary, "        "))
	}
	return b.String()
}

// usage is the top-level help: every command.
func usage() string {
	var b strings.Builder
	b.WriteString("Tsubame: an ad delivery server.\n\nUsage:\n")
	all := make([]*command, len(commands))
	for i := range commands {
		all[i] = &commands[i]
	}
	b.WriteString(groupUsage(all))
	b.WriteString(`
tsubame COMMAND -h describes a command and its flags; tsubame GROUP -h
(placements, campaigns, admin, log, pacing, report) lists a group's commands.
Flags may come before or after the arguments; -- ends them.

The configuration file is -config, else $TSUBAME_CONFIG, else none (built-in
defaults); TSUBAME_* variables override any key (see docs/configuration.md).
`)
	return b.String()
}

// indentText wraps text at 80 columns, each line after indent.
func indentText(text, indent string) string {
	var b strings.Builder
	for i, para := range strings.Split(strings.TrimSpace(text), "\n\n") {
		if i > 0 {
			b.WriteString("\n")
		}
		line := indent
		for _, w := range strings.Fields(para) {
			if len(line) > len(indent) && len(line)+1+len(w) > 80 {
				b.WriteString(line + "\n")
				line = indent
			}
			if len(line) > len(indent) {
				line += " "
			}
			line += w
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
