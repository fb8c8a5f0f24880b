package replay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/internal/yield"
	"github.com/pegasus-engine/pegasus/projection"
)

// The persisted projections live in the log's aux key space (eventlog
// WriteAux) under "proj/". Keys, relative to the aux namespace:
//
//	proj/meta                         meta                 format, identity, the seq reflected
//	proj/stats                        projection.Stats
//	proj/mf/<path>                    projection.Fact      one long-term memory fact
//	proj/me/<seq (8)>                 projection.Episode   one episode, by the seq that recorded it
//	proj/t/<task id>                  EncodeStoredTask     every task, as of its last change
//	proj/s/<task id>                  projection.Summary   what task lists scan
//	proj/g/<task id>                  Progress.EncodeStored without the input text the task holds
//	proj/a/<task id>                  (empty)              non-terminal tasks: loaded at start
//	proj/q/<queue key (20)><task id>  (empty)              the queue order index (projection.QueueKey)
//	proj/n/<task id> 0x00 <ver (8)>   EncodeStoredTask     per-task snapshot at stream version ver
//
// A task record or snapshot refers to a large input text (1 KiB or more,
// projection.InputRefMin) by the sequence of the event whose body holds
// it, the event that created the task, instead of copying it; reading the
// task back reads that event (resolveInput). Retention removes a task's
// records in the batch that removes its events, so a reference never
// outlives its event; one that does is reported (ErrInputGone), never
// served as an empty input.
//
// Integers are big-endian. A checkpoint writes everything that changed
// since the previous one and the meta atomically, in one synced batch or
// one ingested sstable (store.write), so a crash leaves either the old or
// the new checkpoint, never a mix. Task ids are ULID strings (no 0x00).
var (
	keyPrefix   = []byte("proj/")
	keyMeta     = []byte("proj/meta")
	keyStats    = []byte("proj/stats")
	prefFact    = "proj/mf/"
	prefEpisode = "proj/me/"
	prefTask    = "proj/t/"
	prefSum     = "proj/s/"
	prefProg    = "proj/g/"
	prefActive  = "proj/a/"
	prefQueue   = "proj/q/"
	prefSnap    = "proj/n/"
)

// FormatVersion is the layout of the persisted projections. A change to
// the key layout bumps it; like projection.Version, a mismatch means
// rebuild.
//
// Version 2 added the queue index (proj/q/). Version 3 stores progress
// without the description that is its task's input text
// (projection.Progress.EncodeStored). Version 4 stores tasks with a marker
// byte and refers to a large input text by the event that holds it
// (projection.EncodeStoredTask).
//
// Persisted: stored in proj/meta.
const FormatVersion = 4

// ErrInputGone is returned when a stored task refers to its input text in
// an event the log no longer holds (removed by retention, or lost): the
// task cannot be read back whole, and is never served with an empty input.
var ErrInputGone = errors.New("replay: the event holding a task's input is gone")

// meta is the value of proj/meta.
type meta struct {
	Format   int    `msgpack:"format"`
	Identity string `msgpack:"identity"`
	Seq      uint64 `msgpack:"seq"`
}

func taskKey(prefix, id string) []byte { return append([]byte(prefix), id...) }

func snapKey(id string, version uint64) []byte {
	k := append([]byte(prefSnap), id...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, version)
}

func snapPrefix(id string) []byte { return append(append([]byte(prefSnap), id...), 0) }

// store reads and writes the persisted projections of one log.
type store struct {
	log    *eventlog.Log
	ingest int // checkpoint size from which it is ingested; 0: DefaultIngestBytes
	// written counts the bytes (keys and values) of the checkpoints
	// written, for the benchmarks.
	written atomic.Int64

	// spare holds what the last checkpoint encoded into, for the next
	// (store.write): a checkpoint's bytes allocated anew each time were
	// about a twentieth of what a recorded call allocated. Bounded by
	// keep (keepChunks when it is less) and keepOps.
	spareMu sync.Mutex
	spare   writeBufs
	// keep is how many bytes of chunks spare may hold: as many as the
	// changes not yet written that start a checkpoint
	// (Options.pendingCheckpoint), so that a checkpoint that large
	// encodes into the last one's buffers.
	keep int64
}

