package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/term"

	papi "github.com/pegasus-engine/pegasus/api"
	pclient "github.com/pegasus-engine/pegasus/client"
	"github.com/pegasus-engine/pegasus/fsm"
)

// streamsOut reports whether submit prints the answer as it streams:
// stdout is a terminal (or the test says so).
func (c *client) streamsOut() bool {
	if c.streamOut != nil {
		return *c.streamOut
	}
	f, ok := c.stdout.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// liveAnswer prints the text of a task's model calls as the model
// streams it (GET /v1/tasks/{id}/stream), until the task's stream says it
// completed or failed. A new call starts on a new line; when an attempt
// fails and the model starts over, the line ends and a note on stderr
// says so, so the text of the new attempt is never mistaken for more of
// the old one.
type liveAnswer struct {
	c      *client
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	call    string
	text    strings.Builder // the current call's text, as printed
	midLine bool            // the last thing printed did not end its line
}

// errTaskEnded stops following a task's stream at its end.
var errTaskEnded = errors.New("the task ended")

func (c *client) streamAnswer(ctx context.Context, api *apiClient, id string) *liveAnswer {
	ctx, cancel := context.WithCancel(ctx)
	l := &liveAnswer{c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		_ = api.FollowTask(ctx, id, 0, l.frame, func(ev papi.Event) error {
			if ev.Stream == id && (ev.Type == string(fsm.TaskCompleted) || ev.Type == string(fsm.TaskFailed)) {
				return errTaskEnded
			}
			return nil
		})
	}()
	return l
}

func (l *liveAnswer) frame(f pclient.TextFrame) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f.Call != l.call {
		l.endLine()
		l.call = f.Call
		l.text.Reset()
	}
	if f.Restart {
		l.endLine()
		l.text.Reset()
		fmt.Fprintf(l.c.stderr, "(the model's attempt %d failed: %s; attempt %d starts over)\n", f.Attempt-1, f.Error, f.Attempt)
		return nil
	}
	fmt.Fprint(l.c.stdout, f.Text)
	l.text.WriteString(f.Text)
	l.midLine = !strings.HasSuffix(f.Text, "\n")
	return nil
}

// endLine ends the line printed last, if it is not ended (l.mu held).
func (l *liveAnswer) endLine() {
	if l.midLine {
		fmt.Fprintln(l.c.stdout)
		l.midLine = false
	}
}

// breakLine ends the printed line before something else is written (a
// question).
func (l *liveAnswer) breakLine() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLine()
	l.text.Reset()
}

// finish waits for the stream to reach the task's end (everything the
// model streamed is printed by then) and reports whether the result was
// printed already: the last call's text is the result. If it was not,
// the line is ended and the caller prints the result.
func (l *liveAnswer) finish(result string) bool {
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	printed := strings.TrimSpace(l.text.String()) == strings.TrimSpace(result) && result != ""
	l.endLine()
	return printed
}

// stop ends following the stream at once (the task failed or waits).
func (l *liveAnswer) stop() {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLine()
}
