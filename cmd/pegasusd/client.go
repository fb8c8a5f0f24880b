package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/pegasus-engine/pegasus/fsm"
)

// client is the quick-start side of pegasusd: small commands that talk to a
// running daemon over its HTTP API.
type client struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// interactive overrides the terminal check (tests).
	interactive *bool
}

type apiClient struct {
	base  string
	token string
	http  *http.Client
}

func newAPIClient(cc *cli.Context) (*apiClient, error) {
	base := strings.TrimRight(cc.String("server"), "/")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Sprintf("--server %q: give a URL such as http://127.0.0.1:7070", base)}
	}
	return &apiClient{base: base, token: cc.String("token"), http: &http.Client{Timeout: 90 * time.Second}}, nil
}

// call sends a request and decodes a 2xx answer into out; an error answer
// becomes an error carrying the API's message.
func (c *apiClient) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && ctx.Err() == nil {
			return fmt.Errorf("cannot reach the daemon at %s (is `pegasusd` running?): %v", c.base, ue.Err)
		}
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var env struct {
			Error apiError `json:"error"`
		}
		if json.Unmarshal(data, &env) == nil && env.Error.Message != "" {
			return fmt.Errorf("%s (%d %s)", env.Error.Message, resp.StatusCode, env.Error.Code)
		}
		return fmt.Errorf("the daemon answered %s", resp.Status)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = data
		return nil
	}
	return json.Unmarshal(data, out)
}

