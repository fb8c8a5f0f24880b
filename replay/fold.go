package replay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// Change is what folding one committed event did: the raw event as stored
// and, embedded, the decoded event with the task before and after it (see
// projection.Change). Before and After share memory with the View: treat
// them as read-only (fsm.Task.Clone to change a copy).
type Change struct {
	Raw eventlog.Event
	projection.Change
}

// FoldOptions configures one call of Fold.
type FoldOptions struct {
	// Bound stops the fold (inclusive); the zero Bound folds to the end of
	// the source.
	Bound Bound
	// OnChange, if set, is called after each event is folded, in order,
	// without the View's lock held (it may query the View). Returning an
	// error stops the fold with that error. The live follower's hook is
	// one.
	OnChange func(*Change) error

	// verify is verify's hook, called like OnChange but directly: a call
	// through a func value takes the Change's address out of reach of the
	// escape analysis, a direct call to a method that keeps nothing of it
	// does not, so verify's Change stays on the stack as a rebuild's does.
	verify *foldVerifier
}

// FoldResult says what one call of Fold did.
type FoldResult struct {
	From, To uint64 // first and last sequence folded; 0 when none
	Events   int    // events folded
	Refused  int    // of which the fold refused (see View.Issues)
	// Gaps counts jumps in the sequence (an event whose Seq is not the
	// previous one plus one). A Pebble log has none (it reports a missing
	// record as corruption); a filtered export has them by design.
	Gaps     int
	FirstGap uint64 // the first sequence missing, 0 when none
	// Reached reports that the fold stopped because of its Bound.
	Reached bool
}

// Fold is the one fold loop of Pegasus. It reads src from the View's
// position (v.Seq()+1) and folds every event, through fsm.Apply and the
// projections, into v, up to opts.Bound or the end of src. Recovery
// (Open), the live follower (Follow), verify, the per-task queries (StateAt,
// Timeline) and every CLI command call it; nothing else folds.
//
// Events at or below v.Seq() are skipped, so any source can be folded into
// a View that already holds its prefix. An event the fsm refuses does not
// stop the fold (it is counted and listed in View.Issues); a source error
// (corruption, I/O, a cancelled context) does, and is returned with the
// result so far. A View that persists checkpoints every
// Options.CheckpointEvery events as it goes. Fold never calls a model or a
// tool: it only folds recorded facts.
//
// One fold at a time per View: a concurrent Fold or Follow on the same View
// returns ErrBusy.
func Fold(ctx context.Context, v *View, src Source, opts FoldOptions) (FoldResult, error) {
	if !v.folding.CompareAndSwap(false, true) {
		return FoldResult{}, ErrBusy
	}
	defer v.folding.Store(false)
	var res FoldResult
	b := opts.Bound
	if r, ok := src.(Reader); ok && b.hasID() {
		rb, err := b.resolve(ctx, r)
		if err != nil {
			return res, err
		}
		b = rb
	}
	last := v.Seq()
	if b.Seq != 0 && b.Seq <= last {
		res.Reached = true
		return res, nil
	}
	// A Pebble log is read borrowed: the fold copies what it keeps (take).
	var it Iterator
	var own *owner
	if bs, ok := src.(borrower); ok {
		it, own = bs.borrowedEvents(ctx, last+1), newOwner()
	} else {
		it = src.Events(ctx, last+1)
	}
	defer it.Close()
	// eventlog's iterators hand out the event in place, without Event's
	// copy under the iterator's lock.
	cur, _ := it.(interface{ Current() *eventlog.Event })
	// One Change for the whole loop. Without OnChange it stays on the
	// stack: the tasks and events copied into it on every step then cost
	// no write barriers while the collector runs. OnChange takes its
	// address, so with a hook it lives on the heap.
	var local Change
	var hooked *Change
	if opts.OnChange != nil {
		hooked = new(Change)
	}
	// Without a hook nothing keeps a decoded event past its step, so
	// the bodies Apply keeps no pointer to are decoded into reused values.
	var bodies *fsm.Bodies
	if hooked == nil && own != nil {
		bodies = new(fsm.Bodies)
	}
	for n := 0; it.Next(); n++ {
		if n&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return res, err
			}
		}
		var ev eventlog.Event
		if cur != nil {
			ev = *cur.Current()
		} else {
			ev = it.Event()
		}
		if ev.Seq <= last {
			continue
		}
		if own != nil {
			own.take(&ev, bodies == nil || !bodyNotKept(&ev))
		}
		in, stop := b.admit(&ev)
		if !in {
			res.Reached = true
			break
		}
		if ev.Seq != last+1 {
			if res.Gaps == 0 {
				res.FirstGap = last + 1
			}
			res.Gaps++
		}
		var refused bool
		if hooked != nil {
			if err := v.step(ctx, ev, hooked, own != nil, nil); err != nil {
				return res, err
			}
			refused = hooked.Err != nil
		} else {
			if err := v.step(ctx, ev, &local, own != nil, bodies); err != nil {
				return res, err
			}
			refused = local.Err != nil
		}
		last = ev.Seq
		if res.From == 0 {
			res.From = ev.Seq
		}
		res.To = ev.Seq
		res.Events++
		if refused {
			res.Refused++
		}
		if hooked != nil {
			if err := opts.OnChange(hooked); err != nil {
				return res, err
			}
		} else if opts.verify != nil {
			if err := opts.verify.check(&local); err != nil {
				return res, err
			}
		}
		if stop {
			res.Reached = true
			break
		}
	}
	if err := it.Err(); err != nil {
		return res, err
	}
	if b.hasID() && !res.Reached {
		return res, fmt.Errorf("%w: %s", ErrBoundNotFound, b.ID)
	}
	return res, nil
}

