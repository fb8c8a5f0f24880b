package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/batcherr"
	"github.com/pegasus-engine/pegasus/internal/usererr"
)

// Input bounds.
const (
	MaxInputText     = 256 << 10 // bytes of an input or message text
	MaxMetadataPairs = 64
	MaxMetadataKey   = 128
	MaxMetadataValue = 4096
	MaxReasonText    = 1024
)

// Input is an external input that creates a task.
type Input struct {
	// Kind is MESSAGE_RECEIVED (the default), WEBHOOK_TRIGGERED or
	// SCHEDULE_FIRED.
	Kind fsm.EventType
	Text string
	// Source says where the input came from ("api", "cli",
	// "webhook:NAME", "schedule:NAME"). The default value is "api".
	Source string
	// TaskType is the task's type. The default value is "general".
	TaskType string
	// Priority orders admission: lower values first. The default value is
	// 0.
	Priority int
	Metadata map[string]string
	// Name is the webhook's or the schedule's name.
	Name string
	// ConcurrencyKey groups the task with others for admission (a tenant,
	// a user): Options.Concurrency limits how many of one key's tasks run
	// at once, and the keys with tasks waiting are admitted in turn. The
	// default value, "", is the default key.
	ConcurrencyKey string
	// Machine is the task machine the task runs under, for its whole life
	// (fsm.ParseMachineRef reads "pegasus.task@0"). The default value, the
	// zero MachineRef, is fsm.CurrentMachine.
	Machine fsm.MachineRef
	// ID, when set, is the id of the input event, and so of the task,
	// chosen by the caller so that a retry is recognised (an HTTP
	// Idempotency-Key): the log stores an id once, so submitting the same
	// input again with the same ID appends nothing and returns the same
	// task, and a different input with that ID fails with
	// eventlog.ErrIDReused. The default value (zero) draws a new id.
	ID ulid.ULID
}

// Submit creates a task from a message and returns its id once the input
// that creates it is committed (and folded, so the task can be read at once).
func (a *Agent) Submit(ctx context.Context, text, source, taskType string) (string, error) {
	return a.SubmitInput(ctx, Input{Text: text, Source: source, TaskType: taskType})
}

// SubmitInput creates a task from an external input. The input event is
// appended, in one synced commit, as the first event of a new stream: the
// task exists from then on, in idle (the spec's TaskFSM.fromEvent), and its
// id is the input's id. It waits in idle until an admission slot is free;
// admission appends TASK_CREATED, caused by the input and correlated to it,
// which starts the machine. When a slot is free already, that TASK_CREATED
// goes in the input's commit (submitAdmitted).
func (a *Agent) SubmitInput(ctx context.Context, in Input) (string, error) {
	ev, body, err := a.inputEvent(&in)
	if err != nil {
		return "", err
	}
	done, err := a.intake()
	if err != nil {
		return "", err
	}
	defer done()
	keyed := ev.ID != (ulid.ULID{})
	if !keyed {
		ev.ID = a.log.NewID()
		ev.Correlation = ev.ID
	}
	taskID := ev.ID.String()
	res, admitted, err := a.submitAdmitted(ctx, taskID, ev, body, keyed)
	if !admitted || (err != nil && keyed) {
		// No slot free, or a keyed input's combined append refused (a
		// retry whose input is stored already): the input on its own.
		res, err = a.app.Append(ctx, taskID, eventlog.NoStream, ev)
	}
	if err != nil {
		return "", fmt.Errorf("agent: submit: %w", err)
	}
	// Committed: the task exists and will run even if this wait ends
	// early. Waiting for the hook means the task can be read, and is
	// admitted or queued, when Submit returns.
	_ = a.watch.waitHooked(ctx, res.LastSeq)
	return taskID, nil
}

