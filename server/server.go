package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/metrics"
	"github.com/pegasus-engine/pegasus/internal/usererr"
	"github.com/pegasus-engine/pegasus/replay"
)

// Server is the HTTP API over one engine: /v1, the broker's /api/v1, the
// dashboard and /metrics. It is an http.Handler; New builds it.
type Server struct {
	a       Agent
	store   EventStore
	view    ReadModel
	history replay.Reader // the per-task queries: state at a bound, why
	catalog Catalog       // tools, models and task types; nil: none
	model   string        // the model's name, for /v1/stats

	log           *slog.Logger
	token         *tokenCheck
	maxBody       int64
	checkpointDir string
	// base is the context of every request; it ends at shutdown so that
	// event streams and long polls end instead of holding the stop.
	base     context.Context
	draining atomic.Bool
	// keys binds Idempotency-Keys (idempotency.go): the log itself, or
	// with --cluster the replicated log's bucket.
	keys    eventlog.KeyReserver
	broker  *brokerAPI // the Dispatch broker under /api/v1 (broker_api.go)
	handler http.Handler
}

// New serves deps with opts (nil: the defaults). The engine behind deps
// must be started; the server starts nothing and stops nothing: Drain
// refuses new work, and the end of deps.Base ends long-lived requests.
func New(deps Deps, opts *Options) *Server {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	s := &Server{a: deps.Agent, store: deps.Store, keys: deps.Keys, view: deps.View, history: deps.History, catalog: deps.Catalog, model: deps.Model,
		log: o.Logger.With("component", "http"), token: newTokenCheck(o.Token),
		maxBody: o.MaxBodyBytes, checkpointDir: o.CheckpointDir, base: deps.Base}
	if s.base == nil {
		s.base = context.Background()
	}
	if s.keys == nil {
		if k, ok := deps.Store.(eventlog.KeyReserver); ok {
			s.keys = k
		}
	}
	if deps.Broker != nil {
		s.broker = &brokerAPI{b: deps.Broker, admin: newTokenCheck(o.AdminToken), agent: newTokenCheck(o.AgentToken),
			open: o.AdminToken == "" && o.OpenAdmin}
	}
	s.handler = s.web(deps.Metrics, o.NoMetricsRoute)
	return s
}

// ServeHTTP serves the API, the dashboard and, unless
// Options.NoMetricsRoute, /metrics.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Drain refuses new work from now on: mutations answer 503 and readiness
// fails, while reads and running requests go on. It is the first step of
// a stop.
func (s *Server) Drain() { s.draining.Store(true) }

type handler func(w http.ResponseWriter, r *http.Request) *apiError

// routes is the API. Each path also has a method-less pattern that answers
// 405 in the JSON error envelope (ServeMux's own 405 is plain text).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	route := func(path string, methods map[string]handler) {
		var names []string
		for m, h := range methods {
			mux.Handle(m+" "+path, s.wrap(h))
			names = append(names, m)
		}
		sort.Strings(names)
		allow := strings.Join(names, ", ")
		mux.Handle(path, s.wrap(func(w http.ResponseWriter, r *http.Request) *apiError {
			w.Header().Set("Allow", allow)
			return &apiError{status: http.StatusMethodNotAllowed, Code: codeMethodNotAllwd,
				Message: fmt.Sprintf("%s %s is not supported; use %s", r.Method, path, allow)}
		}))
	}
	route("/v1/tasks", map[string]handler{"POST": s.createTask, "GET": s.listTasks})
	route("/v1/tasks/{id}", map[string]handler{"GET": s.getTask})
	route("/v1/tasks/{id}/events", map[string]handler{"GET": s.taskEvents})
	route("/v1/tasks/{id}/stream", map[string]handler{"GET": s.taskStream})
	route("/v1/tasks/{id}/progress", map[string]handler{"GET": s.taskProgress})
	route("/v1/tasks/{id}/state", map[string]handler{"GET": s.taskState})
	route("/v1/tasks/{id}/why", map[string]handler{"GET": s.taskWhy})
	route("/v1/tasks/{id}/trace", map[string]handler{"GET": s.taskTrace})
	route("/v1/tasks/{id}/messages", map[string]handler{"POST": s.postMessage})
	route("/v1/tasks/{id}/suspend", map[string]handler{"POST": s.suspend})
	route("/v1/tasks/{id}/resume", map[string]handler{"POST": s.resume})
	route("/v1/tasks/{id}/cancel", map[string]handler{"POST": s.cancel})
	route("/v1/webhooks/{name}", map[string]handler{"POST": s.webhook})
	route("/v1/events", map[string]handler{"GET": s.events})
	route("/v1/events/stream", map[string]handler{"GET": s.stream})
	route("/v1/stats", map[string]handler{"GET": s.stats})
	route("/v1/spend", map[string]handler{"GET": s.spend})
	route("/v1/admin/checkpoint", map[string]handler{"POST": s.checkpoint})
	route("/v1/tools", map[string]handler{"GET": s.tools})
	route("/v1/models", map[string]handler{"GET": s.models})
	route("/v1/task-types", map[string]handler{"GET": s.taskTypes})
	route("/v1/openapi.json", map[string]handler{"GET": s.openAPI})
	s.brokerRoutes(route)
	route("/healthz", map[string]handler{"GET": s.healthz})
	route("/readyz", map[string]handler{"GET": s.readyz})
	mux.Handle("/", s.wrap(func(w http.ResponseWriter, r *http.Request) *apiError {
		return errNotFound("no route %s %s", r.Method, r.URL.Path)
	}))
	return s.middleware(mux)
}

