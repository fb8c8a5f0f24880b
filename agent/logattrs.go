package agent

import (
	"log/slog"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Every log line about a task carries these typed attributes, with the
// same keys in text and JSON logs: task_id, machine ("name@N", as the API
// writes it; empty before TASK_CREATED) and, for a line about one event,
// event_id.

func taskIDAttr(id string) slog.Attr { return slog.String("task_id", id) }

func machineAttr(t *fsm.Task) slog.Attr { return machineRefAttr(t.Machine) }

func machineRefAttr(m fsm.MachineRef) slog.Attr {
	if m == (fsm.MachineRef{}) {
		return slog.String("machine", "")
	}
	return slog.String("machine", m.String())
}

func eventIDAttr(id ulid.ULID) slog.Attr { return slog.String("event_id", id.String()) }
