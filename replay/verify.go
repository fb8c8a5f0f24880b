package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/projection"
)

// ProblemKind classifies what verify found wrong.
type ProblemKind string

// The kinds of problems. Persisted in `verify --json` output: never change
// a value.
const (
	ProblemLog        ProblemKind = "log"        // eventlog's audit: checksum, record, index, gap
	ProblemRead       ProblemKind = "read"       // the fold could not read a record
	ProblemSequence   ProblemKind = "sequence"   // a global sequence or stream version out of order
	ProblemDecode     ProblemKind = "decode"     // a body that does not decode, an unknown event type
	ProblemTransition ProblemKind = "transition" // an event the task machine refuses
	ProblemMemory     ProblemKind = "memory"     // a memory event refused or inconsistent
	ProblemTaskID     ProblemKind = "task_id"    // a task stream not named by the id of its first (creating) event
	ProblemUndue      ProblemKind = "undue"      // an event the loop appended that answered no work due (fsm.Next)
	ProblemProjection ProblemKind = "projection" // persisted projections disagree with a fresh fold
	ProblemSnapshot   ProblemKind = "snapshot"   // a persisted snapshot disagrees with a fresh fold
)

// Problem is one thing verify found wrong, at a position.
type Problem struct {
	Kind   ProblemKind `json:"kind"`
	Seq    uint64      `json:"seq,omitempty"` // global sequence, 0 if not tied to one event
	ID     string      `json:"event_id,omitempty"`
	Stream string      `json:"stream,omitempty"`
	Type   string      `json:"type,omitempty"`
	Key    string      `json:"key,omitempty"` // the key involved (quoted), if any
	Reason string      `json:"reason"`
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(string(p.Kind))
	if p.Seq != 0 {
		fmt.Fprintf(&b, " at seq %d", p.Seq)
	}
	if p.Stream != "" {
		fmt.Fprintf(&b, " stream %s", p.Stream)
	}
	if p.Type != "" {
		fmt.Fprintf(&b, " %s", p.Type)
	}
	if p.Key != "" {
		fmt.Fprintf(&b, " key %s", p.Key)
	}
	b.WriteString(": ")
	b.WriteString(p.Reason)
	return b.String()
}

// MaxProblems bounds Report.Problems; every problem is counted.
const MaxProblems = 100

// Report is the audit of a log.
type Report struct {
	Head    uint64 `json:"head"`
	Events  int    `json:"events"` // events folded
	Tasks   int    `json:"tasks"`
	Refused int    `json:"refused"`
	// Checkpoint is the sequence of the persisted projections compared with
	// a fresh fold there; 0 when none were compared (ProjectionsNote says
	// why).
	Checkpoint      uint64 `json:"checkpoint"`
	ProjectionsNote string `json:"projections_note,omitempty"`
	// Snapshots is how many persisted snapshots were compared.
	Snapshots int `json:"snapshots"`
	// Log is eventlog's own audit (checksums, gaps, indexes); nil when the
	// source is not a Pebble log.
	Log          *eventlog.Report `json:"log,omitempty"`
	Problems     []Problem        `json:"problems"`
	ProblemCount int              `json:"problem_count"`
	// FirstProblem is the problem at the lowest position (problems not tied
	// to a sequence come after those that are).
	FirstProblem    *Problem      `json:"first_problem,omitempty"`
	Duration        time.Duration `json:"duration_ns"`
	EventsPerSecond float64       `json:"events_per_second"`
	// Archives is the check of the retention archives against their
	// manifests, when asked for (AddArchives).
	Archives *ArchiveReport `json:"archives,omitempty"`

	// evicted counts the tasks the fold held no longer at the end,
	// reloads those read back for a late event, walks the walks over
	// the records (for the tests).
	evicted, reloads, walks int
}

// OK reports whether verify found nothing wrong.
func (r *Report) OK() bool { return r.ProblemCount == 0 }

func (r *Report) add(p Problem) {
	r.ProblemCount++
	if len(r.Problems) < MaxProblems {
		r.Problems = append(r.Problems, p)
	}
	if f := r.FirstProblem; f == nil || (p.Seq != 0 && (f.Seq == 0 || p.Seq < f.Seq)) {
		c := p
		r.FirstProblem = &c
	}
}

