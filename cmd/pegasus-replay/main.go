package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
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
	err := app.RunContext(ctx, interspersed(app, args))
	return report(std, err)
}
