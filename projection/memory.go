package projection

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
)

// MemoryStream is the stream that holds long-term memory: facts by path and
// episodes. Memory lives in the log like everything else, so it replays.
const MemoryStream = "$memory"

// The memory event types, appended to MemoryStream by the agent's memory
// tools and by post-task reflection.
//
// Persisted: never change an existing value.
const (
	MemoryWritten   fsm.EventType = "MEMORY_WRITTEN"   // a fact's whole content
	MemoryPatched   fsm.EventType = "MEMORY_PATCHED"   // first occurrence of Old replaced by New
	MemoryAppended  fsm.EventType = "MEMORY_APPENDED"  // content added at the end of a fact
	EpisodeRecorded fsm.EventType = "EPISODE_RECORDED" // one episodic memory entry
)

// MemoryEventTypes lists the memory event types in a stable order.
var MemoryEventTypes = []fsm.EventType{MemoryWritten, MemoryPatched, MemoryAppended, EpisodeRecorded}

// MemorySchemaVersion is the body schema of the memory events, stored in
// each event's envelope. DecodeMemory refuses any other.
//
// Persisted: bump it only for an incompatible change of a body.
const MemorySchemaVersion = 1

// MemoryWrittenBody sets a fact's content, creating the fact if needed.
type MemoryWrittenBody struct {
	Path    string `msgpack:"path" json:"path"`
	Content string `msgpack:"content" json:"content"`
}

// MemoryPatchedBody replaces the first occurrence of Old by New in a fact.
// Content is the fact's content after the patch, as the writer computed it:
// folding uses Content, so a fold never fails and never depends on string
// semantics; verify checks that Content is what the replacement gives.
type MemoryPatchedBody struct {
	Path    string `msgpack:"path" json:"path"`
	Old     string `msgpack:"old" json:"old"`
	New     string `msgpack:"new" json:"new"`
	Content string `msgpack:"content" json:"content"`
}

// ErrPatchNoMatch is returned by NewMemoryPatch when the text to replace
// is empty or not in the fact.
var ErrPatchNoMatch = errors.New("projection: the text to replace is not in the fact")

// NewMemoryPatch builds the body of a MEMORY_PATCHED that replaces the
// first occurrence of old by new in current (the fact's content now, from
// the memory projection), recording the result as verify expects it. The
// memory_patch tool calls it and appends nothing when it fails.
func NewMemoryPatch(path, current, old, new string) (*MemoryPatchedBody, error) {
	if old == "" || !strings.Contains(current, old) {
		return nil, fmt.Errorf("%w: %q", ErrPatchNoMatch, path)
	}
	return &MemoryPatchedBody{Path: path, Old: old, New: new, Content: strings.Replace(current, old, new, 1)}, nil
}

// MemoryAppendedBody adds Content verbatim at the end of a fact (creating
// it if needed). The writer supplies any separator, a newline say.
type MemoryAppendedBody struct {
	Path    string `msgpack:"path" json:"path"`
	Content string `msgpack:"content" json:"content"`
}

// EpisodeRecordedBody is one episodic memory entry, usually written by
// post-task reflection about the task TaskID.
type EpisodeRecordedBody struct {
	Title   string `msgpack:"title" json:"title"`
	Summary string `msgpack:"summary" json:"summary"`
	Details string `msgpack:"details" json:"details"`
	Lesson  string `msgpack:"lesson" json:"lesson"`
	TaskID  string `msgpack:"task_id" json:"task_id,omitempty"`
}

func (*MemoryWrittenBody) EventType() fsm.EventType   { return MemoryWritten }
func (*MemoryPatchedBody) EventType() fsm.EventType   { return MemoryPatched }
func (*MemoryAppendedBody) EventType() fsm.EventType  { return MemoryAppended }
func (*EpisodeRecordedBody) EventType() fsm.EventType { return EpisodeRecorded }

// EncodeMemory returns the canonical msgpack encoding of a memory event
// body; append it with Schema MemorySchemaVersion and Type b.EventType().
func EncodeMemory(b fsm.Body) ([]byte, error) {
	switch v := b.(type) {
	case *MemoryWrittenBody:
		if v != nil {
			return marshal(v)
		}
	case *MemoryPatchedBody:
		if v != nil {
			return marshal(v)
		}
	case *MemoryAppendedBody:
		if v != nil {
			return marshal(v)
		}
	case *EpisodeRecordedBody:
		if v != nil {
			return marshal(v)
		}
	default:
		return nil, fmt.Errorf("%w: %T is not a memory body", fsm.ErrUnknownEvent, b)
	}
	return nil, fmt.Errorf("projection: encode: nil body")
}

