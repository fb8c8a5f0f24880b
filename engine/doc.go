// Package engine assembles a Pegasus engine in-process, as nats-server's
// server.NewServer does: Start opens the event log in a data directory,
// recovers the agent (the one fold: its View serves the reads), and starts
// the Dispatch broker, the fan-out (Options.Publish), the cluster's
// replicated log, leases and sightings (Options.Cluster), the metrics'
// subscription, the schedules and retention. pegasusd, the tests and an
// embedder start it the same way; package server serves it over HTTP.
//
// Options.Config, a configuration file (package config, docs/config.md),
// adds named models (one client each, counted, each endpoint probed at
// start), task types, MCP servers (agent/mcp's manager, started before the
// agent and closed after it), tools run by broker workers (a call is handed
// to the broker once it runs) and schedules. Catalog lists the tools, the
// models and the task types for a server's /v1/tools, /v1/models and
// /v1/task-types.
//
// Each part is configured by Options (pebble's style: every field says its
// default; EnsureDefaults, Validate). The engine imports no HTTP server:
// server depends on what Engine exposes (Agent, Log, Keys, View, History,
// Broker, Metrics, ModelName, Context), never the other way round.
//
// The stop is ordered, and Stop keeps the order:
//
//  1. a server in front drains (mutations 503, readiness fails);
//  2. StopSchedules: no schedule fires any more, a firing one ends;
//  3. Cancel: Context ends, and with it long-lived requests, the broker's
//     loop and the partitions' resumes;
//  4. the HTTP server shuts down (its owner does it);
//  5. Stop: the metrics stop reading the log, the broker's loop ends,
//     retention stops, the leases stop taking and the fan-out stops, the
//     agent drains its running stages and closes the log, and last the
//     cluster's leases are given back and its follower stops.
//
// Failed is closed when the engine can no longer serve and its process
// should be restarted: the log refuses writes, the local copy stopped
// following the cluster's stream, or a partition's lease was lost. Err
// says which. Reopening the log is what recovers; a fresh process does it
// from a known state.
package engine
