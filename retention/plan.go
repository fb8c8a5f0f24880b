package retention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

// maxChainHops bounds how far the causation check follows a chain through
// events on reserved streams (a memory write caused by a task, read by
// another): real chains are a hop or two.
const maxChainHops = 16

// runPlan is what one run removes.
type runPlan struct {
	streams []replay.Finished
	events  []eventlog.Event // every event of streams, by seq
	pinned  int
}

// reserved reports whether stream is a reserved ("$") stream, whose
// events are never removed.
func reserved(stream string) bool { return strings.HasPrefix(stream, "$") }

// plan picks the finished tasks to remove and reads their events: at most
// maxEvents events (but at least the first task), oldest tasks first,
// minus the tasks that a task staying in the log points at.
func plan(ctx context.Context, l *eventlog.Log, cutoff time.Time, maxEvents int) (runPlan, error) {
	var p runPlan
	finished, err := replay.FinishedBefore(ctx, l, cutoff, maxEvents)
	if err != nil {
		return p, err
	}
	cand := map[string][]eventlog.Event{}
	byID := map[ulid.ULID]string{}
	var picked []replay.Finished
	total := 0
	for _, f := range finished {
		evs, err := readStream(l, f.ID)
		if err != nil {
			return p, err
		}
		if len(evs) == 0 || uint64(len(evs)) != f.Version || evs[len(evs)-1].Seq != f.Seq {
			continue // changed since the projections were persisted: next run
		}
		if total > 0 && total+len(evs) > maxEvents {
			break
		}
		total += len(evs)
		picked = append(picked, f)
		cand[f.ID] = evs
		for _, ev := range evs {
			byID[ev.ID] = f.ID
		}
	}

	pinned := map[string]bool{}
	var pin func(stream string) error
	pin = func(stream string) error {
		if pinned[stream] {
			return nil
		}
		pinned[stream] = true
		// What a kept task points at is kept: follow its causations up,
		// through reserved streams, into other candidates.
		for _, ev := range cand[stream] {
			c := ev.Causation
			for hop := 0; c != (ulid.ULID{}) && hop < maxChainHops; hop++ {
				if owner, ok := byID[c]; ok {
					if owner != stream {
						if err := pin(owner); err != nil {
							return err
						}
					}
					break
				}
				up, err := l.Get(c)
				if errors.Is(err, eventlog.ErrNotFound) {
					break
				}
				if err != nil {
					return err
				}
				if !reserved(up.Stream) {
					break // a task staying in the log: its own chain is whole
				}
				c = up.Causation
			}
		}
		return nil
	}
	for _, f := range picked {
		for _, ev := range cand[f.ID] {
			kept, err := pointedAtByKept(l, cand, ev.ID, 0)
			if err != nil {
				return p, err
			}
			if kept {
				if err := pin(f.ID); err != nil {
					return p, err
				}
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return p, err
		}
	}
	for _, f := range picked {
		if pinned[f.ID] {
			p.pinned++
			continue
		}
		p.streams = append(p.streams, f)
		p.events = append(p.events, cand[f.ID]...)
	}
	slices.SortFunc(p.events, func(a, b eventlog.Event) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return p, nil
}

// pointedAtByKept reports whether an event of a task that stays in the log
// (not a candidate) has the event id as its causation, directly or
// through events on reserved streams.
func pointedAtByKept(l *eventlog.Log, cand map[string][]eventlog.Event, id ulid.ULID, hops int) (bool, error) {
	it := l.Children(id)
	defer it.Close()
	var via []ulid.ULID
	for it.Next() {
		ch := it.Event()
		switch {
		case cand[ch.Stream] != nil:
			// Another candidate: if it ends up kept, pin follows its
			// causations back here.
		case reserved(ch.Stream):
			via = append(via, ch.ID)
		default:
			return true, nil
		}
	}
	if err := it.Err(); err != nil {
		return false, err
	}
	if hops+1 >= maxChainHops {
		return false, nil
	}
	for _, v := range via {
		if kept, err := pointedAtByKept(l, cand, v, hops+1); kept || err != nil {
			return kept, err
		}
	}
	return false, nil
}

func readStream(l *eventlog.Log, stream string) ([]eventlog.Event, error) {
	it := l.ReadStream(stream, 1)
	var evs []eventlog.Event
	for it.Next() {
		evs = append(evs, it.Event())
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("retention: read task %s: %w", stream, err)
	}
	return evs, nil
}

// isArchiveFile reports whether name is an archive (or its temporary file)
// by its name.
func isArchiveFile(name string) bool {
	name = strings.TrimSuffix(name, ".tmp")
	return strings.HasPrefix(name, "pegasus-archive-") && strings.HasSuffix(name, ".ndjson.gz")
}
