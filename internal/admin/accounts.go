package admin

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"tsubame"
)

// Accounts are the admin users and their API tokens, kept in one JSON file
// (mode 0600) that the running server and the CLI (`tsubame admin
// create-user`) share: every change takes an exclusive lock on a lock file
// beside it, re-reads the file, and replaces it atomically. The server
// re-reads it when its modification time changes. Passwords are stored as
// argon2id hashes and tokens as SHA-256 hashes; TOTP secrets are stored as
// they are (verification needs them), which is why the file is private.
type Accounts struct {
	path string
	mu   sync.Mutex
	data accountsFile
	mod  fileVersion // the file as last read
	// lastStep is the last TOTP time step accepted per user: a code is
	// accepted once (RFC 6238 §5.2).
	lastStep map[string]int64
	// readErr is why the file could not be read the last time it was
	// tried (nil: it was read); while it is set, every credential is
	// refused (ReadError).
	readErr error
}

type accountsFile struct {
	Users  []*User  `json:"users"`
	Tokens []*Token `json:"tokens"`
}

// Role is what a user or a token may do on the admin listener:
//
//	viewer  read placements, stats, the configuration, the access-log view, /metrics
//	editor  a viewer who also writes placements, imports and purges the cache
//	admin   an editor who also manages users and API tokens, and reads /debug/pprof
type Role string

// Roles, weakest first.
const (
	RoleViewer Role = "viewer"
	RoleEditor Role = "editor"
	RoleAdmin  Role = "admin"
)

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleEditor:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Allows reports whether r may do what needs need.
func (r Role) Allows(need Role) bool { return r.rank() > 0 && r.rank() >= need.rank() }

// ParseRole reads a role name.
func ParseRole(s string) (Role, error) {
	if r := Role(s); r.rank() > 0 {
		return r, nil
	}
	return "", tsubame.Errorf(tsubame.EINVALID, "role must be viewer, editor or admin (got %q)", s)
}

// ScopeMetrics limits a token to GET /metrics (a Prometheus scraper).
const ScopeMetrics = "metrics"

// User is an admin user.
type User struct {
	Name     string    `json:"name"`
	Role     Role      `json:"role"`
	Password string    `json:"password"`       // PHC argon2id hash
	TOTP     string    `json:"totp,omitempty"` // base32 secret
	Created  time.Time `json:"created"`
}

// Token is an API token for automation, presented as "Authorization: Bearer
// tsb_<id>_<secret>". Only the SHA-256 of the whole token is stored; the
// token itself is shown once, when created.
type Token struct {
	ID   string `json:"id"`
	User string `json:"user"`
	Name string `json:"name"`
	// Role is at most its user's (checked when it is made, and again at
	// each use: a demoted user's tokens are demoted too).
	Role Role `json:"role"`
	// Scope, if ScopeMetrics, limits the token to GET /metrics.
	Scope   string    `json:"scope,omitempty"`
	Hash    string    `json:"hash"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires,omitzero"`
}

// OpenAccounts reads the accounts file in dir, creating dir (0700) if needed.
// A missing file is an empty set of accounts.
func OpenAccounts(dir string) (*Accounts, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	a := &Accounts{path: filepath.Join(dir, "users.json"), lastStep: map[string]int64{}}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.refresh(); err != nil {
		return nil, err
	}
	return a, nil
}

// refresh re-reads the file if it changed since it was last read.
func (a *Accounts) refresh() error {
	a.readErr = a.read()
	return a.readErr
}

// ReadError is why the accounts file could not be read the last time it
// was tried, or nil. While it cannot be read (a file written by root, a
// bad mode), every login, session and token is refused: a change made in
// it (a token deleted) must not be missed. This says why.
func (a *Accounts) ReadError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.readErr
}

// fileVersion tells one content of the accounts file from another: the
// modification time alone misses two writes within one tick of a coarse
// clock (1 s on some file systems), and every write is a new file (a
// rename), so its inode changes too.
type fileVersion struct {
	mtime time.Time
	ino   uint64
	size  int64
}