// writeBufs are the buffers a checkpoint encodes into: the arena's
// chunks and the lists of writes before and after inKeyOrder.
type writeBufs struct {
	chunks   [][]byte
	ops, out []kv
}

// kv is one write of a checkpoint.
type kv struct {
	k, v []byte
	del  bool
}

// What a store keeps between checkpoints at most: 2 MiB of chunks, or
// store.keep bytes if more, and two lists of 32,768 writes (about a
// checkpoint of 6,000 tasks each).
const (
	keepChunks = 8
	keepOps    = 32 << 10
)

// takeBufs returns the buffers the last checkpoint left, and release
// keeps bufs for the next one, within the bounds. Nothing the buffers
// held may be referred to any more: a write is done with its values when
// it returns (a batch and an sstable copy them).
func (s *store) takeBufs() writeBufs {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	b := s.spare
	s.spare = writeBufs{}
	return b
}

func (s *store) release(b writeBufs) {
	b.chunks = b.chunks[:min(len(b.chunks), max(keepChunks, int(s.keep/arenaChunk)))]
	if cap(b.ops) > keepOps {
		b.ops = nil
	}
	if cap(b.out) > keepOps {
		b.out = nil
	}
	clear(b.ops[:cap(b.ops)]) // no pointers into old chunks: a kept chunk is all the memory kept
	clear(b.out[:cap(b.out)])
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	s.spare = b
}

// load returns the persisted projections as a Set holding the active
// tasks, or (nil, reason) when they must be rebuilt from zero. An I/O error
// is returned as is.
//
// Active tasks are loaded while the Set holds less than half the budget; the
// rest are recorded from their summaries only (projection.Set.RestoreCold)
// and read when needed.
func (s *store) load(o projection.Options, identity string, head uint64, budget int64) (*projection.Set, string, error) {
	raw, err := s.log.GetAux(keyMeta)
	if errors.Is(err, eventlog.ErrNotFound) {
		return nil, "no persisted projections", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("replay: reading projections: %w", err)
	}
	var m meta
	if err := codec.Decode(raw, &m); err != nil {
		return nil, fmt.Sprintf("unreadable projection meta: %v", err), nil
	}
	switch {
	case m.Format != FormatVersion:
		return nil, fmt.Sprintf("projection layout %d, this build writes %d", m.Format, FormatVersion), nil
	case m.Identity != identity:
		return nil, fmt.Sprintf("projections built by %q, this build is %q", m.Identity, identity), nil
	case m.Seq > head:
		return nil, fmt.Sprintf("projections at seq %d are ahead of the log head %d", m.Seq, head), nil
	}
	stats, err := s.getStats(o.Stats)
	if err != nil {
		return nil, err.Error(), nil
	}
	mem, err := s.getMemory()
	if err != nil {
		return nil, err.Error(), nil
	}
	set := projection.Restore(o, m.Seq, stats, mem)
	it := s.log.ScanAux([]byte(prefActive))
	defer it.Close()
	for it.Next() {
		id := string(it.Key()[len(prefActive):])
		if set.Bytes().Total() >= budget/2 {
			sum, err := s.loadSummary(id)
			if errors.Is(err, projection.ErrTaskNotFound) || fsmMalformed(err) {
				return nil, fmt.Sprintf("active task %s: %v", id, err), nil
			}
			if err != nil {
				return nil, "", err
			}
			set.RestoreCold(&sum)
			continue
		}
		st, err := s.loadStored(id, true)
		if errors.Is(err, projection.ErrTaskNotFound) || errors.Is(err, ErrInputGone) || fsmMalformed(err) {
			return nil, fmt.Sprintf("active task %s: %v", id, err), nil
		}
		if err != nil {
			return nil, "", err
		}
		set.RestoreTask(st.task, st.progress, st.inputSeq)
	}
	if err := it.Err(); err != nil {
		return nil, "", fmt.Errorf("replay: reading projections: %w", err)
	}
	return set, "", nil
}

