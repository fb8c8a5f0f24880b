package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/batcherr"
	"github.com/pegasus-engine/pegasus/internal/usererr"
)

// CreateRequest is a new dispatch task as a caller asks for it (the body
// of POST /api/v1/tasks). Only Title is required; Create fills in the
// seed's defaults, so that a Go caller and an HTTP one get the same task
// from the same request.
type CreateRequest struct {
	// AgentID is who creates the task (the X-Agent-ID of the request); it
	// is recorded, and is the default Owner. Required.
	AgentID string `json:"-"`
	// Title is what the task is. Required.
	Title       string `json:"title"`
	Description string `json:"description"`
	// Owner defaults to AgentID.
	Owner string `json:"owner"`
	// RequiredCapabilities are what a worker must have, all of them
	// (compared case-insensitively).
	RequiredCapabilities []string `json:"required_capabilities"`
	// Priority is 0-10, higher first. The default value is 0.
	Priority int `json:"priority"`
	// TimeoutSeconds is how long an attempt may run, at least 1: the
	// machine has no attempt without a deadline. The default value (nil)
	// is 300; 0 is refused rather than read as the default.
	TimeoutSeconds *int `json:"timeout_seconds"`
	// MaxRetries is how many times a failed or timed-out attempt is
	// retried; 0 is valid (no retry). The default value (nil) is 3.
	MaxRetries *int `json:"max_retries"`
	// RetryEligible says whether a failure may be retried at all. The
	// default value (nil) is true.
	RetryEligible *bool `json:"retry_eligible"`
	// Source is where the task comes from. The default value is "agent".
	Source string `json:"source"`
	// ParentTaskID must name an existing task.
	ParentTaskID string `json:"parent_task_id"`
	// Metadata takes any JSON value per key; each is given back as it
	// was given (TaskMetadata).
	Metadata map[string]json.RawMessage `json:"metadata"`
	// RunAt: the task is not assigned before. Zero: at once.
	RunAt time.Time `json:"run_at"`
	// DelaySeconds is RunAt counted from the time in the task's id (not
	// from the clock): a keyed create sent again has the same id, so the
	// same run_at, and is recognised as the same request. Not with RunAt.
	DelaySeconds int `json:"delay_seconds"`
	// HeartbeatSeconds, when set, times an attempt out after this long
	// without a report. The default value is 0: no heartbeat.
	HeartbeatSeconds int `json:"heartbeat_seconds"`
	// RetryBackoffSeconds delays retry n+1 by this times 2^n, plus a
	// jitter. The default value is 0: the seed's immediate retry.
	RetryBackoffSeconds int `json:"retry_backoff_seconds"`
	// ConcurrencyKey is the concurrency key of the agent task an agent
	// worker runs for it (docs/limits.md). The default value is none.
	ConcurrencyKey string `json:"concurrency_key"`
}

// Create appends DISPATCH_CREATED for a new task with id and returns the
// task as folded. A zero id draws a new one; the same id again with the
// same request answers the first task (the Idempotency-Key path). Bad
// input is an error wrapping ErrInvalid, and nothing is recorded.
func (b *Broker) Create(ctx context.Context, id ulid.ULID, req CreateRequest) (fsm.Task, error) {
	if id == (ulid.ULID{}) {
		id = b.newID()
	}
	body, err := createdBody(id, &req)
	if err != nil {
		return fsm.Task{}, err
	}
	return b.create(ctx, id, body, ulid.ULID{}, ulid.ULID{})
}

// Created is one task of CreateMany: the task as folded, and whether the
// log held it already (a retry under the same id).
type Created struct {
	Task     fsm.Task
	Replayed bool
}

