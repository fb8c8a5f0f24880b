package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// StateAt returns a task as it was at bound b (the zero Bound: now). It
// folds the task's own stream through Fold, starting from the newest
// persisted snapshot (or task record) inside the bound when r is a
// LogReader, so a long task costs one snapshot read plus at most
// Options.SnapshotEvery-1 events. The result equals a fold from zero; the
// equivalence tests check it.
//
// An unknown task, or one not yet created at b, wraps
// projection.ErrTaskNotFound.
func StateAt(ctx context.Context, r Reader, id string, b Bound) (fsm.Task, error) {
	b, err := b.resolve(ctx, r)
	if err != nil {
		return fsm.Task{}, err
	}
	o := (&Options{}).EnsureDefaults()
	set := projection.NewSet(o.setOptions(false))
	from := uint64(1)
	if lr, ok := r.(*LogReader); ok && projection.KindOf(id) == projection.KindTask {
		base, inputSeq, ok, err := bestSnapshot(lr.Log, id, b)
		if err != nil {
			return fsm.Task{}, err
		}
		if ok {
			set = projection.Restore(o.setOptions(false), base.Seq, nil, nil)
			set.RestoreTask(base, nil, inputSeq)
			from = base.Version + 1
		}
	}
	v := viewFrom(o, set)
	if _, err := Fold(ctx, v, streamSource{r: r, stream: id, fromVersion: from}, FoldOptions{Bound: b}); err != nil {
		return fsm.Task{}, err
	}
	t, err := v.Task(id)
	if err != nil {
		return fsm.Task{}, fmt.Errorf("%w (at %s)", err, b.String())
	}
	return t, nil
}

// bestSnapshot returns the newest persisted state of task id inside b:
// the task record or a snapshot, with its input text read from the log if
// the record refers to it (and the sequence it refers to). A time bound
// trusts a candidate whose last event is stamped at or before it (stream
// times do not go back).
func bestSnapshot(l *eventlog.Log, id string, b Bound) (fsm.Task, uint64, bool, error) {
	inside := func(t *fsm.Task) bool {
		switch {
		case b.Seq != 0:
			return t.Seq <= b.Seq
		case !b.Time.IsZero():
			return !t.UpdatedAt.After(b.Time)
		}
		return true
	}
	var best fsm.Task
	var bestRef projection.InputRef
	found := false
	// consider decodes a candidate and reports whether it is inside b.
	consider := func(raw []byte) (bool, error) {
		t, ref, err := projection.DecodeStoredTask(raw)
		if err != nil {
			return false, fmt.Errorf("replay: persisted state of task %s: %w", id, err)
		}
		if t.ID != id || !inside(&t) {
			return false, nil
		}
		if !found || t.Version > best.Version {
			best, bestRef, found = t, ref, true
		}
		return true, nil
	}
	raw, err := l.GetAux(taskKey(prefTask, id))
	switch {
	case err == nil:
		if _, err := consider(raw); err != nil {
			return fsm.Task{}, 0, false, err
		}
	case !errors.Is(err, eventlog.ErrNotFound):
		return fsm.Task{}, 0, false, err
	}
	var snaps [][]byte
	it := l.ScanAux(snapPrefix(id))
	for it.Next() {
		snaps = append(snaps, it.Value())
	}
	err = it.Err()
	it.Close()
	if err != nil {
		return fsm.Task{}, 0, false, err
	}
	// Keys sort by version: the newest snapshot inside the bound is the
	// first one found walking back.
	for i := len(snaps) - 1; i >= 0; i-- {
		ok, err := consider(snaps[i])
		if err != nil {
			return fsm.Task{}, 0, false, err
		}
		if ok {
			break
		}
	}
	if found {
		if err := resolveInput(l, &best, bestRef); err != nil {
			return fsm.Task{}, 0, false, err
		}
	}
	return best, bestRef.Seq, found, nil
}

// Step is one event of a task's timeline with the state it moved the task
// from and to. A refused event has Err set and From == To.
type Step struct {
	Event   eventlog.Event
	Decoded fsm.Event
	From    fsm.State
	To      fsm.State
	Err     error
}

// TaskTimeline is a task's history event by event.
type TaskTimeline struct {
	TaskID string
	Steps  []Step
	Task   fsm.Task // the task after the last step
}

// Timeline folds a task's stream from its first event up to b and
// returns every event with the state before and after it: `pegasus-replay
// show`. Unknown tasks wrap projection.ErrTaskNotFound.
func Timeline(ctx context.Context, r Reader, id string, b Bound) (*TaskTimeline, error) {
	b, err := b.resolve(ctx, r)
	if err != nil {
		return nil, err
	}
	v, err := NewView(nil)
	if err != nil {
		return nil, err
	}
	tl := &TaskTimeline{TaskID: id}
	_, err = Fold(ctx, v, streamSource{r: r, stream: id, fromVersion: 1}, FoldOptions{
		Bound: b,
		OnChange: func(ch *Change) error {
			from := ch.Before.State
			if from == "" {
				from = fsm.StateIdle
			}
			to := ch.After.State
			if to == "" {
				to = fsm.StateIdle
			}
			tl.Steps = append(tl.Steps, Step{Event: ch.Raw, Decoded: ch.Event, From: from, To: to, Err: ch.Err})
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	if len(tl.Steps) == 0 {
		return nil, fmt.Errorf("%w: %s", projection.ErrTaskNotFound, id)
	}
	tl.Task, _ = v.Task(id)
	return tl, nil
}