func fsmMalformed(err error) bool {
	return errors.Is(err, fsm.ErrMalformed) || errors.Is(err, projection.ErrMalformed)
}

func (s *store) getStats(o projection.StatsOptions) (*projection.Stats, error) {
	raw, err := s.log.GetAux(keyStats)
	if errors.Is(err, eventlog.ErrNotFound) {
		return projection.NewStats(o), nil
	}
	if err != nil {
		return nil, err
	}
	return projection.DecodeStats(raw, o)
}

// getMemory reads the persisted memory projection.
func (s *store) getMemory() (*projection.Memory, error) {
	var facts []projection.Fact
	var episodes []projection.Episode
	it := s.log.ScanAux([]byte(prefFact))
	for it.Next() {
		f, err := projection.DecodeFact(it.Value())
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("memory fact %q: %w", it.Key(), err)
		}
		facts = append(facts, f)
	}
	err := it.Err()
	it.Close()
	if err != nil {
		return nil, err
	}
	it = s.log.ScanAux([]byte(prefEpisode))
	defer it.Close()
	for it.Next() {
		e, err := projection.DecodeEpisode(it.Value())
		if err != nil {
			return nil, fmt.Errorf("memory episode %q: %w", it.Key(), err)
		}
		episodes = append(episodes, e)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	return projection.RestoreMemory(facts, episodes), nil
}

func episodeKey(seq uint64) []byte { return binary.BigEndian.AppendUint64([]byte(prefEpisode), seq) }

// loadTask reads a persisted task (and its progress if withProgress).
func (s *store) loadTask(id string, withProgress bool) (fsm.Task, *projection.Progress, error) {
	st, err := s.loadStored(id, withProgress)
	return st.task, st.progress, err
}

// storedTask is a task read back from the store, whole.
type storedTask struct {
	task     fsm.Task
	progress *projection.Progress // nil if none, or not asked for
	inputSeq uint64               // the event holding its input, if the record refers to it
}

// loadStored reads a persisted task (and its progress if withProgress),
// with its input text read from the log when the record refers to it.
func (s *store) loadStored(id string, withProgress bool) (storedTask, error) {
	t, ref, err := s.loadRecord(id)
	if err != nil {
		return storedTask{}, err
	}
	if err := resolveInput(s.log, &t, ref); err != nil {
		return storedTask{}, err
	}
	st := storedTask{task: t, inputSeq: ref.Seq}
	if !withProgress {
		return st, nil
	}
	raw, err := s.log.GetAux(taskKey(prefProg, id))
	if errors.Is(err, eventlog.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return storedTask{}, err
	}
	p, err := projection.DecodeStored(raw, &st.task)
	if err != nil {
		return storedTask{}, fmt.Errorf("replay: persisted progress of %s: %w", id, err)
	}
	st.progress = &p
	return st, nil
}

// loadRecord reads a persisted task record as stored: without its input
// text when ref is not zero (resolveInput puts it back). Enough for its
// state, versions and times.
func (s *store) loadRecord(id string) (fsm.Task, projection.InputRef, error) {
	raw, err := s.log.GetAux(taskKey(prefTask, id))
	if errors.Is(err, eventlog.ErrNotFound) {
		return fsm.Task{}, projection.InputRef{}, fmt.Errorf("%w: %s", projection.ErrTaskNotFound, id)
	}
	if err != nil {
		return fsm.Task{}, projection.InputRef{}, err
	}
	t, ref, err := projection.DecodeStoredTask(raw)
	if err != nil {
		return fsm.Task{}, projection.InputRef{}, fmt.Errorf("replay: persisted task %s: %w", id, err)
	}
	return t, ref, nil
}