// Summary is a one-line verdict naming the first bad position.
func (r *Report) Summary() string {
	if r.OK() {
		return fmt.Sprintf("ok: %d events, %d tasks, head %d", r.Events, r.Tasks, r.Head)
	}
	return fmt.Sprintf("%d problem(s); first: %s", r.ProblemCount, r.FirstProblem)
}

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// Options are the View options the daemon runs with; the persisted
	// projections are compared only if they were built with the same
	// (projection.Identity).
	Options *Options
	// AllowGaps accepts jumps in the global sequence, for a filtered
	// export. A Pebble log never allows them.
	AllowGaps bool
	// OnEvent, if set, is called after every event folded, for a progress
	// bar.
	OnEvent func(seq uint64)
	// OnProgress, if set, is called through every phase of the audit,
	// about every 1,024 keys or events and at the start of each phase:
	// "fold" (the walk over the records, checked by eventlog's audit and
	// folded; Done is the sequence folded, Total the head), "projections"
	// (the persisted projections compared with the fold at their
	// sequence), "fold" again to the head, then the rest of eventlog's own
	// audit ("log: holes", "log: stream index", ...; see
	// eventlog.VerifyProgress). When the records have a problem, the
	// fold walks them again after the audit, from "fold" on once more.
	OnProgress func(eventlog.VerifyProgress)

	// twoWalks makes Verify audit the records, then fold them in a
	// second walk, as it does when the records have a problem (for the
	// tests).
	twoWalks bool

	// evictEvery is how many events the fold takes between two evictions
	// of the finished tasks; 0 means evictEvery. Tests evict after every
	// event.
	evictEvery int
}

// Verify audits a log from zero and reports everything wrong with it:
//
//   - eventlog's own audit: every record's checksum and envelope, the
//     global sequence gap-free from 1, the stream, id and causation
//     indexes consistent with the records;
//   - a fresh fold of every event through Fold: every recorded transition
//     legal under the machine that wrote it, every body decodable, stream
//     versions gap-free, task streams named by their first (creating) event;
//   - the persisted projections equal to the fresh fold at the sequence
//     they reflect, and every persisted snapshot equal to the fresh fold
//     at its version.
//
// The records are read once: the fold reads them from eventlog's audit
// (eventlog.Audit) as it checks them. When the audit finds a problem in
// the records, the fold reads them again in a walk of its own that steps
// over what it cannot read; either way the Report is the same as an audit
// followed by a fold.
//
// A nil error with a Report that is not OK means the log has problems;
// Report.FirstProblem names the first bad position. An error means the
// audit could not run (I/O, a cancelled context).
func Verify(ctx context.Context, l *eventlog.Log, vo *VerifyOptions) (*Report, error) {
	start := time.Now()
	if vo == nil {
		vo = &VerifyOptions{}
	}
	o := vo.Options.copy().EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{Head: l.Head()}
	progress := func(eventlog.VerifyProgress) {}
	if vo.OnProgress != nil {
		progress = vo.OnProgress
	}
	// One walk over the records: the fold reads them from eventlog's
	// audit as it checks them. The fold's findings wait in their own
	// Report until the audit's are in, so that the Report lists them in
	// the order of an audit followed by a fold.
	walking := !vo.twoWalks
	audit, err := l.NewAudit(ctx, &eventlog.VerifyOptions{OnProgress: func(p eventlog.VerifyProgress) {
		if walking && p.Phase == "records" {
			return // the fold's progress stands for the walk
		}
		p.Phase = "log: " + p.Phase
		progress(p)
	}})
	if err != nil {
		return nil, fmt.Errorf("replay: verify: %w", err)
	}
	defer audit.Close()
	frep := &Report{Head: rep.Head}
	ferr := errUnsound
	if walking {
		ferr = verifyFold(ctx, l, o, vo, frep, progress, &auditSource{a: audit, head: rep.Head}, audit.Archived())
		walking = false
	}
	lrep, err := audit.Finish()
	if err != nil && !eventlog.IsCorruption(err) {
		return nil, fmt.Errorf("replay: verify: %w", err)
	}
	rep.Log = &lrep
	for _, p := range lrep.Problems {
		rep.add(Problem{Kind: ProblemLog, Seq: p.Seq, Key: quoteKey(p.Key), Reason: p.Reason})
	}
	for i := len(lrep.Problems); i < lrep.ProblemCount; i++ {
		rep.ProblemCount++ // counted by eventlog, not listed
	}
	if lrep.Holes > 0 {
		if err := checkManifests(ctx, l, rep); err != nil {
			return nil, err
		}
	}
	switch {
	case errors.Is(ferr, errUnsound) || (lrep.Holes > 0) != audit.Archived():
		// The records have a problem: fold them again the way that steps
		// over what it cannot read.
		rep.walks = 2
		if err := verifyFold(ctx, l, o, vo, rep, progress, &resumeSource{r: FromLog(l)}, lrep.Holes > 0); err != nil {
			return nil, err
		}
	case ferr != nil:
		return nil, ferr
	default:
		rep.merge(frep)
		rep.walks = 1
	}
	rep.Duration = time.Since(start)
	if s := rep.Duration.Seconds(); s > 0 {
		rep.EventsPerSecond = float64(rep.Events) / s
	}
	return rep, nil
}

