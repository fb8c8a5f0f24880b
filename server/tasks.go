package server

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/broker"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// TaskJSON is a task as the API shows it.
type TaskJSON struct {
	TaskID    string            `json:"task_id"`
	Type      string            `json:"type"`
	State     fsm.State         `json:"state"`
	Machine   string            `json:"machine"` // NAME@VERSION, for the task's whole life
	Queued    bool              `json:"queued"`  // reasoning or acting, waiting for an admission slot
	Priority  int               `json:"priority"`
	Source    string            `json:"source"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	Iteration int               `json:"iteration"`
	Version   uint64            `json:"version"`
	Input     string            `json:"input"`
	Result    string            `json:"result"`             // "" until completed
	Error     string            `json:"error"`              // "" unless failed
	Question  string            `json:"question,omitempty"` // suspended: why (the model's question, or the suspend reason)
	Metadata  map[string]string `json:"metadata"`           // {} when none, as on /api/v1
	Context   *fsm.Context      `json:"context,omitempty"`
	Plan      *fsm.Plan         `json:"plan"`
	History   []fsm.Transition  `json:"history"`

	// A broker task's reasons (dispatch.task): why it timed out, why it
	// is a dead letter.
	TimeoutReason    string `json:"timeout_reason,omitempty"`
	DeadLetterReason string `json:"dead_letter_reason,omitempty"`

	// ConcurrencyKey groups the task for admission; "" (omitted): the
	// default key.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

func (s *Server) taskJSON(t *fsm.Task, full bool) TaskJSON {
	j := TaskJSON{
		TaskID: t.ID, Type: t.Type, State: t.State, Machine: t.Machine.String(), Queued: s.a.Queued(t.ID), Priority: t.Priority,
		Source: t.Context.Source, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, Iteration: t.Context.Iteration,
		Version: t.Version, Input: t.Context.InputText, Result: t.Context.FinalResult, Error: t.Context.Error,
		Metadata: t.Context.InputMetadata, Plan: t.Context.Plan, History: t.History, ConcurrencyKey: t.ConcurrencyKey,
	}
	if t.State == fsm.StateSuspended {
		j.Question = t.Context.SuspendReason
	}
	if d := t.Dispatch; d != nil {
		j.Error, j.TimeoutReason, j.DeadLetterReason = broker.TaskError(t), d.TimeoutReason, d.DeadLetterReason
	}
	if full {
		c := t.Context
		j.Context = &c
	}
	if j.History == nil {
		j.History = []fsm.Transition{}
	}
	if j.Metadata == nil {
		j.Metadata = map[string]string{}
	}
	return j
}

type createRequest struct {
	Input    *string           `json:"input"`
	Source   string            `json:"source"`
	Type     string            `json:"type"`
	Priority int               `json:"priority"`
	Metadata map[string]string `json:"metadata"`
	Machine  string            `json:"machine"` // NAME@VERSION; empty: the current machine
	// ConcurrencyKey groups the task for admission (a tenant, a user).
	ConcurrencyKey string `json:"concurrency_key"`
}

// input is the agent's input for req, with its defaults still to apply.
func (req *createRequest) input() (agent.Input, *apiError) {
	if req.Input == nil {
		return agent.Input{}, errBadRequest(`"input" is required`)
	}
	in := agent.Input{Text: *req.Input, Source: req.Source, TaskType: req.Type, Priority: req.Priority, Metadata: req.Metadata,
		ConcurrencyKey: req.ConcurrencyKey}
	if req.Machine != "" {
		ref, err := fsm.ParseMachineRef(req.Machine)
		if err != nil {
			return in, errBadRequest(`"machine": %q: want NAME@VERSION of a machine this build runs, for example %s`, req.Machine, fsm.CurrentMachine)
		}
		in.Machine = ref
	}
	return in, nil
}

// CreatedJSON is the answer to POST /v1/tasks: the new task's id, the
// state its input left and whether it waits for an admission slot.
type CreatedJSON struct {
	TaskID string    `json:"task_id"`
	State  fsm.State `json:"state"`
	Queued bool      `json:"queued"`
}

func (s *Server) createTask(w http.ResponseWriter, r *http.Request) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	var req createRequest
	if e := decodeBody(r, &req, false); e != nil {
		return e
	}
	in, e := req.input()
	if e != nil {
		return e
	}
	return s.submit(w, r, in)
}

// submit creates a task from in, once per Idempotency-Key: a retry answers
// like the first request (201, the same task id, its state now).
func (s *Server) submit(w http.ResponseWriter, r *http.Request, in agent.Input) *apiError {
	var id string
	err := s.keyed(w, r, func(eventID ulid.ULID) error {
		in.ID = eventID
		var err error
		id, err = s.a.SubmitInput(r.Context(), in)
		return err
	})
	if err != nil {
		return s.fromError(err)
	}
	// A new task is idle: its input made it, and the agent creates and
	// admits it next (racing this answer, so the state now would differ
	// from run to run). A retry answered under its Idempotency-Key says
	// where the task is now.
	out := CreatedJSON{TaskID: id, State: fsm.StateIdle, Queued: s.a.Queued(id)}
	if w.Header().Get("Idempotent-Replayed") == "true" {
		if t, err := s.a.Task(id); err == nil {
			out.State = t.State
		}
	}
	w.Header().Set("Location", "/v1/tasks/"+id)
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// validID refuses what cannot be a task id before any lookup: task ids are
// ULIDs.
func validID(id string) bool {
	if len(id) != ulid.EncodedSize {
		return false
	}
	_, err := ulid.ParseStrict(id)
	return err == nil
}

// lookup is the preamble of a task's routes: it parses the query string,
// refusing parameters other than known, then finds the task the path names.
func (s *Server) lookup(r *http.Request, known ...string) (fsm.Task, url.Values, *apiError) {
	q, e := query(r, known...)
	if e != nil {
		return fsm.Task{}, nil, e
	}
	id := r.PathValue("id")
	if !validID(id) {
		return fsm.Task{}, nil, errNotFound("no such task %q", id)
	}
	t, err := s.a.Task(id)
	if err != nil {
		return t, nil, s.fromError(err)
	}
	return t, q, nil
}

// settled reports whether a task waits for nobody but the user: finished
// or suspended.
func settled(t *fsm.Task) bool { return agent.Done(t) || t.State == fsm.StateSuspended }

// maxWait bounds ?wait= below the server's write timeout.
const maxWait = 60 * time.Second

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) *apiError {
	t, q, e := s.lookup(r, "wait")
	if e != nil {
		return e
	}
	wait, e := waitParam(q)
	if e != nil {
		return e
	}
	if wait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		if nt, err := s.a.WaitUntil(ctx, t.ID, settled); err == nil || ctx.Err() != nil {
			if err == nil {
				t = nt
			} else if cur, err := s.a.Task(t.ID); err == nil {
				t = cur
			}
		}
	}
	writeJSON(w, http.StatusOK, s.taskJSON(&t, true))
	return nil
}

// query parses the query string and refuses parameters the route does not
// know, so that a misspelt filter is an error rather than ignored.
func query(r *http.Request, known ...string) (url.Values, *apiError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errBadRequest("malformed query string: %v", err)
	}
	for k := range q {
		ok := false
		for _, kn := range known {
			ok = ok || k == kn
		}
		if !ok {
			return nil, errBadRequest("unknown query parameter %q (known: %s)", k, strings.Join(known, ", "))
		}
	}
	return q, nil
}

func intParam(q url.Values, name string, def, lo, hi int) (int, *apiError) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, errBadRequest("%s %q: give an integer from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

// waitParam reads ?wait=DURATION for a long poll, bounded by maxWait; zero
// when absent.
func waitParam(q url.Values) (time.Duration, *apiError) {
	ws := q.Get("wait")
	if ws == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(ws)
	if err != nil || d < 0 {
		return 0, errBadRequest("wait %q: give a duration such as 30s", ws)
	}
	return min(d, maxWait), nil
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) *apiError {
	q, e := query(r, "state", "machine", "type", "source", "q", "limit", "cursor", "order")
	if e != nil {
		return e
	}
	limit, e := intParam(q, "limit", replay.DefaultLimit, 1, replay.MaxLimit)
	if e != nil {
		return e
	}
	// Oldest first, like /api/v1/tasks and the command line.
	rq := replay.Query{Limit: limit, Cursor: q.Get("cursor")}
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		rq.Desc = true
	case "queue": // most urgent first, across machines: see replay.Query.Queue
		rq.Queue, rq.Desc = true, false
	default:
		return errBadRequest("order %q: give asc, desc or queue", q.Get("order"))
	}
	for _, st := range splitList(q.Get("state")) {
		if !fsm.State(st).Valid() {
			return errBadRequest("state %q: give one of %s", st, joinStates(fsm.AllStates))
		}
		rq.States = append(rq.States, fsm.State(st))
	}
	for _, m := range splitList(q.Get("machine")) {
		name, ok := machineFilter(m)
		if !ok {
			return errBadRequest("machine %q: give NAME (any version) or NAME@VERSION of a machine this build folds, for example %s", m, fsm.CurrentMachine)
		}
		rq.Machines = append(rq.Machines, name)
	}
	rq.Types = splitList(q.Get("type"))
	rq.Sources = splitList(q.Get("source"))
	rq.Text = q.Get("q")
	page, err := s.view.Tasks(r.Context(), rq)
	if err != nil {
		return s.fromError(err)
	}
	type item struct {
		projection.Summary
		Queued bool `json:"queued"`
	}
	out := struct {
		Tasks      []item `json:"tasks"`
		NextCursor string `json:"next_cursor,omitempty"`
	}{Tasks: make([]item, 0, len(page.Tasks)), NextCursor: page.Next}
	for _, t := range page.Tasks {
		out.Tasks = append(out.Tasks, item{Summary: t, Queued: s.a.Queued(t.ID)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// machineFilter reads a machine filter: NAME@VERSION or NAME/vVERSION
// (returned as NAME@VERSION), or a NAME alone, which projection.Filter
// matches at any version. Either must name a machine this build folds.
func machineFilter(m string) (string, bool) {
	if !strings.ContainsAny(m, "@/") {
		for _, mc := range fsm.Machines() {
			if mc.Ref().Name == m {
				return m, true
			}
		}
		return "", false
	}
	ref, err := fsm.ParseMachineRef(m)
	return ref.String(), err == nil
}

// joinStates lists states for an error message: "pending, assigned, ...".
func joinStates(states []fsm.State) string {
	ss := make([]string, len(states))
	for i, st := range states {
		ss[i] = string(st)
	}
	return strings.Join(ss, ", ")
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (s *Server) taskEvents(w http.ResponseWriter, r *http.Request) *apiError {
	t, q, e := s.lookup(r, "after_version", "limit")
	if e != nil {
		return e
	}
	after, e := intParam(q, "after_version", 0, 0, 1<<31)
	if e != nil {
		return e
	}
	limit, e := intParam(q, "limit", 1000, 1, 10000)
	if e != nil {
		return e
	}
	it := s.store.ReadStream(t.ID, uint64(after)+1)
	defer it.Close()
	evs := []eventJSON{}
	var last uint64
	for len(evs) < limit && it.Next() {
		ev := it.Event()
		evs = append(evs, toEventJSON(ev))
		last = ev.Seq
	}
	if err := it.Err(); err != nil {
		return s.fromError(err)
	}
	if e := s.reflect(r.Context(), last); e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, map[string]any{"task_id": t.ID, "events": evs})
	return nil
}

func (s *Server) taskProgress(w http.ResponseWriter, r *http.Request) *apiError {
	t, _, e := s.lookup(r)
	if e != nil {
		return e
	}
	p, err := s.view.Progress(t.ID)
	if err != nil {
		return s.fromError(err)
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// ---- commands

func (s *Server) command(w http.ResponseWriter, r *http.Request, body any, do func(id string) (fsm.Task, error)) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	if e := decodeBody(r, body, body == nil || isOptional(body)); e != nil {
		return e
	}
	id := r.PathValue("id")
	if !validID(id) {
		return errNotFound("no such task %q", id)
	}
	t, err := do(id)
	if err != nil {
		return s.fromError(err)
	}
	writeJSON(w, http.StatusOK, s.taskJSON(&t, false))
	return nil
}

type reasonBody struct {
	Reason string `json:"reason"`
}

func isOptional(body any) bool { _, ok := body.(*reasonBody); return ok }

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) *apiError {
	var b struct {
		Text   *string `json:"text"`
		Source string  `json:"source"`
	}
	return s.command(w, r, &b, func(id string) (fsm.Task, error) {
		if b.Text == nil {
			return fsm.Task{}, errMissingText
		}
		var t fsm.Task
		err := s.keyed(w, r, func(eventID ulid.ULID) error {
			var err error
			t, err = s.a.SendMessageID(r.Context(), id, eventID, *b.Text, b.Source)
			return err
		})
		return t, err
	})
}

var errMissingText = &inputError{`"text" is required`}

type inputError struct{ msg string }

func (e *inputError) Error() string       { return e.msg }
func (e *inputError) UserMessage() string { return e.msg }
func (e *inputError) Unwrap() error       { return agent.ErrInvalidInput }

func (s *Server) suspend(w http.ResponseWriter, r *http.Request) *apiError {
	var b reasonBody
	return s.command(w, r, &b, func(id string) (fsm.Task, error) { return s.a.Suspend(r.Context(), id, b.Reason) })
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) *apiError {
	var b reasonBody
	return s.command(w, r, &b, func(id string) (fsm.Task, error) { return s.a.Resume(r.Context(), id, b.Reason) })
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) *apiError {
	var b reasonBody
	return s.command(w, r, &b, func(id string) (fsm.Task, error) { return s.a.Cancel(r.Context(), id, b.Reason) })
}

// nameRE is what a webhook's name may be (a schedule's too).
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// webhook creates a task from any body: the body, as text, is the input.
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	q, e := query(r, "type", "priority", "concurrency_key")
	if e != nil {
		return e
	}
	name := r.PathValue("name")
	if !nameRE.MatchString(name) {
		return errBadRequest("webhook name %q: use letters, digits, '_', '.', '-' (at most 64)", name)
	}
	prio, e := intParam(q, "priority", 0, -1000000, 1000000)
	if e != nil {
		return e
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyReadError(err)
	}
	in := agent.Input{Kind: fsm.WebhookTriggered, Name: name, Text: string(data), Source: "webhook:" + name,
		TaskType: q.Get("type"), Priority: prio, ConcurrencyKey: q.Get("concurrency_key")}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		in.Metadata = map[string]string{"content_type": truncateASCII(ct, 200)}
	}
	if !isText(data) {
		return errBadRequest("the webhook body must be text (UTF-8)")
	}
	return s.submit(w, r, in)
}

func truncateASCII(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func isText(b []byte) bool {
	return strings.ToValidUTF8(string(b), "\uFFFD") == string(b) && !strings.ContainsRune(string(b), 0)
}
