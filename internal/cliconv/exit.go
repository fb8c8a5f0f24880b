package cliconv

import (
	"errors"
	"fmt"
	"regexp"
)

// Exit codes, the one table of both programs (see the package comment).
// Persisted in scripts: do not renumber.
const (
	ExitOK          = 0
	ExitFailed      = 1
	ExitUsage       = 2
	ExitNotFound    = 3
	ExitUnavailable = 4
	ExitTaskFailed  = 5
	ExitNeedsInput  = 6
	ExitSuspended   = 7
)

// Kinds of error. A command wraps one (with Kind or the helpers below) and
// Code turns it into the exit code.
var (
	// ErrUsage marks bad flags or arguments.
	ErrUsage = errors.New("cliconv: usage")
	// ErrNotFound marks an unknown task or event.
	ErrNotFound = errors.New("cliconv: not found")
	// ErrUnavailable marks a source or daemon that cannot be used at all.
	ErrUnavailable = errors.New("cliconv: unavailable")
	// ErrTaskFailed marks a task that ended failed.
	ErrTaskFailed = errors.New("cliconv: task failed")
	// ErrNeedsInput marks a task that waits for an answer.
	ErrNeedsInput = errors.New("cliconv: task needs input")
	// ErrSuspended marks a task an operator suspended: it waits for a
	// resume, not for an answer.
	ErrSuspended = errors.New("cliconv: task suspended by an operator")
)

// KindError attaches one of the kinds above to an error without changing
// its message.
type KindError struct {
	Kind error
	Err  error
}

func (e *KindError) Error() string   { return e.Err.Error() }
func (e *KindError) Unwrap() []error { return []error{e.Kind, e.Err} }

// Kind marks err with kind; nil stays nil.
func Kind(kind, err error) error {
	if err == nil {
		return nil
	}
	return &KindError{Kind: kind, Err: err}
}

// Usagef returns a usage error (exit code 2).
func Usagef(format string, args ...any) error {
	return Kind(ErrUsage, fmt.Errorf(format, args...))
}

// NotFoundf returns a not-found error (exit code 3).
func NotFoundf(format string, args ...any) error {
	return Kind(ErrNotFound, fmt.Errorf(format, args...))
}

// Code maps an error to the exit code. Programs call it in main only.
func Code(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage):
		return ExitUsage
	case errors.Is(err, ErrUnavailable):
		return ExitUnavailable
	case errors.Is(err, ErrNotFound):
		return ExitNotFound
	case errors.Is(err, ErrTaskFailed):
		return ExitTaskFailed
	case errors.Is(err, ErrNeedsInput):
		return ExitNeedsInput
	case errors.Is(err, ErrSuspended):
		return ExitSuspended
	default:
		return ExitFailed
	}
}

// packagePrefix matches the package prefix of a sentinel error's text
// ("replay: ", "eventlog: "), which means something to a Go programmer and
// nothing to an operator.
var packagePrefix = regexp.MustCompile(`\b(replay|eventlog|fsm|projection|agent|broker|codec|llm|tools|cliconv|pegasusd|json): `)

// Message is err's text as a person should read it: without the package
// prefixes of the sentinels it wraps. The command-line programs print
// their own errors through it. The daemon's API does not: its messages
// come from the errors' own texts for people (internal/usererr): a
// pattern cannot tell a prefix from the words of a message ("not assigned
// to this agent: task ..." lost "agent: ").
func Message(err error) string {
	return packagePrefix.ReplaceAllString(err.Error(), "")
}
