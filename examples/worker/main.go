// Command worker is a Dispatch broker worker (docs/broker.md): it
// registers its capabilities, long-polls for the tasks assigned to it,
// reports progress, and completes or fails each one.
//
//	go run ./examples/worker --url http://127.0.0.1:7070 --id resizer --caps image,resize
//
// It runs until interrupted, or until it has finished --max-tasks tasks.
// A task whose metadata has "fail" set is failed with that text (and
// "retryable" = "false" makes the failure final): handy for trying the
// retry and dead-letter paths.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"
)

func main() {
	var c client
	var caps string
	var maxTasks, slots int
	flag.StringVar(&c.url, "url", "http://127.0.0.1:7070", "the daemon's address")
	flag.StringVar(&c.id, "id", "example-worker", "this worker's id (X-Agent-ID)")
	flag.StringVar(&c.token, "token", cmp.Or(os.Getenv("PEGASUS_AGENT_TOKEN"), os.Getenv("PEGASUS_TOKEN")),
		"the daemon's --agent-token (or --token), if it has one")
	flag.StringVar(&caps, "caps", "general", "comma-separated capabilities")
	flag.IntVar(&slots, "max-tasks", 1, "tasks at once (the broker's max_tasks)")
	flag.IntVar(&maxTasks, "stop-after", 0, "stop after finishing this many tasks (0: never)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, &c, strings.Split(caps, ","), slots, maxTasks); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// run registers, then polls and works until ctx ends or maxTasks are done.
func run(ctx context.Context, c *client, caps []string, slots, maxTasks int) error {
	if err := c.call(ctx, "PUT", "/api/v1/agents/"+c.id, map[string]any{"capabilities": caps, "max_tasks": slots}, nil); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	log.Printf("worker %s registered with %v", c.id, caps)
	done := 0
	for maxTasks == 0 || done < maxTasks {
		var page struct {
			Tasks []task `json:"tasks"`
		}
		if err := c.call(ctx, "GET", "/api/v1/tasks?agent="+c.id+"&status=assigned&wait=30s", nil, &page); err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		for _, t := range page.Tasks {
			if err := work(ctx, c, t); err != nil {
				return err
			}
			done++
		}
	}
	return nil
}

type task struct {
	ID       string            `json:"task_id"`
	Title    string            `json:"title"`
	Metadata map[string]string `json:"metadata"`
}

// work runs one task: a progress report, then the outcome.
func work(ctx context.Context, c *client, t task) error {
	path := "/api/v1/tasks/" + t.ID
	if err := c.call(ctx, "POST", path+"/progress", map[string]any{"message": "started " + t.Title}, nil); err != nil {
		return fmt.Errorf("progress %s: %w", t.ID, err)
	}
	if msg := t.Metadata["fail"]; msg != "" {
		log.Printf("failing %s: %s", t.ID, msg)
		return c.call(ctx, "POST", path+"/fail", map[string]any{"error": msg, "retry_eligible": t.Metadata["retryable"] != "false"}, nil)
	}
	log.Printf("completing %s (%s)", t.ID, t.Title)
	return c.call(ctx, "POST", path+"/complete", map[string]any{"result": map[string]any{"worker": c.id, "title": t.Title}}, nil)
}

// client is the smallest worker library: JSON over HTTP with X-Agent-ID.
type client struct {
	url, id, token string
}

func (c *client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second) // above the long poll
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("X-Agent-ID", c.id)
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}
