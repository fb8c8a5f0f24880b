package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestDecodeLine decodes what a server sends as the SDK's connection
// does: requests, results, errors and batches, field names matched
// exactly, and refuses what it refuses.
func TestDecodeLine(t *testing.T) {
	msgs, err := decodeLine([]byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"Echo: hi"}]}}` + "\r\n"))
	if err != nil || len(msgs) != 1 {
		t.Fatalf("a result: %v %v", msgs, err)
	}
	resp, ok := msgs[0].(*jsonrpc.Response)
	if want, _ := jsonrpc.MakeID(float64(7)); !ok || resp.ID != want || resp.Error != nil ||
		string(resp.Result) != `{"content":[{"type":"text","text":"Echo: hi"}]}` {
		t.Errorf("a result: %#v", msgs[0])
	}

	msgs, err = decodeLine([]byte(`{"jsonrpc":"2.0","id":"a","error":{"code":-32602,"message":"bad","data":{"x":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp = msgs[0].(*jsonrpc.Response)
	var we *jsonrpc.Error
	if !errors.As(resp.Error, &we) || we.Code != -32602 || we.Message != "bad" || string(we.Data) != `{"x":1}` || resp.ID.Raw() != "a" {
		t.Errorf("an error: %#v", resp)
	}

	msgs, err = decodeLine([]byte(`[{"jsonrpc":"2.0","method":"notifications/tools/list_changed"},{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}]`))
	if err != nil || len(msgs) != 2 {
		t.Fatalf("a batch: %v %v", msgs, err)
	}
	if n, ok := msgs[0].(*jsonrpc.Request); !ok || n.Method != "notifications/tools/list_changed" || n.IsCall() {
		t.Errorf("a notification: %#v", msgs[0])
	}
	if r, ok := msgs[1].(*jsonrpc.Request); !ok || r.Method != "ping" || !r.IsCall() || string(r.Params) != `{}` {
		t.Errorf("a request: %#v", msgs[1])
	}

	for _, bad := range []string{
		`{"jsonrpc":"1.0","id":1,"result":{}}`,         // not 2.0
		`{"JSONRPC":"2.0","id":1,"result":{}}`,         // names match exactly
		`{"jsonrpc":"2.0","result":{}}`,                // a response without an id
		`{"jsonrpc":"2.0","id":1,"result":{}} {"x":1}`, // trailing data
		`{"jsonrpc":"2.0","id":true,"result":{}}`,      // an id of another type
		`[]`, // an empty batch
		`{"jsonrpc":"2.0","id":1,"result":{"a":"b"`, // cut short
		`{"jsonrpc":"2.0","id":1,"result":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}`,
	} {
		if msgs, err := decodeLine([]byte(bad)); err == nil {
			t.Errorf("%.60s: %v, want an error", bad, msgs)
		}
	}
	// Brackets in strings do not count.
	if _, err := decodeLine([]byte(`{"jsonrpc":"2.0","id":1,"result":{"text":"` + strings.Repeat("[", maxDepth+1) + `\"["}}`)); err != nil {
		t.Errorf("brackets in a string: %v", err)
	}
}

// TestStdioConnection speaks to a subprocess through stdioTransport: a
// line written reaches it, the lines it writes (one longer than the read
// buffer, blank ones between) come back as messages in order, its exit is
// io.EOF, and Close returns once it has exited.
func TestStdioConnection(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	const long = 200 << 10 // bytes of text, more than the read buffer
	script := `read line; printf '%s\n\n' "$line"; printf '{"jsonrpc":"2.0","id":2,"result":{"text":"'
		head -c 204800 /dev/zero | tr '\0' x; printf '"}}\n'`
	tr := &stdioTransport{cmd: exec.Command("sh", "-c", script), terminate: time.Second}
	ctx := context.Background()
	conn, err := tr.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id, _ := jsonrpc.MakeID(float64(1))
	// The script echoes the request line back: as a message from the
	// server, a request.
	if err := conn.Write(ctx, &jsonrpc.Request{ID: id, Method: "tools/call", Params: json.RawMessage(`{"name":"echo"}`)}); err != nil {
		t.Fatal(err)
	}
	m, err := conn.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); err != nil || !ok || r.Method != "tools/call" || r.ID != id || string(r.Params) != `{"name":"echo"}` {
		t.Fatalf("the echoed request: %#v %v", m, err)
	}
	m, err = conn.Read(ctx)
	if r, ok := m.(*jsonrpc.Response); err != nil || !ok || len(r.Result) != long+len(`{"text":""}`) {
		t.Fatalf("the long line: %T %v", m, err)
	}
	if m, err := conn.Read(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the server's exit: %v %v, want io.EOF", m, err)
	}
	if err := conn.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if m, err := conn.Read(ctx); !errors.Is(err, io.EOF) {
		t.Errorf("after close: %v %v, want io.EOF", m, err)
	}
}

// TestStdioCloseStopsAServerThatKeepsRunning: a server that ignores its
// closed input is sent SIGTERM after the terminate duration.
func TestStdioCloseStopsAServerThatKeepsRunning(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep")
	}
	tr := &stdioTransport{cmd: exec.Command("sleep", "60"), terminate: 50 * time.Millisecond}
	conn, err := tr.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := conn.Read(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a read with a cancelled context: %v", err)
	}
	if err := conn.Close(); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Errorf("close: %v, want the process terminated by SIGTERM", err)
	}
}
