package projection

import (
	"fmt"

	"github.com/pegasus-engine/pegasus/fsm"
)

// SystemStream is the stream that holds the daemon's lifecycle events:
// SYSTEM_STARTED and SYSTEM_STOPPED. The stats count them; no fold
// interprets their bodies.
const SystemStream = "$system"

// The system event types, appended to SystemStream by the agent when it
// starts and stops.
//
// Persisted: never change an existing value.
const (
	SystemStarted fsm.EventType = "SYSTEM_STARTED"
	SystemStopped fsm.EventType = "SYSTEM_STOPPED"
)

// SystemEventTypes lists the system event types in a stable order.
var SystemEventTypes = []fsm.EventType{SystemStarted, SystemStopped}

// SystemSchemaVersion is the body schema of the system events, stored in
// each event's envelope. DecodeSystem refuses any other.
//
// Persisted: bump it only for an incompatible change of a body.
const SystemSchemaVersion = 1

// SystemBody is the body of SYSTEM_STARTED and SYSTEM_STOPPED.
type SystemBody struct {
	// Kind is the event type (not stored: the envelope holds it).
	Kind fsm.EventType `msgpack:"-" json:"-"`
	// Model is the model the daemon runs with.
	Model string `msgpack:"model,omitempty" json:"model,omitempty"`
	// Config is, on SYSTEM_STARTED, the hash of the configuration file the
	// daemon runs under ("sha256:..."; secrets are not in it), empty
	// without one.
	Config string `msgpack:"config,omitempty" json:"config,omitempty"`
	// Head is the log's head sequence when the event was written.
	Head uint64 `msgpack:"head" json:"head"`
	// Resumed and Suspended count, on SYSTEM_STARTED, the tasks resumed
	// (they were reasoning or acting) and those found suspended.
	Resumed   int `msgpack:"resumed,omitempty" json:"resumed,omitempty"`
	Suspended int `msgpack:"suspended,omitempty" json:"suspended,omitempty"`
	// Clean is set on SYSTEM_STOPPED when every stage drained before the
	// shutdown deadline.
	Clean bool `msgpack:"clean,omitempty" json:"clean,omitempty"`
}

// EventType returns Kind, or SYSTEM_STARTED when Kind is empty.
func (b *SystemBody) EventType() fsm.EventType {
	if b.Kind == "" {
		return SystemStarted
	}
	return b.Kind
}

// EncodeSystem returns the canonical msgpack encoding of a system event
// body; append it with Schema SystemSchemaVersion and Type b.EventType().
func EncodeSystem(b *SystemBody) ([]byte, error) {
	if b == nil {
		return nil, fmt.Errorf("projection: encode: nil body")
	}
	return marshal(b)
}

// DecodeSystem decodes the body of a system event; an empty body is the
// zero body. An unknown type wraps fsm.ErrUnknownEvent, another schema
// fsm.ErrSchema, bad bytes ErrMalformed.
func DecodeSystem(et fsm.EventType, schema uint16, data []byte) (*SystemBody, error) {
	switch et {
	case SystemStarted, SystemStopped:
	default:
		return nil, fmt.Errorf("%w: %q", fsm.ErrUnknownEvent, et)
	}
	if schema != SystemSchemaVersion {
		return nil, fmt.Errorf("%w: %s schema %d (this build reads %d)", fsm.ErrSchema, et, schema, SystemSchemaVersion)
	}
	b := &SystemBody{}
	if len(data) > 0 {
		if err := unmarshal(data, b); err != nil {
			return nil, err
		}
	}
	b.Kind = et
	return b, nil
}
