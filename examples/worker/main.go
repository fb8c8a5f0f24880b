// Command worker is a Dispatch broker worker (docs/broker.md) on the Go
// worker SDK (package client, docs/client.md): it registers its
// capabilities, long-polls for the tasks assigned to it, reports
// progress, and completes or fails each one.
//
//	go run ./examples/worker --url http://127.0.0.1:7070 --id resizer --caps image,resize
//
// It runs until interrupted (then it finishes the tasks it runs), or
// until it has finished --stop-after tasks. A task whose metadata has
// "fail" set is failed with that text (and "retryable" = "false" makes
// the failure final): handy for trying the retry and dead-letter paths.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"

	"github.com/pegasus-engine/pegasus/client"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:7070", "the daemon's address")
	id := flag.String("id", "example-worker", "this worker's id (X-Agent-ID)")
	token := flag.String("token", cmp.Or(os.Getenv("PEGASUS_AGENT_TOKEN"), os.Getenv("PEGASUS_TOKEN")),
		"the daemon's --agent-token (or --token), if it has one")
	caps := flag.String("caps", "general", "comma-separated capabilities")
	slots := flag.Int("max-tasks", 1, "tasks at once (the broker's max_tasks)")
	stopAfter := flag.Int64("stop-after", 0, "stop after finishing this many tasks (0: never)")
	flag.Parse()

	c, err := client.New(*url, &client.Options{AgentID: *id, Token: *token})
	if err != nil {
		log.Fatal(err)
	}
	w, err := client.NewWorker(c, &client.WorkerOptions{
		Capabilities: strings.Split(*caps, ","), MaxTasks: *slots, Logger: slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var done atomic.Int64
	err = w.Run(ctx, client.HandlerFunc(func(ctx context.Context, t *client.Task) (any, error) {
		if *stopAfter > 0 && done.Add(1) >= *stopAfter {
			defer stop() // the last one: Run reports it, then returns
		}
		if err := t.Progress(ctx, "started "+t.Title); err != nil {
			return nil, err
		}
		if msg := t.MetadataText("fail"); msg != "" {
			if t.MetadataText("retryable") == "false" {
				return nil, client.Permanent(errors.New(msg))
			}
			return nil, errors.New(msg)
		}
		return map[string]string{"worker": *id, "title": t.Title}, nil
	}))
	if err != nil {
		log.Fatal(err)
	}
}