// decodeStoredTask decodes a persisted task record or snapshot and reads
// its input text back from l when the record refers to it.
func decodeStoredTask(l *eventlog.Log, raw []byte) (fsm.Task, error) {
	t, ref, err := projection.DecodeStoredTask(raw)
	if err != nil {
		return fsm.Task{}, err
	}
	if err := resolveInput(l, &t, ref); err != nil {
		return fsm.Task{}, err
	}
	return t, nil
}

// resolveInput puts into t the input text its stored record refers to
// (ref; nothing to do when zero), read from the event at ref.Seq.
func resolveInput(l *eventlog.Log, t *fsm.Task, ref projection.InputRef) error {
	if ref.IsZero() {
		return nil
	}
	ev, err := l.GetSeq(ref.Seq)
	if errors.Is(err, eventlog.ErrNotFound) {
		return fmt.Errorf("%w: task %s refers to its input in the event at seq %d: %v", ErrInputGone, t.ID, ref.Seq, err)
	}
	if err != nil {
		return fmt.Errorf("replay: reading the input of task %s at seq %d: %w", t.ID, ref.Seq, err)
	}
	fe, err := Decode(ev)
	if err != nil {
		return fmt.Errorf("replay: reading the input of task %s at seq %d: %w", t.ID, ref.Seq, err)
	}
	if err := ref.Resolve(t, fe); err != nil {
		return fmt.Errorf("replay: persisted task %s: %w", t.ID, err)
	}
	return nil
}

// loadSummary reads a persisted task summary.
func (s *store) loadSummary(id string) (projection.Summary, error) {
	raw, err := s.log.GetAux(taskKey(prefSum, id))
	if errors.Is(err, eventlog.ErrNotFound) {
		return projection.Summary{}, fmt.Errorf("%w: %s has no summary", projection.ErrTaskNotFound, id)
	}
	if err != nil {
		return projection.Summary{}, err
	}
	sum, err := projection.DecodeSummary(raw)
	if err != nil {
		return projection.Summary{}, fmt.Errorf("replay: persisted summary of %s: %w", id, err)
	}
	return sum, nil
}

// restoreTask puts an evicted task back into set before one of its events
// is folded. A task never persisted (its stream began with a refused
// event) is left out: the fold then refuses the event as it would from
// zero.
func (s *store) restoreTask(set *projection.Set, id string) error {
	st, err := s.loadStored(id, true)
	if errors.Is(err, projection.ErrTaskNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replay: loading evicted task: %w (run verify; delete the proj/ keys to rebuild)", err)
	}
	set.RestoreTask(st.task, st.progress, st.inputSeq)
	return nil
}

// DefaultIngestBytes is the size from which a checkpoint is ingested as
// an sstable rather than committed as a batch (store.write).
const DefaultIngestBytes = 64 << 10