// CreateMany creates a task from each request, all in one synced commit:
// when it returns without error every task exists, and when it fails
// none of the tasks it would have written is stored. ids[i], when not
// zero, is the id of reqs[i]'s task (an Idempotency-Key's): a task the log
// holds already under that id with the same request is answered
// (Replayed) and not written again, so a batch sent again creates nothing
// twice, also when an earlier request stored some of its tasks; the same
// id with another request is an item error wrapping eventlog.ErrIDReused.
// Requests are checked first: any invalid one refuses the whole batch
// with a *batcherr.Error naming each by its index. A parent_task_id must
// name a task that exists before the batch.
func (b *Broker) CreateMany(ctx context.Context, ids []ulid.ULID, reqs []CreateRequest) ([]Created, error) {
	out := make([]Created, len(reqs))
	err := b.CreateEach(ctx, ids, reqs, func(i int, t *fsm.Task, replayed bool) {
		out[i] = Created{Task: *t, Replayed: replayed}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CreateEach is CreateMany giving each task made, as folded, to each in
// order (i is its request's index) instead of a slice of them: a caller
// that only encodes them copies none. t is valid during the call only.
// each is called only once every task is committed; when CreateEach
// returns an error it may have been called for some.
func (b *Broker) CreateEach(ctx context.Context, ids []ulid.ULID, reqs []CreateRequest, each func(i int, t *fsm.Task, replayed bool)) error {
	if len(ids) != len(reqs) {
		return fmt.Errorf("broker: CreateMany: %d ids for %d requests", len(ids), len(reqs))
	}
	var bad batcherr.Error
	evs := make([]eventlog.Event, len(reqs))
	bodies := make([]fsm.DispatchCreatedBody, len(reqs)) // one allocation, not one per body
	drawn := make([]bool, len(reqs))                     // an id drawn here is in no log
	var first map[ulid.ULID]int                          // the callers' ids: a drawn one is new
	now := b.opts.Now()
	for i := range reqs {
		id := ids[i]
		if id == (ulid.ULID{}) {
			id, drawn[i] = b.newID(), true
		} else if j, dup := first[id]; dup {
			bad.Add(i, usererr.Errorf(ErrInvalid, "the same id (idempotency key) as tasks[%d]", j))
			continue
		} else {
			if first == nil {
				first = make(map[ulid.ULID]int)
			}
			first[id] = i
		}
		body := &bodies[i]
		var err error
		*body, err = createdBody(id, &reqs[i])
		if err == nil {
			err = b.checkCreated(body)
		}
		if err != nil {
			bad.Add(i, err)
			continue
		}
		data, err := fsm.Encode(body)
		if err != nil {
			return err
		}
		evs[i] = eventlog.Event{ID: id, Type: string(fsm.DispatchCreated), Time: now, Schema: fsm.SchemaVersion, Body: data}
	}
	if err := bad.Err(); err != nil {
		return err
	}
	held, last, err := batcherr.Commit(ctx, b.log, b.app, evs, drawn)
	if err != nil {
		return err
	}
	if err := b.WaitFor(ctx, last); err != nil {
		return err
	}
	for i := range evs {
		if !held[i] && bodies[i].ParentTaskID != "" {
			b.children.add(bodies[i].ParentTaskID, evs[i].ID.String())
		}
	}
	// The view folded the batch once WaitFor returned: each task as folded
	// at or after its commit. (The broker's index holds only what
	// scheduling reads, not the whole task.)
	var t fsm.Task // one for every call (t is valid during the call only)
	for i := range evs {
		var err error
		if t, err = b.Task(evs[i].ID.String()); err != nil {
			return err
		}
		each(i, &t, held[i])
	}
	return nil
}

// checkCreated refuses a body the machine would not take, or whose parent
// does not exist.
func (b *Broker) checkCreated(body *fsm.DispatchCreatedBody) error {
	if bad := fsm.CheckDispatchCreated(body); bad != "" {
		return usererr.Errorf(ErrInvalid, "%s", bad)
	}
	if body.ParentTaskID != "" {
		if _, err := b.tasks.Task(body.ParentTaskID); err != nil {
			return usererr.Errorf(ErrInvalid, "parent_task_id %q: no such task", body.ParentTaskID)
		}
	}
	return nil
}

// createdBody resolves req into the body the log records: every default
// applied, so that the fold applies none and a recorded task never
// changes meaning.
func createdBody(id ulid.ULID, req *CreateRequest) (fsm.DispatchCreatedBody, error) {
	invalid := func(format string, args ...any) (fsm.DispatchCreatedBody, error) {
		return fsm.DispatchCreatedBody{}, usererr.Errorf(ErrInvalid, format, args...)
	}
	switch {
	case req.AgentID == "":
		return invalid("a task records who created it: no agent")
	case req.TimeoutSeconds != nil && *req.TimeoutSeconds <= 0:
		return invalid("timeout_seconds %d: want at least 1 (leave it out for the default, %d)", *req.TimeoutSeconds, fsm.DefaultTimeoutSeconds)
	case req.DelaySeconds < 0:
		return invalid("delay_seconds %d: want at least 0", req.DelaySeconds)
	case req.DelaySeconds > 0 && !req.RunAt.IsZero():
		return invalid("give run_at or delay_seconds, not both")
	}
	meta, metaJSON, err := splitMetadata(req.Metadata, false)
	if err != nil {
		return fsm.DispatchCreatedBody{}, err
	}
	body := fsm.DispatchCreatedBody{
		AgentID: req.AgentID, Title: req.Title, Description: req.Description, Owner: req.Owner,
		RequiredCapabilities: req.RequiredCapabilities, Priority: req.Priority, TimeoutSeconds: fsm.DefaultTimeoutSeconds,
		MaxRetries: fsm.DefaultMaxRetries, RetryEligible: true, Source: req.Source, ParentTaskID: req.ParentTaskID,
		Metadata: meta, MetadataJSON: metaJSON, RunAt: req.RunAt, HeartbeatSeconds: req.HeartbeatSeconds,
		RetryBackoffSeconds: req.RetryBackoffSeconds, ConcurrencyKey: req.ConcurrencyKey,
	}
	if req.TimeoutSeconds != nil {
		body.TimeoutSeconds = *req.TimeoutSeconds
	}
	if req.MaxRetries != nil {
		body.MaxRetries = *req.MaxRetries
	}
	if req.RetryEligible != nil {
		body.RetryEligible = *req.RetryEligible
	}
	if req.DelaySeconds > 0 {
		body.RunAt = ulid.Time(id.Time()).UTC().Add(time.Duration(req.DelaySeconds) * time.Second)
	}
	return fsm.DispatchDefaults(body), nil
}

// create appends DISPATCH_CREATED with body, which holds resolved values
// (createdBody), caused by cause and correlated with corr (zero: none); a
// parent must exist.
func (b *Broker) create(ctx context.Context, id ulid.ULID, body fsm.DispatchCreatedBody, cause, corr ulid.ULID) (fsm.Task, error) {
	if err := b.checkCreated(&body); err != nil {
		return fsm.Task{}, err
	}
	if id == (ulid.ULID{}) {
		id = b.newID()
	}
	data, err := fsm.Encode(&body)
	if err != nil {
		return fsm.Task{}, err
	}
	ev := eventlog.Event{ID: id, Type: string(fsm.DispatchCreated), Time: b.opts.Now(), Causation: cause, Correlation: corr,
		Schema: fsm.SchemaVersion, Body: data}
	res, err := b.app.Append(ctx, id.String(), eventlog.NoStream, ev)
	if errors.Is(err, eventlog.ErrConflict) {
		// The same id again (an Idempotency-Key retry whose first append
		// is stored): the log already answered identical content above,
		// so a conflict means the stream exists: return it.
		if t, terr := b.tasks.Task(id.String()); terr == nil {
			return t, nil
		}
	}
	if err != nil {
		return fsm.Task{}, err
	}
	if err := b.WaitFor(ctx, res.LastSeq); err != nil {
		return fsm.Task{}, err
	}
	b.children.add(body.ParentTaskID, id.String()) // before the loop follows it: the parent lists it at once
	return b.taskAt(ctx, id.String(), res)
}

// splitMetadata turns metadata of any JSON values into what the log
// records: strings as they are, every other value as its compact JSON
// text, with its key listed (sorted) in the second result. With update,
// null and "" delete their key (recorded as ""), as in a JSON merge patch.
func splitMetadata(in map[string]json.RawMessage, update bool) (map[string]string, []string, error) {
	if len(in) == 0 {
		return nil, nil, nil
	}
	out := make(map[string]string, len(in))
	var keys []string
	for k, raw := range in {
		if strings.TrimSpace(k) == "" {
			return nil, nil, usererr.Errorf(ErrInvalid, "metadata: an empty key")
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil || compact.Len() == 0 {
			return nil, nil, usererr.Errorf(ErrInvalid, "metadata %q: not a JSON value", k)
		}
		var s string
		switch {
		case compact.String() == "null":
			if out[k] = ""; !update {
				out[k] = "null"
				keys = append(keys, k)
			}
		case compact.Bytes()[0] == '"' && json.Unmarshal(compact.Bytes(), &s) == nil:
			out[k] = s
		default:
			out[k] = compact.String()
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return out, keys, nil
}

// TaskMetadata returns t's metadata as given: strings as JSON strings,
// and the values given as other JSON (fsm.Dispatch.MetadataJSON) as that
// JSON. It is never nil.
func TaskMetadata(t *fsm.Task) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(t.Metadata))
	var isJSON []string
	if t.Dispatch != nil {
		isJSON = t.Dispatch.MetadataJSON
	}
	for _, k := range slices.Sorted(maps.Keys(t.Metadata)) {
		v := t.Metadata[k]
		if _, found := slices.BinarySearch(isJSON, k); found && json.Valid([]byte(v)) {
			out[k] = json.RawMessage(v)
			continue
		}
		var s bytes.Buffer
		enc := json.NewEncoder(&s)
		enc.SetEscapeHTML(false) // as given: "<b>", not "\u003cb\u003e"
		_ = enc.Encode(v)        // a string always encodes
		out[k] = bytes.TrimSuffix(s.Bytes(), []byte("\n"))
	}
	return out
}

// TaskError is why t's last attempt ended without a result, in words: the
// worker's error, or, for an attempt that timed out, which deadline passed
// (the worker reported no error, so the task's error field would say
// nothing). "" for a task whose attempt has not failed nor timed out.
func TaskError(t *fsm.Task) string {
	d := t.Dispatch
	switch {
	case d == nil:
		return ""
	case d.Error != "":
		return d.Error
	case d.TimeoutReason == "": // set by a time-out, cleared by the next attempt
		return ""
	case d.TimeoutReason == fsm.TimeoutHeartbeat:
		return fmt.Sprintf("timed out: no report from %s within heartbeat_seconds=%d", orNobody(d.AssignedAgent), d.HeartbeatSeconds)
	}
	return fmt.Sprintf("timed out: no outcome from %s within timeout_seconds=%d", orNobody(d.AssignedAgent), d.TimeoutSeconds)
}

func orNobody(agent string) string {
	if agent == "" {
		return "the worker"
	}
	return "worker " + agent
}
