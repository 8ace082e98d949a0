package tsubame_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"tsubame"
)

func TestValidID(t *testing.T) {
	for _, id := range []string{"1", "top-banner", "site_1.slot:2", "a@b", strings.Repeat("x", tsubame.MaxIDLength)} {
		if err := tsubame.ValidID(id); err != nil {
			t.Errorf("ValidID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", " 1", "a/b", "<x>", "1\x00", "é", "a b", "a\"", strings.Repeat("x", tsubame.MaxIDLength+1)} {
		if err := tsubame.ValidID(id); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("ValidID(%q) = %v, want EINVALID", id, err)
		}
	}
}

func TestPlacementValidate(t *testing.T) {
	ok := &tsubame.Placement{ID: "1", URLs: []string{"http://a.example.com/t.js", "https://b.example.com/t.js?x=1&y=2"},
		Name: "Top banner (日本)", Deps: []string{"campaign:42"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	many := make([]string, tsubame.MaxURLs+1)
	for i := range many {
		many[i] = fmt.Sprintf("http://a.example.com/%d.js", i)
	}
	bad := map[string]*tsubame.Placement{
		"no urls":      {ID: "1"},
		"too many":     {ID: "1", URLs: many},
		"relative":     {ID: "1", URLs: []string{"/t.js"}},
		"scheme":       {ID: "1", URLs: []string{"javascript:alert(1)"}},
		"no host":      {ID: "1", URLs: []string{"http:///t.js"}},
		"space":        {ID: "1", URLs: []string{"http://a.example.com/a b.js"}},
		"newline":      {ID: "1", URLs: []string{"http://a.example.com/\r\nX: y"}},
		"u2028":        {ID: "1", URLs: []string{"http://a.example.com/\u2028"}},
		"long url":     {ID: "1", URLs: []string{"http://a.example.com/" + strings.Repeat("a", tsubame.MaxURLLength)}},
		"name control": {ID: "1", URLs: []string{"http://a.example.com/"}, Name: "a\x1b[31m"},
		"bad utf8":     {ID: "1", URLs: []string{"http://a.example.com/"}, Name: "\xff"},
		"empty dep":    {ID: "1", URLs: []string{"http://a.example.com/"}, Deps: []string{""}},
		"dep space":    {ID: "1", URLs: []string{"http://a.example.com/"}, Deps: []string{"a b"}},
		"bad id":       {ID: "a/b", URLs: []string{"http://a.example.com/"}},
	}
	for name, p := range bad {
		if err := p.Validate(); tsubame.ErrorCode(err) != tsubame.EINVALID {
			t.Errorf("%s: Validate = %v, want EINVALID", name, err)
		}
	}
}

func TestCloneIsDeep(t *testing.T) {
	p := &tsubame.Placement{ID: "1", URLs: []string{"http://a.example.com/"}, Deps: []string{"d"}}
	c := p.Clone()
	c.URLs[0], c.Deps[0] = "x", "y"
	if p.URLs[0] != "http://a.example.com/" || p.Deps[0] != "d" {
		t.Fatal("Clone shares slices")
	}
	if (*tsubame.Placement)(nil).Clone() != nil {
		t.Fatal("Clone of nil")
	}
}

func TestErrors(t *testing.T) {
	cause := errors.New("dial tcp 10.1.2.3:6379: connection refused")
	err := fmt.Errorf("loading: %w", tsubame.WrapError(tsubame.EUNAVAILABLE, cause, "store unavailable"))
	if tsubame.ErrorCode(err) != tsubame.EUNAVAILABLE || tsubame.ErrorMessage(err) != "store unavailable" {
		t.Fatalf("code %q message %q", tsubame.ErrorCode(err), tsubame.ErrorMessage(err))
	}
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "10.1.2.3") {
		t.Fatal("cause lost for operators")
	}
	plain := errors.New("boom: secret detail")
	if tsubame.ErrorCode(plain) != tsubame.EINTERNAL || tsubame.ErrorMessage(plain) != "internal error" {
		t.Fatal("internal errors must not leak their text")
	}
	if tsubame.ErrorCode(nil) != "" || tsubame.ErrorMessage(nil) != "" {
		t.Fatal("nil")
	}
	if !tsubame.IsNotFound(tsubame.Errorf(tsubame.ENOTFOUND, "x")) || tsubame.IsNotFound(plain) {
		t.Fatal("IsNotFound")
	}
	if err := tsubame.ValidatePlacements([]*tsubame.Placement{nil}); err == nil {
		t.Fatal("nil placement accepted")
	}
}

// IDChar admits exactly the letters, the digits and -_.:@, of every byte.
func TestIDCharEveryByte(t *testing.T) {
	const rule = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:@"
	for c := range 256 {
		if got, want := tsubame.IDChar(byte(c)), strings.IndexByte(rule, byte(c)) >= 0; got != want {
			t.Errorf("IDChar(%#x) = %v, want %v", c, got, want)
		}
	}
}