// submitAdmitted appends the input in, which creates task taskID, with
// the task's TASK_CREATED in the same commit when an admission slot is
// free now (no task waits for one, and in's concurrency key is under its
// limit): the very event admission would append once the input is folded
// (admission: caused by the input, correlated to it), so the log, the fold
// and the machine see what they would have seen, one commit and one fold
// earlier. It reports false, having appended nothing, when no slot is free,
// the task is another daemon's, or the input of a keyed submit is stored
// already. The hook skips the input's dispatch (handedOff) and dispatches
// the TASK_CREATED, whose stage holds the reserved slot.
func (a *Agent) submitAdmitted(ctx context.Context, taskID string, in eventlog.Event, body *fsm.Input, keyed bool) (eventlog.AppendResult, bool, error) {
	if keyed && a.sched.slotFree() {
		if _, err := a.log.Get(in.ID); !errors.Is(err, eventlog.ErrNotFound) {
			return eventlog.AppendResult{}, false, nil // a retry, or the log failing: the plain path answers
		}
	}
	created, ok := a.admitWithInput(taskID, &in, body)
	if !ok {
		return eventlog.AppendResult{}, false, nil
	}
	res, err := a.app.Append(ctx, taskID, eventlog.NoStream, in, created)
	if err != nil {
		a.unadmit(taskID)
	}
	return res, true, err
}

// admitWithInput takes a free admission slot for task taskID, which its
// input in creates, if the agent owns it and one is free now, and returns
// the TASK_CREATED to append with in: the one admission would append once
// in is folded. The hook will skip the input's dispatch (handedOff) and
// dispatch the TASK_CREATED, whose stage holds the slot.
func (a *Agent) admitWithInput(taskID string, in *eventlog.Event, body *fsm.Input) (eventlog.Event, bool) {
	if !a.sched.slotFree() || !a.owns(taskID) {
		return eventlog.Event{}, false
	}
	t, ok := a.inputTask(taskID, in, body)
	if !ok || !a.sched.reserve(taskID, t.ConcurrencyKey) {
		return eventlog.Event{}, false
	}
	a.corr.store(taskID, in.Correlation) // admission's correlation, before the hook stores it
	created := a.admission(&t)
	created.ID = a.log.NewID()
	h := newHandoff(created.ID, 1)
	h.ids[0] = in.ID
	a.handoffs.store(taskID, h)
	return created, true
}

// unadmit gives back the slot admitWithInput took for task taskID when
// the append failed. Nothing is stored then, unless an acknowledgement
// was lost (--cluster): if the hook has folded the TASK_CREATED, it has
// removed the record and dispatched the task, which keeps its slot.
func (a *Agent) unadmit(taskID string) {
	if _, ok := a.handoffs.loadAndRemove(taskID); ok {
		a.sched.release(taskID, false)
		a.corr.remove(taskID)
	}
}

// batchAdmissions takes the admission slots free now for the inputs of a
// batch whose ids were drawn for it (a keyed input may be a retry's),
// in order, and returns the TASK_CREATED of each input that got one, by
// its index: SubmitInputs writes it in the batch's commit, as
// submitAdmitted does for one input.
func (a *Agent) batchAdmissions(evs []eventlog.Event, bodies []*fsm.Input, drawn []bool) map[int]eventlog.Event {
	var out map[int]eventlog.Event
	for i := range evs {
		if !drawn[i] {
			continue
		}
		if !a.sched.slotFree() {
			break // taken, or tasks wait: the rest of the batch waits too
		}
		// A key at its limit leaves the slots to the inputs after it.
		if created, ok := a.admitWithInput(evs[i].ID.String(), &evs[i], bodies[i]); ok {
			if out == nil {
				out = map[int]eventlog.Event{}
			}
			out[i] = created
		}
	}
	return out
}

// inputTask is task taskID as its input in (whose body is body, the one
// in.Body encodes) alone leaves it, and whether it then waits to be
// started (fsm.Next), as the fold will have it.
func (a *Agent) inputTask(taskID string, in *eventlog.Event, body *fsm.Input) (fsm.Task, bool) {
	t, err := fsm.Apply(fsm.Task{}, fsm.Event{ID: in.ID, Type: fsm.EventType(in.Type), Stream: taskID, Version: 1,
		Correlation: in.Correlation, Body: body})
	return t, err == nil && fsm.Next(&t).Kind == fsm.ActStart
}

// inputEvent applies in's defaults, checks it and returns the event that
// creates its task: with in.ID as its id and correlation, zero when the
// caller chose none.
func (a *Agent) inputEvent(in *Input) (eventlog.Event, *fsm.Input, error) {
	if in.Kind == "" {
		in.Kind = fsm.MessageReceived
	}
	if in.Source == "" {
		in.Source = "api"
	}
	if in.TaskType == "" {
		in.TaskType = TypeGeneral
	}
	if err := a.checkInput(in); err != nil {
		return eventlog.Event{}, nil, err
	}
	body := &fsm.Input{Kind: in.Kind, Text: in.Text, Source: in.Source, TaskType: in.TaskType,
		Priority: in.Priority, Metadata: in.Metadata, Name: in.Name, ConcurrencyKey: in.ConcurrencyKey}
	if in.Machine != (fsm.MachineRef{}) {
		m := in.Machine // a copy: in stays the caller's (and on its stack)
		body.Machine = &m
	}
	inData, err := fsm.Encode(body)
	if err != nil {
		return eventlog.Event{}, nil, err
	}
	return eventlog.Event{ID: in.ID, Type: string(in.Kind), Correlation: in.ID, Schema: fsm.SchemaVersion, Body: inData}, body, nil
}

