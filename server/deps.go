package server

import (
	"context"
	"net/http"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/broker"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// The HTTP server depends on what its handlers use, not on the agent, the
// log and the view as a whole: an engine hands it *agent.Agent as the
// Agent, *eventlog.Log as the EventStore and *replay.View as the
// ReadModel (the compile-time checks below), and a test can hand it small
// fakes to reach the error paths a real daemon hardly takes.

// Agent is what the handlers ask of the agent: intake, task control and
// the live state of a task.
type Agent interface {
	// Accepting reports whether the agent takes new work (readyz).
	Accepting() bool
	Runtime() agent.RuntimeStats
	Queued(id string) bool
	Task(id string) (fsm.Task, error)
	WaitUntil(ctx context.Context, id string, cond func(*fsm.Task) bool) (fsm.Task, error)
	SubmitInput(ctx context.Context, in agent.Input) (string, error)
	SendMessageID(ctx context.Context, id string, eventID ulid.ULID, text, source string) (fsm.Task, error)
	Suspend(ctx context.Context, id, reason string) (fsm.Task, error)
	Resume(ctx context.Context, id, reason string) (fsm.Task, error)
	Cancel(ctx context.Context, id, why string) (fsm.Task, error)
	// SubscribeDeltas follows the live text of a task's model calls.
	SubscribeDeltas(id string) *agent.DeltaSub
}

// EventStore is the part of the event log the handlers use: reading and
// following events, looking an event up by id, ids drawn by the log's
// clock, its health and checkpoint copies. Appends go through the engine,
// never here.
type EventStore interface {
	Get(id ulid.ULID) (eventlog.Event, error)
	NewID() ulid.ULID
	Head() uint64
	Health() error
	Scan(from uint64, dir eventlog.Direction) *eventlog.Iterator
	ReadStream(stream string, fromVersion uint64) *eventlog.Iterator
	Subscribe(ctx context.Context, fromSeq uint64) *eventlog.Subscription
	Checkpoint(dir string) error
}

// ReadModel is the folded read model the handlers serve: the task list,
// progress, statistics, its memory and what the fold refused.
type ReadModel interface {
	Tasks(ctx context.Context, q replay.Query) (replay.Page, error)
	Progress(id string) (projection.Progress, error)
	Stats() projection.StatsReport
	Issues() ([]replay.Issue, int)
	// Seq is the last sequence folded.
	Seq() uint64
	// WaitFor blocks until seq is folded, or ctx ends.
	WaitFor(ctx context.Context, seq uint64) error
	// MemoryUse is what the task views hold, against the memory budget.
	MemoryUse() projection.MemoryUse
	// Checkpoint persists the projections, before a checkpoint copy.
	Checkpoint(ctx context.Context) error
}

// Metrics is what the server serves of the engine's metrics: /metrics,
// and the counting of every request.
type Metrics interface {
	Handler() http.Handler
	InstrumentHTTP(h http.Handler) http.Handler
}

// Catalog is what the daemon runs with: its tools, models and task
// types, as GET /v1/tools, /v1/models and /v1/task-types serve them. An
// engine built from a configuration file implements it.
type Catalog interface {
	Tools() []api.Tool
	Models() []api.Model
	TaskTypes() []api.TaskType
}

// MCPServers is what a Catalog that runs MCP servers also reports: each
// server's state, for GET /v1/tools and /readyz. A Catalog without it
// has no MCP server to report.
type MCPServers interface {
	MCPServers() []api.MCPServer
}

// Deps is what a Server serves, usually all from one started engine
// (engine.Engine has a method for each).
type Deps struct {
	Agent Agent
	Store EventStore
	View  ReadModel
	// History answers the per-task queries (state at a bound, why):
	// replay.FromLog of the log.
	History replay.Reader
	// Keys binds Idempotency-Keys: the log itself, or under --cluster the
	// replicated log (one binding per key for every daemon). Nil: Store,
	// if it is a KeyReserver.
	Keys eventlog.KeyReserver
	// Broker serves /api/v1; nil: those routes answer 503.
	Broker *broker.Broker
	// Metrics serves /metrics and counts requests; nil: neither.
	Metrics Metrics
	// Catalog serves /v1/tools, /v1/models and /v1/task-types; nil:
	// they answer empty lists.
	Catalog Catalog
	// Model is the model's name, for /v1/stats.
	Model string
	// Base is the context of every request: when it ends, event streams
	// and long polls end and failed mutations answer 503. Nil: never.
	Base context.Context
}

var (
	_ Agent      = (*agent.Agent)(nil)
	_ EventStore = (*eventlog.Log)(nil)
	_ ReadModel  = (*replay.View)(nil)
)