// merge adds what a fold found (into a Report of its own) to r, as if
// found after what r has.
func (r *Report) merge(f *Report) {
	for _, p := range f.Problems {
		r.add(p)
	}
	r.ProblemCount += f.ProblemCount - len(f.Problems)
	if p := f.FirstProblem; p != nil {
		if fp := r.FirstProblem; fp == nil || (p.Seq != 0 && (fp.Seq == 0 || p.Seq < fp.Seq)) {
			r.FirstProblem = p
		}
	}
	r.Events, r.Refused, r.Tasks, r.Snapshots = f.Events, f.Refused, f.Tasks, f.Snapshots
	r.Checkpoint, r.evicted, r.reloads = f.Checkpoint, f.evicted, f.reloads
	if f.ProjectionsNote != "" {
		r.ProjectionsNote = f.ProjectionsNote
	}
}

// verifyFold is Verify's fold of src, a walk over l's records: to the
// persisted projections' sequence, where it compares them, then to the
// end. archived says that retention removed records from l.
func verifyFold(ctx context.Context, l *eventlog.Log, o *Options, vo *VerifyOptions, rep *Report, progress func(eventlog.VerifyProgress), src Source, archived bool) error {
	st := &store{log: l}
	var m meta
	compareAt := uint64(0)
	raw, err := l.GetAux(keyMeta)
	switch {
	case errors.Is(err, eventlog.ErrNotFound):
		rep.ProjectionsNote = "no persisted projections"
	case err != nil:
		return err
	case codec.Decode(raw, &m) != nil:
		rep.add(Problem{Kind: ProblemProjection, Key: quoteKey(keyMeta), Reason: "projection meta does not decode"})
	case m.Format != FormatVersion || m.Identity != projection.Identity(o.setOptions(true)):
		rep.ProjectionsNote = fmt.Sprintf("persisted projections built by %q (layout %d) are not this build's; not compared (the daemon rebuilds them at start)", m.Identity, m.Format)
	case m.Seq > rep.Head:
		rep.add(Problem{Kind: ProblemProjection, Seq: m.Seq, Key: quoteKey(keyMeta),
			Reason: fmt.Sprintf("projections claim seq %d, beyond the log head %d", m.Seq, rep.Head)})
	default:
		compareAt = m.Seq
		rep.Checkpoint = m.Seq
	}

	snaps, err := snapshotKeys(l)
	if err != nil {
		return err
	}
	fv := newFoldVerifier(rep, vo)
	fv.snaps, fv.log, fv.progress, fv.archived = snaps, l, progress, archived
	fresh, err := NewView(o)
	if err != nil {
		return err
	}
	fv.evictFrom(fresh, rep.Checkpoint)
	if m.Seq != 0 && rep.Checkpoint == m.Seq {
		progress(eventlog.VerifyProgress{Phase: "fold", Total: rep.Head})
		if err := fv.fold(ctx, fresh, src, AtSeq(compareAt)); err != nil {
			return err
		}
		if fresh.Seq() == compareAt {
			progress(eventlog.VerifyProgress{Phase: "projections"})
			if err := compareProjections(ctx, rep, st, fresh, compareAt, fv); err != nil {
				return err
			}
		}
	}
	fv.compareAt = 0 // compared: from here on a finished task just leaves
	for id := range fv.evicted {
		fv.evicted[id] = nil // the hashes are no longer needed
	}
	progress(eventlog.VerifyProgress{Phase: "fold", Done: fresh.Seq(), Total: rep.Head})
	if err := fv.fold(ctx, fresh, src, Bound{}); err != nil {
		return err
	}
	rep.Tasks = fresh.set.Tasks().Len() + len(fv.evicted)
	rep.evicted, rep.reloads = len(fv.evicted), fv.reloads
	return nil
}

// VerifySource audits a source that is not a Pebble log (an NDJSON
// export): the fold checks of Verify, without the log-level and persisted
// projection checks.
func VerifySource(ctx context.Context, src Source, vo *VerifyOptions) (*Report, error) {
	start := time.Now()
	if vo == nil {
		vo = &VerifyOptions{}
	}
	o := vo.Options.copy().EnsureDefaults()
	rep := &Report{ProjectionsNote: "not a Pebble log: no persisted projections"}
	fresh, err := NewView(o)
	if err != nil {
		return nil, err
	}
	fv := newFoldVerifier(rep, vo)
	if err := fv.fold(ctx, fresh, src, Bound{}); err != nil {
		return nil, err
	}
	rep.Head = fresh.Seq()
	rep.Tasks = fresh.set.Tasks().Len()
	rep.Duration = time.Since(start)
	if s := rep.Duration.Seconds(); s > 0 {
		rep.EventsPerSecond = float64(rep.Events) / s
	}
	return rep, nil
}

// resumeSource scans a log from the fold's position, or from past a record
// it could not read.
type resumeSource struct {
	r    *LogReader
	skip uint64 // scan from here at least
}

