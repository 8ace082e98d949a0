package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"tsubame"
	"tsubame/internal/admin"
	"tsubame/internal/config"
)

// runAdmin manages admin users and API tokens in the accounts file, which
// a running server picks up at once.
func runAdmin(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, environ []string) error {
	if len(args) == 0 {
		return usagef("admin needs a subcommand: create-user, delete-user, list-users, create-token, verify-audit")
	}
	sub, rest := args[0], args[1:]
	fs, path := newFlagSet("admin "+sub, stderr)
	noTOTP := fs.Bool("no-totp", false, "create-user: no TOTP second factor (only with admin.require_totp: false)")
	user := fs.String("user", "", "create-token: the user the token acts as")
	name := fs.String("name", "", "create-token: what the token is for")
	ttl := fs.Duration("ttl", 0, "create-token: lifetime (0: admin.max_token_ttl)")
	role := fs.String("role", "", "create-user: viewer, editor or admin (default: admin for the first user, else viewer); create-token: at most the user's (default: the user's)")
	scope := fs.String("scope", "", "create-token: metrics limits the token to GET /metrics")
	if err := fs.Parse(rest); err != nil {
		return err
	}
	cfg, err := loadConfig(*path, environ, stderr)
	if err != nil {
		return err
	}
	if sub == "verify-audit" {
		return verifyAudit(cfg, fs.Args(), stdout)
	}
	accounts, err := admin.OpenAccounts(cfg.AdminDir())
	if err != nil {
		return err
	}
	switch sub {
	case "create-user":
		if fs.NArg() != 1 {
			return usagef("usage: tsubame admin create-user [-config FILE] [-role ROLE] [-no-totp] NAME (the password is read from standard input)")
		}
		r := admin.RoleViewer
		if accounts.Empty() {
			r = admin.RoleAdmin // the first user administers the others
		}
		if *role != "" {
			if r, err = admin.ParseRole(*role); err != nil {
				return &usageError{msg: tsubame.ErrorMessage(err)}
			}
		}
		return createUser(cfg, accounts, fs.Arg(0), r, *noTOTP, stdin, stdout, stderr)
	case "delete-user":
		if fs.NArg() != 1 {
			return usagef("usage: tsubame admin delete-user [-config FILE] NAME")
		}
		if err := accounts.DeleteUser(fs.Arg(0)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted user %s and their API tokens\n", fs.Arg(0))
		return auditCLI(cfg, fs.Arg(0), "user.delete")
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
		if *user == "" || *name == "" || fs.NArg() != 0 {
			return usagef("usage: tsubame admin create-token [-config FILE] -user NAME -name PURPOSE [-role ROLE] [-scope metrics] [-ttl 720h]")
		}
		lifetime, err := admin.TokenLifetime(*ttl, cfg.Admin.MaxTokenTTL)
		if err != nil {
			return &usageError{msg: tsubame.ErrorMessage(err)}
		}
		var r admin.Role
		if *role != "" {
			if r, err = admin.ParseRole(*role); err != nil {
				return &usageError{msg: tsubame.ErrorMessage(err)}
			}
		}
		plain, tok, err := accounts.CreateTokenWith(*user, *name, lifetime, r, *scope)
		if err != nil {
			return err
		}
		expires := "never"
		if !tok.Expires.IsZero() {
			expires = tok.Expires.Format(time.RFC3339)
		}
		fmt.Fprintf(stderr, "API token %s for %s, expires %s (shown once; send it as \"Authorization: Bearer ...\"):\n", tok.ID, *user, expires)
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
	actor := "cli"
	if u := os.Getenv("USER"); u != "" {
		actor = "cli:" + u
	}
	a.Record(admin.AuditRecord{Time: time.Now(), Actor: actor, Remote: "local", Action: action, Target: target, Result: "ok"})
	return closeAuditLog(a, alerts)
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
