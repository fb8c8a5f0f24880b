package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/broker"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// The Dispatch broker's API (docs/broker.md) under /api/v1, as the seed
// draws it: every route needs X-Agent-ID; admin routes also the admin
// token.

// brokerAPI is the broker the server serves, and who may call it.
type brokerAPI struct {
	b     *broker.Broker
	admin *tokenCheck
	agent *tokenCheck // worker routes' token, nil: none required
	open  bool        // admin routes without a token (loopback, no admin token)
}

func (s *Server) brokerRoutes(route func(string, map[string]handler)) {
	w, a, k := s.workerRoute, s.adminRoute, s.agentRoute
	route("/api/v1/tasks", map[string]handler{"POST": w(s.apiCreate), "GET": w(s.agentAuth(s.apiList, isPoll))})
	route("/api/v1/tasks:batch", map[string]handler{"POST": w(s.apiCreateBatch)})
	route("/api/v1/tasks/{id}", map[string]handler{"GET": w(s.apiGet), "PATCH": w(s.apiPatch)})
	route("/api/v1/tasks/{id}/events", map[string]handler{"GET": w(s.apiEvents)})
	route("/api/v1/tasks/{id}/progress", map[string]handler{"POST": k(s.apiReport(fsm.DispatchProgress))})
	route("/api/v1/tasks/{id}/complete", map[string]handler{"POST": k(s.apiReport(fsm.DispatchCompleted))})
	route("/api/v1/tasks/{id}/fail", map[string]handler{"POST": k(s.apiReport(fsm.DispatchFailed))})
	route("/api/v1/agents/{id}", map[string]handler{"PUT": k(s.apiRegister)})
	route("/api/v1/agents", map[string]handler{"GET": a(s.apiAgents)})
	route("/api/v1/agents/{id}/drain", map[string]handler{"POST": a(s.apiDrain)})
	route("/api/v1/stats", map[string]handler{"GET": a(s.apiStats)})
	route("/api/v1/dlq", map[string]handler{"GET": a(s.apiDLQ)})
	route("/api/v1/dlq/requeue", map[string]handler{"POST": a(s.apiRequeueMatching)})
	route("/api/v1/dlq/{id}/requeue", map[string]handler{"POST": a(s.apiRequeue)})
}

type agentHandler func(w http.ResponseWriter, r *http.Request, agentID string) *apiError

// workerRoute requires X-Agent-ID and records the agent's liveness.
func (s *Server) workerRoute(h agentHandler) handler {
	return func(w http.ResponseWriter, r *http.Request) *apiError {
		if s.broker == nil {
			return errShuttingDown
		}
		id := strings.TrimSpace(r.Header.Get("X-Agent-ID"))
		if id == "" {
			return errBadRequest("the X-Agent-ID header is required on /api/v1")
		}
		s.broker.b.Seen(id)
		return h(w, r, id)
	}
}

// adminRoute is workerRoute plus the admin token.
func (s *Server) adminRoute(h agentHandler) handler {
	return s.workerRoute(func(w http.ResponseWriter, r *http.Request, id string) *apiError {
		if !s.isAdmin(r) {
			return &apiError{status: http.StatusUnauthorized, Code: codeUnauthorized,
				Message: "an admin route: send Authorization: Bearer <admin token> (--admin-token)"}
		}
		return h(w, r, id)
	})
}

func (s *Server) isAdmin(r *http.Request) bool {
	if s.broker.admin == nil {
		return s.broker.open
	}
	return s.broker.admin.ok(r)
}

// fromBrokerError maps the broker's errors to the API. The message is the
// one the broker's error carries for people (usererr), never a cut of
// its Go text.
func (s *Server) fromBrokerError(err error) *apiError {
	switch {
	case errors.Is(err, broker.ErrNotFound):
		return errNotFound("%s", userMessage(err, "no such task"))
	case errors.Is(err, broker.ErrInvalid):
		return errBadRequest("%s", userMessage(err, "invalid request"))
	case errors.Is(err, broker.ErrNotAssigned):
		return errConflict("%s", userMessage(err, "only the assigned worker reports on a task"))
	case errors.Is(err, broker.ErrNotDeadLetter):
		return errConflict("%s", userMessage(err, "the task is not a dead letter"))
	}
	return s.fromError(err)
}