// Submitted is one task of SubmitInputs: its id, and whether the log held
// its input already (a retry under the same Input.ID).
type Submitted struct {
	ID       string
	Replayed bool
}

// SubmitInputs creates a task from each input, all in one synced commit:
// when it returns without error every task exists, and when it fails none
// of the inputs it would have written is stored. Inputs are checked first:
// any invalid one refuses the whole batch with a *batcherr.Error naming
// each invalid input by its index. An input whose ID the log holds
// already with the same content is a retry: it is answered (Replayed)
// and not written again, so a batch sent again creates nothing twice,
// also when some of its inputs were stored by an earlier request; the
// same ID with other content is an item error wrapping
// eventlog.ErrIDReused. Two inputs of one batch may not share an ID.
func (a *Agent) SubmitInputs(ctx context.Context, ins []Input) ([]Submitted, error) {
	evs := make([]eventlog.Event, len(ins))
	bodies := make([]*fsm.Input, len(ins))
	var bad batcherr.Error
	first := make(map[ulid.ULID]int)
	for i := range ins {
		ev, body, err := a.inputEvent(&ins[i])
		if err != nil {
			bad.Add(i, err)
			continue
		}
		if ev.ID != (ulid.ULID{}) {
			if j, dup := first[ev.ID]; dup {
				bad.Add(i, usererr.Errorf(ErrInvalidInput, "the same id (idempotency key) as tasks[%d]", j))
				continue
			}
			first[ev.ID] = i
		}
		evs[i], bodies[i] = ev, body
	}
	if err := bad.Err(); err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return []Submitted{}, nil
	}
	done, err := a.intake()
	if err != nil {
		return nil, err
	}
	defer done()
	drawn := make([]bool, len(evs)) // an id drawn here is in no log
	for i := range evs {
		if evs[i].ID == (ulid.ULID{}) {
			evs[i].ID = a.log.NewID()
			evs[i].Correlation = evs[i].ID
			drawn[i] = true
		}
	}
	created := a.batchAdmissions(evs, bodies, drawn)
	held, last, err := batcherr.CommitWith(ctx, a.log, a.app, evs, drawn, func(i int) []eventlog.Event {
		if ev, ok := created[i]; ok {
			return []eventlog.Event{ev}
		}
		return nil
	})
	if err != nil {
		for i := range created {
			a.unadmit(evs[i].ID.String())
		}
		if be := (*batcherr.Error)(nil); errors.As(err, &be) {
			return nil, err // an item refused
		}
		return nil, fmt.Errorf("agent: submit: %w", err)
	}
	out := make([]Submitted, len(evs))
	for i := range evs {
		out[i] = Submitted{ID: evs[i].ID.String(), Replayed: held[i]}
	}
	if last > 0 {
		_ = a.watch.waitHooked(ctx, last)
	}
	return out, nil
}

func (a *Agent) checkInput(in *Input) error {
	switch in.Kind {
	case fsm.MessageReceived, fsm.WebhookTriggered, fsm.ScheduleFired:
	default:
		return usererr.Errorf(ErrInvalidInput, "input kind %q", in.Kind)
	}
	if !slices.ContainsFunc(a.catalog.types, func(tt TaskType) bool { return tt.Name == in.TaskType }) {
		return &UnknownTypeError{Type: in.TaskType, Known: a.TaskTypes()}
	}
	if len(in.Text) > MaxInputText {
		return usererr.Errorf(ErrInvalidInput, "input text is %d bytes, more than %d", len(in.Text), MaxInputText)
	}
	if len(in.Source) > 200 || len(in.Name) > 200 {
		return usererr.Errorf(ErrInvalidInput, "source and name are limited to 200 bytes")
	}
	if in.Machine != (fsm.MachineRef{}) {
		if _, err := fsm.MachineFor(in.Machine); err != nil {
			return usererr.Errorf(ErrInvalidInput, "machine %s: not a machine this build runs", in.Machine)
		}
	}
	if err := CheckConcurrencyKey(in.ConcurrencyKey); err != nil {
		return err
	}
	if in.Priority < -1000000 || in.Priority > 1000000 {
		return usererr.Errorf(ErrInvalidInput, "priority %d is out of range (-1000000 to 1000000)", in.Priority)
	}
	return checkMetadata(in.Metadata)
}