func (c *client) isInteractive() bool {
	if c.interactive != nil {
		return *c.interactive
	}
	f, ok := c.stdin.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (c *client) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// submit sends a task and, unless --no-wait, waits for it: it prints the
// result, asks the user when the task asks a question (on a terminal), and
// exits 3 when the task fails.
func (c *client) submit(cc *cli.Context) error {
	if cc.NArg() == 0 {
		return usageError{`submit needs the task's text: pegasusd submit "what time is it?"`}
	}
	api, err := newAPIClient(cc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cc.Context, cc.Duration("timeout"))
	defer cancel()
	text := strings.Join(cc.Args().Slice(), " ")
	var created createdJSON
	req := map[string]any{
		"input": text, "type": cc.String("type"), "priority": cc.Int("priority"), "source": cc.String("source"),
	}
	if m := cc.String("machine"); m != "" {
		req["machine"] = m
	}
	err = api.call(ctx, "POST", "/v1/tasks", req, &created)
	if err != nil {
		return err
	}
	if cc.Bool("no-wait") {
		if cc.Bool("json") {
			return c.printJSON(created)
		}
		fmt.Fprintln(c.stdout, created.TaskID)
		return nil
	}
	if !cc.Bool("json") {
		fmt.Fprintf(c.stderr, "task %s submitted\n", created.TaskID)
	}
	asked := ""
	for {
		var t taskJSON
		if err := api.call(ctx, "GET", "/v1/tasks/"+created.TaskID+"?wait=30s", nil, &t); err != nil {
			if ctx.Err() != nil {
				return &exitCodeError{exitError, fmt.Errorf("gave up waiting for task %s after %s", created.TaskID, cc.Duration("timeout"))}
			}
			return err
		}
		switch {
		case t.State == fsm.StateCompleted:
			if cc.Bool("json") {
				return c.printJSON(t)
			}
			fmt.Fprintln(c.stdout, t.Result)
			return nil
		case t.State == fsm.StateFailed:
			if cc.Bool("json") {
				_ = c.printJSON(t)
			}
			return &exitCodeError{exitFailed, fmt.Errorf("task %s failed: %s", t.TaskID, t.Error)}
		case t.State == fsm.StateSuspended && t.Question != asked:
			if cc.Bool("json") || !c.isInteractive() {
				if cc.Bool("json") {
					_ = c.printJSON(t)
				}
				return &exitCodeError{exitNeedInput, fmt.Errorf("task %s asks: %s\nanswer with: pegasusd reply %s \"...\"", t.TaskID, t.Question, t.TaskID)}
			}
			answer, err := c.ask(t.Question)
			if err != nil {
				return err
			}
			if err := api.call(ctx, "POST", "/v1/tasks/"+t.TaskID+"/messages", map[string]string{"text": answer, "source": "cli"}, nil); err != nil {
				return err
			}
			asked = t.Question
		case t.State != fsm.StateSuspended:
			asked = "" // it moved on; a later question may repeat the text
		}
	}
}

// ask prints the task's question and reads one line of answer.
func (c *client) ask(question string) (string, error) {
	fmt.Fprintf(c.stderr, "%s\n> ", question)
	line, err := bufio.NewReader(c.stdin).ReadString('\n')
	if err != nil && line == "" {
		return "", fmt.Errorf("no answer: %w", err)
	}
	return strings.TrimSpace(line), nil
}

func (c *client) reply(cc *cli.Context) error {
	if cc.NArg() < 2 {
		return usageError{`reply needs a task id and the text: pegasusd reply ID "four people"`}
	}
	api, err := newAPIClient(cc)
	if err != nil {
		return err
	}
	id := cc.Args().First()
	var t taskJSON
	if err := api.call(cc.Context, "POST", "/v1/tasks/"+url.PathEscape(id)+"/messages",
		map[string]string{"text": strings.Join(cc.Args().Slice()[1:], " "), "source": "cli"}, &t); err != nil {
		return err
	}
	if cc.Bool("json") {
		return c.printJSON(t)
	}
	fmt.Fprintf(c.stdout, "task %s is %s\n", t.TaskID, t.State)
	return nil
}

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
	if s := cc.String("state"); s != "" {
		q.Set("state", s)
	}
	if s := cc.String("type"); s != "" {
		q.Set("type", s)
	}
	if cc.Bool("json") {
		var raw json.RawMessage
		if err := api.call(cc.Context, "GET", "/v1/tasks?"+q.Encode(), nil, &raw); err != nil {
			return err
		}
		_, err := c.stdout.Write(raw)
		return err
	}
	var page struct {
		Tasks []struct {
			ID        string    `json:"task_id"`
			Type      string    `json:"type"`
			State     fsm.State `json:"state"`
			Queued    bool      `json:"queued"`
			CreatedAt time.Time `json:"created_at"`
			Input     string    `json:"input"`
			Error     string    `json:"error"`
		} `json:"tasks"`
		Next string `json:"next_cursor"`
	}
	if err := api.call(cc.Context, "GET", "/v1/tasks?"+q.Encode(), nil, &page); err != nil {
		return err
	}
	if len(page.Tasks) == 0 {
		fmt.Fprintln(c.stdout, "no tasks")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTYPE\tCREATED\tINPUT")
	for _, t := range page.Tasks {
		state := string(t.State)
		if t.Queued {
			state += " (queued)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, state, t.Type, t.CreatedAt.Local().Format("2006-01-02 15:04:05"), oneLine(t.Input, 60))
	}
	return tw.Flush()
}

func (c *client) task(cc *cli.Context) error {
	if cc.NArg() != 1 {
		return usageError{"task needs one task id"}
	}
	api, err := newAPIClient(cc)
	if err != nil {
		return err
	}
	path := "/v1/tasks/" + url.PathEscape(cc.Args().First())
	if cc.Bool("json") {
		var raw json.RawMessage
		if err := api.call(cc.Context, "GET", path, nil, &raw); err != nil {
			return err
		}
		_, err := c.stdout.Write(raw)
		return err
	}
	var t taskJSON
	if err := api.call(cc.Context, "GET", path, nil, &t); err != nil {
		return err
	}
	w := c.stdout
	state := string(t.State)
	if t.Queued {
		state += " (queued for a slot)"
	}
	fmt.Fprintf(w, "task      %s\nstate     %s\ntype      %s (priority %d, source %s)\ncreated   %s\niteration %d\ninput     %s\n",
		t.TaskID, state, t.Type, t.Priority, t.Source, t.CreatedAt.Local().Format(time.RFC3339), t.Iteration, oneLine(t.Input, 200))
	if t.Question != "" {
		fmt.Fprintf(w, "waiting   %s\n", t.Question)
	}
	if t.Result != "" {
		fmt.Fprintf(w, "result    %s\n", t.Result)
	}
	if t.Error != "" {
		fmt.Fprintf(w, "error     %s\n", t.Error)
	}
	if t.Plan != nil && len(t.Plan.Steps) > 0 {
		fmt.Fprintln(w, "plan")
		for _, s := range t.Plan.Steps {
			mark := " "
			if s.Completed {
				mark = "x"
			}
			fmt.Fprintf(w, "  [%s] %d %s\n", mark, s.Index, oneLine(s.Description, 100))
		}
	}
	fmt.Fprintln(w, "history")
	for _, h := range t.History {
		fmt.Fprintf(w, "  %s  %-9s -> %-9s %s\n", h.Timestamp.Local().Format("15:04:05.000"), h.From, h.To, h.Event)
	}
	return nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		return s[:cut] + "…"
	}
	return s
}
