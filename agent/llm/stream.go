package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"

	"github.com/pegasus-engine/pegasus/internal/sse"
)

// ErrStreamBroken is the error of a streamed reply that ended before its
// end: the connection closed, or the body ended without "data: [DONE]" or
// a finish reason. It is retried like a transport error.
var ErrStreamBroken = errors.New("llm: the stream ended before the reply did")

// isEventStream reports whether a Content-Type is text/event-stream: a
// server that ignores "stream": true answers with JSON, read as before.
func isEventStream(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}

// wireChunk is one chat.completion.chunk of a streamed reply.
type wireChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   *string           `json:"content"`
			ToolCalls []wireToolCallBit `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// wireToolCallBit is a piece of a tool call: the first piece of call
// index i names it, the next ones add to its arguments.
type wireToolCallBit struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// assembly is a streamed reply being put together, chunk by chunk.
type assembly struct {
	model    string
	content  strings.Builder
	text     bool // some chunk carried content
	calls    []*callBits
	finish   string
	finished bool
	usage    wireUsage
	choices  bool
}

type callBits struct {
	id, name string
	args     strings.Builder
}

func (a *assembly) add(ch *wireChunk, deltas func(string)) {
	if a.model == "" {
		a.model = ch.Model
	}
	if ch.Usage != nil {
		a.usage = *ch.Usage
	}
	for _, c := range ch.Choices {
		if c.Index != 0 {
			continue // only the first choice is asked for and used
		}
		a.choices = true
		if c.Delta.Content != nil && *c.Delta.Content != "" {
			a.text = true
			a.content.WriteString(*c.Delta.Content)
			if deltas != nil {
				deltas(*c.Delta.Content)
			}
		}
		for _, bit := range c.Delta.ToolCalls {
			for len(a.calls) <= bit.Index && bit.Index < 1024 {
				a.calls = append(a.calls, &callBits{})
			}
			if bit.Index < 0 || bit.Index >= len(a.calls) {
				continue
			}
			cb := a.calls[bit.Index]
			if bit.ID != "" {
				cb.id = bit.ID
			}
			if bit.Function.Name != "" {
				cb.name += bit.Function.Name
			}
			cb.args.WriteString(argumentsPiece(bit.Function.Arguments))
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			a.finish, a.finished = *c.FinishReason, true
		}
	}
}

// argumentsPiece is a piece of a tool call's arguments: a JSON string is
// unquoted (the usual form), an object is kept as it is (a server that
// sends the whole object at once).
func argumentsPiece(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

// wire is the assembled reply in the form of a whole response, so that
// both forms become a Response the same way.
func (a *assembly) wire() *wireResponse {
	w := &wireResponse{Model: a.model, Usage: a.usage}
	if !a.choices {
		return w
	}
	ch := wireChoice{FinishReason: a.finish}
	ch.Message.Role = "assistant"
	if a.text {
		s := a.content.String()
		ch.Message.Content = &s
	}
	for _, cb := range a.calls {
		args, _ := json.Marshal(cb.args.String())
		ch.Message.ToolCalls = append(ch.Message.ToolCalls, wireToolCall{ID: cb.id, Type: "function",
			Function: wireFunction{Name: cb.name, Arguments: args}})
	}
	w.Choices = []wireChoice{ch}
	return w
}

// errDone stops reading at "data: [DONE]".
var errDone = errors.New("done")

// readStream reads a streamed reply (OpenAI chat.completion.chunk events)
// and assembles it, giving each piece of text to deltas as it arrives.
// A body that ends early is ErrStreamBroken (retried); one larger than
// MaxResponseBytes, a chunk that is not JSON or a reply without a choice
// is a decodeError (not retried), as for a whole response.
func (c *Client) readStream(ctx context.Context, body io.Reader, deltas func(string)) (Response, error) {
	lim := &io.LimitedReader{R: body, N: c.opts.MaxResponseBytes + 1}
	var a assembly
	err := sse.Read(ctx, lim, int(min(c.opts.MaxResponseBytes, 1<<30)), func(ev sse.Event) error {
		data := bytes.TrimSpace(ev.Data)
		if string(data) == "[DONE]" {
			return errDone
		}
		var ch wireChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return &decodeError{fmt.Errorf("stream chunk: %w", err)}
		}
		if len(ch.Error) > 0 && string(ch.Error) != "null" {
			return fmt.Errorf("%w: the server sent an error: %s", ErrStreamBroken,
				c.opts.APIKey.scrub(errorMessage([]byte(`{"error":`+string(ch.Error)+`}`))))
		}
		a.add(&ch, deltas)
		return nil
	})
	if lim.N <= 0 {
		return Response{}, &decodeError{fmt.Errorf("body larger than %d bytes", c.opts.MaxResponseBytes)}
	}
	var dec *decodeError
	switch {
	case errors.Is(err, bufio.ErrTooLong):
		return Response{}, &decodeError{fmt.Errorf("a stream line is longer than %d bytes", c.opts.MaxResponseBytes)}
	case errors.As(err, &dec):
		return Response{}, err
	case errors.Is(err, ErrStreamBroken):
		return Response{}, err
	case err != nil && err != errDone:
		return Response{}, fmt.Errorf("%w: %s", ErrStreamBroken, c.opts.APIKey.scrub(err.Error()))
	case err == nil && !a.finished:
		return Response{}, ErrStreamBroken
	}
	r, err := a.wire().response()
	if err != nil {
		return Response{}, &decodeError{err}
	}
	return r, nil
}