// The audit's fold checks every record's checksum, as eventlog's Verify
// does (a plain scan leaves it to Pebble's block checksums), so that a
// damaged record is reported as unreadable, not folded.
func (s *resumeSource) Events(ctx context.Context, from uint64) Iterator {
	return s.r.Log.ScanChecked(max(from, s.skip), false)
}

func (s *resumeSource) borrowedEvents(ctx context.Context, from uint64) Iterator {
	return s.r.Log.ScanChecked(max(from, s.skip), true)
}

// auditSource is eventlog's audit walking the records (eventlog.Audit),
// read as a fold's source: every record the audit found sound, in order,
// borrowed. The first problem the audit finds in the records, or a walk
// that does not end at head, ends the fold with errUnsound.
type auditSource struct {
	a    *eventlog.Audit
	head uint64 // the log's head when verify started: a scan reads no further
	last uint64 // the last sequence handed out
}

// errUnsound ends a fold of an auditSource whose audit found a problem in
// the records.
var errUnsound = errors.New("replay: verify: the records have a problem")

func (s *auditSource) Events(ctx context.Context, from uint64) Iterator {
	return &auditIterator{s: s}
}

func (s *auditSource) borrowedEvents(ctx context.Context, from uint64) Iterator {
	return &auditIterator{s: s}
}

// auditIterator goes on from where the last one stopped: a bounded fold
// stops at its bound, the next goes on from there.
type auditIterator struct {
	s   *auditSource
	ev  eventlog.Event
	err error
}

func (it *auditIterator) Next() bool {
	s := it.s
	if it.err != nil {
		return false
	}
	if !s.a.Next() {
		if !s.a.Sound() || s.last != s.head {
			it.err = errUnsound
		}
		return false
	}
	it.ev = s.a.Event()
	if it.ev.Seq > s.head {
		it.err = errUnsound
		return false
	}
	s.last = it.ev.Seq
	return true
}

func (it *auditIterator) Event() eventlog.Event { return it.ev }
func (it *auditIterator) Err() error            { return it.err }
func (it *auditIterator) Close() error          { return nil }

// Current is the event Next moved to, in place: the fold copies it once,
// not through Event.
func (it *auditIterator) Current() *eventlog.Event { return &it.ev }

type foldVerifier struct {
	rep       *Report
	snaps     map[string]struct{} // string(snapKey) of every persisted snapshot
	log       *eventlog.Log
	vo        *VerifyOptions
	versions  map[string]uint64 // last version of each reserved stream
	refusedAt map[string]uint64 // first refused event of each task stream
	undue     map[string]bool   // task streams with an event that answered no due work, reported once
	holes     map[string]bool   // task streams with a hole, reported once
	missing   map[string]bool   // of which the hole is a missing or unreadable record
	unread    int               // records the fold could not read
	progress  func(eventlog.VerifyProgress)
	archived  bool // retention removed records from the log

	// Eviction (see evict); view is nil when the fold keeps every task.
	view      *View
	compareAt uint64                  // the persisted projections' sequence while not yet compared, else 0
	evicted   map[string]*evictedTask // tasks that left the fold; nil value once compared
	seed      maphash.Seed
	lingering map[string]uint64 // terminal tasks with work due at the last eviction -> their version
	since     int               // events since the last eviction
	reloads   int               // evicted tasks read back for a late event
	buf       []byte            // digest's and compareProjections' encodings
	before    fsm.Task          // check's copy of the task before a step, for fsm.Next
}

// evictedTask is what compareProjections needs of a task that left the
// fold before the persisted projections' sequence: hashes of what it would
// compare (the encoded record, summary and progress) and its queue key.
type evictedTask struct {
	task, summary, progress uint64
	hasProgress             bool
	queueKey                string
}

// evictEvery is how many events verify folds between two evictions of
// the finished tasks.
const evictEvery = 4096

// evictFrom makes the fold evict finished tasks from v as it goes,
// remembering what compareProjections needs of them while the fold is
// before compareAt (0: no comparison).
func (fv *foldVerifier) evictFrom(v *View, compareAt uint64) {
	fv.view, fv.compareAt, fv.evicted, fv.seed = v, compareAt, map[string]*evictedTask{}, maphash.MakeSeed()
	v.reload = fv.reload
}

