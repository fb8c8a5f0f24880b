package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/segmentio/encoding/json"
)

// Calls sent past the SDK's client. The SDK's CallTool decodes each answer
// twice (the response's result into a CallToolResult, whose UnmarshalJSON
// decodes it again), each time with a decoder that allocates a 32 KiB
// buffer: about 64 KiB of garbage a call, half of what a call recorded by
// the agent allocates. On a stdio connection (ours, stdio.go) a plain
// tools/call is therefore written by the connection itself, with an id of
// its own ("pegasus-N"), and its answer is taken off the connection's
// reading goroutine before the SDK sees it and decoded once into the
// result; the session, every other request and every notification stay
// the SDK's. A call goes the SDK's way when its session speaks a revision
// whose requests carry the SDK's per-request _meta (2026-07-28 and later),
// when it may be answered with a task (tasks.go), or when the connection is
// not a stdio one (Streamable HTTP).

// directPrefix starts the ids of the requests a stdioConn sends itself; the
// SDK's ids are numbers.
const directPrefix = "pegasus-"

// notifyCancelTimeout bounds the write of notifications/cancelled, as the
// SDK's bounds its own.
const notifyCancelTimeout = 5 * time.Second

// directCalls are the requests a stdioConn sent itself and awaits.
type directCalls struct {
	mu      sync.Mutex
	next    uint64
	pending map[string]chan msgOrErr
	ended   error // why no answer will come: the server's output ended
}

// take hands resp to the call that awaits it, if its id is one of ours; it
// reports whether resp was ours (an answer to a call given up is dropped).
func (d *directCalls) take(resp *jsonrpc.Response) bool {
	id, ok := resp.ID.Raw().(string)
	if !ok || !strings.HasPrefix(id, directPrefix) {
		return false
	}
	d.mu.Lock()
	ch := d.pending[id]
	delete(d.pending, id)
	d.mu.Unlock()
	if ch != nil {
		ch <- msgOrErr{msg: resp}
	}
	return true
}

// end fails the calls in flight with err, and every later one.
func (d *directCalls) end(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ended != nil {
		return
	}
	d.ended = err
	for id, ch := range d.pending {
		ch <- msgOrErr{err: err}
		delete(d.pending, id)
	}
}

// add registers a new call and returns its id and where its answer comes.
func (d *directCalls) add() (string, chan msgOrErr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ended != nil {
		return "", nil, d.ended
	}
	d.next++
	id := directPrefix + strconv.FormatUint(d.next, 10)
	ch := make(chan msgOrErr, 1)
	if d.pending == nil {
		d.pending = map[string]chan msgOrErr{}
	}
	d.pending[id] = ch
	return id, ch, nil
}

func (d *directCalls) drop(id string) {
	d.mu.Lock()
	delete(d.pending, id)
	d.mu.Unlock()
}

// callTool sends tools/call for the tool named name with args (JSON) and
// the idempotency key key in its _meta, and returns the answer's result, as the SDK's CallTool would send
// and await it: the same errors (a JSON-RPC error is a *jsonrpc.Error in
// the chain), and notifications/cancelled sent when ctx ends first.
func (c *stdioConn) callTool(ctx context.Context, name string, args json.RawMessage, key string) (json.RawMessage, error) {
	const method = "tools/call"
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id, ch, err := c.direct.add()
	if err != nil {
		return nil, fmt.Errorf("calling %q: %w", method, err)
	}
	if err := c.writeCall(id, name, args, key); err != nil {
		c.direct.drop(id)
		return nil, fmt.Errorf("calling %q: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.err != nil {
			return nil, fmt.Errorf("calling %q: %w", method, m.err)
		}
		resp := m.msg.(*jsonrpc.Response)
		if resp.Error != nil {
			return nil, fmt.Errorf("calling %q: %w", method, resp.Error)
		}
		return resp.Result, nil
	case <-ctx.Done():
		c.direct.drop(id)
		reason := ctx.Err().Error()
		go c.notifyCancelled(id, reason)
		return nil, ctx.Err()
	case <-c.closed:
		c.direct.drop(id)
		return nil, fmt.Errorf("%w: calling %q: the connection closed", mcp.ErrConnectionClosed, method)
	}
}

// writeCall writes the request line of a tools/call.
func (c *stdioConn) writeCall(id, name string, args json.RawMessage, key string) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	b := append(c.line[:0], `{"jsonrpc":"2.0","id":"`...)
	b = append(b, id...)
	b = append(b, `","method":"tools/call","params":{"name":`...)
	b = json.AppendEscape(b, name, json.EscapeHTML)
	b = append(b, `,"arguments":`...)
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	// The model's arguments may span lines; a message is one line.
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, args); err != nil {
		c.line = b[:0]
		return fmt.Errorf("encoding the arguments: %w", err)
	}
	b = buf.Bytes()
	b = append(b, `,"_meta":`...)
	b = appendKeyMeta(b, key)
	b = append(b, "}}\n"...)
	c.line = b
	_, err := c.stdin.Write(b)
	return err
}

// appendKeyMeta appends the _meta of a call with idempotency key key,
// mcp.Meta{MetaIdempotencyKey: key} as JSON.
func appendKeyMeta(b []byte, key string) []byte {
	b = append(b, `{"`+MetaIdempotencyKey+`":`...)
	b = json.AppendEscape(b, key, json.EscapeHTML)
	return append(b, '}')
}

// notifyCancelled tells the server that the call id was given up, best
// effort, as the SDK does for its own calls.
func (c *stdioConn) notifyCancelled(id, reason string) {
	b := append([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"`), id...)
	b = append(b, `","reason":`...)
	b = json.AppendEscape(b, reason, json.EscapeHTML)
	b = append(b, "}}\n"...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.writeMu.Lock()
		defer c.writeMu.Unlock()
		_, _ = c.stdin.Write(b)
	}()
	timer := time.NewTimer(notifyCancelTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-c.closed:
	}
}

// plainResult is a tools/call result with text content only, the common
// answer, decoded without the SDK's decoder. A result or a content with
// any other field (set, even to null) goes to the SDK's decoding instead.
type plainResult struct {
	Content []plainContent `json:"content"`
	IsError bool           `json:"isError"`
}

type plainContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// errNotPlain is a result plainResult does not map.
var errNotPlain = errors.New("mcp: not a plain text result")

// decodeResult decodes a tools/call result into what the SDK's CallTool
// returns for it: text content by hand, anything else by the SDK's own
// CallToolResult.UnmarshalJSON (one decoding, not its CallTool's two).
func decodeResult(raw json.RawMessage) (*mcp.CallToolResult, error) {
	if res, err := decodePlain(raw); err == nil {
		return res, nil
	}
	res := new(mcp.CallToolResult)
	if err := res.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("calling %q: %w", "tools/call", err)
	}
	return res, nil
}

func decodePlain(raw json.RawMessage) (*mcp.CallToolResult, error) {
	var p plainResult
	rest, err := json.Parse(raw, &p, json.DontMatchCaseInsensitiveStructFields|json.DisallowUnknownFields)
	if err != nil || len(bytes.TrimSpace(rest)) > 0 {
		return nil, errNotPlain
	}
	// As the SDK's: a result without content has an empty list.
	res := &mcp.CallToolResult{IsError: p.IsError, Content: make([]mcp.Content, len(p.Content))}
	texts := make([]mcp.TextContent, len(p.Content))
	for i := range p.Content {
		c := &p.Content[i]
		if c.Type != "text" {
			return nil, errNotPlain
		}
		texts[i].Text = c.Text
		res.Content[i] = &texts[i]
	}
	return res, nil
}
