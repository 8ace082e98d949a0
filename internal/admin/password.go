package admin

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	zxcvbn "github.com/ccojocar/zxcvbn-go"
	"golang.org/x/crypto/argon2"
)

// Argon2id parameters: OWASP's password storage cheat sheet's first choice
// (19 MiB, 2 passes, 1 lane). They are kept in each hash, so changing them
// later leaves existing hashes verifiable.
const (
	argonTime    = 2
	argonMemory  = 19 * 1024 // KiB
	argonThreads = 1
	argonKeyLen  = 32
	argonSaltLen = 16
)

// MaxPasswordLength bounds what is hashed (NIST SP 800-63B asks to accept at
// least 64 characters); longer input is refused before any work.
const MaxPasswordLength = 256

// hashSlots bounds the argon2id computations running at once: each takes
// 19 MiB and a core for tens of milliseconds, so a login flood must queue
// here rather than exhaust memory.
var hashSlots = make(chan struct{}, 2)

// hashPassword returns the PHC-format argon2id hash of password with a fresh
// random salt.
func hashPassword(password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argonKey(password, salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)), nil
}

func argonKey(password string, salt []byte, t, m uint32, p uint8, keyLen uint32) []byte {
	hashSlots <- struct{}{}
	defer func() { <-hashSlots }()
	return argon2.IDKey([]byte(password), salt, t, m, p, keyLen)
}

var errBadHash = errors.New("malformed password hash")

// checkPassword reports whether password matches the PHC-format hash.
func checkPassword(hash, password string) (bool, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errBadHash
	}
	var version int
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, errBadHash
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || t == 0 || p == 0 || m > 1<<20 || t > 16 {
		return false, errBadHash
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) == 0 {
		return false, errBadHash
	}
	got := argonKey(password, salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// dummyHash is checked against when the user does not exist, so an unknown
// name costs the same time as a wrong password.
var dummyHash = sync.OnceValue(func() string {
	h, err := hashPassword("tsubame-timing-equaliser")
	if err != nil {
		panic(err)
	}
	return h
})

// The 10,000 most common passwords (SecLists' 10-million-password-list-top-10000,
// see commonpw/README.md), one per line.
//
//go:embed commonpw/top10000.txt
var commonPasswordsText []byte

var commonPasswords = sync.OnceValue(func() map[string]struct{} {
	set := make(map[string]struct{}, 10000)
	sc := bufio.NewScanner(bytes.NewReader(commonPasswordsText))
	for sc.Scan() {
		if w := strings.TrimSpace(sc.Text()); w != "" {
			set[strings.ToLower(w)] = struct{}{}
		}
	}
	return set
})

// PasswordPolicy is NIST SP 800-63B §5.1.1.2 for memorized secrets: a
// minimum length, a generous maximum, any characters, no composition rules,
// and a check against passwords known to be common. Its messages name the
// rule, never the password.
type PasswordPolicy struct {
	MinLength int
	// MinScore is the least zxcvbn score (0..4) a password must reach: an
	// estimate of how many guesses an attacker's cracking rules need, which
	// sees through a common word with digits appended (password1234),
	// keyboard walks, sequences, repeats, dates and the user's name. 0
	// skips the estimate.
	MinScore int
}

// Check returns why password cannot be used by user, or nil.
func (pp PasswordPolicy) Check(user, password string) error {
	n := utf8.RuneCountInString(password)
	switch {
	case !utf8.ValidString(password):
		return errors.New("password must be valid UTF-8")
	case n < pp.MinLength:
		return fmt.Errorf("password must be at least %d characters long", pp.MinLength)
	case len(password) > MaxPasswordLength:
		return fmt.Errorf("password must be at most %d bytes long", MaxPasswordLength)
	}
	lower := strings.ToLower(password)
	if _, common := commonPasswords()[lower]; common {
		return errors.New("password is one of the 10,000 most common passwords; choose another")
	}
	if strings.Contains(lower, strings.ToLower(user)) {
		return errors.New("password must not contain the user name")
	}
	if strings.Count(password, password[:1]) == len(password) {
		return errors.New("password must not repeat a single character")
	}
	if pp.MinScore > 0 {
		if r := zxcvbn.PasswordStrength(password, []string{user, "tsubame", "admin"}); r.Score < pp.MinScore {
			return errors.New("password is too easy to guess (a common word or name with small changes, a keyboard or " +
				"number sequence, a repeat or a date); choose a longer, less predictable one, such as several unrelated words")
		}
	}
	return nil
}
