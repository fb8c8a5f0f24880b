// Command pegasusd is the Pegasus daemon: the agent, its event log and its
// HTTP API, plus small client commands (submit, tasks, task) that talk to a
// running daemon. See docs/api.md and docs/agent.md.
package main

import "os"

func main() {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}
