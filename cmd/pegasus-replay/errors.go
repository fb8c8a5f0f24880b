package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

// Exit codes: the one table both programs share (internal/cliconv,
// docs/cli.md). Scripts branch on them.
const (
	exitOK       = cliconv.ExitOK          // the command did what was asked
	exitFailed   = cliconv.ExitFailed      // verify found problems, or the command failed
	exitUsage    = cliconv.ExitUsage       // bad flags or arguments
	exitNotFound = cliconv.ExitNotFound    // unknown task or event
	exitSource   = cliconv.ExitUnavailable // the source is unusable: not a Pegasus log, newer format, locked, unreachable
)

// Errors that commands return and that only report (below) turns into exit
// codes. Commands never call cli.Exit or os.Exit: they wrap one of these, or
// return what replay, eventlog or the HTTP client returned.
var (
	// errUsage marks bad flags or arguments.
	errUsage = cliconv.ErrUsage
	// errNotFound marks an unknown task or event.
	errNotFound = cliconv.ErrNotFound
	// errSource marks a source that cannot be read at all.
	errSource = cliconv.ErrUnavailable
	// errProblems is returned by verify when the audit found problems. Its
	// report has already been printed, so report prints nothing more.
	errProblems = errors.New("verify found problems")
)

// usagef returns a usage error (exit code 2) with the given message.
func usagef(format string, args ...any) error {
	return &kindError{kind: errUsage, err: fmt.Errorf(format, args...)}
}

// notFoundf returns a not-found error (exit code 3).
func notFoundf(format string, args ...any) error {
	return &kindError{kind: errNotFound, err: fmt.Errorf(format, args...)}
}

// sourceErr marks err as making the source unusable (exit code 4), keeping
// err in the chain so its own sentinels still match.
func sourceErr(err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: errSource, err: err}
}

// kindError attaches one of the kind sentinels above to an error without
// changing its message.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// exitCode maps an error returned by a command to the process exit code.
// This is the only place that decides exit codes.
func exitCode(err error) int {
	switch {
	case err == nil || errors.Is(err, errUsage):
	case isSourceError(err):
		return exitSource
	case isNotFoundError(err):
		return exitNotFound
	}
	return cliconv.Code(err)
}

// report prints err (if any) with a hint where one helps, and returns the
// exit code for it.
func report(std *stdio, err error) int {
	code := exitCode(err)
	if err == nil || errors.Is(err, errProblems) {
		return code
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(std.err, "pegasus-replay: interrupted")
		return code
	}
	fmt.Fprintf(std.err, "pegasus-replay: %s\n", cliconv.Message(err))
	if h := hint(err); h != "" {
		fmt.Fprintf(std.err, "hint: %s\n", h)
	}
	return code
}