// write persists a checkpoint atomically: everything that changed and the
// meta. It runs without the View's lock: p shares no mutable memory with
// the fold.
//
// A small checkpoint is one synced batch. One of s.ingest bytes or more
// is ingested as one sstable (eventlog.Log.IngestAux): a large batch in
// the write-ahead log held up every append committed behind it, since
// Pebble publishes batches in commit order. Each waited for the batch to
// be copied into the memtable (9 to 45 ms for 2 MiB on a two-core VM,
// where the first touch of a fresh memtable's pages is slow) and for its
// bytes to be synced with its own. An sstable is written and synced by
// the checkpoint beside the appends, which wait only for the MANIFEST
// edit that adds it. Both are atomic and durable when write returns.
func (s *store) write(ctx context.Context, p *projection.Pending, identity string) error {
	bufs := s.takeBufs()
	ops := slices.Grow(bufs.ops[:0], 5*len(p.Tasks)+len(p.Snapshots)+len(p.Facts)+len(p.Episodes)+2) // five keys at most per task
	a := arena{spare: bufs.chunks}
	defer func() {
		bufs.chunks, bufs.ops = a.chunks(), ops
		s.release(bufs)
	}()
	size := 0
	var pace yield.Pacer // a background encoding: let the fold and the appends run
	add := func(k, v []byte, del bool) {
		pace.Step(len(k) + len(v))
		ops = append(ops, kv{k, v, del})
		size += len(k) + len(v)
	}
	for i := range p.Tasks {
		if i&255 == 0 {
			if err := ctx.Err(); err != nil {
				return err // encoding a large checkpoint gives up at the stop deadline
			}
		}
		r := &p.Tasks[i]
		id := r.Task.ID
		a.reserve(arenaTask + len(r.Task.Context.InputText))
		at := len(a.b)
		a.b = projection.AppendStoredTask(a.b, &r.Task, r.InputSeq)
		tb := a.cut(at)
		add(a.key(prefTask, id), tb, false)
		at = len(a.b)
		a.b = r.Summary.AppendEncode(a.b)
		sb := a.cut(at)
		add(a.key(prefSum, id), sb, false)
		at = len(a.b)
		a.b = r.Summary.AppendQueueKey(append(a.b, prefQueue...))
		add(a.cut(at), nil, false)
		if r.Progress != nil {
			at = len(a.b)
			b, err := r.Progress.AppendStored(a.b, &r.Task)
			if err != nil {
				return err
			}
			a.b = b
			pb := a.cut(at)
			add(a.key(prefProg, id), pb, false)
		}
		switch {
		case !r.Task.IsTerminal():
			add(a.key(prefActive, id), nil, false)
		case !r.Unlisted:
			// Finished: its listing goes. One created and finished
			// between two checkpoints never had one, and gets no
			// tombstone for the scan of proj/a at start to step over.
			add(a.key(prefActive, id), nil, true)
		}
	}
	for i := range p.Snapshots {
		t := &p.Snapshots[i].Task
		b, err := projection.EncodeStoredTask(t, p.Snapshots[i].InputSeq)
		if err != nil {
			return err
		}
		add(snapKey(t.ID, t.Version), b, false)
	}
	add(keyStats, p.Stats, false)
	for i := range p.Facts {
		b, err := p.Facts[i].Encode()
		if err != nil {
			return err
		}
		add(taskKey(prefFact, p.Facts[i].Path), b, false)
	}
	for i := range p.Episodes {
		b, err := p.Episodes[i].Encode()
		if err != nil {
			return err
		}
		add(episodeKey(p.Episodes[i].Seq), b, false)
	}
	mb, err := codec.Encode(&meta{Format: FormatVersion, Identity: identity, Seq: p.Seq})
	if err != nil {
		return err
	}
	add(keyMeta, mb, false)
	bufs.out = inKeyOrder(bufs.out, ops, func(o kv) []byte { return o.k })
	sorted := bufs.out
	fill := func(b *eventlog.AuxBatch) error {
		b.SplitTables(len(prefTask)) // one table per key range: "proj/t/", "proj/s/", ...
		b.Grow(len(sorted))
		for _, o := range sorted {
			if o.del {
				b.Delete(o.k)
			} else {
				b.Set(o.k, o.v)
			}
		}
		return nil
	}
	limit := s.ingest
	if limit <= 0 {
		limit = DefaultIngestBytes
	}
	write := s.log.IngestAux
	if size < limit {
		write = s.log.WriteAux
	}
	if err := write(ctx, fill); err != nil {
		return err
	}
	s.written.Add(int64(size))
	return nil
}

// arena holds the keys and values a checkpoint encodes, appended one
// after the other into shared chunks: a few allocations per checkpoint
// where each task's record, summary, progress and keys took one or two
// each, and none once a store reuses the chunks of the last checkpoint
// (spare). What it hands out is capped (cut), so nothing appended later
// writes over it; a chunk that an encoding outgrows is copied by append
// and the earlier parts stay valid in the old one.
type arena struct {
	b     []byte
	used  [][]byte // chunks filled, of arenaChunk bytes
	spare [][]byte // chunks to fill first
}

