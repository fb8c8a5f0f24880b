package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/fsm"
)

// MetaIdempotencyKey is the _meta key of a tools/call request that carries
// the call's idempotency key: the same on every run of the call, including
// the run after a crash.
const MetaIdempotencyKey = "io.pegasus/idempotency-key"

// maxName is OpenAI's limit on a tool name.
const maxName = 64

// ToolName returns the name the model calls a server's tool by:
// "<server>__<tool>", with every character other than a letter, a digit,
// '_' or '-' replaced by '_'. A name longer than 64 characters keeps its
// first 55 and ends in '_' and 8 hex digits of the SHA-256 of the full
// name, so that two long names stay distinct and the same on every start.
func ToolName(server, tool string) string {
	full := server + "__" + tool
	b := []byte(full)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) <= maxName {
		return string(b)
	}
	return string(b[:maxName-9]) + "_" + shortHash(full)
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

// tool is one server tool as the agent sees it.
type tool struct {
	s           *server
	remote      string // the tool's name on the server
	name        string
	description string
	params      json.RawMessage
	taskSupport string // "", "forbidden", "optional" or "required"
}

func newTool(s *server, t *mcp.Tool, used map[string]bool) (*tool, error) {
	name := ToolName(s.cfg.Name, t.Name)
	if used[name] {
		// Two server tools that differ only in characters the name rule
		// replaces: the second one gets the hash suffix.
		name = name[:min(len(name), maxName-9)] + "_" + shortHash(s.cfg.Name+"__"+t.Name)
		if used[name] {
			return nil, fmt.Errorf("its name %q is taken", name)
		}
	}
	used[name] = true
	params := json.RawMessage(`{"type":"object","properties":{}}`)
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("input schema: %v", err)
		}
		params = b
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	support, _ := t.Meta[metaTaskSupport].(string)
	return &tool{s: s, remote: t.Name, name: name, description: desc, params: params, taskSupport: support}, nil
}

func (t *tool) Name() string                { return t.name }
func (t *tool) Description() string         { return t.description }
func (t *tool) Parameters() json.RawMessage { return t.params }
func (t *tool) Source() tools.Source {
	return tools.Source{Kind: tools.SourceMCP, Server: t.s.cfg.Name}
}

// Call runs the tool and returns its text (see CallParts).
func (t *tool) Call(ctx context.Context, c tools.Call) (string, error) {
	r, err := t.CallParts(ctx, c)
	return r.Text, err
}

// CallParts runs the tool on its server. See the package documentation.
func (t *tool) CallParts(ctx context.Context, c tools.Call) (tools.Result, error) {
	t.s.calls.Add(1)
	r, err := t.call(ctx, c)
	if err != nil {
		t.s.errs.Add(1)
	}
	return r, err
}

func (t *tool) call(ctx context.Context, c tools.Call) (tools.Result, error) {
	sess, err := t.s.current()
	if err != nil {
		if t.s.m.closed() {
			return tools.Result{}, fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return tools.Result{}, err
	}
	if c.Handle != "" {
		res, err := t.awaitTask(ctx, sess, c.Handle)
		if err != nil {
			return tools.Result{}, err
		}
		return t.result(res)
	}
	args := c.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	res, err := t.send(ctx, sess, args, c.IdempotencyKey)
	if err != nil {
		return tools.Result{}, t.callError(ctx, sess, err)
	}
	if task, ok := taskOf(res); ok {
		// Nobody will poll a task whose handle cannot be, or was not,
		// recorded: it is cancelled.
		if c.RecordHandle == nil {
			t.sendCancel(ctx, sess, task.TaskID)
			return tools.Result{}, fmt.Errorf("%w: server %q answered %s with task %s, and this call cannot record it",
				ErrTask, t.s.cfg.Name, t.remote, task.TaskID)
		}
		if err := c.RecordHandle(ctx, task.TaskID); err != nil {
			t.sendCancel(ctx, sess, task.TaskID)
			return tools.Result{}, fmt.Errorf("mcp: recording task %s of server %q: %w", task.TaskID, t.s.cfg.Name, err)
		}
		res, err = t.awaitTask(ctx, sess, task.TaskID)
		if err != nil {
			return tools.Result{}, err
		}
	}
	return t.result(res)
}

// send sends a tools/call of the tool with args, carrying the call's
// idempotency key in its _meta: past the SDK's client when the session
// allows it (direct.go), through its CallTool otherwise.
func (t *tool) send(ctx context.Context, sess *session, args json.RawMessage, key string) (*mcp.CallToolResult, error) {
	asTask := sess.tasks != nil && sess.tasks.useTask(t.taskSupport)
	if sess.direct == nil || asTask || sess.tasks.isModern() || perRequestMeta(sess.cs) {
		params := &mcp.CallToolParams{Name: t.remote, Arguments: args, Meta: mcp.Meta{MetaIdempotencyKey: key}}
		if asTask {
			params.Meta[metaAsTask] = true
		}
		return sess.cs.CallTool(ctx, params)
	}
	sess.tasks.sent()
	answer, err := sess.direct.callTool(ctx, t.remote, args, key)
	if err != nil {
		return nil, err
	}
	return decodeResult(answer)
}

// perRequestMeta reports whether the SDK adds its per-request _meta to
// the session's requests (revision 2026-07-28 and later).
func perRequestMeta(cs *mcp.ClientSession) bool {
	r := cs.InitializeResult()
	return r != nil && r.ProtocolVersion >= "2026-07-28"
}

// callError says why a request failed: the caller gave up, the server
// answered with an error, the session ended, or the answer did not decode.
func (t *tool) callError(ctx context.Context, sess *session, err error) error {
	var wire *jsonrpc.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("mcp: call to %s on server %q: %w", t.remote, t.s.cfg.Name, context.Cause(ctx))
	case errors.As(err, &wire):
		return fmt.Errorf("mcp: server %q: tool %s: %s (code %d)", t.s.cfg.Name, t.remote, wire.Message, wire.Code)
	case errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, os.ErrClosed) || sess.ended():
		// The SDK fails the calls in flight with the error that ended its
		// reading (io.EOF when a stdio server exits), before the session's
		// end is seen.
		return fmt.Errorf("%w: server %q, tool %s: %v", ErrServerExited, t.s.cfg.Name, t.remote, err)
	}
	return fmt.Errorf("%w from server %q, tool %s: %v", ErrMalformedResult, t.s.cfg.Name, t.remote, err)
}