// evict drops the finished tasks from the fresh fold, so that verify's
// memory grows with the tasks in flight, not with the log: of a task that
// left, only its id stays and, before the persisted projections'
// sequence, 64-bit hashes of what compareProjections compares (a
// disagreement then goes unseen with a chance of 2^-64). A task the fold
// found a problem in stays. An evicted task that gets a late event is read
// back (reload): one with a late event before that sequence is compared
// as it is there, like every task when nothing is evicted.
func (fv *foldVerifier) evict() error {
	v := fv.view
	v.mu.Lock()
	defer v.mu.Unlock()
	set := v.set
	type kept struct {
		t        fsm.Task
		p        projection.Progress
		hasP     bool
		inputSeq uint64
	}
	var keep []kept
	var err error
	lingering := fv.lingering
	fv.lingering = map[string]uint64{}
	set.Tasks().Each(func(t *fsm.Task) {
		if err != nil || !t.State.IsTerminal() {
			return // Flushed keeps it
		}
		_, refused := fv.refusedAt[t.ID]
		// With a problem, or terminal with work still due (a reflection,
		// say) and changed since the last eviction: put back after
		// Flushed. Work that stays due a whole round may never be done
		// (the task leaves; reload brings it back if it is).
		due := false
		if fsm.Next(t).Kind != fsm.ActNone && lingering[t.ID] != t.Version {
			fv.lingering[t.ID], due = t.Version, true
		}
		if due || refused || fv.missing[t.ID] || fv.holes[t.ID] {
			p, hasP := set.Progress(t.ID)
			keep = append(keep, kept{*t, p, hasP, set.InputSeq(t.ID)})
			return
		}
		var e *evictedTask
		if fv.compareAt != 0 {
			e, err = fv.digest(set, t)
		}
		fv.evicted[t.ID] = e
	})
	if err != nil {
		return err
	}
	set.Flushed(set.Seq())
	for i := range keep {
		k := &keep[i]
		delete(fv.evicted, k.t.ID)
		if k.hasP {
			set.RestoreTask(k.t, &k.p, k.inputSeq)
		} else {
			set.RestoreTask(k.t, nil, k.inputSeq)
		}
	}
	return nil
}

// digest is what compareProjections needs of t once it left the fold.
// Each encoding is hashed in one reused buffer.
func (fv *foldVerifier) digest(set *projection.Set, t *fsm.Task) (*evictedTask, error) {
	fv.buf = projection.AppendStoredTask(fv.buf[:0], t, set.InputSeq(t.ID))
	e := &evictedTask{task: maphash.Bytes(fv.seed, fv.buf)}
	sum := projection.Summarize(t)
	fv.buf = sum.AppendEncode(fv.buf[:0])
	e.summary, e.queueKey = maphash.Bytes(fv.seed, fv.buf), string(sum.QueueKey())
	if p, ok := set.Progress(t.ID); ok {
		var err error
		if fv.buf, err = p.AppendStored(fv.buf[:0], t); err != nil {
			return nil, err
		}
		e.progress, e.hasProgress = maphash.Bytes(fv.seed, fv.buf), true
	}
	return e, nil
}

// reload puts back a task that evict dropped, for a late event: its
// stream folded again from the log up to the fold's position, which gives
// the state it left with (the fold is pure).
func (fv *foldVerifier) reload(set *projection.Set, id string) error {
	if _, ok := fv.evicted[id]; !ok {
		return nil // never in memory: the fold refuses the event as from zero
	}
	delete(fv.evicted, id)
	fv.reloads++
	tmp := projection.NewSet(set.Options())
	it := fv.log.ReadStream(id, 1)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		if ev.Seq > set.Seq() {
			break
		}
		if fe, err := Decode(ev); err != nil {
			tmp.Refuse(fe, err)
		} else {
			tmp.Apply(fe)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("replay: verify: reading evicted task %s back: %w", id, err)
	}
	t, err := tmp.Tasks().Get(id)
	if err != nil {
		return fmt.Errorf("replay: verify: reading evicted task %s back: %w", id, err)
	}
	if p, ok := tmp.Progress(id); ok {
		set.RestoreTask(t, &p, tmp.InputSeq(id))
	} else {
		set.RestoreTask(t, nil, tmp.InputSeq(id))
	}
	return nil
}

func newFoldVerifier(rep *Report, vo *VerifyOptions) *foldVerifier {
	return &foldVerifier{rep: rep, vo: vo, versions: map[string]uint64{}, refusedAt: map[string]uint64{},
		holes: map[string]bool{}, missing: map[string]bool{}, undue: map[string]bool{}}
}

// fold runs Fold to b, recording problems, and steps over unreadable
// records so that one bad record does not hide the rest of the log.
func (fv *foldVerifier) fold(ctx context.Context, v *View, src Source, b Bound) error {
	for {
		res, err := Fold(ctx, v, src, FoldOptions{Bound: b, verify: fv})
		fv.rep.Events += res.Events
		fv.rep.Refused += res.Refused
		if res.Gaps > 0 && !fv.vo.AllowGaps {
			if !isLogSource(src) {
				fv.rep.add(Problem{Kind: ProblemSequence, Seq: res.FirstGap,
					Reason: fmt.Sprintf("global sequence has %d gap(s); the first missing is %d", res.Gaps, res.FirstGap)})
			}
		}
		if err == nil {
			return nil
		}
		var ce *eventlog.CorruptionError
		rs, resumable := src.(*resumeSource)
		if !errors.As(err, &ce) || !resumable {
			if errors.As(err, &ce) {
				fv.rep.add(Problem{Kind: ProblemRead, Seq: ce.Seq, Key: quoteKey(ce.Key), Reason: ce.Reason})
				fv.unread++
				return nil
			}
			return err
		}
		fv.rep.add(Problem{Kind: ProblemRead, Seq: ce.Seq, Key: quoteKey(ce.Key), Reason: ce.Reason})
		fv.unread++
		if ce.Seq == 0 || ce.Seq < rs.skip || (b.Seq != 0 && ce.Seq > b.Seq) {
			return nil // cannot step over it
		}
		rs.skip = ce.Seq + 1
	}
}