// ErrBusy is returned by Fold and Follow when another fold is running on
// the same View.
var ErrBusy = errors.New("replay: another fold is running on this view")

// Decode turns a stored event into the event the fsm and the projections
// fold: the envelope plus the decoded body. Memory events decode with
// projection.DecodeMemory, system events with projection.DecodeSystem,
// everything else with fsm.Decode. Event types this build has no body for
// are an error on task, inputs and memory streams, and carry no body on
// $system and other reserved streams (they are counted, never
// interpreted). On error the envelope is still filled
// in, so the fold can record the refusal where it happened.
func Decode(ev eventlog.Event) (fsm.Event, error) { return decode(ev, false, nil) }

// decode is Decode; with shared, ev.Body is the fold's own copy (owner.take),
// never changed, and the decoded strings alias it (fsm.DecodeShared). With
// bodies too, the body may be one of bodies' reused values: the event must
// not be kept past the fold's step.
func decode(ev eventlog.Event, shared bool, bodies *fsm.Bodies) (fsm.Event, error) {
	body := func() (fsm.Body, error) {
		if shared && len(ev.Body) > 0 {
			data := unsafe.String(unsafe.SliceData(ev.Body), len(ev.Body))
			if bodies != nil {
				return bodies.DecodeShared(fsm.EventType(ev.Type), ev.Schema, data)
			}
			return fsm.DecodeShared(fsm.EventType(ev.Type), ev.Schema, data)
		}
		return fsm.Decode(fsm.EventType(ev.Type), ev.Schema, ev.Body)
	}
	fe := envelope(&ev)
	var err error
	switch projection.KindOf(ev.Stream) {
	case projection.KindMemory:
		fe.Body, err = projection.DecodeMemory(fe.Type, ev.Schema, ev.Body)
	case projection.KindSystem:
		var b *projection.SystemBody
		if b, err = projection.DecodeSystem(fe.Type, ev.Schema, ev.Body); err == nil {
			fe.Body = b
		} else if errors.Is(err, fsm.ErrUnknownEvent) {
			err = nil
		}
	case projection.KindOther:
		fe.Body, err = body()
		if errors.Is(err, fsm.ErrUnknownEvent) {
			fe.Body, err = nil, nil
		}
	default:
		fe.Body, err = body()
	}
	if err != nil {
		fe.Body = nil
	}
	return fe, err
}