func versionOf(fi os.FileInfo) fileVersion {
	v := fileVersion{mtime: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		v.ino = st.Ino
	}
	return v
}

func (a *Accounts) read() error {
	fi, err := os.Stat(a.path)
	if errors.Is(err, os.ErrNotExist) {
		a.data, a.mod = accountsFile{}, fileVersion{}
		return nil
	}
	if err != nil {
		return err
	}
	if versionOf(fi) == a.mod {
		return nil
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s: must not be readable by group or others (mode %v); chmod 600 it", a.path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(a.path)
	if err != nil {
		return err
	}
	var data accountsFile
	if err := json.Unmarshal(b, &data); err != nil {
		return fmt.Errorf("%s: %w", a.path, err)
	}
	// Users and tokens from before roles existed could do everything:
	// they are admins (written so at the next change).
	for _, u := range data.Users {
		if u.Role == "" {
			u.Role = RoleAdmin
		}
	}
	for _, t := range data.Tokens {
		if t.Role == "" {
			t.Role = RoleAdmin
		}
	}
	a.data, a.mod = data, versionOf(fi)
	return nil
}

// update applies fn to the current accounts under the file lock and writes
// the result if fn succeeds.
func (a *Accounts) update(fn func(d *accountsFile) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	lock, err := os.OpenFile(a.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	a.mod = fileVersion{} // re-read whatever another process wrote
	if err := a.refresh(); err != nil {
		return err
	}
	next := accountsFile{Users: slices.Clone(a.data.Users), Tokens: slices.Clone(a.data.Tokens)}
	if err := fn(&next); err != nil {
		return err
	}
	b, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return err
	}
	tmp := a.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, a.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	a.data = next
	if fi, err := os.Stat(a.path); err == nil {
		a.mod = versionOf(fi)
	}
	return nil
}

// ValidUserName reports whether name can name a user: 1 to 64 letters,
// digits and . _ @ -.
func ValidUserName(name string) error {
	if name == "" || len(name) > 64 {
		return tsubame.Errorf(tsubame.EINVALID, "user name must be 1 to 64 characters long")
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '@' || c == '-') {
			return tsubame.Errorf(tsubame.EINVALID, "user name may hold only letters, digits and . _ @ -")
		}
	}
	return nil
}

// NewTOTP makes a TOTP secret for a user (SHA-1, 6 digits, 30 s: what
// authenticator apps expect) and returns the key, whose URL an app can import.
func NewTOTP(user string) (*otp.Key, error) {
	return totp.Generate(totp.GenerateOpts{Issuer: "Tsubame", AccountName: user})
}

// TOTPQR is the QR code of a TOTP key's otpauth:// URL, as a PNG data URL
// an <img> shows (the dashboard's Content-Security-Policy allows data:
// images), for an authenticator app to scan.
func TOTPQR(key *otp.Key) (string, error) {
	img, err := key.Image(qrPixels, qrPixels)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return "", err
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes()), nil
}

// qrPixels is the QR code's width and height: about 4 pixels a module for
// the version an otpauth:// URL needs, what a phone's camera reads off a
// screen at arm's length.
const qrPixels = 240

// enrolment is the answer to a request that made a user: the role and the
// TOTP secret as text, as otpauth:// URL and as QR code (shown this once).
func enrolment(user string, role Role, key *otp.Key) map[string]string {
	out := map[string]string{"user": user, "role": string(role), "totp_secret": key.Secret(), "totp_url": key.URL()}
	if img, err := TOTPQR(key); err == nil {
		out["totp_qr"] = img
	}
	return out
}

// CreateUser adds a user after checking the name and the password against
// policy. totpSecret may be empty only when the caller allows users without
// a second factor.
func (a *Accounts) CreateUser(name, password, totpSecret string, policy PasswordPolicy) error {
	return a.CreateUserWithRole(name, password, totpSecret, RoleAdmin, policy)
}

