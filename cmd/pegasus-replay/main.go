package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, newStdio(), os.Args)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit code. It is
// the whole program minus os.Exit, so tests call it in-process.
func run(ctx context.Context, std *stdio, args []string) int {
	app := newApp(std)
	args = cliconv.Interspersed(app, args)
	app.Metadata = map[string]any{explicitKey: cliconv.ExplicitFlags(args, globalFlags(false))}
	err := app.RunContext(ctx, args)
	return report(std, err)
}