// envelope returns ev as the fsm folds it, without its body.
func envelope(ev *eventlog.Event) fsm.Event {
	return fsm.Event{
		ID: ev.ID, Type: fsm.EventType(ev.Type), Time: ev.Time, Stream: ev.Stream,
		Version: ev.Version, Seq: ev.Seq, Causation: ev.Causation, Correlation: ev.Correlation,
	}
}

// bodyNotKept reports whether the read models keep nothing of ev's body,
// not even a string: the bodies of the inputs stream, $system and the
// other reserved streams (they are counted by type), the memory stream's
// (projection.DecodeMemory copies what it keeps), and a task's
// MODEL_CALLED and TASK_NOTIFY (fsm.Apply checks them and records a
// transition, which holds the event's id and type). A fold without a hook
// (its bodies are reused, nothing keeps an event past its step) decodes
// these from the borrowed bytes instead of copying them.
// TestFoldBorrowedBodiesOutliveTheirSource fails when one of them is kept.
func bodyNotKept(ev *eventlog.Event) bool {
	if projection.KindOf(ev.Stream) != projection.KindTask {
		return true
	}
	return ev.Type == string(fsm.ModelCalled) || ev.Type == string(fsm.TaskNotify)
}

// borrower is a Source that Fold may read borrowed: events whose Stream,
// Type and Body are valid only until the next one (eventlog.ScanBorrowed).
type borrower interface {
	borrowedEvents(ctx context.Context, from uint64) Iterator
}

// owner makes a borrowed event the fold's own: one copy of the body, and
// the stream and type names interned (a fold sees few distinct names at a
// time: the tasks in flight and the event types).
//
// Each body gets a copy of its own: the decoded strings alias it
// (fsm.DecodeShared), so a task keeps alive the bodies it holds strings
// of and nothing else. (Small bodies copied into shared chunks were tried
// and not kept: a task that outlives its neighbours in the log would keep
// their chunks alive, memory the budget does not count.)
type owner struct {
	names map[string]string
	// recent caches interned names by a hash of their ends: a fold's
	// streams and types repeat within a few events, and a hit costs one
	// comparison where the map hashes the whole name and probes a table
	// of thousands.
	recent [1 << recentBits]string
}

// recentBits is the log2 of owner.recent's size.
const recentBits = 10

// maxInterned bounds the interned names; past it the table starts over.
const maxInterned = 8192

func newOwner() *owner { return &owner{names: make(map[string]string, 256)} }

func (o *owner) take(ev *eventlog.Event, body bool) {
	ev.Stream, ev.Type = o.intern(ev.Stream), o.intern(ev.Type)
	if body && len(ev.Body) > 0 {
		// Copied as a string: its allocation is not cleared first, as a
		// byte slice's spare capacity is. The fold never writes to it.
		s := string(ev.Body)
		ev.Body = unsafe.Slice(unsafe.StringData(s), len(s))
	}
}

func (o *owner) intern(b string) string {
	slot := &o.recent[nameHash(b)>>(64-recentBits)]
	if *slot == b {
		return *slot
	}
	s := o.internSlow(b)
	*slot = s
	return s
}

// nameHash mixes a name's length and its first and last eight bytes:
// event types differ at one end or the other, and stream names (ids) in
// their random tail.
func nameHash(b string) uint64 {
	h := uint64(len(b))
	if len(b) >= 8 {
		h ^= binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(b), len(b))) * 0x9e3779b97f4a7c15
		h ^= binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(b[len(b)-8:]), 8)) * 0xc2b2ae3d27d4eb4f
	} else {
		for i := 0; i < len(b); i++ {
			h = h*31 + uint64(b[i])
		}
		h *= 0x9e3779b97f4a7c15
	}
	return h
}

func (o *owner) internSlow(b string) string {
	if s, ok := o.names[b]; ok {
		return s
	}
	if len(o.names) >= maxInterned {
		clear(o.names)
	}
	s := strings.Clone(b)
	o.names[s] = s
	return s
}
