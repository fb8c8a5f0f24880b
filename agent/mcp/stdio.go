package mcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/segmentio/encoding/json"
)

// stdioTransport runs a server as a subprocess and speaks to it over its
// standard input and output, one JSON-RPC message a line, as the SDK's
// mcp.CommandTransport does (the same start, the same shutdown: stdin
// closed, then SIGTERM, then SIGKILL, each after terminate). It differs in
// how it reads: the SDK's connection decodes each message twice (as a
// batch first, then as one message) with a decoder that allocates a 32 KiB
// buffer each time, about 64 KiB of garbage a message; this one reads the
// line into a buffer it keeps and decodes it once.
type stdioTransport struct {
	cmd       *exec.Cmd
	terminate time.Duration

	conn *stdioConn // what Connect made
}

// maxLine bounds a message's line, as mcp.DefaultMaxLineLength bounds the
// SDK's.
const maxLine = mcp.DefaultMaxLineLength

// maxDepth bounds the nesting of a message, as the SDK's decoder does.
const maxDepth = 1000

// errLineTooLong is a server's line longer than maxLine.
var errLineTooLong = errors.New("mcp: a message from the server is longer than the limit")

func (t *stdioTransport) Connect(context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	terminate := t.terminate
	if terminate <= 0 {
		terminate = 5 * time.Second // mcp.CommandTransport's default
	}
	c := &stdioConn{cmd: t.cmd, stdin: stdin, terminate: terminate, incoming: make(chan msgOrErr), closed: make(chan struct{})}
	t.conn = c
	go c.readLoop(stdout)
	return c, nil
}

// msgOrErr is what the reading goroutine hands to Read.
type msgOrErr struct {
	msg jsonrpc.Message
	err error
}

type stdioConn struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	terminate time.Duration

	incoming  chan msgOrErr
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error

	writeMu sync.Mutex
	line    []byte // Write's buffer, under writeMu

	direct directCalls // the calls sent past the SDK (direct.go)
}

// readLoop reads the server's lines and hands their messages to Read, in
// order, until the output ends or the connection closes. A goroutine of
// its own, so that Read can return when its context ends or the
// connection closes while a read blocks.
func (c *stdioConn) readLoop(stdout io.Reader) {
	defer c.direct.end(io.EOF) // the connection closed
	r := bufio.NewReaderSize(stdout, 64<<10)
	var long []byte // a line longer than r's buffer, gathered
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(line) > maxLine {
				c.fail(errLineTooLong)
				return
			}
			long = append(long, line...)
			continue
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		if len(line) > maxLine {
			c.fail(errLineTooLong)
			return
		}
		if len(bytes.TrimSpace(line)) > 0 {
			msgs, derr := decodeLine(line)
			if derr != nil {
				c.fail(derr)
				return
			}
			for _, m := range msgs {
				if resp, ok := m.(*jsonrpc.Response); ok && c.direct.take(resp) {
					continue // an answer to a call sent past the SDK
				}
				if !c.hand(msgOrErr{msg: m}) {
					return
				}
			}
		}
		if err != nil {
			c.fail(err) // io.EOF when the server exits
			return
		}
	}
}

// fail ends the reading with err: the calls sent past the SDK fail with it
// at once, and Read returns it.
func (c *stdioConn) fail(err error) {
	c.direct.end(err)
	c.hand(msgOrErr{err: err})
}

// hand gives m to Read, or reports false when the connection closed.
func (c *stdioConn) hand(m msgOrErr) bool {
	select {
	case c.incoming <- m:
		return true
	case <-c.closed:
		return false
	}
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	default:
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case m := <-c.incoming:
		return m.msg, m.err
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.line = append(append(c.line[:0], data...), '\n')
	_, err = c.stdin.Write(c.line)
	return err
}

// Close closes the server's input and waits for it to exit, sending
// SIGTERM, then SIGKILL, each after c.terminate (the MCP specification's
// stdio shutdown, as mcp.CommandTransport does it).
func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = c.shutdown()
	})
	return c.closeErr
}

func (c *stdioConn) shutdown() error {
	if err := c.stdin.Close(); err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	wait := func() (error, bool) {
		timer := time.NewTimer(c.terminate)
		defer timer.Stop()
		select {
		case err := <-exited:
			return err, true
		case <-timer.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := c.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("mcp: the server does not exit")
}

func (c *stdioConn) SessionID() string { return "" }

// wireMessage is a JSON-RPC 2.0 message as it travels: a request (method
// set) or a response (result or error).
type wireMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      any             `json:"id,omitempty"`
	Method  *string         `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

// decodeLine decodes one line: a message, or a batch of them (an array),
// with the SDK's rules: field names match exactly, a value nests at most
// maxDepth deep, nothing follows it.
func decodeLine(line []byte) ([]jsonrpc.Message, error) {
	line = bytes.TrimSpace(line)
	if err := checkDepth(line); err != nil {
		return nil, err
	}
	if line[0] != '[' {
		m, err := decodeMessage(line)
		if err != nil {
			return nil, err
		}
		return []jsonrpc.Message{m}, nil
	}
	var raws []json.RawMessage
	if err := parse(line, &raws); err != nil {
		return nil, err
	}
	if len(raws) == 0 {
		return nil, errors.New("mcp: unmarshaling jsonrpc message: an empty batch")
	}
	msgs := make([]jsonrpc.Message, 0, len(raws))
	for _, raw := range raws {
		m, err := decodeMessage(raw)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// decodeMessage decodes one message as jsonrpc.DecodeMessage does.
func decodeMessage(data []byte) (jsonrpc.Message, error) {
	var w wireMessage
	if err := parse(data, &w); err != nil {
		return nil, err
	}
	if w.JSONRPC != "2.0" {
		return nil, fmt.Errorf("mcp: invalid message version tag %q; expected %q", w.JSONRPC, "2.0")
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil {
		return nil, err
	}
	if w.Method != nil {
		return &jsonrpc.Request{ID: id, Method: *w.Method, Params: w.Params}, nil
	}
	if !id.IsValid() {
		return nil, errors.New("mcp: unmarshaling jsonrpc message: a response without an id")
	}
	resp := &jsonrpc.Response{ID: id, Result: w.Result}
	if w.Error != nil {
		resp.Error = w.Error
	}
	return resp, nil
}

// parse decodes data into v, field names matching exactly, with nothing
// but spaces after the value.
func parse(data []byte, v any) error {
	rest, err := json.Parse(data, v, json.DontMatchCaseInsensitiveStructFields)
	if err != nil {
		return fmt.Errorf("mcp: unmarshaling jsonrpc message: %w", err)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return errors.New("mcp: unmarshaling jsonrpc message: invalid trailing data")
	}
	return nil
}

// checkDepth refuses a value whose objects and arrays nest deeper than
// maxDepth (strings skipped).
func checkDepth(data []byte) error {
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			if depth++; depth > maxDepth {
				return fmt.Errorf("mcp: unmarshaling jsonrpc message: nested deeper than %d", maxDepth)
			}
		case b == '}' || b == ']':
			depth--
		}
	}
	return nil
}