// CreateUserWithRole is CreateUser with the user's role.
func (a *Accounts) CreateUserWithRole(name, password, totpSecret string, role Role, policy PasswordPolicy) error {
	if err := ValidUserName(name); err != nil {
		return err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return err
	}
	if err := policy.Check(name, password); err != nil {
		return tsubame.WrapError(tsubame.EINVALID, err, "%v", err)
	}
	hash, err := hashPassword(password)
	if err != nil {
		return err
	}
	return a.update(func(d *accountsFile) error {
		if slices.ContainsFunc(d.Users, func(u *User) bool { return u.Name == name }) {
			return tsubame.Errorf(tsubame.ECONFLICT, "user %q exists", name)
		}
		// Names that differ by case only look alike in the audit log and
		// the dashboard: one could pass for the other.
		if i := slices.IndexFunc(d.Users, func(u *User) bool { return strings.EqualFold(u.Name, name) }); i >= 0 {
			return tsubame.Errorf(tsubame.ECONFLICT, "user %q exists; names may not differ by case only (%q)", d.Users[i].Name, name)
		}
		d.Users = append(d.Users, &User{Name: name, Role: role, Password: hash, TOTP: totpSecret, Created: time.Now().UTC()})
		return nil
	})
}

// errLastAdmin refuses to leave the accounts without an admin.
var errLastAdmin = tsubame.Errorf(tsubame.ECONFLICT, "the last admin cannot be deleted or demoted: make another admin first")

func lastAdmin(d *accountsFile, name string) bool {
	admins := 0
	isAdmin := false
	for _, u := range d.Users {
		if u.Role == RoleAdmin {
			admins++
			isAdmin = isAdmin || u.Name == name
		}
	}
	return isAdmin && admins == 1
}

// SetRole changes a user's role. The last admin cannot be demoted.
func (a *Accounts) SetRole(name string, role Role) error {
	if _, err := ParseRole(string(role)); err != nil {
		return err
	}
	return a.update(func(d *accountsFile) error {
		i := slices.IndexFunc(d.Users, func(u *User) bool { return u.Name == name })
		if i < 0 {
			return tsubame.Errorf(tsubame.ENOTFOUND, "no user %q", name)
		}
		if role != RoleAdmin && lastAdmin(d, name) {
			return errLastAdmin
		}
		u := *d.Users[i]
		u.Role = role
		d.Users[i] = &u
		return nil
	})
}

// SetCredentials replaces a user's password after checking it against
// policy and, when totpSecret is not nil, their TOTP secret ("" removes
// the second factor: the caller checks that this is allowed). The user's
// dashboard sessions end at their next request (Server.sessionUser
// compares the credentials a session began with); API tokens are not changed.
func (a *Accounts) SetCredentials(name, password string, totpSecret *string, policy PasswordPolicy) error {
	if err := policy.Check(name, password); err != nil {
		return tsubame.WrapError(tsubame.EINVALID, err, "%v", err)
	}
	hash, err := hashPassword(password)
	if err != nil {
		return err
	}
	return a.update(func(d *accountsFile) error {
		i := slices.IndexFunc(d.Users, func(u *User) bool { return u.Name == name })
		if i < 0 {
			return tsubame.Errorf(tsubame.ENOTFOUND, "no user %q", name)
		}
		u := *d.Users[i]
		u.Password = hash
		if totpSecret != nil {
			u.TOTP = *totpSecret
		}
		d.Users[i] = &u
		return nil
	})
}

// DeleteUser removes a user and every token of theirs. The last admin
// cannot be deleted.
func (a *Accounts) DeleteUser(name string) error {
	return a.update(func(d *accountsFile) error {
		if lastAdmin(d, name) {
			return errLastAdmin
		}
		n := len(d.Users)
		d.Users = slices.DeleteFunc(d.Users, func(u *User) bool { return u.Name == name })
		if len(d.Users) == n {
			return tsubame.Errorf(tsubame.ENOTFOUND, "no user %q", name)
		}
		d.Tokens = slices.DeleteFunc(d.Tokens, func(t *Token) bool { return t.User == name })
		return nil
	})
}

// RoleOf returns a user's role ("" for no such user).
func (a *Accounts) RoleOf(name string) Role {
	u, err := a.user(name)
	if err != nil || u == nil {
		return ""
	}
	return u.Role
}

