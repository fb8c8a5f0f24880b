package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/pegasus-engine/pegasus/agent"
)

// taskStream serves one task as Server-Sent Events: its committed events,
// as GET /v1/events/stream?stream= does (ids are sequences, so
// Last-Event-ID resumes), and between them the live text of its model
// calls: "delta" frames ({call, attempt, text}) as the model streams, and
// "attempt_restarted" ({call, attempt, error}) when an attempt failed and
// the next one starts over. These frames have no id: they are not in the
// log. A client that connects in the middle of a call first gets the
// current attempt's text so far; a finished call's text is in its
// MODEL_CALLED event.
func (s *Server) taskStream(w http.ResponseWriter, r *http.Request) *apiError {
	t, q, e := s.lookup(r, "after_seq")
	if e != nil {
		return e
	}
	live := s.a.SubscribeDeltas(t.ID)
	defer live.Close()
	return s.serveEvents(w, r, q, t.ID, live)
}

// deltaFrame is the data of a "delta" or "attempt_restarted" frame.
type deltaFrame struct {
	Call    string `json:"call"`
	Attempt int    `json:"attempt"`
	Text    string `json:"text,omitempty"`
	Error   string `json:"error,omitempty"`
}

// deltaFrames renders frames into buf (reset first) and returns its
// bytes.
func deltaFrames(buf *bytes.Buffer, frames []agent.DeltaFrame) []byte {
	buf.Reset()
	for _, f := range frames {
		name := "delta"
		if f.Restart {
			name = "attempt_restarted"
		}
		data, _ := json.Marshal(deltaFrame{Call: f.Call, Attempt: f.Attempt, Text: f.Text, Error: f.Error})
		fmt.Fprintf(buf, "event: %s\ndata: %s\n\n", name, data)
	}
	return buf.Bytes()
}
