package mcp

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/segmentio/encoding/json"
)

// TestDecodeResultMatchesTheSDK: a tools/call result decodes to what the
// SDK's CallTool returns for it, whether it takes the text-only way or the
// SDK's own decoding, and fails where the SDK's fails.
func TestDecodeResultMatchesTheSDK(t *testing.T) {
	for _, raw := range []string{
		`{"content":[{"type":"text","text":"Echo: hi"}]}`,
		`{"content":[{"type":"text","text":"a"},{"type":"text","text":"b\n\u00e9"}],"isError":true}`,
		`{"content":[]}`,
		`{}`,
		`{"content":null}`,
		`{"content":[{"type":"text"}]}`,
		`{"content":[{"type":"text","text":"x"}],"unknown":{"a":[1,2]}}`,
		`{"content":[{"type":"text","text":"x","annotations":{"priority":0.5}}]}`,
		`{"content":[{"type":"text","text":"x","_meta":{"k":"v"}}]}`,
		`{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"}]}`,
		`{"content":[{"type":"resource_link","uri":"file:///a","name":"a","size":3}]}`,
		`{"content":[{"type":"resource","resource":{"uri":"file:///a","text":"t"}}]}`,
		`{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":1}}`,
		`{"content":[{"type":"text","text":"x"}],"_meta":{"k":"v"}}`,
		`{"content":[{"type":"text","text":"x","data":"not base64!"}]}`,
		`{"content":[{"type":"nope"}]}`,
		`{"content":[null]}`,
		`{"content":[{"type":"text","text":"x"}],"isError":"yes"}`,
		`{"content":{"type":"text"}}`,
		`{"Content":[{"type":"text","text":"x"}]}`,
		`{"content":[{"Type":"text","text":"x"}]}`,
	} {
		want := new(mcp.CallToolResult)
		wantErr := want.UnmarshalJSON([]byte(raw))
		got, err := decodeResult(json.RawMessage(raw))
		switch {
		case (err != nil) != (wantErr != nil):
			t.Errorf("%s: error %v, the SDK's %v", raw, err, wantErr)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Errorf("%s: %#v, the SDK's %#v", raw, got, want)
		}
	}
}

// TestDirectCallOnAStdioConnection: a tools/call sent past the SDK is one
// line (arguments that span lines compacted), with an id of its own, and
// its answer is taken off the connection before the SDK's reader; once the
// server's output ends a call fails at once.
func TestDirectCallOnAStdioConnection(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	sent := filepath.Join(t.TempDir(), "sent")
	script := `read line; printf '%s\n' "$line" > "$SENT"
		printf '{"jsonrpc":"2.0","id":"pegasus-1","result":{"content":[{"type":"text","text":"hi"}]}}\n'
		printf '{"jsonrpc":"2.0","method":"notifications/message","params":{}}\n'`
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "SENT="+sent)
	tr := &stdioTransport{cmd: cmd, terminate: time.Second}
	ctx := context.Background()
	conn, err := tr.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := tr.conn
	raw, err := c.callTool(ctx, "echo", json.RawMessage("{\n  \"message\": \"<a>\"\n}"), "t:1:0")
	if err != nil || string(raw) != `{"content":[{"type":"text","text":"hi"}]}` {
		t.Fatalf("the answer: %s %v", raw, err)
	}
	b, err := os.ReadFile(sent)
	want := `{"jsonrpc":"2.0","id":"pegasus-1","method":"tools/call","params":{"name":"echo","arguments":{"message":"<a>"},"_meta":{"io.pegasus/idempotency-key":"t:1:0"}}}` + "\n"
	if err != nil || string(b) != want {
		t.Fatalf("sent %q (%v), want %q", b, err, want)
	}
	// The SDK's reader gets what is not an answer to a direct call.
	if m, err := conn.Read(ctx); err != nil || m == nil {
		t.Fatalf("the notification: %v %v", m, err)
	}
	if m, err := conn.Read(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the server's exit: %v %v, want io.EOF", m, err)
	}
	if _, err := c.callTool(ctx, "echo", nil, ""); !errors.Is(err, io.EOF) {
		t.Fatalf("a call after the output ended: %v, want io.EOF", err)
	}
}