// anyMetadata is a broker task's metadata: any JSON value per key
// (broker.TaskMetadata).
type anyMetadata = map[string]json.RawMessage

// DispatchJSON is a dispatch task as the API shows it: the seed's
// swarm_tasks columns, plus dead_lettered and the extensions.
type DispatchJSON struct {
	TaskID               string          `json:"task_id"`
	Title                string          `json:"title"`
	Description          string          `json:"description"`
	Owner                string          `json:"owner"`
	RequiredCapabilities []string        `json:"required_capabilities"`
	Status               fsm.State       `json:"status"`
	AssignedAgent        string          `json:"assigned_agent"`
	CreatedAt            time.Time       `json:"created_at"`
	AssignedAt           time.Time       `json:"assigned_at,omitzero"`
	StartedAt            time.Time       `json:"started_at,omitzero"`
	CompletedAt          time.Time       `json:"completed_at,omitzero"`
	UpdatedAt            time.Time       `json:"updated_at"`
	Result               json.RawMessage `json:"result"`
	Error                string          `json:"error"`
	RetryCount           int             `json:"retry_count"`
	MaxRetries           int             `json:"max_retries"`
	RetryEligible        bool            `json:"retry_eligible"`
	TimeoutSeconds       int             `json:"timeout_seconds"`
	Priority             int             `json:"priority"`
	Source               string          `json:"source"`
	ParentTaskID         string          `json:"parent_task_id"`
	Metadata             anyMetadata     `json:"metadata"`
	DeadLettered         bool            `json:"dead_lettered"`
	DeadLetterReason     string          `json:"dead_letter_reason,omitempty"`
	TimeoutReason        string          `json:"timeout_reason,omitempty"`
	RunAt                time.Time       `json:"run_at,omitzero"`
	HeartbeatSeconds     int             `json:"heartbeat_seconds"`
	RetryBackoffSeconds  int             `json:"retry_backoff_seconds"`
	ConcurrencyKey       string          `json:"concurrency_key,omitempty"`
	Deadline             time.Time       `json:"deadline,omitzero"`
	Progress             string          `json:"progress,omitempty"`
	Version              uint64          `json:"version"`
	Children             []string        `json:"children,omitempty"`
}

// noMetadata is the metadata of every task without any: one empty map,
// which nothing writes to, instead of one per answer.
var noMetadata = anyMetadata{}

func toDispatchJSON(t *fsm.Task) DispatchJSON {
	d := t.Dispatch
	j := DispatchJSON{
		TaskID: t.ID, Title: d.Title, Description: d.Description, Owner: d.Owner, RequiredCapabilities: d.RequiredCapabilities,
		Status: t.State, AssignedAgent: d.AssignedAgent, CreatedAt: t.CreatedAt, AssignedAt: d.AssignedAt, StartedAt: d.StartedAt,
		UpdatedAt: t.UpdatedAt, Error: broker.TaskError(t), RetryCount: d.RetryCount, MaxRetries: d.MaxRetries, RetryEligible: d.RetryEligible,
		TimeoutSeconds: d.TimeoutSeconds, Priority: t.Priority, Source: t.Context.Source, ParentTaskID: t.ParentID,
		Metadata: noMetadata, DeadLettered: d.DeadLettered, DeadLetterReason: d.DeadLetterReason, TimeoutReason: d.TimeoutReason, RunAt: d.RunAt,
		HeartbeatSeconds: d.HeartbeatSeconds, RetryBackoffSeconds: d.RetryBackoffSeconds, Progress: d.Progress, Version: t.Version,
		ConcurrencyKey: t.ConcurrencyKey,
	}
	if len(t.Metadata) > 0 {
		j.Metadata = broker.TaskMetadata(t)
	}
	if j.RequiredCapabilities == nil {
		j.RequiredCapabilities = []string{}
	}
	if d.Result != "" {
		j.Result = json.RawMessage(d.Result)
	} else {
		j.Result = json.RawMessage("null")
	}
	if !d.CompletedAt.IsZero() {
		j.CompletedAt = d.CompletedAt
	} else if t.IsTerminal() {
		j.CompletedAt = d.DeadLetteredAt
	}
	j.Deadline, _ = fsm.DispatchDeadline(t)
	return j
}

