package projection

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Summary is the small per-task record that task lists are served from (the
// HTTP API's GET /v1/tasks and `pegasus-replay tasks`). It is derived from
// the task alone, persisted next to it, and cheap to scan.
type Summary struct {
	ID        string    `msgpack:"id" json:"task_id"`
	Type      string    `msgpack:"type" json:"type"`
	State     fsm.State `msgpack:"state" json:"state"`
	Machine   string    `msgpack:"machine" json:"machine"` // NAME@VERSION, for the task's whole life
	Source    string    `msgpack:"source" json:"source"`
	Priority  int       `msgpack:"priority" json:"priority"`
	CreatedAt time.Time `msgpack:"created_at" json:"created_at"`
	UpdatedAt time.Time `msgpack:"updated_at" json:"updated_at"`
	Iteration int       `msgpack:"iteration" json:"iterations"`
	Events    uint64    `msgpack:"events" json:"events"` // the stream version: events folded into the task
	Seq       uint64    `msgpack:"seq" json:"seq"`       // global sequence of the task's last event
	Input     string    `msgpack:"input" json:"input"`   // the input text, cut to MaxSummaryText bytes
	Error     string    `msgpack:"error" json:"error"`   // "" unless failed, as on /api/v1
}

// MaxSummaryText bounds the text fields of a Summary, in bytes.
const MaxSummaryText = 120

// Summarize returns the summary of a task.
func Summarize(t *fsm.Task) Summary {
	return Summary{
		ID: t.ID, Type: t.Type, State: t.State, Machine: t.Machine.String(), Source: t.Context.Source, Priority: t.Priority,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, Iteration: t.Context.Iteration,
		Events: t.Version, Seq: t.Seq,
		Input: cut(t.Context.InputText, MaxSummaryText), Error: cut(t.Context.Error, MaxSummaryText),
	}
}

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// Encode returns the canonical encoding of s: the bytes marshal writes,
// by hand rather than by reflection, which cost as much as the whole task
// record's encoding at every checkpoint (TestEncodeSummaryMatchesReflection
// checks the bytes). A field added to Summary must be added here too; that
// test fails until it is.
func (s *Summary) Encode() ([]byte, error) {
	return s.AppendEncode(make([]byte, 0, 96+len(s.ID)+len(s.Input)+len(s.Error))), nil
}

// AppendEncode appends Encode's encoding of s to dst.
func (s *Summary) AppendEncode(dst []byte) []byte {
	w := fsm.NewMapWriter(dst)
	w.Str("id", s.ID)
	w.Str("type", s.Type)
	w.Str("state", string(s.State))
	w.Str("machine", s.Machine)
	w.Str("source", s.Source)
	w.Int("priority", s.Priority)
	w.Time("created_at", s.CreatedAt)
	w.Time("updated_at", s.UpdatedAt)
	w.Int("iteration", s.Iteration)
	w.Uint64("events", s.Events)
	w.Uint64("seq", s.Seq)
	w.Str("input", s.Input)
	w.Str("error", s.Error)
	return w.Close()
}

// DecodeSummary decodes an encoding written by Summary.Encode.
func DecodeSummary(data []byte) (Summary, error) {
	var s Summary
	if err := unmarshal(data, &s); err != nil {
		return Summary{}, err
	}
	s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
	return s, nil
}

// Filter selects tasks for a list. Every set field must match; an empty
// list or a nil bound matches everything.
type Filter struct {
	States  []fsm.State `json:"states,omitempty"`
	Types   []string    `json:"types,omitempty"`
	Sources []string    `json:"sources,omitempty"`
	// Machines keeps tasks of these machines: NAME (any version, e.g.
	// dispatch.task) or NAME@VERSION.
	Machines []string `json:"machines,omitempty"`
	// Text keeps tasks whose id or input (as the summary holds it: its
	// first MaxSummaryText bytes) contains it, ignoring case.
	Text string `json:"text,omitempty"`
	// MinPriority and MaxPriority bound the priority, inclusive.
	MinPriority *int `json:"min_priority,omitempty"`
	MaxPriority *int `json:"max_priority,omitempty"`
	// CreatedFrom (inclusive) and CreatedTo (exclusive) bound the creation
	// time; zero means unbounded.
	CreatedFrom time.Time `json:"created_from,omitzero"`
	CreatedTo   time.Time `json:"created_to,omitzero"`
}

// Match reports whether s passes the filter.
func (f *Filter) Match(s *Summary) bool {
	if len(f.States) > 0 && !in(f.States, s.State) {
		return false
	}
	if len(f.Types) > 0 && !in(f.Types, s.Type) {
		return false
	}
	if len(f.Sources) > 0 && !in(f.Sources, s.Source) {
		return false
	}
	if len(f.Machines) > 0 && !slices.ContainsFunc(f.Machines, func(m string) bool {
		return m == s.Machine || strings.HasPrefix(s.Machine, m+"@")
	}) {
		return false
	}
	if f.Text != "" && !containsFold(s.Input, f.Text) && !containsFold(s.ID, f.Text) {
		return false
	}
	if f.MinPriority != nil && s.Priority < *f.MinPriority {
		return false
	}
	if f.MaxPriority != nil && s.Priority > *f.MaxPriority {
		return false
	}
	if !f.CreatedFrom.IsZero() && s.CreatedAt.Before(f.CreatedFrom) {
		return false
	}
	if !f.CreatedTo.IsZero() && !s.CreatedAt.Before(f.CreatedTo) {
		return false
	}
	return true
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func in[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// The queue order is one order over the tasks of every machine, the order
// in which they would be taken from one queue:
//
//  1. urgency, most urgent first: a pegasus.task's priority as it is (its
//     seed: lower value = higher priority), a dispatch.task's priority
//     negated (its seed: 0-10, higher = more urgent). Both default to 0,
//     so tasks at the default priority of either machine interleave by
//     age; a dispatch task of priority p ranks with pegasus tasks of
//     priority -p. Any other machine ranks like pegasus.task.
//  2. creation time, oldest first (the dispatch seed's created_at ASC; for
//     pegasus.task the admission queue's oldest-first tie break);
//  3. task id.
//
// Within one machine this is that machine's own queue order: the agent's
// admission order for pegasus.task, the broker's ORDER BY priority DESC,
// created_at ASC for dispatch.task. QueueKey encodes it as bytes that sort
// in that order, which is how the persisted queue index is kept.

// QueueUrgency returns the first component of the queue order for a task
// of machine (NAME or NAME@VERSION) at priority: lower is more urgent.
func QueueUrgency(machine string, priority int) int64 {
	if machine == fsm.DispatchMachineName || strings.HasPrefix(machine, fsm.DispatchMachineName+"@") {
		return -int64(priority)
	}
	return int64(priority)
}

// QueueKeyLen is the length of a QueueKey before the task id.
const QueueKeyLen = 8 + 8 + 4

// QueueKey returns the task's position in the queue order as bytes that
// compare in that order: urgency and creation time (seconds, nanoseconds),
// big-endian with the sign bit flipped, then the task id.
func (s *Summary) QueueKey() []byte {
	return s.AppendQueueKey(make([]byte, 0, QueueKeyLen+len(s.ID)))
}

// AppendQueueKey appends QueueKey's bytes to dst.
func (s *Summary) AppendQueueKey(dst []byte) []byte {
	return AppendQueueKey(dst, s.Machine, s.Priority, s.CreatedAt, s.ID)
}

// AppendQueueKey appends the QueueKey of a task to k: machine is NAME or
// NAME@VERSION.
func AppendQueueKey(k []byte, machine string, priority int, created time.Time, id string) []byte {
	k = binary.BigEndian.AppendUint64(k, uint64(QueueUrgency(machine, priority))^1<<63)
	k = binary.BigEndian.AppendUint64(k, uint64(created.Unix())^1<<63)
	k = binary.BigEndian.AppendUint32(k, uint32(created.Nanosecond()))
	return append(k, id...)
}

// QueueCompare orders summaries in the queue order (negative: a first).
func QueueCompare(a, b *Summary) int {
	if ua, ub := QueueUrgency(a.Machine, a.Priority), QueueUrgency(b.Machine, b.Priority); ua != ub {
		return cmp.Compare(ua, ub)
	}
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}
