package server

import (
	"net/http"

	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/traces"
)

// taskTrace serves GET /v1/tasks/{id}/trace?contents=: the spans of the
// task and of the tasks it caused (traces.Build over
// replay.TraceEvents), the task's span first. contents=true adds prompt
// and completion contents and tool arguments and results.
func (s *Server) taskTrace(w http.ResponseWriter, r *http.Request) *apiError {
	t, q, e := s.lookup(r, "contents")
	if e != nil {
		return e
	}
	var opt traces.Options
	switch q.Get("contents") {
	case "", "false":
	case "true":
		opt.Contents = true
	default:
		return errBadRequest("contents %q: want true or false", q.Get("contents"))
	}
	evs, err := replay.TraceEvents(r.Context(), s.history, t.ID)
	if err != nil {
		return s.fromError(err)
	}
	spans := traces.ToJSON(traces.Build(evs, opt))
	out := map[string]any{"task_id": t.ID, "spans": spans}
	if len(spans) > 0 {
		out["trace_id"] = spans[0].TraceID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
