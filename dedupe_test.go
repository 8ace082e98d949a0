package tsubame_test

import (
	"strings"
	"testing"
	"time"

	"tsubame"
)

func TestValidateFirstSeen(t *testing.T) {
	longest := strings.Repeat("x", tsubame.MaxEventIDLength)
	for _, tc := range []struct {
		id   string
		ttl  time.Duration
		code string
	}{
		{"imp:d-1", time.Minute, ""},
		{"a", time.Nanosecond, ""},
		{longest, time.Hour, ""},
		{"\x00{tag}: \xff", time.Second, ""}, // any bytes: stores treat ids as opaque
		{"", time.Minute, tsubame.EINVALID},
		{longest + "x", time.Minute, tsubame.EINVALID},
		{"imp:d-1", 0, tsubame.EINVALID},
		{"imp:d-1", -time.Second, tsubame.EINVALID},
	} {
		err := tsubame.ValidateFirstSeen(tc.id, tc.ttl)
		if got := tsubame.ErrorCode(err); got != tc.code {
			t.Errorf("ValidateFirstSeen(%d-byte id %.12q, %v) = %v, want code %q", len(tc.id), tc.id, tc.ttl, err, tc.code)
		}
	}
}
