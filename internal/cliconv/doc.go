// Package cliconv holds the conventions both command-line programs follow,
// pegasusd (as a client of a running daemon) and pegasus-replay, so that
// they agree on everything an operator or a script can see:
//
//   - exit codes: one table (below), mapped from errors in main only;
//   - usage errors: one line on stderr and exit code 2, never the help;
//   - an unknown command says "unknown command" and suggests the nearest;
//   - flags are accepted after arguments (`task ID --json`);
//   - an explicit flag beats an environment variable, which beats a default;
//   - times in human output are UTC, listings are oldest first with the
//     same page size and the same columns, and a page prints its cursor;
//   - --json prints one JSON document; colour only on a terminal, never
//     with NO_COLOR set (https://no-color.org) or TERM=dumb;
//   - --version prints the module version, the commit, the Go version and
//     the on-disk formats.
//
// Exit codes (docs/cli.md). Scripts branch on them: never renumber.
//
//	0  ok
//	1  the command failed (verify found problems, the daemon answered an error)
//	2  usage: bad flags or arguments
//	3  not found: unknown task or event
//	4  unavailable: the source or the daemon cannot be used (locked, not a
//	   Pegasus log, newer format, unreachable)
//	5  the task failed (pegasusd submit, task --follow)
//	6  the task waits for an answer (pegasusd submit, task --follow)
//	7  the task was suspended by an operator and waits for a resume
//	   (pegasusd submit)
package cliconv

// ExitCodesHelp is the exit-code table as --help prints it.
const ExitCodesHelp = "Exit codes: 0 ok, 1 failed, 2 usage, 3 not found, 4 source or daemon unavailable, " +
	"5 task failed, 6 task waits for an answer, 7 task suspended by an operator (docs/cli.md)."
