package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"tsubame"
	"tsubame/internal/admin"
	"tsubame/internal/config"
)

// runAdmin manages admin users and API tokens in the accounts file, which
// a running server picks up at once.
// adminFlags are the flags of the admin commands.
type adminFlags struct {
	noTOTP, newTOTP   bool          // create-user, set-password
	user, name, scope string        // create-token
	ttl               time.Duration // create-token
	role              string        // create-user, create-token
}

// runAdmin runs "tsubame admin SUB" with its arguments, counted by the
// command table.
func runAdmin(e *env, sub string, f *adminFlags, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	cfg, err := e.load()
	if err != nil {
		return err
	}
	if sub == "verify-audit" {
		return verifyAudit(cfg, args, stdout)
	}
	accounts, err := admin.OpenAccounts(cfg.AdminDir())
	if err != nil {
		return err
	}
	switch sub {
	case "create-user":
		r := admin.RoleViewer
		if accounts.Empty() {
			r = admin.RoleAdmin // the first user administers the others
		}
		if f.role != "" {
			if r, err = admin.ParseRole(f.role); err != nil {
				return &usageError{msg: tsubame.ErrorMessage(err)}
			}
		}
		return createUser(cfg, accounts, args[0], r, f.noTOTP, e.stdin, stdout, stderr)
	case "delete-user":
		if err := accounts.DeleteUser(args[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted user %s and their API tokens\n", args[0])
		return auditCLI(cfg, args[0], "user.delete")
	case "set-password":
		return setPassword(cfg, accounts, args[0], f, e.stdin, stdout, stderr)
	case "list-tokens":
		if f.user != "" && accounts.RoleOf(f.user) == "" {
			return tsubame.Errorf(tsubame.ENOTFOUND, "no user %q", f.user)
		}
		return listTokens(accounts, f.user, stdout)
	case "delete-token":
		id := args[0]
		if rest, ok := strings.CutPrefix(id, "tsb_"); ok { // the whole token: its id is the part after tsb_
			id, _, _ = strings.Cut(rest, "_")
		}
		tok, err := accounts.DeleteTokenByID(id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted API token %s (%s, of %s)\n", tok.ID, tok.Name, tok.User)
		return auditCLI(cfg, tok.ID, "token.delete")
	case "list-users":
		names, err := accounts.Users()
		if err != nil {
			return err
		}
		for _, n := range names {
			fmt.Fprintln(stdout, n)
		}
		return nil
	case "create-token":
		lifetime, err := admin.TokenLifetime(f.ttl, cfg.Admin.MaxTokenTTL)
		if err != nil {
			return &usageError{msg: tsubame.ErrorMessage(err)}
		}
		var r admin.Role
		if f.role != "" {
			if r, err = admin.ParseRole(f.role); err != nil {
				return &usageError{msg: tsubame.ErrorMessage(err)}
			}
		}
		plain, tok, err := accounts.CreateTokenWith(f.user, f.name, lifetime, r, f.scope)
		if err != nil {
			return err
		}
		expires := "never"
		if !tok.Expires.IsZero() {
			expires = tok.Expires.Format(time.RFC3339)
		}
		fmt.Fprintf(stderr, "API token %s for %s, expires %s (shown once; send it as \"Authorization: Bearer ...\"):\n", tok.ID, f.user, expires)
		fmt.Fprintln(stdout, plain)
		return auditCLI(cfg, tok.ID, "token.create")
	}
	return usagef("unknown admin subcommand %q", sub)
}

func createUser(cfg *config.Config, accounts *admin.Accounts, name string, role admin.Role, noTOTP bool, stdin io.Reader, stdout, stderr io.Writer) error {
	if noTOTP && cfg.Admin.RequireTOTP {
		return usagef("-no-totp: admin.require_totp is true")
	}
	if err := admin.ValidUserName(name); err != nil {
		return err
	}
	password, err := readPassword(stdin, stderr)
	if err != nil {
		return err
	}
	var secret, url string
	if !noTOTP {
		key, err := admin.NewTOTP(name)
		if err != nil {
			return err
		}
		secret, url = key.Secret(), key.URL()
	}
	if err := accounts.CreateUserWithRole(name, password, secret, role, admin.PasswordPolicy{MinLength: cfg.Admin.MinPasswordLength, MinScore: cfg.Admin.MinPasswordScore}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created user %s\n", name)
	if secret != "" {
		fmt.Fprintf(stdout, "TOTP secret (add it to an authenticator app; shown once): %s\n%s\n", secret, url)
	}
	return auditCLI(cfg, name, "user.create")
}

// setPassword replaces a user's password and, with -new-totp or
// -no-totp, their second factor.
func setPassword(cfg *config.Config, accounts *admin.Accounts, name string, f *adminFlags, stdin io.Reader, stdout, stderr io.Writer) error {
	if f.newTOTP && f.noTOTP {
		return usagef("-new-totp and -no-totp: choose one")
	}
	if f.noTOTP && cfg.Admin.RequireTOTP {
		return usagef("-no-totp: admin.require_totp is true")
	}
	if accounts.RoleOf(name) == "" {
		return tsubame.Errorf(tsubame.ENOTFOUND, "no user %q", name)
	}
	password, err := readPassword(stdin, stderr)
	if err != nil {
		return err
	}
	var secret *string
	var url string
	switch {
	case f.newTOTP:
		key, err := admin.NewTOTP(name)
		if err != nil {
			return err
		}
		s := key.Secret()
		secret, url = &s, key.URL()
	case f.noTOTP:
		secret = new(string)
	}
	policy := admin.PasswordPolicy{MinLength: cfg.Admin.MinPasswordLength, MinScore: cfg.Admin.MinPasswordScore}
	if err := accounts.SetCredentials(name, password, secret, policy); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "password of %s replaced; their dashboard sessions end at their next request\n", name)
	if url != "" {
		fmt.Fprintf(stdout, "TOTP secret (add it to an authenticator app; shown once): %s\n%s\n", *secret, url)
	}
	action := "user.password"
	if secret != nil {
		action = "user.password+totp"
	}
	return auditCLI(cfg, name, action)
}

// listTokens writes the API tokens of user (every user's for ""), one per
// line: id, user, name, role, scope, expiry. The secrets are not stored.
func listTokens(accounts *admin.Accounts, user string, stdout io.Writer) error {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUSER\tNAME\tROLE\tSCOPE\tEXPIRES")
	for _, t := range accounts.Tokens(user) {
		expires := "never"
		if !t.Expires.IsZero() {
			expires = t.Expires.UTC().Format(time.RFC3339)
		}
		scope := t.Scope
		if scope == "" {
			scope = "-"
		}
		role := string(t.Role)
		if role == "" {
			role = "(the user's)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.User, t.Name, role, scope, expires)
	}
	return tw.Flush()
}

// readPassword reads the password: typed twice without echo at a terminal,
// else the first line of stdin (for scripts: never as an argument, which
// other users could see in the process list).
func readPassword(stdin io.Reader, stderr io.Writer) (string, error) {
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(stderr, "Password: ")
		p1, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return "", err
		}
		fmt.Fprint(stderr, "Again: ")
		p2, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return "", err
		}
		if string(p1) != string(p2) {
			return "", usagef("the passwords differ")
		}
		return string(p1), nil
	}
	line, err := bufio.NewReaderSize(stdin, 1024).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", usagef("no password on standard input")
	}
	return line, nil
}

