package tsubame

import (
	"errors"
	"fmt"
)

// Error codes: the kinds of failure the domain knows about. Adapters map each
// code to a transport status in exactly one place (internal/render.HTTPStatus),
// so a handler never picks a status code by itself.
const (
	ECONFLICT     = "conflict"     // the resource is held by someone else (e.g. a locked store file)
	EINTERNAL     = "internal"     // a bug or an unexpected failure; details are never shown to clients
	EINVALID      = "invalid"      // the input is malformed or breaks a rule
	ENOTFOUND     = "not_found"    // the thing asked for does not exist
	EUNAVAILABLE  = "unavailable"  // a backend is down or overloaded; retrying later may succeed
	EUNAUTHORIZED = "unauthorized" // the credentials (a token, a signature) are missing or wrong
	EFORBIDDEN    = "forbidden"    // the caller is known and may not do this (e.g. a source not allowed)
	ETOOLARGE     = "too_large"    // the input is beyond a size limit
)

// Error is a domain error: a code from the list above, a message that is safe
// to show to a client, and an optional underlying cause kept for operators.
type Error struct {
	Code    string
	Message string
	Err     error
}

// Error returns the message followed by the cause, for logs.
func (e *Error) Error() string {
	if e.Err == nil {
		return e.Message
	}
	// A cause given its code with its own text as the message (WrapError(
	// EINVALID, err, "%v", err)) reads once, not twice.
	if cause := e.Err.Error(); e.Message == "" || e.Message == cause {
		return cause
	}
	return e.Message + ": " + e.Err.Error()
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a formatted, client-safe message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WrapError returns an *Error with the given code and message that keeps err as its cause.
func WrapError(code string, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL for
// any other non-nil error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) && e.Code != "" {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the client-safe message of err. Errors that are not an
// *Error (or are internal) yield a generic text, so internals never leak.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) && e.Code != EINTERNAL && e.Message != "" {
		return e.Message
	}
	return "internal error"
}

// IsNotFound reports whether err is of kind ENOTFOUND.
func IsNotFound(err error) bool { return ErrorCode(err) == ENOTFOUND }
