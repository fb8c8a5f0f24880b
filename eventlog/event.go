package eventlog

import (
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
)

// Event is one entry of the log: an envelope the log understands and a body
// it does not.
type Event struct {
	// ID identifies the event forever. Set it to make an append idempotent
	// (a retry with the same ID writes nothing and returns the first
	// position); leave it zero to let the log assign a new, monotonic ULID.
	ID ulid.ULID
	// Seq is the global sequence, assigned by the log: gap-free from 1.
	// Ignored on append.
	Seq uint64
	// Stream is the task id, or a system stream such as "$inputs". On
	// append it is taken from the append's stream argument.
	Stream string
	// Version is the position in the stream, assigned by the log: gap-free
	// from 1 per stream. Ignored on append.
	Version uint64
	// Type is a stable type name such as "TASK_CREATED". Required.
	Type string
	// Time is when the event happened. Zero means the log's clock at commit.
	// Stored as unix nanoseconds and returned in UTC.
	Time time.Time
	// Causation is the ID of the event that caused this one; zero for an
	// external input. The causation index lists an event's children.
	Causation ulid.ULID
	// Correlation is the ID of the root of the causal chain. Zero on append
	// means: the causation's correlation if the causation is in the log (or
	// earlier in the same append), otherwise the event's own ID. So a root
	// event correlates to itself and its descendants inherit it.
	Correlation ulid.ULID
	// Schema is the body's schema version.
	Schema uint16
	// Metadata is small string data for operators (limits: MaxMetadata*).
	Metadata map[string]string
	// Body is the msgpack-encoded payload, opaque to the log.
	Body []byte
}

// ExpectedVersion is the optimistic-concurrency check of an append: Any, NoStream
// or Exactly(v).
type ExpectedVersion int64

const (
	// Any skips the check.
	Any ExpectedVersion = -1
	// NoStream requires the stream to be empty.
	NoStream ExpectedVersion = 0
)

// Exactly requires the stream's current version to be v. Exactly(0) is
// NoStream.
func Exactly(v uint64) ExpectedVersion { return ExpectedVersion(v) }

func (e ExpectedVersion) String() string {
	switch {
	case e == Any:
		return "any"
	case e == NoStream:
		return "no stream"
	case e < 0:
		return "invalid(" + strconv.FormatInt(int64(e), 10) + ")"
	default:
		return strconv.FormatInt(int64(e), 10)
	}
}

// AppendResult reports where an append landed.
type AppendResult struct {
	// FirstSeq and LastSeq are the global sequences of the first and last
	// appended events.
	FirstSeq, LastSeq uint64
	// Version is the stream's version after the append (the version of its
	// last event).
	Version uint64
	// Events are the appended events with ID, Seq, Version, Time and
	// Correlation filled in; their Body and Metadata are the ones the
	// caller passed (not copies). For an idempotent replay, they are the
	// events as first stored.
	Events []Event
}

// StreamAppend is one stream's part of an AppendMulti.
type StreamAppend struct {
	Stream   string
	Expected ExpectedVersion
	Events   []Event
}

// Direction is the order of a Scan.
type Direction int8

const (
	// Forward scans by increasing sequence.
	Forward Direction = iota
	// Backward scans by decreasing sequence.
	Backward
)
