package tsubame_test

import (
	"errors"
	"slices"
	"testing"

	"tsubame"
)

func TestEachLine(t *testing.T) {
	for in, want := range map[string][]string{
		"":           nil,
		"a\n":        {"a"},
		"a\nb\n":     {"a", "b"},
		"a\n\nb":     {"a", "", "b"},
		"no newline": {"no newline"},
	} {
		var got []string
		if err := tsubame.EachLine([]byte(in), func(l []byte) error { got = append(got, string(l)); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("EachLine(%q) = %q, want %q", in, got, want)
		}
	}
	stop := errors.New("stop")
	n := 0
	if err := tsubame.EachLine([]byte("a\nb\nc\n"), func([]byte) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("did not stop at the first error: %v after %d", err, n)
	}
}