// DecodeMemory decodes the body of a memory event. An unknown type wraps
// fsm.ErrUnknownEvent, another schema fsm.ErrSchema, bad bytes ErrMalformed.
func DecodeMemory(et fsm.EventType, schema uint16, data []byte) (fsm.Body, error) {
	var b fsm.Body
	switch et {
	case MemoryWritten:
		b = &MemoryWrittenBody{}
	case MemoryPatched:
		b = &MemoryPatchedBody{}
	case MemoryAppended:
		b = &MemoryAppendedBody{}
	case EpisodeRecorded:
		b = &EpisodeRecordedBody{}
	default:
		return nil, fmt.Errorf("%w: %q", fsm.ErrUnknownEvent, et)
	}
	if schema != MemorySchemaVersion {
		return nil, fmt.Errorf("%w: %s schema %d (this build reads %d)", fsm.ErrSchema, et, schema, MemorySchemaVersion)
	}
	if len(data) > 0 && (data[0]&0xf0 == 0x90 || data[0] == 0xdc || data[0] == 0xdd) {
		// A struct written as an array, which no encoder of the project
		// writes: msgpack's reflection reads it by position.
		if err := unmarshal(data, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	if err := codec.CheckShape(data); err != nil {
		return nil, fmt.Errorf("%w: %T: %v", ErrMalformed, b, err)
	}
	if err := fsm.DecodeStringFields(data, memoryField(b)); err != nil {
		return nil, fmt.Errorf("%w: %T: %v", ErrMalformed, b, err)
	}
	return b, nil
}

// memoryField says where each key of b's encoding goes: its fields are
// strings, decoded by hand (fsm.DecodeStringFields) rather than by
// msgpack's reflection, as the fold decodes a task's bodies.
// TestDecodeMemoryMatchesReflection compares the two on random bodies.
func memoryField(b fsm.Body) func(string) *string {
	switch v := b.(type) {
	case *MemoryWrittenBody:
		return pathContent(&v.Path, &v.Content)
	case *MemoryPatchedBody:
		return func(k string) *string {
			switch k {
			case "path":
				return &v.Path
			case "old":
				return &v.Old
			case "new":
				return &v.New
			case "content":
				return &v.Content
			}
			return nil
		}
	case *MemoryAppendedBody:
		return pathContent(&v.Path, &v.Content)
	case *EpisodeRecordedBody:
		return func(k string) *string {
			switch k {
			case "title":
				return &v.Title
			case "summary":
				return &v.Summary
			case "details":
				return &v.Details
			case "lesson":
				return &v.Lesson
			case "task_id":
				return &v.TaskID
			}
			return nil
		}
	}
	return func(string) *string { return nil }
}

// pathContent is memoryField for a body of a path and a content.
func pathContent(path, content *string) func(string) *string {
	return func(k string) *string {
		switch k {
		case "path":
			return path
		case "content":
			return content
		}
		return nil
	}
}

// Fact is one long-term memory fact as the memory projection serves it.
type Fact struct {
	Path      string    `msgpack:"path" json:"path"`
	Content   string    `msgpack:"content" json:"content"`
	CreatedAt time.Time `msgpack:"created_at" json:"created_at"`
	UpdatedAt time.Time `msgpack:"updated_at" json:"updated_at"`
	Seq       uint64    `msgpack:"seq" json:"seq"`           // the last event that changed it
	Revision  int       `msgpack:"revision" json:"revision"` // how many events changed it
}

// Episode is one episodic memory entry.
type Episode struct {
	ID         ulid.ULID `msgpack:"id" json:"id"` // the EPISODE_RECORDED event
	Title      string    `msgpack:"title" json:"title"`
	Summary    string    `msgpack:"summary" json:"summary"`
	Details    string    `msgpack:"details" json:"details"`
	Lesson     string    `msgpack:"lesson" json:"lesson"`
	TaskID     string    `msgpack:"task_id" json:"task_id,omitempty"`
	RecordedAt time.Time `msgpack:"recorded_at" json:"recorded_at"`
	Seq        uint64    `msgpack:"seq" json:"seq"`
}

// Memory is the memory projection: facts by path and episodes in the order
// they were recorded. It holds everything in memory (long-term memory is
// curated by the agent) and records what changed since the last
// checkpoint, so that a checkpoint writes only the changed facts and the
// new episodes, one key each, however large memory grows.
type Memory struct {
	facts    map[string]Fact
	episodes []Episode

	changed     map[string]struct{} // facts changed since ClearChanges
	newEpisodes int                 // episodes appended since ClearChanges
	bytes       int64               // estimated memory held (see Bytes)
}

// NewMemory returns an empty memory projection.
func NewMemory() *Memory { return &Memory{facts: map[string]Fact{}, changed: map[string]struct{}{}} }

// RestoreMemory rebuilds the projection from persisted facts and episodes
// (in recorded order), with no pending changes.
func RestoreMemory(facts []Fact, episodes []Episode) *Memory {
	m := NewMemory()
	for _, f := range facts {
		m.facts[f.Path] = f
		m.bytes += factBytes(&f)
	}
	m.episodes = episodes
	for i := range episodes {
		m.bytes += episodeBytes(&episodes[i])
	}
	return m
}

// Bytes estimates the memory the projection holds. Long-term memory is
// held in full: it is what the agent reads on every task.
func (m *Memory) Bytes() int64 { return m.bytes }

// Changes returns the facts changed (by path) and the episodes recorded
// since the last ClearChanges, as copies: the fold may go on while they
// are written.
func (m *Memory) Changes() (facts []Fact, episodes []Episode) {
	for p := range m.changed {
		facts = append(facts, m.facts[p])
	}
	sort.Slice(facts, func(i, j int) bool { return facts[i].Path < facts[j].Path })
	return facts, append([]Episode(nil), m.episodes[len(m.episodes)-m.newEpisodes:]...)
}

// ClearChanges forgets the changes made by events up to seq, once they are
// persisted. Changes made after seq (folded while the checkpoint was
// written) stay pending.
func (m *Memory) ClearChanges(seq uint64) {
	for p := range m.changed {
		if m.facts[p].Seq <= seq {
			delete(m.changed, p)
		}
	}
	n := 0
	for i := len(m.episodes) - 1; i >= len(m.episodes)-m.newEpisodes && m.episodes[i].Seq > seq; i-- {
		n++
	}
	m.newEpisodes = n
}

// PatchMismatchError reports a MEMORY_PATCHED whose recorded Content is not
// what replacing Old by New in the fact gives. The fold applied Content
// anyway (the body is the truth); verify reports the event.
type PatchMismatchError struct {
	Path   string
	Reason string
}

func (e *PatchMismatchError) Error() string {
	return fmt.Sprintf("projection: MEMORY_PATCHED %q: %s", e.Path, e.Reason)
}

// Apply folds one event of MemoryStream. It returns an error for an event
// it cannot apply (unknown type, missing body, empty path), leaving memory
// unchanged, and a *PatchMismatchError for a patch it applied whose body
// disagrees with itself.
func (m *Memory) Apply(ev fsm.Event) error {
	at := ev.Time.UTC()
	set := func(path, content string) {
		f, ok := m.facts[path]
		if !ok {
			f = Fact{Path: path, CreatedAt: at}
		} else {
			m.bytes -= factBytes(&f)
		}
		f.Content = content
		f.UpdatedAt = at
		f.Seq = ev.Seq
		f.Revision++
		m.facts[path] = f
		m.bytes += factBytes(&f)
		m.changed[path] = struct{}{}
	}
	switch b := ev.Body.(type) {
	case *MemoryWrittenBody:
		if err := checkMemory(ev, b, b.Path); err != nil {
			return err
		}
		set(b.Path, b.Content)
	case *MemoryAppendedBody:
		if err := checkMemory(ev, b, b.Path); err != nil {
			return err
		}
		set(b.Path, m.facts[b.Path].Content+b.Content)
	case *MemoryPatchedBody:
		if err := checkMemory(ev, b, b.Path); err != nil {
			return err
		}
		prev, existed := m.facts[b.Path]
		set(b.Path, b.Content)
		switch {
		case !existed:
			return &PatchMismatchError{Path: b.Path, Reason: "patches a fact that does not exist"}
		case b.Old == "" || !strings.Contains(prev.Content, b.Old):
			return &PatchMismatchError{Path: b.Path, Reason: "old text is not in the fact"}
		case strings.Replace(prev.Content, b.Old, b.New, 1) != b.Content:
			return &PatchMismatchError{Path: b.Path, Reason: "recorded content is not the replacement's result"}
		}
	case *EpisodeRecordedBody:
		if err := checkMemory(ev, b, "-"); err != nil {
			return err
		}
		m.episodes = append(m.episodes, Episode{
			ID: ev.ID, Title: b.Title, Summary: b.Summary, Details: b.Details, Lesson: b.Lesson,
			TaskID: b.TaskID, RecordedAt: at, Seq: ev.Seq,
		})
		m.bytes += episodeBytes(&m.episodes[len(m.episodes)-1])
		m.newEpisodes++
	default:
		if ev.Body == nil {
			return fmt.Errorf("projection: %s on %s: missing body", ev.Type, MemoryStream)
		}
		return fmt.Errorf("%w: %q on %s", fsm.ErrUnknownEvent, ev.Type, MemoryStream)
	}
	return nil
}

// checkMemory refuses a typed-nil body, a body for another type and an
// empty path.
func checkMemory(ev fsm.Event, b fsm.Body, path string) error {
	switch {
	case isNilMemoryBody(b):
		return fmt.Errorf("projection: %s: missing body", ev.Type)
	case b.EventType() != ev.Type:
		return fmt.Errorf("projection: %s: body is for %s", ev.Type, b.EventType())
	case path == "":
		return fmt.Errorf("projection: %s: empty path", ev.Type)
	}
	return nil
}

func isNilMemoryBody(b fsm.Body) bool {
	switch v := b.(type) {
	case *MemoryWrittenBody:
		return v == nil
	case *MemoryPatchedBody:
		return v == nil
	case *MemoryAppendedBody:
		return v == nil
	case *EpisodeRecordedBody:
		return v == nil
	}
	return false
}

// Fact returns the fact at path.
func (m *Memory) Fact(path string) (Fact, bool) {
	f, ok := m.facts[path]
	return f, ok
}

// Facts returns the facts whose path starts with prefix ("" for all),
// sorted by path.
func (m *Memory) Facts(prefix string) []Fact {
	out := make([]Fact, 0, len(m.facts))
	for p, f := range m.facts {
		if strings.HasPrefix(p, prefix) {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Episodes returns every episode in the order recorded. The slice is the
// caller's; the entries are values.
func (m *Memory) Episodes() []Episode { return append([]Episode(nil), m.episodes...) }

// Encode returns the canonical encoding of one fact, as persisted.
func (f *Fact) Encode() ([]byte, error) { return marshal(f) }

// DecodeFact decodes an encoding written by Fact.Encode.
func DecodeFact(data []byte) (Fact, error) {
	var f Fact
	if err := unmarshal(data, &f); err != nil {
		return Fact{}, err
	}
	f.CreatedAt, f.UpdatedAt = f.CreatedAt.UTC(), f.UpdatedAt.UTC()
	return f, nil
}

// Encode returns the canonical encoding of one episode, as persisted.
func (e *Episode) Encode() ([]byte, error) { return marshal(e) }

// DecodeEpisode decodes an encoding written by Episode.Encode.
func DecodeEpisode(data []byte) (Episode, error) {
	var e Episode
	if err := unmarshal(data, &e); err != nil {
		return Episode{}, err
	}
	e.RecordedAt = e.RecordedAt.UTC()
	return e, nil
}

// Len returns the number of facts and episodes.
func (m *Memory) Len() (facts, episodes int) { return len(m.facts), len(m.episodes) }

// memoryState is the persisted form of Memory.
type memoryState struct {
	Facts    []Fact    `msgpack:"facts"`
	Episodes []Episode `msgpack:"episodes"`
}

// Encode returns the canonical encoding of the whole memory projection,
// which the equivalence tests and verify compare.
func (m *Memory) Encode() ([]byte, error) {
	return marshal(&memoryState{Facts: m.Facts(""), Episodes: m.episodes})
}

// DecodeMemoryState decodes an encoding written by Memory.Encode.
func DecodeMemoryState(data []byte) (*Memory, error) {
	var s memoryState
	if err := unmarshal(data, &s); err != nil {
		return nil, err
	}
	m := NewMemory()
	for _, f := range s.Facts {
		f.CreatedAt, f.UpdatedAt = f.CreatedAt.UTC(), f.UpdatedAt.UTC()
		m.facts[f.Path] = f
	}
	for i := range s.Episodes {
		s.Episodes[i].RecordedAt = s.Episodes[i].RecordedAt.UTC()
	}
	m.episodes = s.Episodes
	return m, nil
}
