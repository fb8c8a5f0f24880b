// Package mcp makes the tools of MCP servers (Model Context Protocol) tools
// of the agent, with the official Go SDK.
//
// [Start] starts a [Manager] over the configured servers: a stdio server is
// a command the manager runs (command, arguments, environment, working
// directory), a Streamable HTTP server is a URL with request headers. Each
// server has a loop of its own: connect (initialize within
// [Options.InitTimeout]), list the tools, serve calls, list again on
// notifications/tools/list_changed, and when the session ends (the process
// exited, the connection broke) mark the server down and start it again
// after a backoff that doubles up to [Options.MaxBackoff]. Start never fails
// for a server that is down: it keeps trying, and [Manager.Servers] says why
// it is down.
//
// The manager is a tools.Provider: [Manager.Tools] has one tool per server
// tool, named "<server>__<tool>" with the server's description and input
// schema, and [Manager.Changed] is closed when that set changes. A tool is a
// tools.PartsTool and a tools.Sourced (tools.SourceMCP and the server's
// name). A call:
//
//   - fails at once, wrapping [ErrServerDown], while its server is starting
//     or down: it never waits for a server to come back;
//   - carries the call's idempotency key in the request's _meta as
//     "io.pegasus/idempotency-key" ([MetaIdempotencyKey]), so that a server
//     that honours it makes the re-run after a crash harmless;
//   - is cancelled with its context: notifications/cancelled is sent;
//   - over stdio, when the call cannot be answered with a task and the
//     session speaks a revision before 2026-07-28, is written by the
//     manager's connection itself and its answer decoded once (direct.go),
//     since the SDK's CallTool decodes each answer twice with a 32 KiB
//     buffer each time; any other call goes through the SDK's CallTool;
//   - returns the text content as text and the other content (images,
//     audio, embedded resources, resource links, structured content) as
//     fsm.ToolPart values, all of it bounded by [Options.MaxResultBytes]
//     with Truncated set on what was cut;
//   - turns isError: true into a [*ToolError] whose text is the server's;
//   - wraps [ErrServerExited] when the server's session ended during the
//     call and [ErrMalformedResult] when the answer does not decode.
//
// # Tasks
//
// A server may answer a long tools/call with a durable task handle instead of
// a result (MCP tasks: core and experimental in protocol revision 2025-11-25,
// the io.modelcontextprotocol/tasks extension in 2026-07-28). The SDK has no
// client for tasks, so the manager reads and rewrites the few messages
// involved (see tasks.go): on a stdio session it wraps the SDK's
// connection, on a Streamable HTTP session the HTTP client it gives the SDK
// rewrites the requests' and answers' bodies (tasks_http.go), since the
// SDK's HTTP connection cannot be wrapped. It reads the server's tasks
// capability and each tool's execution.taskSupport, adds the task field to
// a tools/call of a tool that supports tasks (2025-11-25; in 2026-07-28 the
// request carries the extension in its per-request capabilities), and
// hands a task handle back to the tool. The tool then calls
// Call.RecordHandle, so that the agent records the handle before it waits,
// and polls tasks/get at the server's poll interval; a completed task's
// result comes from tasks/result (2025-11-25) or inline (2026-07-28). A
// call whose Call.Handle is set (the daemon restarted after the handle was
// recorded) polls that handle again instead of calling the tool a second
// time.
//
// A call whose context ends while it waits on a task (the agent task was
// cancelled, the call timed out) sends tasks/cancel for the task, and so
// does a call whose handle could not be recorded; once [Manager.Stopping]
// was called (the daemon stops) or the manager is closed, a cancelled call
// leaves its task to the next start instead.
package mcp
