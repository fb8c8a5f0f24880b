package projection

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
)

// WorkersStream holds the broker's worker registrations and drains: the
// workers are in the log, their liveness is not (it lives in the daemon's
// memory). Replay counts these events and otherwise ignores them; the
// broker folds them with Workers.Apply.
const WorkersStream = "$workers"

// The worker event types, appended to WorkersStream by the broker.
//
// Persisted: never change an existing value.
const (
	WorkerRegistered fsm.EventType = "WORKER_REGISTERED" // a worker registered or updated its capabilities
	WorkerDrained    fsm.EventType = "WORKER_DRAINED"    // an operator drained a worker: no new assignments
)

// WorkerSchemaVersion is the body schema of the worker events.
//
// Persisted: bump it only for an incompatible change of a body.
const WorkerSchemaVersion = 1

// WorkerBody is the body of WORKER_REGISTERED and WORKER_DRAINED.
type WorkerBody struct {
	// Worker is the worker's id (its X-Agent-ID).
	Worker string `msgpack:"worker" json:"worker"`
	// Capabilities and MaxTasks are what WORKER_REGISTERED declares.
	Capabilities []string `msgpack:"capabilities,omitempty" json:"capabilities,omitempty"`
	MaxTasks     int      `msgpack:"max_tasks,omitempty" json:"max_tasks,omitempty"`
	// By is the agent that caused the event (the worker itself, or an
	// operator for a drain).
	By string `msgpack:"by" json:"by"`
}

// EncodeWorker returns the canonical encoding of a worker event body.
func EncodeWorker(b *WorkerBody) ([]byte, error) {
	if b == nil || b.Worker == "" {
		return nil, fmt.Errorf("projection: encode worker: no worker")
	}
	return codec.Encode(b)
}

// DecodeWorker decodes a worker event body.
func DecodeWorker(schema uint16, data []byte) (*WorkerBody, error) {
	if schema != WorkerSchemaVersion {
		return nil, fmt.Errorf("%w: worker schema %d", fsm.ErrSchema, schema)
	}
	var b WorkerBody
	if err := codec.Decode(data, &b); err != nil {
		return nil, fmt.Errorf("%w: worker body: %v", fsm.ErrMalformed, err)
	}
	return &b, nil
}

// Worker is one registered worker as the fold of its events.
type Worker struct {
	ID           string    `json:"id"`
	Capabilities []string  `json:"capabilities"`
	MaxTasks     int       `json:"max_tasks"`
	Draining     bool      `json:"draining"`
	DrainedBy    string    `json:"drained_by,omitempty"`
	RegisteredAt time.Time `json:"registered_at"`
}

// Has reports whether w has every capability in caps, compared without
// regard to case (the seed's rule).
func (w *Worker) Has(caps []string) bool {
	for _, c := range caps {
		if !slices.ContainsFunc(w.Capabilities, func(x string) bool { return strings.EqualFold(x, c) }) {
			return false
		}
	}
	return true
}

// Workers is the fold of WorkersStream: every worker ever registered.
type Workers map[string]*Worker

// Apply folds one worker event, at time at. A registration replaces the
// capabilities and limit and ends a drain; a drain of an unknown worker
// registers it drained.
func (ws Workers) Apply(et fsm.EventType, b *WorkerBody, at time.Time) error {
	if b == nil || b.Worker == "" {
		return fmt.Errorf("projection: %s without a worker", et)
	}
	w := ws[b.Worker]
	if w == nil {
		w = &Worker{ID: b.Worker, MaxTasks: 1, RegisteredAt: at.UTC()}
		ws[b.Worker] = w
	}
	switch et {
	case WorkerRegistered:
		w.Capabilities = slices.Clone(b.Capabilities)
		w.MaxTasks = max(b.MaxTasks, 1)
		w.Draining, w.DrainedBy = false, ""
	case WorkerDrained:
		w.Draining, w.DrainedBy = true, b.By
	default:
		return fmt.Errorf("%w: %q on %s", fsm.ErrUnknownEvent, et, WorkersStream)
	}
	return nil
}