// arenaChunk is the size of the arena's chunks, arenaTask the room a
// task's records and keys usually take at most, besides its input text.
const (
	arenaChunk = 256 << 10
	arenaTask  = 8 << 10
)

// reserve makes room for n bytes, in a new chunk if the current one is
// short of it.
func (a *arena) reserve(n int) {
	if cap(a.b)-len(a.b) >= n {
		return
	}
	a.keep()
	if k := len(a.spare); k > 0 && n <= arenaChunk {
		a.b, a.spare = a.spare[k-1][:0], a.spare[:k-1]
		return
	}
	a.b = make([]byte, 0, max(arenaChunk, n))
}

// keep sets the current chunk aside for chunks, if it is of the usual
// size (a larger one, for a large input, is left to the collector).
func (a *arena) keep() {
	if cap(a.b) == arenaChunk {
		a.used = append(a.used, a.b)
	}
	a.b = nil
}

// chunks returns every chunk of the arena, to reuse once nothing refers
// to what it handed out.
func (a *arena) chunks() [][]byte {
	a.keep()
	return append(a.used, a.spare...)
}

// cut returns what was appended since a.b held at bytes.
func (a *arena) cut(at int) []byte { return a.b[at:len(a.b):len(a.b)] }

// key appends the key prefix+id and returns it.
func (a *arena) key(prefix, id string) []byte {
	at := len(a.b)
	a.b = append(append(a.b, prefix...), id...)
	return a.cut(at)
}

// inKeyOrder returns ops sorted by key(op), in dst's array if it is
// large enough, so that the ingest that
// writes them has no sorting left to do. A checkpoint's writes come task
// by task, in the order of the tasks' ids: each key range ("proj/t/",
// "proj/s/", ...) is in order already but for a few (the queue index, the
// snapshots, memory), and the ranges are interleaved. So it puts each op
// in its range (a counting sort on the ranges, in key order), then sorts
// the ranges not in order yet. Keys are unique.
func inKeyOrder[T any](dst, ops []T, key func(T) []byte) []T {
	type rangeKey [7]byte // a key's first len(prefTask) bytes ("proj/t/"), zeros after a shorter key
	var ranges []rangeKey // the ranges met, a dozen at most
	var count []int
	in := make([]int, len(ops)) // ops[i] is in ranges[in[i]]
	for i, o := range ops {
		var r rangeKey
		copy(r[:], key(o))
		at := slices.Index(ranges, r)
		if at < 0 {
			at = len(ranges)
			ranges, count = append(ranges, r), append(count, 0)
		}
		in[i] = at
		count[at]++
	}
	order := make([]int, len(ranges)) // the ranges in key order
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(ranges[a][:], ranges[b][:]) })
	start, at := make([]int, len(ranges)), 0
	for _, r := range order {
		start[r] = at
		at += count[r]
	}
	out := slices.Grow(dst[:0], len(ops))[:len(ops)]
	next := slices.Clone(start)
	for i, o := range ops {
		out[next[in[i]]] = o
		next[in[i]]++
	}
	cmp := func(a, b T) int { return bytes.Compare(key(a), key(b)) }
	for r := range ranges {
		part := out[start[r] : start[r]+count[r]]
		if !slices.IsSortedFunc(part, cmp) {
			slices.SortFunc(part, cmp)
		}
	}
	return out
}

// clear deletes every persisted projection key.
func (s *store) clear(ctx context.Context) error {
	end := append([]byte(nil), keyPrefix...)
	end[len(end)-1]++
	return s.log.WriteAux(ctx, func(b *eventlog.AuxBatch) error {
		b.DeleteRange(keyPrefix, end)
		return nil
	})
}