// Users lists the users' names.
func (a *Accounts) Users() ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.refresh(); err != nil {
		return nil, err
	}
	var out []string
	for _, u := range a.data.Users {
		out = append(out, u.Name)
	}
	return out, nil
}

// Empty reports whether no user exists yet.
func (a *Accounts) Empty() bool {
	names, err := a.Users()
	return err == nil && len(names) == 0
}

func (a *Accounts) user(name string) (*User, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.refresh(); err != nil {
		return nil, err
	}
	for _, u := range a.data.Users {
		if u.Name == name {
			return u, nil
		}
	}
	return nil, nil
}

// errBadCredentials is the one answer to every failed login, whichever part
// was wrong: the caller cannot learn which names exist.
var errBadCredentials = errors.New("invalid credentials")

// Authenticate checks a name, password and TOTP code. Every failure returns
// errBadCredentials after about the same work; only a broken accounts file
// returns another error.
func (a *Accounts) Authenticate(name, password, code string, now time.Time) (*User, error) {
	if len(password) > MaxPasswordLength || len(name) > 64 || len(code) > 16 {
		return nil, errBadCredentials
	}
	u, err := a.user(name)
	if err != nil {
		return nil, err
	}
	hash := dummyHash()
	if u != nil {
		hash = u.Password
	}
	ok, err := checkPassword(hash, password)
	if err != nil {
		return nil, err
	}
	if u == nil || !ok {
		return nil, errBadCredentials
	}
	if u.TOTP != "" && !a.checkTOTP(u, code, now) {
		return nil, errBadCredentials
	}
	return u, nil
}

