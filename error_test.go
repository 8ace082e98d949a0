package tsubame

import (
	"errors"
	"testing"
)

func TestErrorText(t *testing.T) {
	cause := errors.New("password must be at least 12 characters long")
	for _, tc := range []struct {
		err  *Error
		want string
	}{
		{Errorf(EINVALID, "limit must be positive"), "limit must be positive"},
		{WrapError(EUNAVAILABLE, cause, "store unreachable"), "store unreachable: password must be at least 12 characters long"},
		{WrapError(EINVALID, cause, "%v", cause), "password must be at least 12 characters long"},
		{&Error{Code: EINVALID, Err: cause}, "password must be at least 12 characters long"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
		if !errors.Is(tc.err, cause) && tc.err.Err != nil {
			t.Errorf("%q lost its cause", tc.err)
		}
	}
}