func (s *session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// ToolError is the error of a call whose result had isError: true. Its
// text is the server's, which the model sees.
type ToolError struct {
	Server, Tool string
	Text         string
}

func (e *ToolError) Error() string { return e.Text }

// result turns a CallToolResult into the tool's Result, bounded by
// MaxResultBytes.
func (t *tool) result(res *mcp.CallToolResult) (tools.Result, error) {
	out := convert(res, t.s.m.opts.MaxResultBytes)
	if res.IsError {
		text := out.Text
		if text == "" {
			text = "the tool reported an error without a text"
		}
		return tools.Result{}, &ToolError{Server: t.s.cfg.Name, Tool: t.remote, Text: text}
	}
	return out, nil
}

// convert maps content to text and parts within budget bytes: the text
// first, then each part's payload in order. A cut text ends in a marker
// saying how much was cut; a cut part has Truncated set and Size the
// original size. The text also lists the parts in one line each, so that
// the model knows they exist.
func convert(res *mcp.CallToolResult, budget int) tools.Result {
	var text strings.Builder
	var parts []fsm.ToolPart
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			if text.Len() > 0 {
				text.WriteByte('\n')
			}
			text.WriteString(c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fsm.ToolPart{Type: "image", MIMEType: c.MIMEType,
				Data: base64.StdEncoding.EncodeToString(c.Data), Size: len(c.Data)})
		case *mcp.AudioContent:
			parts = append(parts, fsm.ToolPart{Type: "audio", MIMEType: c.MIMEType,
				Data: base64.StdEncoding.EncodeToString(c.Data), Size: len(c.Data)})
		case *mcp.EmbeddedResource:
			if c.Resource == nil {
				continue
			}
			p := fsm.ToolPart{Type: "resource", MIMEType: c.Resource.MIMEType, URI: c.Resource.URI,
				Text: c.Resource.Text, Size: len(c.Resource.Text)}
			if c.Resource.Blob != nil {
				p.Data, p.Size = base64.StdEncoding.EncodeToString(c.Resource.Blob), len(c.Resource.Blob)
			}
			parts = append(parts, p)
		case *mcp.ResourceLink:
			p := fsm.ToolPart{Type: "resource_link", MIMEType: c.MIMEType, URI: c.URI, Text: c.Name}
			if c.Size != nil {
				p.Size = int(*c.Size)
			}
			parts = append(parts, p)
		}
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, fsm.ToolPart{Type: "structured", MIMEType: "application/json", Text: string(b), Size: len(b)})
			if text.Len() == 0 {
				text.Write(b)
			}
		}
	}
	for _, p := range parts {
		if text.Len() > 0 {
			text.WriteByte('\n')
		}
		fmt.Fprintf(&text, "[%s", p.Type)
		for _, s := range []string{p.MIMEType, p.URI} {
			if s != "" {
				fmt.Fprintf(&text, " %s", s)
			}
		}
		if p.Size > 0 {
			fmt.Fprintf(&text, ", %d bytes", p.Size)
		}
		text.WriteString("]")
	}
	out := tools.Result{Text: text.String()}
	if len(out.Text) > budget {
		full := len(out.Text)
		out.Text = cut(out.Text, budget) + fmt.Sprintf("\n[truncated: %d of %d bytes]", budget, full)
		budget = 0
	} else {
		budget -= len(out.Text)
	}
	for i := range parts {
		p := &parts[i]
		if n := len(p.Data); n > budget {
			p.Data = p.Data[:budget/4*4] // whole base64 quanta
			p.Truncated = true
		}
		budget -= len(p.Data)
		if n := len(p.Text); n > budget {
			p.Text = cut(p.Text, budget)
			p.Truncated = true
		}
		budget -= len(p.Text)
	}
	out.Parts = parts
	return out
}

// cut returns s's first n bytes or fewer, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
