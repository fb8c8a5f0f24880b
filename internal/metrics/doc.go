// Package metrics exposes a running daemon in the Prometheus exposition
// format (docs/metrics.md lists every series).
//
// Nothing here instruments the agent's code paths. The metrics are derived
// from what the daemon already keeps:
//
//   - the committed events, read by a subscription of their own (Run): events
//     by type, model calls, tokens, tool calls, task outcomes and durations,
//     and the log's commit groups (every event of one group carries the time
//     the committer read once for the group, so consecutive events with the
//     same time are one synced commit);
//   - the fold's read models at scrape time (Collect): tasks by state, which
//     therefore always equal GET /v1/stats, the fold's lag behind the head,
//     the admission queue and the runtime slots;
//   - the log's storage engine (Pebble) at scrape time: disk usage,
//     compactions, WAL bytes and fsync latency;
//   - the HTTP handler (InstrumentHTTP): requests by route pattern and code.
//
// Label values that come from data (event types, tool names, failure
// reasons) are bounded: past a fixed number of distinct values they are
// counted under "(other)", so a hostile log cannot grow the registry.
package metrics
