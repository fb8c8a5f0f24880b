package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/internal/sse"
)

// StreamOptions say where an event stream starts and what it keeps.
type StreamOptions struct {
	// AfterSeq starts the stream right after this global sequence (0:
	// from the log's first event).
	AfterSeq uint64
	// Stream keeps the events of one stream only: a task id, "$inputs",
	// ... Empty: every event.
	Stream string
}

// maxEventLine bounds one line of the event stream: an event in its JSON
// form, with its body in base64 (replay.MaxExportLine).
const maxEventLine = 64 << 20

// Subscription is a live stream of the log's events
// (GET /v1/events/stream, Server-Sent Events). When the connection drops
// it reconnects with Last-Event-ID, the sequence of the last event it
// returned, so no event is lost or returned twice; after MaxAttempts
// consecutive connections that failed, or ended before an event, it gives
// up. It is not safe for
// concurrent use.
type Subscription struct {
	c      *Client
	opts   StreamOptions
	last   uint64 // the sequence of the last event returned
	body   io.ReadCloser
	events chan sseResult
	cancel context.CancelFunc
	fails  int
}

type sseResult struct {
	ev  sse.Event
	err error // nil with ev.Data nil: the stream ended
}

// Subscribe opens an event stream. Read it with Next; Close it when done.
// The server sends an event only once its reads reflect it: a task read
// after Next returned one of its events includes that event.
func (c *Client) Subscribe(opts StreamOptions) *Subscription {
	return &Subscription{c: c, opts: opts, last: opts.AfterSeq}
}

// LastSeq is the sequence of the last event Next returned (or
// StreamOptions.AfterSeq): where a new subscription would resume.
func (s *Subscription) LastSeq() uint64 { return s.last }

// Next returns the next event, waiting for it, or an error: ctx's, a
// refusal of the server (an *Error: ErrBeyondHead when the resume
// position is past the log's head), or, once MaxAttempts connections in
// a row failed or ended without an event (with MaxAttempts 1: the first
// time the stream ends), the last connection error or ErrStreamEnded
// (which wraps the read error of a broken stream).
func (s *Subscription) Next(ctx context.Context) (api.Event, error) {
	for {
		if s.events == nil {
			if err := s.connect(ctx); err != nil {
				var e *Error
				if errors.As(err, &e) && !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
					return api.Event{}, err
				}
				if s.fails++; s.fails >= s.c.opts.MaxAttempts {
					return api.Event{}, err
				}
				if err := sleep(ctx, s.c.backoff(s.fails)); err != nil {
					return api.Event{}, err
				}
				continue
			}
		}
		var r sseResult
		var ok bool
		select {
		case <-ctx.Done():
			return api.Event{}, ctx.Err()
		case r, ok = <-s.events:
		}
		if !ok || r.err != nil || r.ev.Data == nil {
			// The connection ended: reconnect after the last event, after
			// a backoff (a server that accepts and closes at once, while
			// it stops, is not hammered).
			s.drop()
			if s.fails++; s.fails >= s.c.opts.MaxAttempts {
				if r.err != nil {
					return api.Event{}, fmt.Errorf("%w: %w", ErrStreamEnded, r.err)
				}
				return api.Event{}, ErrStreamEnded
			}
			if err := sleep(ctx, s.c.backoff(s.fails)); err != nil {
				return api.Event{}, err
			}
			continue
		}
		var ev api.Event
		if err := json.Unmarshal(r.ev.Data, &ev); err != nil {
			return api.Event{}, fmt.Errorf("client: event %s of the stream: %w", r.ev.ID, err)
		}
		s.fails = 0
		if ev.Seq <= s.last {
			continue // already returned before a reconnection
		}
		s.last = ev.Seq
		return ev, nil
	}
}

// connect opens the stream after s.last and starts reading it.
func (s *Subscription) connect(ctx context.Context) error {
	// Last-Event-ID is the SSE way to resume; after_seq says the same for
	// proxies that drop the header.
	q := url.Values{"after_seq": {strconv.FormatUint(s.last, 10)}}
	if s.opts.Stream != "" {
		q.Set("stream", s.opts.Stream)
	}
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // the dial and the header obey ctx
	resp, err := s.c.openEventStream(sctx, ctx, "/v1/events/stream", q, strconv.FormatUint(s.last, 10))
	stop()
	if err != nil {
		cancel()
		return err
	}
	s.body, s.cancel = resp.Body, cancel
	evs := make(chan sseResult)
	s.events = evs
	go func() {
		defer close(evs)
		err := sse.Read(sctx, resp.Body, maxEventLine, func(e sse.Event) error {
			select {
			case evs <- sseResult{ev: e}:
				return nil
			case <-sctx.Done():
				return sctx.Err()
			}
		})
		if sctx.Err() == nil {
			select {
			case evs <- sseResult{err: err}:
			case <-sctx.Done():
			}
		}
	}()
	return nil
}

// openEventStream sends GET path?q asking for Server-Sent Events (with
// Last-Event-ID lastID when not empty) and returns the response once the
// server accepted it: rctx bounds the request and the body read after,
// ctx's end while it waits for the response is returned as ctx's error.
func (c *Client) openEventStream(rctx, ctx context.Context, path string, q url.Values, lastID string) (*http.Response, error) {
	u, err := c.url(path, q)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set(api.HeaderLastEventID, lastID)
	}
	c.headers(req, request{path: path})
	hc := *c.opts.HTTPClient
	hc.Timeout = 0 // a stream stays open as long as the caller reads it
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, errorOf(resp.StatusCode, data)
	}
	return resp, nil
}

// drop closes the current connection.
func (s *Subscription) drop() {
	if s.cancel != nil {
		s.cancel()
		s.body.Close()
		for range s.events { // the reader has stopped
		}
	}
	s.body, s.events, s.cancel = nil, nil, nil
}

// Close ends the subscription.
func (s *Subscription) Close() error {
	s.drop()
	return nil
}