// isLogSource reports whether src reads a Pebble log, whose gaps are
// retention's holes (the audit checks them).
func isLogSource(src Source) bool {
	switch src.(type) {
	case *resumeSource, *auditSource:
		return true
	}
	return false
}

// check is the hook of a verify fold (FoldOptions.verify): it turns what
// the fold saw into problems. It keeps nothing of ch (the fold's Change is
// on its stack): what it records it copies.
func (fv *foldVerifier) check(ch *Change) error {
	ev := &ch.Raw
	at := func(kind ProblemKind, format string, args ...any) {
		fv.rep.add(Problem{Kind: kind, Seq: ev.Seq, ID: ev.ID.String(), Stream: ev.Stream, Type: ev.Type,
			Reason: fmt.Sprintf(format, args...)})
	}
	if fv.vo.OnEvent != nil {
		fv.vo.OnEvent(ev.Seq)
	}
	if fv.progress != nil && ev.Seq%1024 == 0 {
		fv.progress(eventlog.VerifyProgress{Phase: "fold", Done: ev.Seq, Total: fv.rep.Head})
	}
	if ch.Kind != projection.KindTask {
		if last := fv.versions[ev.Stream]; ev.Version != last+1 && (!fv.vo.AllowGaps || ev.Version <= last) {
			at(ProblemSequence, "stream version %d follows %d", ev.Version, last)
		}
		fv.versions[ev.Stream] = ev.Version
	}
	hole := ch.Kind == projection.KindTask && ch.Err != nil && ev.Version > ch.Before.Version+1
	switch err := ch.Err; {
	case err == nil:
	case errors.Is(err, fsm.ErrUnknownEvent), errors.Is(err, fsm.ErrMalformed), errors.Is(err, fsm.ErrSchema),
		errors.Is(err, projection.ErrMalformed):
		at(ProblemDecode, "%v", err)
	case hole && fv.holes[ev.Stream]:
		// Already reported: every later event of a task with a hole is
		// refused the same way.
	case hole:
		fv.holes[ev.Stream] = true
		if first, ok := fv.refusedAt[ev.Stream]; ok {
			at(ProblemSequence, "version %d follows version %d: the task stopped at the event refused at seq %d, so its later events are not folded", ev.Version, ch.Before.Version, first)
		} else {
			fv.missing[ev.Stream] = true
			at(ProblemSequence, "version %d follows version %d: an event of this task is missing or unreadable, so its later events are not folded", ev.Version, ch.Before.Version)
		}
	case ch.Kind == projection.KindMemory:
		at(ProblemMemory, "%v", err)
	default:
		at(ProblemTransition, "%v", err)
	}
	if ch.Err != nil && ch.Kind == projection.KindTask {
		if _, ok := fv.refusedAt[ev.Stream]; !ok {
			fv.refusedAt[ev.Stream] = ev.Seq
		}
	}
	if ch.Warn != nil {
		at(ProblemMemory, "%v", ch.Warn)
	}
	if ch.Kind == projection.KindTask && ch.Err == nil && ch.Before.State == fsm.StateNone && ev.Stream != ev.ID.String() {
		at(ProblemTaskID, "task stream %q is not named by the id %s of its first event %s", ev.Stream, ev.ID, ev.Type)
	}
	if ch.Kind == projection.KindTask && ch.Err == nil && !fv.undue[ev.Stream] {
		// Every event the loop appended answers the work the machine said
		// was due just before it (fsm.Next); inputs and commands (messages,
		// suspend, resume, cancel) come from outside and answer nothing.
		// Legal is not enough: a TASK_COMPLETED in completed is legal once,
		// but due only while the result is not recorded.
		if ch.Before.State != fsm.StateNone && !fsm.IsCommand(ch.Event.Type) {
			// fsm.Next keeps its argument from the escape analysis (a
			// call through the machine's interface): it gets a copy, so
			// that the fold's Change stays on the stack.
			fv.before = ch.Before
			if due := fsm.Next(&fv.before); !due.Answered(ch.Event.Type) {
				fv.undue[ev.Stream] = true
				at(ProblemUndue, "the task's first event that answers no due work: %s was due (%s)", due.Kind, due)
			}
		}
	}
	if ch.Kind == projection.KindTask && ch.Err == nil && len(fv.snaps) > 0 {
		k := snapKey(ch.After.ID, ch.After.Version)
		if _, ok := fv.snaps[string(k)]; ok {
			fv.rep.Snapshots++
			delete(fv.snaps, string(k))
			want, err := fsm.EncodeTask(ch.After)
			if err != nil {
				return err
			}
			raw, err := fv.log.GetAux(k)
			if err != nil {
				return err
			}
			// Read back as a reader would, the input from the event the
			// snapshot refers to: what it gives must be the fold's task.
			got, err := decodeStoredTask(fv.log, raw)
			var gotb []byte
			if err == nil {
				gotb, err = fsm.EncodeTask(got)
			}
			switch {
			case err != nil:
				fv.rep.add(Problem{Kind: ProblemSnapshot, Seq: ev.Seq, ID: ev.ID.String(), Stream: ev.Stream, Key: quoteKey(k),
					Reason: fmt.Sprintf("snapshot of task %s at version %d does not read back: %v", ch.After.ID, ch.After.Version, err)})
			case !bytes.Equal(gotb, want):
				fv.rep.add(Problem{Kind: ProblemSnapshot, Seq: ev.Seq, ID: ev.ID.String(), Stream: ev.Stream, Key: quoteKey(k),
					Reason: fmt.Sprintf("snapshot of task %s at version %d disagrees with the log", ch.After.ID, ch.After.Version)})
			}
		}
	}
	if fv.view != nil {
		n := fv.vo.evictEvery
		if n == 0 {
			n = evictEvery
		}
		if fv.since++; fv.since >= n {
			fv.since = 0
			return fv.evict()
		}
	}
	return nil
}

