// Package usererr carries, with an error, the message a person should read:
// what is wrong in the terms of the request, without the package prefix
// of a sentinel ("broker: ") or Go names. The HTTP API answers with it, so
// that a message is written once, where the error is made, instead of
// being cut out of the Go error's text.
//
// An error has a message for people if something in its chain implements
// Messager: an *Error (a sentinel plus a text, for the common
// `fmt.Errorf("%w: ...", ErrX, ...)`), or a package's typed error that
// words its fields (broker.ReportError).
package usererr

import (
	"errors"
	"fmt"
)

// Messager is an error that says what is wrong for people.
type Messager interface {
	error
	UserMessage() string
}

// Error is a sentinel with a message for people. Its Error is the
// sentinel's text and the message, for logs and Go callers; errors.Is
// matches the sentinel.
type Error struct {
	Err  error  // the sentinel callers branch on
	Text string // for people: no package prefix, no Go names
}

func (e *Error) Error() string       { return e.Err.Error() + ": " + e.Text }
func (e *Error) Unwrap() error       { return e.Err }
func (e *Error) UserMessage() string { return e.Text }

// Errorf returns sentinel with the message format and args make.
func Errorf(sentinel error, format string, args ...any) error {
	return &Error{Err: sentinel, Text: fmt.Sprintf(format, args...)}
}

// Message returns the message for people of the first error in err's
// chain that has one, and whether there is one.
func Message(err error) (string, bool) {
	var m Messager
	if errors.As(err, &m) {
		return m.UserMessage(), true
	}
	return "", false
}
