// Package tools defines what a tool is for the agent, a registry of tools,
// and the built-in tools: memory_list, memory_read, memory_write,
// memory_patch, memory_append, notify and current_time.
//
// A tool is anything that implements [Tool]. The agent runs one tool call
// per plan step, under its tool semaphore and a per-call timeout, and
// records it in the log as TOOL_CALL_STARTED then TOOL_CALL_COMPLETED or
// TOOL_CALL_FAILED. The result text (or "error: " and the error text) is
// what the model sees next.
//
// A tool may run more than once for the same step: if the daemon crashes
// after TOOL_CALL_STARTED was recorded and before the completion was, the
// call runs again after recovery with the same [Call.IdempotencyKey]. Tools
// with side effects outside Pegasus should pass the key on (as an
// Idempotency-Key header, a request id, a unique constraint) so that the
// second run is harmless. This is the at-least-once rule.
//
// A tool says where it runs by implementing [Sourced] ([SourceOf]: a tool
// that does not is [SourceGo]; the built-in tools are [SourceBuiltin]); the
// agent records it on the tool call's events. A [PartsTool] answers with
// typed parts beside its text; a tool that waits on a job elsewhere records
// its durable handle with [Call.RecordHandle] and gets it back in
// [Call.Handle] after a crash. A [Provider] is a changing set of tools (an
// MCP server). A [WorkerTool] is run by a broker worker: the agent hands its
// call to the broker instead of calling it.
//
// The memory tools read and write long-term memory through the [Memory]
// interface; the agent implements it with events on the "$memory" stream
// and the memory projection, so memory replays like everything else.
package tools
