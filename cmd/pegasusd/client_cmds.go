package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/urfave/cli/v2"

	papi "github.com/pegasus-engine/pegasus/api"
	pclient "github.com/pegasus-engine/pegasus/client"
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
	o := pclient.ListOptions{Limit: cc.Int("limit"), Order: "asc", Cursor: cc.String("cursor")}
	if cc.Bool("desc") {
		o.Order = "desc"
	}
	if s := cc.String("state"); s != "" {
		o.States = []string{s}
	}
	if s := cc.String("machine"); s != "" {
		o.Machines = []string{s}
	}
	if s := cc.String("type"); s != "" {
		o.Types = []string{s}
	}
	var all struct {
		Tasks []papi.TaskSummary `json:"tasks"`
		Next  string             `json:"next_cursor,omitempty"`
	}
	for {
		page, err := api.List(cc.Context, o)
		if err != nil {
			return api.cliError(cc.Context, err)
		}
		all.Tasks = append(all.Tasks, page.Tasks...)
		all.Next = page.NextCursor
		if !cc.Bool("all") || page.NextCursor == "" {
			break
		}
		o.Cursor = page.NextCursor
	}
	if all.Tasks == nil {
		all.Tasks = []papi.TaskSummary{}
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
		fmt.Fprintln(tw, strings.Join(cliconv.TaskRow(summary(t), t.Queued, now), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if all.Next != "" {
		fmt.Fprintln(c.stdout, cliconv.MoreLine(all.Next))
	}
	return nil
}

// summary is a listed task as the projection summarises it, for the
// shared columns.
func summary(t papi.TaskSummary) projection.Summary {
	return projection.Summary{ID: t.TaskID, Type: t.Type, State: fsm.State(t.State), Machine: t.Machine, Source: t.Source,
		Priority: t.Priority, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, Iteration: t.Iterations, Events: t.Events,
		Seq: t.Seq, Input: t.Input, Error: t.Error}
}

// taskAPI reads the one task id of a command and the daemon to ask.
func taskAPI(cc *cli.Context) (*apiClient, string, error) {
	if cc.NArg() != 1 {
		return nil, "", usageError{fmt.Sprintf("%s takes one task id", cc.Command.Name)}
	}
	api, err := newAPIClient(cc)
	return api, cc.Args().First(), err
}

// taskPath is the API's path of task id.
func taskPath(id string) string { return "/v1/tasks/" + url.PathEscape(id) }

// task shows one task; with --follow it prints each new transition until
// the task ends, and exits 5 when it fails.
func (c *client) task(cc *cli.Context) error {
	api, id, err := taskAPI(cc)
	if err != nil {
		return err
	}
	if cc.Bool("follow") {
		return c.follow(cc.Context, api, id, cc.Bool("json"))
	}
	if cc.Bool("json") {
		var raw json.RawMessage
		if err := api.call(cc.Context, "GET", taskPath(id), &raw); err != nil {
			return err
		}
		_, err := c.stdout.Write(raw)
		return err
	}
	_, err = c.printTask(cc.Context, api, id)
	return err
}

// printTask prints the task as every command that prints a task does,
// through fsm.Describe: its events are read from the daemon in their one
// JSON form, stored bytes and all, and folded here by replay, as
// pegasus-replay --server does, so both CLIs print the same text for the
// same task. It returns the task it printed.
func (c *client) printTask(ctx context.Context, api *apiClient, id string) (fsm.Task, error) {
	cur, err := api.Get(ctx, id)
	if err != nil {
		return fsm.Task{}, api.cliError(ctx, err)
	}
	var evs []eventlog.Event
	for {
		page, err := api.TaskEvents(ctx, cur.TaskID, uint64(len(evs)), 10000)
		if err != nil {
			return fsm.Task{}, api.cliError(ctx, err)
		}
		for _, e := range page.Events {
			ev, err := replay.ParseEventJSON(replay.EventJSON(e))
			if err != nil {
				return fsm.Task{}, fmt.Errorf("task %s: %w", cur.TaskID, err)
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
	t, err := replay.StateAt(ctx, mem, cur.TaskID, replay.Bound{})
	if err != nil {
		return fsm.Task{}, fmt.Errorf("task %s: %w", cur.TaskID, err)
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
func (c *client) follow(ctx context.Context, api *apiClient, id string, asJSON bool) error {
	// The head first, then the task: whatever comes after the head is on
	// the stream, whatever came before is in the task.
	head, err := api.Events(ctx, 0, 1)
	if err != nil {
		return api.cliError(ctx, err)
	}
	printed, showResult := 0, false
	if !asJSON {
		shown, err := c.printTask(ctx, api, id)
		if err != nil {
			return err
		}
		// The result of a task that completes while followed (Describe
		// printed it already for one that had).
		printed, showResult = len(shown.History), shown.State != fsm.StateCompleted
	}
	t, err := api.Get(ctx, id)
	if err != nil {
		return api.cliError(ctx, err)
	}
	asked := ""
	// show prints what is new in t and says whether following is over.
	show := func(t papi.Task) (bool, error) {
		for ; printed < len(t.History); printed++ {
			if asJSON {
				if err := json.NewEncoder(c.stdout).Encode(t.History[printed]); err != nil {
					return true, err
				}
			} else {
				c.printTransition(transition(t.History[printed]))
			}
		}
		switch t.State {
		case papi.StateCompleted:
			if showResult {
				fmt.Fprintf(c.stdout, "result: %s\n", t.Result)
			}
			return true, nil
		case papi.StateFailed:
			return true, cliconv.Kind(cliconv.ErrTaskFailed, fmt.Errorf("task %s failed: %s", t.TaskID, t.Error))
		case papi.StateSuspended:
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
	sub := api.Subscribe(pclient.StreamOptions{AfterSeq: head.Head, Stream: t.TaskID})
	defer sub.Close()
	for {
		_, err := sub.Next(ctx)
		var e *pclient.Error
		switch {
		case err == pclient.ErrStreamEnded:
			return fmt.Errorf("the daemon closed the event stream (is it stopping?)")
		case errors.As(err, &e):
			return fmt.Errorf("the daemon answered %d %s to the event stream", e.Status, http.StatusText(e.Status))
		case errors.Is(err, pclient.ErrUnreachable):
			return cliconv.Kind(cliconv.ErrUnavailable, fmt.Errorf("cannot reach the daemon at %s: %w", api.BaseURL(), err))
		case err != nil:
			return err
		}
		t, err := api.Get(ctx, id)
		if err != nil {
			return api.cliError(ctx, err)
		}
		if done, err := show(t); done {
			return err
		}
	}
}

// transition is a transition of the API as the machine records it.
func transition(h papi.Transition) fsm.Transition {
	id, _ := ulid.ParseStrict(h.EventID)
	return fsm.Transition{From: fsm.State(h.From), To: fsm.State(h.To), Event: fsm.EventType(h.Event), EventID: id, Timestamp: h.Timestamp}
}

// events prints a task's events in order: sequence, time (UTC), type and
// the one-line summary of its body.
func (c *client) events(cc *cli.Context) error {
	api, id, err := taskAPI(cc)
	if err != nil {
		return err
	}
	var page papi.TaskEvents
	var raw json.RawMessage
	if err := api.call(cc.Context, "GET", taskPath(id)+"/events", &raw); err != nil {
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
		api, id, err := taskAPI(cc)
		if err != nil {
			return err
		}
		do := map[string]func(context.Context, string, string) (papi.Task, error){
			"suspend": api.Suspend, "resume": api.Resume, "cancel": api.Cancel,
		}[name]
		t, err := do(cc.Context, id, cc.String("reason"))
		if err != nil {
			return fmt.Errorf("%s %s: %w", name, cc.Args().First(), api.cliError(cc.Context, err))
		}
		if cc.Bool("json") {
			return c.printJSON(t)
		}
		fmt.Fprintf(c.stdout, "task %s is %s\n", t.TaskID, t.State)
		return nil
	}
}
