// Package traces derives OpenTelemetry-shaped spans from a task's events.
//
// It is a pure function of the log, like the fold: no I/O, no clock, no
// random numbers. Trace and span ids come from the events' ULIDs, so the
// same task mapped twice (live by pegasusd, later by pegasus-replay from a
// checkpoint or an archive) gives the same trace, which tracing backends
// de-duplicate. The OTLP export, live and offline, and the dashboard's
// waterfall all draw what Build returns.
package traces
