package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/internal/sse"
)

// TextFrame is a frame of a task's live model text on its stream
// (GET /v1/tasks/{id}/stream): a "delta" (a piece of Text of the
// attempt), or an "attempt_restarted" (Restart set: the attempt before
// Attempt failed, forget its text).
type TextFrame struct {
	Restart bool   `json:"-"`
	Call    string `json:"call"` // the id of the event the model call follows
	Attempt int    `json:"attempt"`
	Text    string `json:"text,omitempty"`
	Error   string `json:"error,omitempty"`
}

// FollowTask reads task id's stream from after global sequence afterSeq:
// onText gets each frame of live model text, onEvent (if not nil) each
// committed event, in the order the server sent them. It returns the
// first error a callback returns, ctx's error, or the stream's end
// (ErrStreamEnded); it does not reconnect.
func (c *Client) FollowTask(ctx context.Context, id string, afterSeq uint64, onText func(TextFrame) error, onEvent func(api.Event) error) error {
	path := "/v1/tasks/" + url.PathEscape(id) + "/stream"
	resp, err := c.openEventStream(ctx, ctx, path, url.Values{"after_seq": {strconv.FormatUint(afterSeq, 10)}}, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = sse.Read(ctx, resp.Body, maxEventLine, func(e sse.Event) error {
		switch e.Event {
		case "delta", "attempt_restarted":
			var f TextFrame
			if err := json.Unmarshal(e.Data, &f); err != nil {
				return fmt.Errorf("client: %s frame: %w", e.Event, err)
			}
			f.Restart = e.Event == "attempt_restarted"
			return onText(f)
		}
		if onEvent == nil {
			return nil
		}
		var ev api.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			return fmt.Errorf("client: event %s of the stream: %w", e.ID, err)
		}
		return onEvent(ev)
	})
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return ErrStreamEnded
}
