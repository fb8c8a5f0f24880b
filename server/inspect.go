package server

import (
	"net/http"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/replay"
)

// taskState serves GET /v1/tasks/{id}/state?at=: the task as it was at a
// sequence, an event id or an RFC 3339 time, folded by replay.StateAt as
// `pegasus-replay state --at` does. Without at, the task now.
func (s *Server) taskState(w http.ResponseWriter, r *http.Request) *apiError {
	t, q, e := s.lookup(r, "at")
	if e != nil {
		return e
	}
	var b replay.Bound
	if at := q.Get("at"); at != "" {
		var err error
		if b, err = replay.ParseBound(at); err != nil {
			return errBadRequest("at %q: give a sequence, an event id or an RFC 3339 time", at)
		}
	}
	past, err := replay.StateAt(r.Context(), s.history, t.ID, b)
	if err != nil {
		return s.fromError(err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"at": b.String(), "task": s.taskJSON(&past, true)})
	return nil
}

// WhyNode is one event of a causation tree: its envelope, without bodies.
type WhyNode struct {
	Seq      uint64     `json:"seq"`
	ID       string     `json:"id"`
	Stream   string     `json:"stream"`
	Type     string     `json:"type"`
	Time     time.Time  `json:"time"`
	Children []*WhyNode `json:"children,omitempty"`
}

func toWhyNode(n *replay.Node) *WhyNode {
	if n == nil {
		return nil
	}
	out := &WhyNode{Seq: n.Event.Seq, ID: n.Event.ID.String(), Stream: n.Event.Stream, Type: n.Event.Type, Time: n.Event.Time}
	for _, c := range n.Children {
		out.Children = append(out.Children, toWhyNode(c))
	}
	return out
}

// taskWhy serves GET /v1/tasks/{id}/why?max_nodes=: the causal chain from
// the task's creation up to its root input, and the tree of everything that
// root led to, as `pegasus-replay why` shows them.
func (s *Server) taskWhy(w http.ResponseWriter, r *http.Request) *apiError {
	t, q, e := s.lookup(r, "max_nodes")
	if e != nil {
		return e
	}
	maxNodes, e := intParam(q, "max_nodes", 1000, 1, replay.DefaultMaxNodes)
	if e != nil {
		return e
	}
	why, err := replay.Explain(r.Context(), s.history, t.ID, maxNodes)
	if err != nil {
		return s.fromError(err)
	}
	chain := make([]eventJSON, 0, len(why.Chain))
	for _, ev := range why.Chain {
		chain = append(chain, toEventJSON(ev))
	}
	missing := ""
	if why.Missing != (ulid.ULID{}) {
		missing = why.Missing.String()
	}
	out := map[string]any{"task_id": t.ID, "chain": chain, "missing": missing,
		"tree": toWhyNode(why.Tree), "truncated": why.Truncated}
	if why.Decisions != nil {
		out["decisions"] = why.Decisions // a broker task's decisions, worded
	}
	if w, ok := s.a.(admissionWaiter); ok {
		if reason, waits := w.AdmissionWait(t.ID); waits {
			out["waiting"] = reason // "waiting: key acme has 4 of 4 running"
		}
	}
	s.budgetWhy(&t, out)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// admissionWaiter is an Agent that says why a task waits for an admission
// slot (*agent.Agent does).
type admissionWaiter interface {
	AdmissionWait(id string) (string, bool)
}

var _ admissionWaiter = (*agent.Agent)(nil)
