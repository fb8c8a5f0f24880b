// Package server is Pegasus's HTTP API as an importable http.Handler: the
// agent's API under /v1 (tasks, events and their stream, stats,
// checkpoints, the OpenAPI document at /v1/openapi.json), the Dispatch
// broker's API under /api/v1, /healthz and /readyz, the dashboard at / and
// /ui/, and /metrics. pegasusd is a thin shell around it: flags, a
// listener, signals.
//
// Handlers translate: they read a request, call the engine and write its
// answer or its error in the one JSON envelope
// ({"error": {"code", "message"}}, the codes of package api). Rules live
// below: the machines (fsm), the agent, the broker (broker.Create,
// broker.Report), the log (eventlog). The server depends only on the
// narrow interfaces of Deps (Agent, EventStore, ReadModel, Metrics), which
// a started engine.Engine fills and a test may fake.
//
// Invariants:
//   - The server starts nothing and stops nothing. Drain makes mutations
//     answer 503 and readiness fail; the end of Deps.Base ends event
//     streams and long polls. The engine's owner stops the engine after
//     the HTTP server shut down.
//   - An error answer never carries a host path or a Go error's text: the
//     daemon's log has those (StorageReason, usererr).
//   - openapi.json describes every route, and a test of pegasusd validates
//     every request and answer of the real handlers against it.
//
// A server in front of an engine, in-process:
//
//	e, err := engine.Start(ctx, &engine.Options{DataDir: dir})
//	...
//	srv := server.New(server.Deps{Agent: e.Agent(), Store: e.Log(), View: e.View(),
//		History: e.History(), Keys: e.Keys(), Broker: e.Broker(), Metrics: e.Metrics(),
//		Model: e.ModelName(), Base: e.Context()}, nil)
//	http.ListenAndServe("127.0.0.1:7070", srv)
//
// and to stop, in this order: srv.Drain(), e.StopSchedules(), e.Cancel(),
// the HTTP server's Shutdown, e.Stop(ctx).
package server
