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
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
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
	u, err := cliconv.ServerURL(cc.String("server"))
	if err != nil {
		return nil, err
	}
	return &apiClient{base: u.String(), token: cc.String("token"), http: &http.Client{Timeout: 90 * time.Second}}, nil
}

// call sends a request and decodes a 2xx answer into out; an error answer
// becomes an error carrying the API's message, marked for its exit code
// (404: not found, unreachable: unavailable).
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
			return cliconv.Kind(cliconv.ErrUnavailable,
				fmt.Errorf("cannot reach the daemon at %s (is pegasusd running? --server or PEGASUS_SERVER names another): %v", c.base, ue.Err))
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
		msg := fmt.Sprintf("the daemon answered %s", resp.Status)
		if json.Unmarshal(data, &env) == nil && env.Error.Message != "" {
			msg = env.Error.Message
		}
		switch resp.StatusCode {
		case http.StatusNotFound:
			return cliconv.NotFoundf("%s", msg)
		case http.StatusUnauthorized:
			return fmt.Errorf("%s (give the daemon's token with --token or PEGASUS_TOKEN)", msg)
		}
		return errors.New(msg)
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

// stream opens a long-lived GET (an event stream) and returns its body;
// the caller closes it.
func (c *apiClient) stream(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := *c.http
	hc.Timeout = 0 // a stream stays open as long as the user wants
	resp, err := hc.Do(req)
	if err != nil {
		return nil, cliconv.Kind(cliconv.ErrUnavailable, fmt.Errorf("cannot reach the daemon at %s: %w", c.base, err))
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("the daemon answered %s to the event stream", resp.Status)
	}
	return resp.Body, nil
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
				return fmt.Errorf("gave up waiting for task %s after %s", created.TaskID, cc.Duration("timeout"))
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
			return cliconv.Kind(cliconv.ErrTaskFailed, fmt.Errorf("task %s failed: %s", t.TaskID, t.Error))
		case t.State == fsm.StateSuspended && suspension(&t) == waitsForResume:
			if cc.Bool("json") {
				_ = c.printJSON(t)
			}
			return suspendedError(&t)
		case t.State == fsm.StateSuspended && t.Question != asked:
			if cc.Bool("json") || !c.isInteractive() {
				if cc.Bool("json") {
					_ = c.printJSON(t)
				}
				return cliconv.Kind(cliconv.ErrNeedsInput, fmt.Errorf("task %s asks: %s; answer with: pegasusd reply %s \"...\"", t.TaskID, t.Question, t.TaskID))
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