// wrap ends the request with the base context too, whatever server
// serves it (a stream or a long poll does not hold a stop), and turns a
// handler's error into the JSON envelope. It runs inside the mux, which
// has named the route on the request by then.
func (s *Server) wrap(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(s.base, cancel)()
		if e := h(w, r.WithContext(ctx)); e != nil {
			writeError(w, e)
		}
	})
}

// middleware authenticates, bounds the body, recovers panics and logs.
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &metrics.StatusRecorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", p)
				if rec.Status == 0 {
					writeError(rec, &apiError{status: http.StatusInternalServerError, Code: codeInternal, Message: "internal error"})
				}
			}
			logRequest(s.log, r, rec.Status)
		}()
		if s.token != nil && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !s.token.ok(r) {
			writeError(rec, &apiError{status: http.StatusUnauthorized, Code: codeUnauthorized,
				Message: "missing or wrong bearer token (Authorization: Bearer ...)"})
			return
		}
		r.Body = http.MaxBytesReader(rec, r.Body, s.maxBody)
		next.ServeHTTP(rec, r)
	})
}

// fromError maps an error of the agent, the fold or the log to the API.
func (s *Server) fromError(err error) *apiError {
	var te *fsm.TransitionError
	var reused *keyReusedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return errConflict("%s", conflictMessage(te))
	case errors.Is(err, agent.ErrTaskNotFound):
		return errNotFound("no such task")
	case errors.As(err, &reused):
		return &apiError{status: http.StatusConflict, Code: codeKeyReused, Message: reused.Error()}
	case errors.Is(err, cluster.ErrFenced):
		// --cluster: this node lost the task's partition to another while
		// the request ran; nothing was written, and a retry (with the same
		// Idempotency-Key) reaches the partition's new owner's log.
		s.log.Warn("request failed: this node lost the task's partition", "err", err)
		return &apiError{status: http.StatusServiceUnavailable, Code: codeClusterBusy,
			Message: "this daemon lost the task's partition to another while it ran the request; nothing was written: retry (with the same Idempotency-Key for a submission)"}
	case errors.Is(err, eventlog.ErrConflict):
		return errConflict("the task changed meanwhile: read it again and retry")
	case errors.Is(err, eventlog.ErrBeyondHead):
		// The handlers check the position against the head first; this is
		// the log's own refusal, for a position checked before a restore.
		return &apiError{status: http.StatusConflict, Code: codeBeyondHead, Message: "the position is beyond the log's head: this log never had that event"}
	case errors.Is(err, agent.ErrUnknownTaskType), errors.Is(err, agent.ErrInvalidInput):
		return errBadRequest("%s", userMessage(err, "invalid input"))
	case errors.Is(err, replay.ErrBadCursor):
		return errBadRequest("a cursor this list did not give: pass next_cursor of the previous page, with the same order")
	case errors.Is(err, agent.ErrStopped), errors.Is(err, eventlog.ErrClosed), s.base.Err() != nil:
		return errShuttingDown
	case errors.Is(err, cluster.ErrUnavailable), errors.Is(err, cluster.ErrUnknownOutcome):
		// --cluster: an election, or a partition busy for the append's
		// whole time; a retry (with the same Idempotency-Key) is safe.
		s.log.Warn("request failed: the clustered log cannot take it now", "err", err)
		return &apiError{status: http.StatusServiceUnavailable, Code: codeClusterBusy,
			Message: "the clustered log cannot take the request now; retry (with the same Idempotency-Key for a submission)"}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away or gave up: nobody reads this answer.
		return &apiError{status: http.StatusServiceUnavailable, Code: codeUnavailable, Message: "request cancelled"}
	}
	if reason := StorageReason(err); reason != "" {
		s.log.Error("request failed", "err", err)
		return &apiError{status: http.StatusServiceUnavailable, Code: codeStorage, Message: reason}
	}
	// The error may carry host paths (the storage engine's messages do):
	// the log has it, the body does not.
	s.log.Error("request failed", "err", err)
	return &apiError{status: http.StatusInternalServerError, Code: codeInternal, Message: "internal error; see the daemon's log"}
}