// auditCLI records a change made from the command line in the audit log.
func auditCLI(cfg *config.Config, target, action string) error {
	a, alerts, err := openAuditLog(cfg, slog.Default())
	if err != nil {
		return err
	}
	actor := cliActor()
	a.Record(admin.AuditRecord{Time: time.Now(), Actor: actor, Remote: "local", Action: action, Target: target, Result: "ok"})
	return closeAuditLog(a, alerts)
}

// cliActor names who ran the command in the audit log, from the process's
// user id (not $USER, which anyone can set): "cli:alice(uid 1000)", the
// shape of the control socket's "local:alice(uid 1000)".
func cliActor() string {
	actor := "cli:" + userOf(strconv.Itoa(os.Getuid()))
	// Run through sudo -u (as the docs say), the uid is the server's
	// user: the login uid, which the kernel keeps across sudo and a user
	// cannot change, names the person.
	if b, err := os.ReadFile("/proc/self/loginuid"); err == nil {
		if login := strings.TrimSpace(string(b)); login != "" && login != "4294967295" && login != strconv.Itoa(os.Getuid()) {
			actor += " login " + userOf(login)
		}
	}
	return actor
}

// userOf is "NAME(uid N)" for a uid.
func userOf(uid string) string {
	return userName(uid) + "(uid " + uid + ")"
}

// userName is the login name of a uid, else "uidN".
func userName(uid string) string {
	if u, err := user.LookupId(uid); err == nil {
		return u.Username
	}
	return "uid" + uid
}

// verifyAudit checks the hash chain of the audit log (the given files, in
// order, or the configured log's closed files and active file) and reports
// the first break.
func verifyAudit(cfg *config.Config, files []string, stdout io.Writer) error {
	if len(files) == 0 {
		var err error
		if files, err = admin.AuditFiles(cfg.AuditLogPath()); err != nil {
			return err
		}
	}
	var chain admin.AuditChain
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = chain.Verify(name, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("audit log broken at %w", err)
		}
	}
	fmt.Fprintf(stdout, "audit log intact: %d lines in %d file(s), chained lines %d to %d\n", chain.Lines, len(files), chain.First, chain.Last())
	return nil
}
