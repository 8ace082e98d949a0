package admin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// accountsWithToken is an accounts file in a new directory with the user
// ops and an API token of theirs.
func accountsWithToken(t *testing.T) (string, *Accounts, string, *Token) {
	t.Helper()
	dir := t.TempDir()
	a, err := OpenAccounts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CreateUser("ops", testPassword, "", PasswordPolicy{MinLength: 12}); err != nil {
		t.Fatal(err)
	}
	plain, tok, err := a.CreateToken("ops", "ci", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return dir, a, plain, tok
}

// A file the server cannot read (here a mode open to others; in the field
// one written by root) refuses every token, and ReadError says why, for
// the server's log; a readable file clears it.
func TestAccountsReadError(t *testing.T) {
	dir, a, plain, _ := accountsWithToken(t)
	path := filepath.Join(dir, "users.json")
	// Another process writes the file with a bad mode.
	other, err := OpenAccounts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.CreateUser("second", testPassword, "", PasswordPolicy{MinLength: 12}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	// Fail closed: a token deleted in a file this process cannot read
	// must not pass.
	if _, ok := a.VerifyToken(plain, time.Now()); ok {
		t.Error("a token passes while the accounts file cannot be read")
	}
	if err := a.ReadError(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("ReadError = %v, want the mode's reason", err)
	}
	if u, _ := a.user("second"); u != nil {
		t.Error("a user of the unreadable file is known")
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if u, err := a.user("second"); err != nil || u == nil {
		t.Errorf("after chmod 600: %v %v", u, err)
	}
	if err := a.ReadError(); err != nil {
		t.Errorf("ReadError after the file is readable: %v", err)
	}
	if _, ok := a.VerifyToken(plain, time.Now()); !ok {
		t.Error("the token is refused once the file is readable again")
	}
}

// Two writes within one tick of a coarse clock (the same modification
// time) are both seen: a token deleted by the second is refused.
func TestAccountsSeeWritesWithinOneTick(t *testing.T) {
	dir, a, plain, tok := accountsWithToken(t)
	path := filepath.Join(dir, "users.json")
	tick := time.Now().Truncate(time.Second)
	if err := os.Chtimes(path, tick, tick); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.VerifyToken(plain, time.Now()); !ok {
		t.Fatal("the token is refused")
	}
	other, err := OpenAccounts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.DeleteToken("ops", tok.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, tick, tick); err != nil { // the same time as before
		t.Fatal(err)
	}
	if _, ok := a.VerifyToken(plain, time.Now()); ok {
		t.Error("a token deleted within the same tick still passes")
	}
}