// userMessage is err's message for people (usererr), or def when err
// carries none: an error's Go text, with its package prefixes, is for
// logs only.
func userMessage(err error, def string) string {
	if msg, ok := usererr.Message(err); ok {
		return msg
	}
	return def
}

// codeStorage answers requests the event log cannot serve: it refuses
// writes (a full disk, an I/O error) or found corruption.
const codeStorage = "storage_unavailable"

// StorageReason says, without host paths, why the event log cannot serve
// err's request, or "" if err is not about the log's storage.
func StorageReason(err error) string {
	var ce *eventlog.CorruptionError
	var dl *eventlog.DataLossError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, eventlog.ErrFailed) && errors.Is(err, syscall.ENOSPC):
		return "the event log refuses writes: no space left on device; pegasusd restarts to recover (docs/operations.md)"
	case errors.Is(err, eventlog.ErrFailed):
		return "the event log refuses writes after a storage I/O error; pegasusd restarts to recover (docs/operations.md)"
	case errors.As(err, &dl):
		return "the event log lost acknowledged events; see docs/operations.md"
	case errors.Is(err, eventlog.ErrDamaged) && errors.As(err, &ce) && ce.File != "":
		return fmt.Sprintf("the event log refuses writes: it found corruption in %s; restore a checkpoint (docs/operations.md)", ce.File)
	case errors.Is(err, eventlog.ErrDamaged) && errors.As(err, &ce) && ce.Seq != 0:
		return fmt.Sprintf("the event log refuses writes: records are missing or corrupt from seq %d; restore a checkpoint (docs/operations.md)", ce.Seq)
	case errors.Is(err, eventlog.ErrDamaged):
		return "the event log refuses writes: it found damaged data; restore a checkpoint (docs/operations.md)"
	case errors.As(err, &ce) && ce.File != "":
		return fmt.Sprintf("the event log found corruption in %s; restore a checkpoint (docs/operations.md)", ce.File)
	case errors.As(err, &ce) && ce.Seq != 0:
		return fmt.Sprintf("the event log found corruption at seq %d; restore a checkpoint (docs/operations.md)", ce.Seq)
	case eventlog.IsCorruption(err):
		return "the event log found corruption; restore a checkpoint (docs/operations.md)"
	}
	return ""
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) *apiError {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz is ready when the daemon takes work: not stopping, and the event
// log healthy (it turns 503 with the reason as soon as the log refuses
// writes or finds corruption). Its answer lists the MCP servers' states,
// if any.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) *apiError {
	if reason := StorageReason(s.store.Health()); reason != "" {
		return &apiError{status: http.StatusServiceUnavailable, Code: codeStorage, Message: reason}
	}
	if s.draining.Load() || !s.a.Accepting() {
		return errShuttingDown
	}
	out := map[string]any{"status": "ready"}
	// Each MCP server's state: a server that is down does not make the
	// daemon unready (its tools fail at once), but the details show it.
	if servers := s.mcpServers(); len(servers) > 0 {
		out["mcp_servers"] = servers
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// mutating refuses new work while the daemon stops.
func (s *Server) mutating() *apiError {
	if s.draining.Load() {
		return errShuttingDown
	}
	return nil
}
