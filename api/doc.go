// Package api holds the wire types of pegasusd's two HTTP APIs: /v1, the
// agent's tasks and the log (docs/api.md), and /api/v1, the Dispatch
// broker's tasks, workers and dead letters (docs/broker.md). Each type is
// the JSON a request sends or an answer carries, field for field, with the
// names the server uses; package client speaks them, and the server sends
// them.
//
// The package imports only the standard library (a lint test in
// internal/lint keeps it so), so that a program that only talks to a
// daemon, a worker for one, stays small. Parts of an answer whose shape
// belongs to the engine and changes with it (a task's whole context, its
// plan, an event's decoded body) are kept as json.RawMessage: they pass
// through unchanged, and a caller that wants them decodes them itself.
//
// Times are RFC 3339 in UTC. A field documented "omitted when zero" is
// absent from the JSON rather than present with a zero value.
package api