// snapshotKeys lists the persisted snapshots.
func snapshotKeys(l *eventlog.Log) (map[string]struct{}, error) {
	out := map[string]struct{}{}
	it := l.ScanAux([]byte(prefSnap))
	defer it.Close()
	for it.Next() {
		out[string(it.Key())] = struct{}{}
	}
	return out, it.Err()
}

// compareProjections compares the persisted projections with a fresh fold
// at their sequence.
//
// Where the log itself is damaged (records the fold could not read) the
// fresh fold cannot be right either, so the tasks that lost an event and
// the stats (which count every event) are not compared: the damage is
// already reported where it is.
func compareProjections(ctx context.Context, rep *Report, st *store, fresh *View, seq uint64, fv *foldVerifier) error {
	bad := func(key []byte, format string, args ...any) {
		rep.add(Problem{Kind: ProblemProjection, Seq: seq, Key: quoteKey(key), Reason: fmt.Sprintf(format, args...)})
	}
	// The fresh fold is compared task by task as the persisted records are
	// read, never encoded whole at once (a Dump): that would double verify's
	// peak memory.
	fresh.mu.RLock()
	defer fresh.mu.RUnlock()
	set := fresh.set
	freshStats, err := set.Stats().Encode()
	if err != nil {
		return err
	}
	freshMemory, err := set.Memory().Encode()
	if err != nil {
		return err
	}
	if fv.unread > 0 {
		rep.ProjectionsNote = "persisted stats not compared: the log has unreadable records"
	} else if fv.archived {
		// The stats count the history the daemon folded, archived tasks
		// included; a fold of the live log cannot (docs/retention.md).
		rep.ProjectionsNote = "persisted stats not compared: retention archived part of the log"
	} else if got, err := st.log.GetAux(keyStats); errors.Is(err, eventlog.ErrNotFound) {
		bad(keyStats, "persisted stats missing")
	} else if err != nil {
		return err
	} else if !bytes.Equal(got, freshStats) {
		bad(keyStats, "persisted stats disagree with the log at seq %d", seq)
	}
	if mem, err := st.getMemory(); err != nil {
		bad([]byte(prefFact), "persisted memory does not decode: %v", err)
	} else if got, err := mem.Encode(); err != nil {
		return err
	} else if !bytes.Equal(got, freshMemory) {
		bad([]byte(prefFact), "persisted memory disagrees with the log at seq %d", seq)
	}
	tasks := set.Tasks().ListAll()
	byID := make(map[string]*fsm.Task, len(tasks))
	active := map[string]bool{}
	for i := range tasks {
		byID[tasks[i].ID] = &tasks[i]
		if !tasks[i].IsTerminal() { // the machine's rule: a failed dispatch task may be retried
			active[tasks[i].ID] = true
		}
	}
	// want is what the fresh fold has for a task under prefix, if anything.
	want := func(prefix string, t *fsm.Task) ([]byte, bool, error) {
		switch prefix {
		case prefTask:
			fv.buf = projection.AppendStoredTask(fv.buf[:0], t, set.InputSeq(t.ID))
			return fv.buf, true, nil
		case prefSum:
			sum := projection.Summarize(t)
			fv.buf = sum.AppendEncode(fv.buf[:0])
			return fv.buf, true, nil
		}
		p, ok := set.Progress(t.ID)
		if !ok {
			return nil, false, nil
		}
		fv.buf, err = p.AppendStored(fv.buf[:0], t)
		return fv.buf, true, err
	}
	for _, kind := range []struct{ prefix, what string }{{prefTask, "task"}, {prefSum, "summary"}, {prefProg, "progress"}} {
		seen := make(map[string]bool, len(tasks)+len(fv.evicted))
		it := st.log.ScanAuxBorrowed([]byte(kind.prefix))
		for n := 0; it.Next(); n++ {
			if n&1023 == 0 {
				if err := ctx.Err(); err != nil {
					it.Close()
					return err
				}
			}
			id := string(it.Key()[len(kind.prefix):])
			seen[id] = true
			if fv.missing[id] {
				continue
			}
			if e := fv.evicted[id]; e != nil {
				// Left the fold (evict): compared by hash.
				h, has := e.task, true
				switch kind.prefix {
				case prefSum:
					h = e.summary
				case prefProg:
					h, has = e.progress, e.hasProgress
				}
				switch {
				case !has:
					bad(it.Key(), "persisted %s of task %s, which the log does not have at seq %d", kind.what, id, seq)
				case maphash.Bytes(fv.seed, it.Value()) != h:
					bad(it.Key(), "persisted %s of task %s disagrees with the log at seq %d", kind.what, id, seq)
				}
				continue
			}
			var w []byte
			ok := false
			if t := byID[id]; t != nil {
				if w, ok, err = want(kind.prefix, t); err != nil {
					it.Close()
					return err
				}
			}
			switch {
			case !ok:
				bad(it.Key(), "persisted %s of task %s, which the log does not have at seq %d", kind.what, id, seq)
			case !bytes.Equal(it.Value(), w):
				bad(it.Key(), "persisted %s of task %s disagrees with the log at seq %d", kind.what, id, seq)
			}
		}
		err := it.Err()
		it.Close()
		if err != nil {
			return err
		}
		var lost []string
		for i := range tasks {
			id := tasks[i].ID
			if seen[id] || fv.missing[id] {
				continue
			}
			if kind.prefix == prefProg {
				if _, ok := set.Progress(id); !ok {
					continue
				}
			}
			lost = append(lost, id)
		}
		for id, e := range fv.evicted {
			if e != nil && !seen[id] && (kind.prefix != prefProg || e.hasProgress) {
				lost = append(lost, id)
			}
		}
		sort.Strings(lost)
		for _, id := range lost {
			bad(taskKey(kind.prefix, id), "%s of task %s missing from the persisted projections", kind.what, id)
		}
	}
	seen := map[string]bool{}
	it := st.log.ScanAuxBorrowed([]byte(prefActive))
	for it.Next() {
		id := string(it.Key()[len(prefActive):])
		seen[id] = true
		if !active[id] && !fv.missing[id] {
			bad(it.Key(), "task %s is marked active but is not at seq %d", id, seq)
		}
	}
	err = it.Err()
	it.Close()
	if err != nil {
		return err
	}
	for _, id := range sortedBoolKeys(active) {
		if !seen[id] && !fv.missing[id] {
			bad(taskKey(prefActive, id), "active task %s is not marked active", id)
		}
	}
	return checkQueueIndex(st, tasks, fv, bad)
}

