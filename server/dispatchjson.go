package server

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// A dispatch task is the answer of every broker route and, in a batch, a
// hundred times over: DispatchJSON is encoded by hand here, into the same
// bytes writeJSON's encoder (encoding/json, HTML left unescaped) writes
// (TestDispatchJSONAsEncodingJSON), without its reflection. What is rare
// (a string that needs escapes, metadata, a result, a time beyond year
// 9999) goes through encoding/json itself.

// jsonAppender is a value writeJSON encodes by appending its JSON, with
// no trailing newline, to the buffer's.
type jsonAppender interface {
	appendJSON(o *jsonOut)
}

// jsonOut is JSON being appended, and the first error of a value
// encoding/json refused.
type jsonOut struct {
	b   []byte
	err error
}

func (j DispatchJSON) appendJSON(o *jsonOut) {
	o.raw(`{"task_id":`)
	o.str(j.TaskID)
	o.raw(`,"title":`)
	o.str(j.Title)
	o.raw(`,"description":`)
	o.str(j.Description)
	o.raw(`,"owner":`)
	o.str(j.Owner)
	o.raw(`,"required_capabilities":`)
	o.strs(j.RequiredCapabilities)
	o.raw(`,"status":`)
	o.str(string(j.Status))
	o.raw(`,"assigned_agent":`)
	o.str(j.AssignedAgent)
	o.raw(`,"created_at":`)
	o.time(j.CreatedAt)
	o.timeOmitZero(`,"assigned_at":`, j.AssignedAt)
	o.timeOmitZero(`,"started_at":`, j.StartedAt)
	o.timeOmitZero(`,"completed_at":`, j.CompletedAt)
	o.raw(`,"updated_at":`)
	o.time(j.UpdatedAt)
	o.raw(`,"result":`)
	if j.Result == nil || string(j.Result) == "null" {
		o.raw("null")
	} else {
		o.std(j.Result)
	}
	o.raw(`,"error":`)
	o.str(j.Error)
	o.int(`,"retry_count":`, j.RetryCount)
	o.int(`,"max_retries":`, j.MaxRetries)
	o.bool(`,"retry_eligible":`, j.RetryEligible)
	o.int(`,"timeout_seconds":`, j.TimeoutSeconds)
	o.int(`,"priority":`, j.Priority)
	o.raw(`,"source":`)
	o.str(j.Source)
	o.raw(`,"parent_task_id":`)
	o.str(j.ParentTaskID)
	o.raw(`,"metadata":`)
	switch {
	case j.Metadata == nil:
		o.raw("null")
	case len(j.Metadata) == 0:
		o.raw("{}")
	default:
		o.std(j.Metadata)
	}
	o.bool(`,"dead_lettered":`, j.DeadLettered)
	o.strOmitEmpty(`,"dead_letter_reason":`, j.DeadLetterReason)
	o.strOmitEmpty(`,"timeout_reason":`, j.TimeoutReason)
	o.timeOmitZero(`,"run_at":`, j.RunAt)
	o.int(`,"heartbeat_seconds":`, j.HeartbeatSeconds)
	o.int(`,"retry_backoff_seconds":`, j.RetryBackoffSeconds)
	o.strOmitEmpty(`,"concurrency_key":`, j.ConcurrencyKey)
	o.timeOmitZero(`,"deadline":`, j.Deadline)
	o.strOmitEmpty(`,"progress":`, j.Progress)
	o.raw(`,"version":`)
	o.b = strconv.AppendUint(o.b, j.Version, 10)
	if len(j.Children) > 0 {
		o.raw(`,"children":`)
		o.strs(j.Children)
	}
	o.raw("}")
}

func (o *jsonOut) raw(s string) { o.b = append(o.b, s...) }

// str appends s as encoding/json writes it with HTML left unescaped: a
// string of printable ASCII without quote or backslash as it is, any
// other through encoding/json.
func (o *jsonOut) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			o.std(s)
			return
		}
	}
	o.b = append(o.b, '"')
	o.b = append(o.b, s...)
	o.b = append(o.b, '"')
}

func (o *jsonOut) strOmitEmpty(key, s string) {
	if s != "" {
		o.raw(key)
		o.str(s)
	}
}

func (o *jsonOut) strs(ss []string) {
	if ss == nil {
		o.raw("null")
		return
	}
	o.raw("[")
	for i, s := range ss {
		if i > 0 {
			o.raw(",")
		}
		o.str(s)
	}
	o.raw("]")
}

func (o *jsonOut) int(key string, n int) {
	o.raw(key)
	o.b = strconv.AppendInt(o.b, int64(n), 10)
}

func (o *jsonOut) bool(key string, v bool) {
	o.raw(key)
	o.b = strconv.AppendBool(o.b, v)
}

// time appends t as time.Time's MarshalJSON writes it (RFC 3339 with
// nanoseconds), through it when the year is beyond its range.
func (o *jsonOut) time(t time.Time) {
	if y := t.Year(); y < 0 || y > 9999 {
		o.std(t)
		return
	}
	o.b = append(o.b, '"')
	o.b = t.AppendFormat(o.b, time.RFC3339Nano)
	o.b = append(o.b, '"')
}

func (o *jsonOut) timeOmitZero(key string, t time.Time) {
	if !t.IsZero() {
		o.raw(key)
		o.time(t)
	}
}

// std appends v as writeJSON's encoder writes it.
func (o *jsonOut) std(v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		if o.err == nil {
			o.err = err
		}
		return
	}
	o.b = append(o.b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
