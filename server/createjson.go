package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/pegasus-engine/pegasus/broker"
)

// A broker create's body (POST /api/v1/tasks, and each item of a batch) is
// decoded here by hand in the common case: a valid JSON object whose
// members are the request's fields, each once, spelled exactly. Plain
// strings (no escapes), integers of up to 18 digits, booleans, null and
// arrays of plain strings are read directly; any other value of a known
// field (an escaped string, metadata, a time) is given to encoding/json
// alone. Anything else (an unknown or misspelled field, a field twice, a
// value of the wrong type) makes the decoder give up, and the caller
// decodes the whole body with encoding/json as before, which refuses it
// with its usual message. The values are those encoding/json gives
// (TestCreateDecodedAsEncodingJSON).

// fastDecoder is a body type with a decoder of its own for the common case.
// decodeFast reports whether it decoded obj, a JSON value already known to
// be valid; when it did not, it leaves the value zero.
type fastDecoder interface {
	decodeFast(obj []byte) bool
}

// createBody is a single broker create's body.
type createBody broker.CreateRequest

func (c *createBody) decodeFast(obj []byte) bool {
	return decodeCreate(obj, (*broker.CreateRequest)(c), nil)
}

// brokerItem is a broker batch's item: a create's body and its key.
type brokerItem struct {
	broker.CreateRequest
	batchKey
}

func (it *brokerItem) decodeFast(obj []byte) bool {
	return decodeCreate(obj, &it.CreateRequest, &it.IdempotencyKey)
}

// createFields are the JSON names of a create's fields, in the order of
// decodeCreate's switch; idempotency_key is a batch item's.
var createFields = [...]string{"title", "description", "owner", "required_capabilities", "priority",
	"timeout_seconds", "max_retries", "retry_eligible", "source", "parent_task_id", "metadata", "run_at",
	"delay_seconds", "heartbeat_seconds", "retry_backoff_seconds", "concurrency_key", "idempotency_key"}

const idempotencyField = len(createFields) - 1

var errNotFast = errors.New("not decoded by hand")

// decodeCreate decodes obj into req and, when key is not nil, its
// idempotency key (see fastDecoder).
func decodeCreate(obj []byte, req *broker.CreateRequest, key *string) bool {
	if len(obj) == 0 || obj[0] != '{' {
		return false
	}
	var seen uint32
	err := eachMember(obj, func(name string, v []byte) error {
		f := -1
		for i, n := range createFields {
			if n == name {
				f = i
				break
			}
		}
		if f < 0 || (f == idempotencyField && key == nil) || seen&(1<<f) != 0 {
			return errNotFast
		}
		seen |= 1 << f
		switch f {
		case 0:
			return jsonString(v, &req.Title)
		case 1:
			return jsonString(v, &req.Description)
		case 2:
			return jsonString(v, &req.Owner)
		case 3:
			return jsonStrings(v, &req.RequiredCapabilities)
		case 4:
			return jsonInt(v, &req.Priority)
		case 5:
			return jsonIntPtr(v, &req.TimeoutSeconds)
		case 6:
			return jsonIntPtr(v, &req.MaxRetries)
		case 7:
			return jsonBoolPtr(v, &req.RetryEligible)
		case 8:
			return jsonString(v, &req.Source)
		case 9:
			return jsonString(v, &req.ParentTaskID)
		case 10:
			return json.Unmarshal(v, &req.Metadata)
		case 11:
			return json.Unmarshal(v, &req.RunAt)
		case 12:
			return jsonInt(v, &req.DelaySeconds)
		case 13:
			return jsonInt(v, &req.HeartbeatSeconds)
		case 14:
			return jsonInt(v, &req.RetryBackoffSeconds)
		case 15:
			return jsonString(v, &req.ConcurrencyKey)
		default:
			return jsonString(v, key)
		}
	})
	if err != nil {
		*req = broker.CreateRequest{}
		if key != nil {
			*key = ""
		}
		return false
	}
	return true
}

var jsonNull = []byte("null")

// plainString is the text of v, a JSON string without escapes in valid
// UTF-8 (as encoding/json gives it), or false.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	in := v[1 : len(v)-1]
	if bytes.IndexByte(in, '\\') >= 0 || !utf8.Valid(in) {
		return "", false
	}
	return string(in), true
}

func jsonString(v []byte, dst *string) error {
	if s, ok := plainString(v); ok {
		*dst = s
		return nil
	}
	if bytes.Equal(v, jsonNull) {
		return nil
	}
	return json.Unmarshal(v, dst)
}

func jsonStrings(v []byte, dst *[]string) error {
	if bytes.Equal(v, jsonNull) {
		*dst = nil
		return nil
	}
	if len(v) > 0 && v[0] == '[' {
		out := []string{}
		plain := true
		for e := range eachElement(v) {
			s, ok := plainString(e)
			if !ok {
				plain = false
				break
			}
			out = append(out, s)
		}
		if plain {
			*dst = out
			return nil
		}
	}
	return json.Unmarshal(v, dst)
}

// plainInt is v, an integer of 1 to 18 digits with an optional minus, or
// false.
func plainInt(v []byte) (int, bool) {
	digits := v
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if len(digits) < len(v) {
		n = -n
	}
	return n, true
}

func jsonInt(v []byte, dst *int) error {
	if n, ok := plainInt(v); ok {
		*dst = n
		return nil
	}
	if bytes.Equal(v, jsonNull) {
		return nil
	}
	return json.Unmarshal(v, dst)
}

func jsonIntPtr(v []byte, dst **int) error {
	if n, ok := plainInt(v); ok {
		*dst = &n
		return nil
	}
	return json.Unmarshal(v, dst)
}

func jsonBoolPtr(v []byte, dst **bool) error {
	switch string(v) {
	case "true", "false":
		b := v[0] == 't'
		*dst = &b
		return nil
	}
	return json.Unmarshal(v, dst)
}

// decodeItemsFast is decodeItemsAtOnce for item types with a decoder of
// their own.
func decodeItemsFast[T any](data []byte) ([]T, bool) {
	if !json.Valid(data) {
		return nil, false
	}
	var raw []byte
	members := 0
	_ = eachMember(data, func(key string, v []byte) error {
		members++
		if key == "tasks" {
			raw = v
		}
		return nil
	})
	if members != 1 || len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	items := make([]T, 0, min(bytes.Count(raw, []byte("{")), maxBatch))
	for e := range eachElement(raw) {
		if len(items) == maxBatch {
			return nil, false
		}
		var zero T
		items = append(items, zero)
		if !any(&items[len(items)-1]).(fastDecoder).decodeFast(e) {
			return nil, false
		}
	}
	return items, len(items) > 0
}