// UnknownTypeError is an input of a task type the agent does not have.
// It unwraps to ErrUnknownTaskType.
type UnknownTypeError struct {
	Type  string
	Known []string // the agent's task types
}

func (e *UnknownTypeError) Error() string { return "agent: " + e.UserMessage() }
func (e *UnknownTypeError) Unwrap() error { return ErrUnknownTaskType }

// UserMessage names the type and the known ones.
func (e *UnknownTypeError) UserMessage() string {
	return fmt.Sprintf("unknown task type %q (known: %s)", e.Type, strings.Join(e.Known, ", "))
}

func checkMetadata(m map[string]string) error {
	if len(m) > MaxMetadataPairs {
		return usererr.Errorf(ErrInvalidInput, "%d metadata entries, more than %d", len(m), MaxMetadataPairs)
	}
	for k, v := range m {
		if k == "" || len(k) > MaxMetadataKey || len(v) > MaxMetadataValue {
			return usererr.Errorf(ErrInvalidInput, "metadata keys are 1 to %d bytes and values at most %d", MaxMetadataKey, MaxMetadataValue)
		}
	}
	return nil
}

// SendMessage answers a suspended task: MESSAGE_RECEIVED on the task's
// stream moves it back to reasoning, with the text as a user message.
func (a *Agent) SendMessage(ctx context.Context, id, text, source string) (fsm.Task, error) {
	return a.SendMessageID(ctx, id, ulid.ULID{}, text, source)
}

// SendMessageID is SendMessage with the message's event id chosen by the
// caller, so that a retry is recognised (an HTTP Idempotency-Key): if the
// log already holds eventID as this very message to this task, nothing is
// appended and the task is returned as it is now, whatever its state; if
// it holds eventID as anything else, the error wraps eventlog.ErrIDReused.
func (a *Agent) SendMessageID(ctx context.Context, id string, eventID ulid.ULID, text, source string) (fsm.Task, error) {
	if len(text) > MaxInputText {
		return fsm.Task{}, usererr.Errorf(ErrInvalidInput, "message text is %d bytes, more than %d", len(text), MaxInputText)
	}
	if source == "" {
		source = "api"
	}
	return a.command(ctx, id, eventID, &fsm.Input{Kind: fsm.MessageReceived, Text: text, Source: source})
}

// Suspend suspends a reasoning or acting task. Whatever stage runs for it
// is cancelled; its outcome, if it arrives, is refused as a conflict.
func (a *Agent) Suspend(ctx context.Context, id, reason string) (fsm.Task, error) {
	if len(reason) > MaxReasonText {
		return fsm.Task{}, usererr.Errorf(ErrInvalidInput, "reason is longer than %d bytes", MaxReasonText)
	}
	if reason == "" {
		reason = "suspended by request"
	}
	return a.command(ctx, id, ulid.ULID{}, &fsm.TaskSuspendedBody{Reason: reason})
}

// Resume returns a suspended task to the state it was suspended in.
func (a *Agent) Resume(ctx context.Context, id, reason string) (fsm.Task, error) {
	if len(reason) > MaxReasonText {
		return fsm.Task{}, usererr.Errorf(ErrInvalidInput, "reason is longer than %d bytes", MaxReasonText)
	}
	return a.command(ctx, id, ulid.ULID{}, &fsm.TaskResumedBody{Reason: reason})
}

// Cancel fails a task that is not finished, with reason "cancelled".
func (a *Agent) Cancel(ctx context.Context, id, why string) (fsm.Task, error) {
	if len(why) > MaxReasonText {
		return fsm.Task{}, usererr.Errorf(ErrInvalidInput, "reason is longer than %d bytes", MaxReasonText)
	}
	msg := "cancelled"
	if why != "" {
		msg = "cancelled: " + why
	}
	return a.command(ctx, id, ulid.ULID{}, &fsm.TaskFailedBody{Reason: "cancelled", Error: msg})
}

