package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// tasks lists tasks as pegasus-replay tasks does: oldest first, the same
// page size and columns, UTC, and the cursor of the next page.
func (c *client) tasks(cc *cli.Context) error {
	if cc.NArg() > 0 {
		return usageError{"tasks takes no arguments; filter with --state and --type"}
	}
	api, err := newAPIClient(cc)
	if err != nil {
		return err
	}
	q := url.Values{}
	q.Set("limit", fmt.Sprint(cc.Int("limit")))
	q.Set("order", "asc")
	if cc.Bool("desc") {
		q.Set("order", "desc")
	}
	if s := cc.String("state"); s != "" {
		q.Set("state", s)
	}
	for _, k := range []string{"machine", "type"} {
		if s := cc.String(k); s != "" {
			q.Set(k, s)
		}
	}
	q.Set("cursor", cc.String("cursor"))
	type item struct {
		projection.Summary
		Queued bool `json:"queued"`
	}
	var all struct {
		Tasks []item `json:"tasks"`
		Next  string `json:"next_cursor,omitempty"`
	}
	for {
		var page struct {
			Tasks []item `json:"tasks"`
			Next  string `json:"next_cursor"`
		}
		if err := api.call(cc.Context, "GET", "/v1/tasks?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		all.Tasks = append(all.Tasks, page.Tasks...)
		all.Next = page.Next
		if !cc.Bool("all") || page.Next == "" {
			break
		}
		q.Set("cursor", page.Next)
	}
	if all.Tasks == nil {
		all.Tasks = []item{}
	}
	if cc.Bool("json") {
		return c.printJSON(all)
	}
	if len(all.Tasks) == 0 {
		fmt.Fprintln(c.stdout, "no tasks")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(cliconv.TaskColumns, "\t"))
	now := time.Now()
	for _, t := range all.Tasks {
		fmt.Fprintln(tw, strings.Join(cliconv.TaskRow(t.Summary, t.Queued, now), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if all.Next != "" {
		fmt.Fprintln(c.stdout, cliconv.MoreLine(all.Next))
	}
	return nil
}

// taskAPI reads the one task id of a command and the daemon to ask.
func taskAPI(cc *cli.Context) (*apiClient, string, error) {
	if cc.NArg() != 1 {
		return nil, "", usageError{fmt.Sprintf("%s takes one task id", cc.Command.Name)}
	}
	api, err := newAPIClient(cc)
	return api, "/v1/tasks/" + url.PathEscape(cc.Args().First()), err
}

// task shows one task; with --follow it prints each new transition until
// the task ends, and exits 5 when it fails.
func (c *client) task(cc *cli.Context) error {
	api, path, err := taskAPI(cc)
	if err != nil {
		return err
	}
	if cc.Bool("follow") {
		return c.follow(cc.Context, api, path, cc.Bool("json"))
	}
	if cc.Bool("json") {
		var raw json.RawMessage
		if err := api.call(cc.Context, "GET", path, nil, &raw); err != nil {
			return err
		}
		_, err := c.stdout.Write(raw)
		return err
	}
	_, err = c.printTask(cc.Context, api, path)
	return err
}

// printTask prints the task as every command that prints a task does,
// through fsm.Describe: its events are read from the daemon in their one
// JSON form, stored bytes and all, and folded here by replay, as
// pegasus-replay --server does, so both CLIs print the same text for the
// same task. It returns the task it printed.
func (c *client) printTask(ctx context.Context, api *apiClient, path string) (fsm.Task, error) {
	var cur struct {
		ID     string `json:"task_id"`
		Queued bool   `json:"queued"`
	}
	if err := api.call(ctx, "GET", path, nil, &cur); err != nil {
		return fsm.Task{}, err
	}
	var evs []eventlog.Event
	for {
		var page struct {
			Events []json.RawMessage `json:"events"`
		}
		q := url.Values{"after_version": {fmt.Sprint(len(evs))}, "limit": {"10000"}}
		if err := api.call(ctx, "GET", path+"/events?"+q.Encode(), nil, &page); err != nil {
			return fsm.Task{}, err
		}
		for _, raw := range page.Events {
			ev, err := replay.ParseEvent(raw)
			if err != nil {
				return fsm.Task{}, fmt.Errorf("task %s: %w", cur.ID, err)
			}
			evs = append(evs, ev)
		}
		if len(page.Events) < 10000 {
			break
		}
	}
	mem, err := replay.NewMemLog(evs...)
	if err != nil {
		return fsm.Task{}, err
	}
	t, err := replay.StateAt(ctx, mem, cur.ID, replay.Bound{})
	if err != nil {
		return fsm.Task{}, fmt.Errorf("task %s: %w", cur.ID, err)
	}
	fmt.Fprint(c.stdout, fsm.Describe(t))
	if cur.Queued {
		fmt.Fprintln(c.stdout, "queued: waiting for an admission slot")
	}
	return t, nil
}

// printTransition prints one new transition of a followed task, as a line
// of Describe's history.
func (c *client) printTransition(h fsm.Transition) {
	fmt.Fprintf(c.stdout, "  %s\n", fsm.DescribeTransition(h))
}

// follow prints the task, then each new transition as it happens (it
// listens to the task's events on the event stream), until the task
// completes (exit 0) or fails (exit 5). A question is printed and
// following goes on: someone may answer it with reply.
func (c *client) follow(ctx context.Context, api *apiClient, path string, asJSON bool) error {
	// The head first, then the task: whatever comes after the head is on
	// the stream, whatever came before is in the task.
	var head struct {
		Head uint64 `json:"head"`
	}
	if err := api.call(ctx, "GET", "/v1/events?limit=1", nil, &head); err != nil {
		return err
	}
	printed, showResult := 0, false
	if !asJSON {
		shown, err := c.printTask(ctx, api, path)
		if err != nil {
			return err
		}
		// The result of a task that completes while followed (Describe
		// printed it already for one that had).
		printed, showResult = len(shown.History), shown.State != fsm.StateCompleted
	}
	var t taskJSON
	if err := api.call(ctx, "GET", path, nil, &t); err != nil {
		return err
	}
	asked := ""
	// show prints what is new in t and says whether following is over.
	show := func(t taskJSON) (bool, error) {
		for ; printed < len(t.History); printed++ {
			if asJSON {
				if err := json.NewEncoder(c.stdout).Encode(t.History[printed]); err != nil {
					return true, err
				}
			} else {
				c.printTransition(t.History[printed])
			}
		}
		switch t.State {
		case fsm.StateCompleted:
			if showResult {
				fmt.Fprintf(c.stdout, "result: %s\n", t.Result)
			}
			return true, nil
		case fsm.StateFailed:
			return true, cliconv.Kind(cliconv.ErrTaskFailed, fmt.Errorf("task %s failed: %s", t.TaskID, t.Error))
		case fsm.StateSuspended:
			if t.Question != asked && suspension(&t) == waitsForResume {
				fmt.Fprintln(c.stderr, suspendedNote(&t))
			} else if t.Question != asked {
				fmt.Fprintf(c.stderr, "task %s asks: %s (answer with: pegasusd reply %s \"...\")\n", t.TaskID, t.Question, t.TaskID)
			}
			asked = t.Question
		}
		return false, nil
	}
	if done, err := show(t); done {
		return err
	}
	q := url.Values{"after_seq": {fmt.Sprint(head.Head)}, "stream": {t.TaskID}}
	body, err := api.stream(ctx, "/v1/events/stream?"+q.Encode())
	if err != nil {
		return err
	}
	defer body.Close()
	errDone := errors.New("done")
	err = cliconv.ReadSSE(ctx, body, replay.MaxExportLine, func(cliconv.SSEEvent) error {
		var t taskJSON
		if err := api.call(ctx, "GET", path, nil, &t); err != nil {
			return err
		}
		done, err := show(t)
		if done && err == nil {
			return errDone
		}
		return err
	})
	switch {
	case errors.Is(err, errDone):
		return nil
	case err == nil:
		return fmt.Errorf("the daemon closed the event stream (is it stopping?)")
	}
	return err
}

// events prints a task's events in order: sequence, time (UTC), type and
// the one-line summary of its body.
func (c *client) events(cc *cli.Context) error {
	api, path, err := taskAPI(cc)
	if err != nil {
		return err
	}
	var page struct {
		Events []replay.EventJSON `json:"events"`
	}
	var raw json.RawMessage
	if err := api.call(cc.Context, "GET", path+"/events", nil, &raw); err != nil {
		return err
	}
	if cc.Bool("json") {
		_, err := c.stdout.Write(raw)
		return err
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tTYPE\tSUMMARY")
	for _, e := range page.Events {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", e.Seq, cliconv.Time(e.Time), e.Type, oneLine(e.Summary, 100))
	}
	return tw.Flush()
}

// command returns the action of suspend, resume or cancel: one POST with
// an optional reason, then the task's new state.
func (c *client) command(name string) cli.ActionFunc {
	return func(cc *cli.Context) error {
		api, path, err := taskAPI(cc)
		if err != nil {
			return err
		}
		var body any
		if r := cc.String("reason"); r != "" {
			body = map[string]string{"reason": r}
		}
		var t taskJSON
		if err := api.call(cc.Context, "POST", path+"/"+name, body, &t); err != nil {
			return fmt.Errorf("%s %s: %w", name, cc.Args().First(), err)
		}
		if cc.Bool("json") {
			return c.printJSON(t)
		}
		fmt.Fprintf(c.stdout, "task %s is %s\n", t.TaskID, t.State)
		return nil
	}
}
