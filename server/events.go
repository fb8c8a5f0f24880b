package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

// eventJSON is an event as the API shows it: the one JSON form of an event
// (docs/events.md), with its one encoder.
type eventJSON = replay.EventJSON

func toEventJSON(ev eventlog.Event) eventJSON { return replay.NewEventJSON(ev) }

func (s *Server) events(w http.ResponseWriter, r *http.Request) *apiError {
	q, e := query(r, "after_seq", "limit")
	if e != nil {
		return e
	}
	after, err := strconv.ParseUint(q.Get("after_seq"), 10, 64)
	if q.Get("after_seq") == "" {
		after, err = 0, nil
	}
	if err != nil {
		return errBadRequest("after_seq %q: give a sequence number", q.Get("after_seq"))
	}
	limit, e := intParam(q, "limit", 100, 1, 1000)
	if e != nil {
		return e
	}
	if e := s.checkResume("after_seq", after); e != nil {
		return e
	}
	it := s.store.Scan(after+1, eventlog.Forward)
	defer it.Close()
	evs := []eventJSON{}
	next := after
	for len(evs) < limit && it.Next() {
		ev := it.Event()
		evs = append(evs, toEventJSON(ev))
		next = ev.Seq
	}
	if err := it.Err(); err != nil {
		return s.fromError(err)
	}
	if e := s.reflect(r.Context(), next); e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": evs, "next_after_seq": next, "head": s.store.Head()})
	return nil
}

// checkResume refuses a resume position beyond the log's head. Such a
// position names an event this log never had (the consumer read another
// data directory, or this one was restored from an older copy or lost its
// tail): answering with nothing, or waiting for the log to grow past it,
// would let the consumer skip silently whatever comes next. Checking here
// also keeps after+1 from wrapping to 0 at 2^64-1.
func (s *Server) checkResume(name string, after uint64) *apiError {
	head := s.store.Head()
	if after <= head {
		return nil
	}
	return &apiError{status: http.StatusConflict, Code: codeBeyondHead, Message: fmt.Sprintf(
		"%s %d is beyond the log's head %d: this log never had that event (another data directory, or one restored "+
			"from an older copy?); resume from a sequence at most %d, or from 0 to read everything again", name, after, head, head)}
}

// reflected blocks until every read the API serves reflects the log up
// to seq: the view has folded it and, when the broker runs, the broker
// has indexed it. The handlers that serve events from the log (the event
// lists and streams) call it before they hand an event out, so that a
// client that saw an event and then reads its task finds the task with
// that event applied, never older. The wait is the fold's lag behind the
// commit, microseconds when the daemon keeps up.
func (s *Server) reflected(ctx context.Context, seq uint64) error {
	if s.broker != nil {
		return s.broker.b.WaitFor(ctx, seq)
	}
	return s.view.WaitFor(ctx, seq)
}

// reflect is reflected for a handler that answers once: a request that
// ends first answers as any cancelled request does.
func (s *Server) reflect(ctx context.Context, seq uint64) *apiError {
	if err := s.reflected(ctx, seq); err != nil {
		return s.fromError(err)
	}
	return nil
}

// sseHeartbeat keeps idle event streams (and proxies) alive.
const sseHeartbeat = 15 * time.Second

// stream serves the log as Server-Sent Events: "id" is the sequence, so a
// client that reconnects with Last-Event-ID resumes right after the last
// event it saw. ?after_seq= starts a new stream elsewhere; ?stream= keeps
// one stream (a task id, "$inputs", ...).
func (s *Server) stream(w http.ResponseWriter, r *http.Request) *apiError {
	q, e := query(r, "after_seq", "stream")
	if e != nil {
		return e
	}
	return s.serveEvents(w, r, q, q.Get("stream"), nil)
}

// serveEvents serves the log from ?after_seq= (or Last-Event-ID) as
// Server-Sent Events, only stream's events when stream is not "". With
// live set (a task's stream), the frames of its model calls in progress
// go out too (taskstream.go), each before any event that follows it.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request, q url.Values, only string, live *agent.DeltaSub) *apiError {
	from := q.Get("after_seq")
	name := "after_seq"
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from, name = id, "Last-Event-ID"
	}
	var after uint64
	if from != "" {
		n, err := strconv.ParseUint(from, 10, 64)
		if err != nil {
			return errBadRequest("%s %q: give a sequence number", name, from)
		}
		after = n
	}
	// Before the stream starts: after the 200, an error has no status.
	if e := s.checkResume(name, after); e != nil {
		return e
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ctx := r.Context()
	sub := s.store.Subscribe(ctx, after+1)
	defer sub.Close()

	type next struct {
		ev  eventlog.Event
		err error
	}
	evs := make(chan next)
	go func() {
		for {
			ev, err := sub.Next(ctx)
			if err == nil && only != "" && ev.Stream != only {
				continue
			}
			select {
			case evs <- next{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte("retry: 2000\n\n")) {
		return nil
	}
	tick := time.NewTicker(sseHeartbeat)
	defer tick.Stop()
	var buf bytes.Buffer
	var ready <-chan struct{}
	if live != nil {
		ready = live.Ready()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if !write([]byte(": ping\n\n")) {
				return nil
			}
		case <-ready:
			if !write(deltaFrames(&buf, live.Take())) {
				return nil
			}
		case n := <-evs:
			// Not before the reads reflect it (reflected). The wait is
			// here, not in the reader: the frames of a model call that
			// starts once this event is folded cannot overtake it while
			// it waits.
			if n.err != nil || s.reflected(ctx, n.ev.Seq) != nil {
				return nil
			}
			// The frames pushed before this event was appended are
			// waiting: they go first.
			if live != nil && !write(deltaFrames(&buf, live.Take())) {
				return nil
			}
			data, err := replay.MarshalEvent(n.ev)
			if err != nil {
				return nil
			}
			buf.Reset()
			fmt.Fprintf(&buf, "id: %d\nevent: %s\ndata: %s\n\n", n.ev.Seq, n.ev.Type, data)
			if !write(buf.Bytes()) {
				return nil
			}
		}
	}
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) *apiError {
	if _, e := query(r); e != nil {
		return e
	}
	issues, n := s.view.Issues()
	if issues == nil {
		issues = []replay.Issue{}
	}
	out := map[string]any{
		"tasks":   s.view.Stats(),
		"runtime": s.a.Runtime(),
		"log":     map[string]any{"head": s.store.Head(), "folded": s.view.Seq(), "refused": n, "issues": issues, "storage": StorageReason(s.store.Health())},
		"memory":  s.view.MemoryUse(),
		"model":   s.model,
	}
	addLimitStats(s.a, out)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// checkpoint writes a consistent copy of the data directory (the log and
// the persisted projections) that pegasus-replay can open while the daemon
// runs.
func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) *apiError {
	if e := s.mutating(); e != nil {
		return e
	}
	var b struct{}
	if e := decodeBody(r, &b, true); e != nil {
		return e
	}
	if err := os.MkdirAll(s.checkpointDir, 0o700); err != nil {
		return s.fromError(err)
	}
	head := s.store.Head()
	dir := filepath.Join(s.checkpointDir, fmt.Sprintf("%s-seq%d", time.Now().UTC().Format("20060102T150405.000Z"), head))
	if err := s.view.Checkpoint(r.Context()); err != nil {
		return s.fromError(err)
	}
	if err := s.store.Checkpoint(dir); err != nil {
		return s.fromError(err)
	}
	abs, _ := filepath.Abs(dir)
	writeJSON(w, http.StatusCreated, map[string]any{"path": abs, "seq": head})
	return nil
}