// apiCreate is POST /api/v1/tasks: the request is the broker's
// CreateRequest, whose defaults and checks are the broker's.
func (s *Server) apiCreate(w http.ResponseWriter, r *http.Request, agentID string) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	var req broker.CreateRequest
	if e := decodeBody(r, (*createBody)(&req), false); e != nil {
		return e
	}
	req.AgentID = agentID
	var t fsm.Task
	err := s.keyed(w, r, func(id ulid.ULID) error {
		var err error
		t, err = s.broker.b.Create(r.Context(), id, req)
		return err
	})
	if err != nil {
		return s.fromBrokerError(err)
	}
	writeJSON(w, http.StatusCreated, toDispatchJSON(&t))
	return nil
}

// apiList is GET /api/v1/tasks with the seed's filters, oldest first
// (order=desc: newest first, as on /v1/tasks), a cursor (the last task_id
// of the previous page) and a long poll: with wait=DURATION an empty page
// waits until a task matches (a worker learns of its assignments with
// ?agent=ME&status=assigned&wait=30s).
func (s *Server) apiList(w http.ResponseWriter, r *http.Request, _ string) *apiError {
	q, e := query(r, "status", "owner", "source", "agent", "cursor", "limit", "order", "wait")
	if e != nil {
		return e
	}
	limit, e := intParam(q, "limit", 100, 1, 1000)
	if e != nil {
		return e
	}
	wait, e := waitParam(q)
	if e != nil {
		return e
	}
	status := fsm.State(q.Get("status"))
	if status != "" && !slices.Contains(fsm.DispatchStates, status) {
		return errBadRequest("status %q: give one of %s", status, joinStates(fsm.DispatchStates))
	}
	desc := false
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		desc = true
	default:
		return errBadRequest("order %q: give asc or desc", q.Get("order"))
	}
	cursor := q.Get("cursor")
	match := func(t *fsm.Task) bool {
		return (status == "" || t.State == status) &&
			(q.Get("owner") == "" || t.Dispatch.Owner == q.Get("owner")) &&
			(q.Get("source") == "" || t.Context.Source == q.Get("source")) &&
			(q.Get("agent") == "" || t.Dispatch.AssignedAgent == q.Get("agent")) &&
			(cursor == "" || (!desc && t.ID > cursor) || (desc && t.ID < cursor))
	}
	var page []DispatchJSON
	var more bool
	source := s.broker.b.Tasks
	waitFor := s.broker.b.Wait
	switch agent := q.Get("agent"); status {
	case fsm.StateAssigned, fsm.StateInProgress:
		if agent != "" {
			// A worker's long poll: its own tasks, woken by their changes only.
			source = func() []fsm.Task { return s.broker.b.AgentTasks(agent) }
			waitFor = func(ctx context.Context, cond func() bool) error { return s.broker.b.WaitAgent(ctx, agent, cond) }
			break
		}
		fallthrough
	case fsm.StatePending:
		source = s.broker.b.Live // the live tasks only
	}
	list := func() bool {
		page, more = page[:0], false
		ts := source() // oldest first
		for i := range ts {
			t := &ts[i]
			if desc {
				t = &ts[len(ts)-1-i]
			}
			if !match(t) {
				continue
			}
			if len(page) == limit {
				more = true
				break
			}
			page = append(page, toDispatchJSON(t))
		}
		return len(page) > 0
	}
	if !list() && wait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		_ = waitFor(ctx, list)
	}
	out := struct {
		Tasks      []DispatchJSON `json:"tasks"`
		NextCursor string         `json:"next_cursor,omitempty"`
	}{Tasks: page}
	if out.Tasks == nil {
		out.Tasks = []DispatchJSON{}
	}
	if more {
		out.NextCursor = page[len(page)-1].TaskID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) apiGet(w http.ResponseWriter, r *http.Request, _ string) *apiError {
	t, err := s.broker.b.Task(r.PathValue("id"))
	if err != nil {
		return s.fromBrokerError(err)
	}
	j := toDispatchJSON(&t)
	j.Children = s.broker.b.Children(t.ID)
	writeJSON(w, http.StatusOK, j)
	return nil
}

