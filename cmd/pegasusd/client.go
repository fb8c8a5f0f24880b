package main

import (
	"bufio"
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

	papi "github.com/pegasus-engine/pegasus/api"
	pclient "github.com/pegasus-engine/pegasus/client"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

// client is the quick-start side of pegasusd: small commands that talk to a
// running daemon over its HTTP API.
type client struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// interactive overrides the terminal check (tests).
	interactive *bool
	// streamOut overrides the check that stdout is a terminal, where
	// submit prints the answer as it streams (tests).
	streamOut *bool
}

// apiClient is the daemon a command talks to, through package client,
// with the CLI's words for its errors.
type apiClient struct {
	*pclient.Client
}

func newAPIClient(cc *cli.Context) (*apiClient, error) {
	u, err := cliconv.ServerURL(cc.String("server"))
	if err != nil {
		return nil, err
	}
	// No retries: a command says at once what went wrong (exit 4 when the
	// daemon cannot be reached), and sends no idempotency key.
	c, err := pclient.New(u.String(), &pclient.Options{Token: cc.String("token"),
		HTTPClient: &http.Client{Timeout: 90 * time.Second}, MaxAttempts: 1})
	if err != nil {
		return nil, err
	}
	return &apiClient{c}, nil
}

// cliError words an error of a request for the user, marked for its exit
// code: the API's message (404: not found; 401: with what to do), or
// unavailable when the daemon cannot be reached.
func (c *apiClient) cliError(ctx context.Context, err error) error {
	var e *pclient.Error
	var ue *url.Error
	switch {
	case errors.As(err, &e):
		msg := e.Message
		if msg == "" {
			msg = fmt.Sprintf("the daemon answered %d %s", e.Status, http.StatusText(e.Status))
		}
		switch e.Status {
		case http.StatusNotFound:
			return cliconv.NotFoundf("%s", msg)
		case http.StatusUnauthorized:
			return fmt.Errorf("%s (give the daemon's token with --token or PEGASUS_TOKEN)", msg)
		}
		return errors.New(msg)
	case errors.Is(err, pclient.ErrUnreachable) && errors.As(err, &ue) && ctx.Err() == nil:
		return cliconv.Kind(cliconv.ErrUnavailable,
			fmt.Errorf("cannot reach the daemon at %s (is pegasusd running? --server or PEGASUS_SERVER names another): %v", c.BaseURL(), ue.Err))
	}
	return err
}

// call is Do with the CLI's errors.
func (c *apiClient) call(ctx context.Context, method, path string, out any) error {
	if err := c.Do(ctx, method, path, nil, nil, out); err != nil {
		return c.cliError(ctx, err)
	}
	return nil
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
	created, err := api.Submit(ctx, papi.CreateTask{Input: text, Type: cc.String("type"), Priority: cc.Int("priority"),
		Source: cc.String("source"), Machine: cc.String("machine"), ConcurrencyKey: cc.String("concurrency-key")})
	if err != nil {
		return api.cliError(ctx, err)
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
	var live *liveAnswer
	if !cc.Bool("json") && !cc.Bool("no-stream") && c.streamsOut() {
		live = c.streamAnswer(ctx, api, created.TaskID)
		defer live.stop()
	}
	asked := ""
	for {
		t, err := api.Wait(ctx, created.TaskID) // finished or suspended
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("gave up waiting for task %s after %s", created.TaskID, cc.Duration("timeout"))
			}
			return api.cliError(ctx, err)
		}
		switch {
		case t.State == papi.StateCompleted:
			if cc.Bool("json") {
				return c.printJSON(t)
			}
			if live != nil && live.finish(t.Result) {
				return nil
			}
			fmt.Fprintln(c.stdout, t.Result)
			return nil
		case t.State == papi.StateFailed:
			if cc.Bool("json") {
				_ = c.printJSON(t)
			}
			return cliconv.Kind(cliconv.ErrTaskFailed, fmt.Errorf("task %s failed: %s", t.TaskID, t.Error))
		case t.State == papi.StateSuspended && suspension(&t) == waitsForResume:
			if cc.Bool("json") {
				_ = c.printJSON(t)
			}
			return suspendedError(&t)
		case t.State == papi.StateSuspended && t.Question != asked:
			if cc.Bool("json") || !c.isInteractive() {
				if cc.Bool("json") {
					_ = c.printJSON(t)
				}
				return cliconv.Kind(cliconv.ErrNeedsInput, fmt.Errorf("task %s asks: %s; answer with: pegasusd reply %s \"...\"", t.TaskID, t.Question, t.TaskID))
			}
			if live != nil {
				live.breakLine()
			}
			answer, err := c.ask(t.Question)
			if err != nil {
				return err
			}
			if _, err := api.Reply(ctx, t.TaskID, papi.Message{Text: answer, Source: "cli"}); err != nil {
				return api.cliError(ctx, err)
			}
			asked = t.Question
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
	t, err := api.Reply(cc.Context, id, papi.Message{Text: strings.Join(cc.Args().Slice()[1:], " "), Source: "cli"})
	if err != nil {
		return api.cliError(cc.Context, err)
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
