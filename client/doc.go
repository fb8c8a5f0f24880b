// Package client is the typed Go client of pegasusd's two HTTP APIs, /v1
// (the agent's tasks and the log, docs/api.md) and /api/v1 (the Dispatch
// broker, docs/broker.md), and the worker SDK for the broker.
//
// A Client sends the requests of package api's wire types and returns
// them decoded. Its guarantees:
//
//   - An error answer is an *Error (status, code, message), which
//     errors.Is matches with the sentinels (ErrNotFound, ErrConflict,
//     ErrKeyReused, ErrUnavailable, ...) by the API's code; a request that
//     got no answer wraps ErrUnreachable.
//   - A request that may be sent twice is retried on a connection error,
//     429, 502, 503 and 504, with exponential backoff and jitter (or the
//     server's Retry-After), within Options.MaxAttempts and the context:
//     GET, PUT, PATCH, DELETE, a worker's reports (which the broker
//     answers as the first when repeated) and a POST with an
//     Idempotency-Key. Any other POST is sent once. Submit,
//     CreateDispatch and Reply take a key (WithIdempotencyKey) and, given
//     none while retries are enabled, send a random one of their own, as
//     Stripe's clients do: their own retries are then safe.
//   - A Subscription follows the event stream and resumes after the last
//     event it returned (Last-Event-ID) when the connection drops.
//
// A Worker (NewWorker, Run) registers the client's AgentID with its
// capabilities, long-polls for its tasks, runs up to MaxTasks handlers at
// once, sends heartbeats for tasks with heartbeat_seconds, reports each
// outcome (Permanent marks an error final: the broker dead-letters the
// task), survives a daemon that restarts under it, and drains on
// shutdown.
//
// The package imports the standard library and package api only, never
// the engine, so a worker binary stays small (internal/lint checks it).
// docs/client.md is its guide; its examples run against a real daemon.
package client