// checkTOTP accepts a code of the current 30 s step or the one on either
// side (clock drift), once.
func (a *Accounts) checkTOTP(u *User, code string, now time.Time) bool {
	if len(code) != 6 {
		return false
	}
	opts := totp.ValidateOpts{Period: 30, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}
	step := now.Unix() / 30
	for _, s := range []int64{step - 1, step, step + 1} {
		want, err := totp.GenerateCodeCustom(u.TOTP, time.Unix(s*30, 0), opts)
		if err != nil || subtle.ConstantTimeCompare([]byte(want), []byte(code)) != 1 {
			continue
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if s <= a.lastStep[u.Name] {
			return false // replayed
		}
		a.lastStep[u.Name] = s
		return true
	}
	return false
}

// tokenPrefix starts every API token, so secret scanners can spot one.
const tokenPrefix = "tsb_"

// CreateToken makes an API token for user; the returned string is the only
// copy of the secret. ttl <= 0 means it never expires.
// TokenLifetime is the lifetime a new token gets when ttl is asked for
// (0: none asked) under the cap max (admin.max_token_ttl; 0: no cap): the
// cap when none is asked, an error when more is.
func TokenLifetime(ttl, max time.Duration) (time.Duration, error) {
	switch {
	case ttl < 0:
		return 0, tsubame.Errorf(tsubame.EINVALID, "ttl must be a positive duration such as 720h")
	case max <= 0:
		return ttl, nil
	case ttl == 0:
		return max, nil
	case ttl > max:
		return 0, tsubame.Errorf(tsubame.EINVALID, "ttl %v is longer than admin.max_token_ttl (%v)", ttl, max)
	}
	return ttl, nil
}

func (a *Accounts) CreateToken(user, name string, ttl time.Duration) (string, *Token, error) {
	return a.CreateTokenWith(user, name, ttl, "", "")
}

// CreateTokenWith is CreateToken with the token's role (at most the
// user's; "" is the user's) and scope ("" or ScopeMetrics).
func (a *Accounts) CreateTokenWith(user, name string, ttl time.Duration, role Role, scope string) (string, *Token, error) {
	if role != "" {
		if _, err := ParseRole(string(role)); err != nil {
			return "", nil, err
		}
	}
	if scope != "" && scope != ScopeMetrics {
		return "", nil, tsubame.Errorf(tsubame.EINVALID, "scope must be empty or %q", ScopeMetrics)
	}
	if name == "" || len(name) > 64 || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", nil, tsubame.Errorf(tsubame.EINVALID, "token name must be 1 to 64 printable characters")
	}
	idb := make([]byte, 6)
	secret := make([]byte, 32)
	if _, err := rand.Read(idb); err != nil {
		return "", nil, err
	}
	if _, err := rand.Read(secret); err != nil {
		return "", nil, err
	}
	id := hex.EncodeToString(idb)
	plain := tokenPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret)
	sum := sha256.Sum256([]byte(plain))
	t := &Token{ID: id, User: user, Name: name, Role: role, Scope: scope, Hash: hex.EncodeToString(sum[:]), Created: time.Now().UTC()}
	if ttl > 0 {
		t.Expires = t.Created.Add(ttl)
	}
	err := a.update(func(d *accountsFile) error {
		i := slices.IndexFunc(d.Users, func(u *User) bool { return u.Name == user })
		if i < 0 {
			return tsubame.Errorf(tsubame.ENOTFOUND, "no user %q", user)
		}
		if t.Role == "" {
			t.Role = d.Users[i].Role
		}
		if !d.Users[i].Role.Allows(t.Role) {
			return tsubame.Errorf(tsubame.EINVALID, "a token's role (%s) cannot exceed its user's (%s)", t.Role, d.Users[i].Role)
		}
		d.Tokens = append(d.Tokens, t)
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	return plain, t, nil
}

// Tokens lists the tokens of user (every user's when user is "").
func (a *Accounts) Tokens(user string) []Token {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.refresh()
	var out []Token
	for _, t := range a.data.Tokens {
		if user == "" || t.User == user {
			out = append(out, *t)
		}
	}
	return out
}

// DeleteTokenByID revokes the token with the given id, whoever's it is,
// and returns it.
func (a *Accounts) DeleteTokenByID(id string) (Token, error) {
	var gone Token
	err := a.update(func(d *accountsFile) error {
		i := slices.IndexFunc(d.Tokens, func(t *Token) bool { return t.ID == id })
		if i < 0 {
			return tsubame.Errorf(tsubame.ENOTFOUND, "no token %q", id)
		}
		gone = *d.Tokens[i]
		d.Tokens = slices.Delete(d.Tokens, i, i+1)
		return nil
	})
	return gone, err
}

// DeleteToken revokes the token with the given id if it belongs to user.
func (a *Accounts) DeleteToken(user, id string) error {
	return a.update(func(d *accountsFile) error {
		n := len(d.Tokens)
		d.Tokens = slices.DeleteFunc(d.Tokens, func(t *Token) bool { return t.ID == id && t.User == user })
		if len(d.Tokens) == n {
			return tsubame.Errorf(tsubame.ENOTFOUND, "no token %q", id)
		}
		return nil
	})
}

// VerifyToken returns the presented token (its Role capped by its user's
// current role), and whether it is known, well-formed and unexpired.
func (a *Accounts) VerifyToken(plain string, now time.Time) (Token, bool) {
	rest, ok := strings.CutPrefix(plain, tokenPrefix)
	if !ok || len(plain) > 128 {
		return Token{}, false
	}
	id, _, ok := strings.Cut(rest, "_")
	if !ok {
		return Token{}, false
	}
	sum := sha256.Sum256([]byte(plain))
	want := hex.EncodeToString(sum[:])
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refresh() != nil {
		// A token deleted in the file this process cannot read must not
		// pass: fail closed, as logins and sessions do (ReadError says why).
		return Token{}, false
	}
	for _, t := range a.data.Tokens {
		if t.ID == id && subtle.ConstantTimeCompare([]byte(t.Hash), []byte(want)) == 1 {
			if !t.Expires.IsZero() && now.After(t.Expires) {
				return Token{}, false
			}
			i := slices.IndexFunc(a.data.Users, func(u *User) bool { return u.Name == t.User })
			if i < 0 {
				return Token{}, false
			}
			tok := *t
			if u := a.data.Users[i]; !u.Role.Allows(tok.Role) {
				tok.Role = u.Role
			}
			return tok, true
		}
	}
	return Token{}, false
}