// DLQFilter selects dead letters for a bulk requeue. Zero fields match
// everything.
type DLQFilter struct {
	Capability string    `json:"capability,omitempty"` // a required capability (case-insensitive)
	Error      string    `json:"error,omitempty"`      // a substring of the error
	From       time.Time `json:"from,omitzero"`        // dead-lettered at or after
	To         time.Time `json:"to,omitzero"`          // dead-lettered before
}

// Match reports whether t is a dead letter the filter selects.
func (f DLQFilter) Match(t *fsm.Task) bool {
	d := t.Dispatch
	switch {
	case d == nil || !d.DeadLettered:
		return false
	case f.Capability != "" && !slices.ContainsFunc(d.RequiredCapabilities, func(c string) bool { return strings.EqualFold(c, f.Capability) }):
		return false
	case f.Error != "" && !strings.Contains(d.Error, f.Error):
		return false
	case !f.From.IsZero() && d.DeadLetteredAt.Before(f.From):
		return false
	case !f.To.IsZero() && !d.DeadLetteredAt.Before(f.To):
		return false
	}
	return true
}

// QueueLess orders dispatch tasks as the broker's queue does: priority
// descending (0-10, higher first), then oldest first, then by id.
func QueueLess(a, b *fsm.Task) int {
	if a.Priority != b.Priority {
		return b.Priority - a.Priority
	}
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// BrokerStats is GET /api/v1/stats: the broker's read model, computed from
// the dispatch tasks as folded.
type BrokerStats struct {
	Tasks        int              `json:"tasks"`
	ByStatus     map[string]int   `json:"by_status"`
	Retries      int              `json:"retries"`      // retry_count summed over tasks
	DeadLetters  int              `json:"dead_letters"` // in the DLQ now
	Requeues     int              `json:"requeues"`     // requeues from the DLQ, ever
	QueueDepth   int              `json:"queue_depth"`  // pending tasks
	OldestQueued float64          `json:"oldest_queued_seconds"`
	ToAssign     DurationQuantile `json:"time_to_assign"`   // created -> (last) assigned
	ToComplete   DurationQuantile `json:"time_to_complete"` // created -> completed
}

// DurationQuantile is p50 and p99 of a set of durations, in milliseconds.
type DurationQuantile struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
}

// ComputeBrokerStats folds tasks (dispatch tasks; others are ignored) into
// BrokerStats; now is the caller's clock, for the queue's age.
func ComputeBrokerStats(tasks []fsm.Task, now time.Time) BrokerStats {
	s := BrokerStats{ByStatus: map[string]int{}}
	for _, st := range fsm.DispatchStates {
		s.ByStatus[string(st)] = 0
	}
	var assign, complete []time.Duration
	for i := range tasks {
		t := &tasks[i]
		d := t.Dispatch
		if d == nil {
			continue
		}
		s.Tasks++
		s.ByStatus[string(t.State)]++
		s.Retries += d.RetryCount
		s.Requeues += d.Requeues
		if d.DeadLettered {
			s.DeadLetters++
		}
		if fsm.Next(t).Kind == fsm.ActAssign {
			s.QueueDepth++
			if age := now.Sub(t.CreatedAt).Seconds(); age > s.OldestQueued {
				s.OldestQueued = age
			}
		}
		if !d.AssignedAt.IsZero() {
			assign = append(assign, d.AssignedAt.Sub(t.CreatedAt))
		}
		if !d.CompletedAt.IsZero() {
			complete = append(complete, d.CompletedAt.Sub(t.CreatedAt))
		}
	}
	s.ToAssign, s.ToComplete = quantiles(assign), quantiles(complete)
	return s
}

func quantiles(ds []time.Duration) DurationQuantile {
	if len(ds) == 0 {
		return DurationQuantile{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := int(q*float64(len(ds)-1) + 0.5)
		return float64(ds[i].Microseconds()) / 1000
	}
	return DurationQuantile{N: len(ds), P50: at(0.50), P99: at(0.99)}
}