func (s *Server) apiPatch(w http.ResponseWriter, r *http.Request, agentID string) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	var req struct {
		Metadata anyMetadata `json:"metadata"`
	}
	if e := decodeBody(r, &req, false); e != nil {
		return e
	}
	t, err := s.broker.b.Update(r.Context(), r.PathValue("id"), agentID, req.Metadata)
	if err != nil {
		return s.fromBrokerError(err)
	}
	writeJSON(w, http.StatusOK, toDispatchJSON(&t))
	return nil
}

// apiReport is a worker's progress, complete or fail.
func (s *Server) apiReport(kind fsm.EventType) agentHandler {
	return func(w http.ResponseWriter, r *http.Request, agentID string) *apiError {
		if e := s.mutating(); e != nil {
			return e
		}
		var req struct {
			Message       string          `json:"message"`
			Result        json.RawMessage `json:"result"`
			Error         string          `json:"error"`
			RetryEligible *bool           `json:"retry_eligible"`
		}
		if e := decodeBody(r, &req, kind == fsm.DispatchProgress); e != nil {
			return e
		}
		rep := fsm.DispatchReportBody{Message: req.Message, Result: string(req.Result), Error: req.Error, RetryEligible: req.RetryEligible}
		t, replayed, err := s.broker.b.Report(r.Context(), r.PathValue("id"), agentID, kind, rep)
		if err != nil {
			return s.fromBrokerError(err)
		}
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		writeJSON(w, http.StatusOK, toDispatchJSON(&t))
		return nil
	}
}

// apiEvents is the task's events (the seed's swarm_task_events) in the one
// event JSON form, each with the agent that caused it.
func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request, _ string) *apiError {
	t, err := s.broker.b.Task(r.PathValue("id"))
	if err != nil {
		return s.fromBrokerError(err)
	}
	type eventWithAgent struct {
		replay.EventJSON
		AgentID string `json:"agent_id"`
	}
	out := struct {
		TaskID string           `json:"task_id"` // as on /v1/tasks/{id}/events
		Events []eventWithAgent `json:"events"`
	}{TaskID: t.ID, Events: []eventWithAgent{}}
	it := s.store.ReadStream(t.ID, 1)
	defer it.Close()
	var last uint64
	for it.Next() {
		ev := it.Event()
		last = ev.Seq
		j := eventWithAgent{EventJSON: replay.NewEventJSON(ev)}
		var who struct {
			AgentID string `json:"agent_id"`
		}
		_ = json.Unmarshal(j.Data, &who)
		j.AgentID = who.AgentID
		out.Events = append(out.Events, j)
	}
	if err := it.Err(); err != nil {
		return s.fromError(err)
	}
	if e := s.reflect(r.Context(), last); e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) apiRegister(w http.ResponseWriter, r *http.Request, agentID string) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	id := r.PathValue("id")
	if id != agentID && !s.isAdmin(r) {
		return errConflict("X-Agent-ID %q may register itself only, not %q (admins may register any worker)", agentID, id)
	}
	var req struct {
		Capabilities []string `json:"capabilities"`
		MaxTasks     int      `json:"max_tasks"`
	}
	if e := decodeBody(r, &req, true); e != nil {
		return e
	}
	wi, err := s.broker.b.Register(r.Context(), id, req.Capabilities, req.MaxTasks)
	if err != nil {
		return s.fromBrokerError(err)
	}
	writeJSON(w, http.StatusOK, workerJSON(wi))
	return nil
}

