// Command pegasus-replay is the debugging and post-mortem tool of Pegasus.
//
// It reads a recorded log (a data directory opened read-only, a running
// daemon over its HTTP API, or an NDJSON export) and asks package replay
// everything it shows: the task list and stats (replay.Open, View.Tasks,
// View.Stats), a timeline (replay.Timeline), the state at a point
// (replay.StateAt), causation (replay.Explain, Ancestors, Descendants), the
// audit (replay.Verify), export and import, and what-if forks (a
// replay.MemLog with injected events, folded by replay.Timeline). It never
// folds on its own, never calls a model or a tool, and never writes to the
// log it reads; rendering uses fsm.Describe and fsm.DescribeEvent, so the
// CLI prints what the fsm tests print. The user's guide, with every --json
// shape and exit code, is docs/replay.md.
//
// Layout, one file per command as in containerd's ctr:
//
//	main.go, app.go      the app, global flags, stdio, flag placement
//	errors.go            error kinds; exit codes are decided only in exitCode
//	source.go, server.go where events come from: --data-dir, --file, --server
//	output.go, render.go tables, colour, event and tree rendering, JSON shapes
//	progress.go          the progress bar on a terminal stderr
//	cmd_*.go             tasks, show, state, why/trace, verify, export/import,
//	                     fork, stats, tail
//	completion.go        bash and zsh completion
//
// Tests: golden_test.go (testdata/golden, rewritten with -update),
// gen_test.go (the recorded histories in testdata, also -update),
// cli_test.go, server_test.go, binary_test.go (the built binary against the
// agent's data and a running pegasusd), large_test.go (the 1,000,000-event
// benchmark, behind -large-log).
package main