// command appends an event that a user asked for to task id, checking
// first that the machine accepts it in the task's current state (else a
// *fsm.TransitionError, which wraps fsm.ErrInvalidTransition). It expects
// the version it checked against: if the agent moved the task in between,
// it waits for the fold to catch up and checks again. It returns the task
// after the event is folded. A non-zero eventID is the event's id, chosen
// by the caller: an event already stored under it is a replay (see
// SendMessageID).
func (a *Agent) command(ctx context.Context, id string, eventID ulid.ULID, body fsm.Body) (fsm.Task, error) {
	done, err := a.intake()
	if err != nil {
		return fsm.Task{}, err
	}
	defer done()
	et := body.EventType()
	if eventID != (ulid.ULID{}) {
		if t, replayed, err := a.replayed(id, eventID, body); replayed || err != nil {
			return t, err
		}
	}
	for attempt := 0; ; attempt++ {
		t, err := a.view.Task(id)
		if err != nil {
			return t, err
		}
		if !t.CanTransition(et) {
			return t, &fsm.TransitionError{From: t.State, Event: et}
		}
		if et == fsm.TaskResumed && !t.Context.SuspendedState.IsActive() {
			return t, &fsm.TransitionError{From: t.State, Event: et}
		}
		ev := a.event(id, t.LastEvent, body)
		ev.ID = eventID
		res, err := a.app.Append(ctx, id, eventlog.Exactly(t.Version), ev)
		var conflict *eventlog.ConflictError
		if errors.As(err, &conflict) && attempt < 20 {
			// Wait until the fold has what the log has, then look again.
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, werr := a.WaitUntil(wctx, id, func(t *fsm.Task) bool { return t.Version >= conflict.Current })
			cancel()
			if werr != nil && ctx.Err() != nil {
				return t, ctx.Err()
			}
			continue
		}
		if err != nil {
			return t, fmt.Errorf("agent: %s: %w", et, err)
		}
		if err := a.watch.waitHooked(ctx, res.LastSeq); err != nil {
			return t, err
		}
		return a.view.Task(id)
	}
}

// replayed reports whether the log already holds eventID. It does as this
// command's event when the stream, type and body match (the causation is
// whatever the task's last event was then, so it is not compared): the task
// is returned as it is now. Anything else under that id is
// eventlog.ErrIDReused.
func (a *Agent) replayed(id string, eventID ulid.ULID, body fsm.Body) (fsm.Task, bool, error) {
	prev, err := a.log.Get(eventID)
	if errors.Is(err, eventlog.ErrNotFound) {
		return fsm.Task{}, false, nil
	}
	if err != nil {
		return fsm.Task{}, false, fmt.Errorf("agent: %s: %w", body.EventType(), err)
	}
	want, err := fsm.Encode(body)
	if err != nil {
		return fsm.Task{}, false, err
	}
	if prev.Stream != id || prev.Type != string(body.EventType()) || prev.Schema != fsm.SchemaVersion || string(prev.Body) != string(want) {
		return fsm.Task{}, false, fmt.Errorf("%w: %s is already event %d of stream %q with different content",
			eventlog.ErrIDReused, eventID, prev.Seq, prev.Stream)
	}
	t, err := a.view.Task(id)
	return t, true, err
}

// ---- notifications

// NotificationType says what a notification is about.
type NotificationType string

// The three notification types of the spec.
const (
	NotifyCompleted NotificationType = "completed" // the task finished; Result is set
	NotifyFailed    NotificationType = "failed"    // the task failed; Error is set
	NotifyMessage   NotificationType = "notify"    // an interim message from the notify tool
)

// Notification is delivered to OnNotify subscribers when the fold records
// a task's completion, failure or interim message.
type Notification struct {
	Type    NotificationType `json:"type"`
	TaskID  string           `json:"task_id"`
	Result  string           `json:"result,omitempty"`
	Error   string           `json:"error,omitempty"`
	Message string           `json:"message,omitempty"`
	Seq     uint64           `json:"seq"`
	Time    time.Time        `json:"time"`
}

// OnNotify registers fn for every notification from now on, and returns a
// function that unregisters it. fn runs on the fold's goroutine, in log
// order: it must return quickly (hand the notification to a channel or a
// goroutine for anything slow).
func (a *Agent) OnNotify(fn func(Notification)) (unregister func()) { return a.watch.listen(fn) }