func workerJSON(w broker.WorkerInfo) broker.WorkerInfo {
	if w.Capabilities == nil {
		w.Capabilities = []string{}
	}
	if w.ActiveTasks == nil {
		w.ActiveTasks = []string{}
	}
	return w
}

func (s *Server) apiAgents(w http.ResponseWriter, r *http.Request, _ string) *apiError {
	ws := s.broker.b.Workers()
	for i := range ws {
		ws[i] = workerJSON(ws[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": ws})
	return nil
}

func (s *Server) apiDrain(w http.ResponseWriter, r *http.Request, agentID string) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	wi, err := s.broker.b.Drain(r.Context(), r.PathValue("id"), agentID)
	if err != nil {
		return s.fromBrokerError(err)
	}
	writeJSON(w, http.StatusOK, workerJSON(wi))
	return nil
}

func (s *Server) apiStats(w http.ResponseWriter, r *http.Request, _ string) *apiError {
	writeJSON(w, http.StatusOK, s.broker.b.Stats())
	return nil
}

func (s *Server) apiDLQ(w http.ResponseWriter, r *http.Request, _ string) *apiError {
	out := []DispatchJSON{}
	for _, t := range s.broker.b.DLQ() {
		out = append(out, toDispatchJSON(&t))
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": out})
	return nil
}

func (s *Server) apiRequeue(w http.ResponseWriter, r *http.Request, agentID string) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	var req struct {
		Reason string `json:"reason"`
	}
	if e := decodeBody(r, &req, true); e != nil {
		return e
	}
	t, err := s.broker.b.Requeue(r.Context(), r.PathValue("id"), agentID, req.Reason)
	if err != nil {
		return s.fromBrokerError(err)
	}
	writeJSON(w, http.StatusOK, toDispatchJSON(&t))
	return nil
}

// apiRequeueMatching requeues every dead letter a filter selects in one
// atomic append: {"capability", "error", "from", "to", "reason"}.
func (s *Server) apiRequeueMatching(w http.ResponseWriter, r *http.Request, agentID string) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	var req struct {
		projection.DLQFilter
		Reason string `json:"reason"`
	}
	if e := decodeBody(r, &req, true); e != nil {
		return e
	}
	n, err := s.broker.b.RequeueMatching(r.Context(), agentID, req.Reason, req.DLQFilter)
	if err != nil {
		return s.fromBrokerError(err)
	}
	writeJSON(w, http.StatusOK, map[string]int{"requeued": n})
	return nil
}

// agentRoute is workerRoute plus the agent token (--agent-token), when
// one is set: the routes only a worker calls (register, progress,
// complete, fail).
func (s *Server) agentRoute(h agentHandler) handler {
	return s.workerRoute(s.agentAuth(h, nil))
}

// agentAuth requires the agent token, when one is set, of the requests
// when selects (nil: every request). The admin token passes too: an admin
// may act for a worker (register it, for one).
func (s *Server) agentAuth(h agentHandler, when func(*http.Request) bool) agentHandler {
	return func(w http.ResponseWriter, r *http.Request, id string) *apiError {
		if s.broker.agent != nil && (when == nil || when(r)) && !s.broker.agent.ok(r) && (s.broker.admin == nil || !s.broker.admin.ok(r)) {
			return &apiError{status: http.StatusUnauthorized, Code: codeUnauthorized,
				Message: "a worker route: send Authorization: Bearer <agent token> (--agent-token)"}
		}
		return h(w, r, id)
	}
}

// isPoll reports whether a GET /api/v1/tasks is a worker's poll: it names
// an agent or waits.
func isPoll(r *http.Request) bool {
	q := r.URL.Query()
	return q.Has("agent") || q.Has("wait")
}