// checkQueueIndex reports the tasks that the queue index (proj/q/) does
// not list at their place in the queue order: they would be missing from
// a list in that order. Entries left behind by a priority change (stale)
// are harmless: a list skips them.
func checkQueueIndex(st *store, tasks []fsm.Task, fv *foldVerifier, bad func([]byte, string, ...any)) error {
	missing := fv.missing
	want := make(map[string]string, len(tasks)) // id -> queue key
	for i := range tasks {
		s := projection.Summarize(&tasks[i])
		want[s.ID] = string(s.QueueKey())
	}
	for id, e := range fv.evicted {
		if e != nil {
			want[id] = e.queueKey
		}
	}
	it := st.log.ScanAuxBorrowed([]byte(prefQueue))
	defer it.Close()
	for it.Next() {
		key := string(it.Key()[len(prefQueue):])
		if len(key) > projection.QueueKeyLen && want[key[projection.QueueKeyLen:]] == key {
			delete(want, key[projection.QueueKeyLen:])
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		if !missing[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		bad(append([]byte(prefQueue), want[id]...), "task %s is missing from the queue order index", id)
	}
	return nil
}

func sortedBoolKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func quoteKey(k []byte) string {
	if k == nil {
		return ""
	}
	return fmt.Sprintf("%q", k)
}