// TestCallAllocatesLittle: a call through the Manager to a stdio server
// (server-everything's echo) allocates a few KiB, not the 64 KiB of the
// SDK's CallTool (two decoders of 32 KiB each for the answer).
func TestCallAllocatesLittle(t *testing.T) {
	m := start(t, testOptions(), everythingStdio(t, "everything"))
	waitReady(t, m, "everything")
	tl := findTool(t, m, "everything__echo")
	ctx := context.Background()
	if _, err := call(ctx, tl, "k", `{"message":"hi"}`); err != nil {
		t.Fatal(err)
	}
	const calls = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		if r, err := call(ctx, tl, "k", `{"message":"hi"}`); err != nil || r.Text != "Echo: hi" {
			t.Fatalf("%q %v", r.Text, err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / calls; per > 24<<10 {
		t.Errorf("%d bytes allocated per call, want at most 24 KiB", per)
	}
}

// TestDirectCallCancelled: a direct call whose context ends returns at once
// and the server is sent notifications/cancelled for its id; a call in
// flight when the server exits fails with io.EOF (ErrServerExited for the
// tool).
func TestDirectCallCancelled(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	sent := filepath.Join(dir, "sent")
	script := `read line; printf '%s\n' "$line" > "$SENT.tmp"; mv "$SENT.tmp" "$SENT"
		read line; printf '%s\n' "$line" > "$SENT.tmp"; mv "$SENT.tmp" "$SENT.2"
		read line`
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "SENT="+sent)
	tr := &stdioTransport{cmd: cmd, terminate: time.Second}
	conn, err := tr.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tr.conn.callTool(ctx, "block", nil, "")
		done <- err
	}()
	eventually(t, "the request", func() bool { _, err := os.Stat(sent); return err == nil })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled call: %v, want context.Canceled", err)
	}
	eventually(t, "notifications/cancelled", func() bool { _, err := os.Stat(sent + ".2"); return err == nil })
	b, _ := os.ReadFile(sent + ".2")
	if want := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"pegasus-1","reason":"context canceled"}}` + "\n"; string(b) != want {
		t.Fatalf("sent %q, want %q", b, want)
	}
	// The server reads one more line and exits: the call fails.
	if _, err := tr.conn.callTool(context.Background(), "echo", nil, ""); !errors.Is(err, io.EOF) {
		t.Fatalf("a call in flight when the server exits: %v, want io.EOF", err)
	}
}

// TestDecodePlainTakesTextOnly: the text-only way takes the common answer
// and leaves any other field to the SDK's decoding.
func TestDecodePlainTakesTextOnly(t *testing.T) {
	for raw, plain := range map[string]bool{
		`{"content":[{"type":"text","text":"Echo: hi"}]}`:                        true,
		`{"content":[{"type":"text","text":"a"}],"isError":true}`:                true,
		`{"content":[{"type":"text","text":"x","annotations":null}]}`:            false,
		`{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":1}}`:   false,
		`{"content":[{"type":"text","text":"x"}],"resultType":"input_required"}`: false,
		`{"content":[{"type":"image","data":"aGk="}]}`:                           false,
	} {
		if _, err := decodePlain(json.RawMessage(raw)); (err == nil) != plain {
			t.Errorf("%s: plain %v, want %v", raw, err == nil, plain)
		}
	}
}

// TestKeyMetaAsJSON: the _meta a direct call writes is the JSON of
// mcp.Meta{MetaIdempotencyKey: key}, whatever the key holds.
func TestKeyMetaAsJSON(t *testing.T) {
	for _, key := range []string{"", "t:1:0", `01J:1:0 <a> & "b" \ \u2028 é` + "\n\t\x01"} {
		want, err := json.Marshal(mcp.Meta{MetaIdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendKeyMeta(nil, key); string(got) != string(want) {
			t.Errorf("key %q: %s, want %s", key, got, want)
		}
	}
}
