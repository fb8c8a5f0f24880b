package replay

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// Query asks for one page of the task list. The HTTP API and the CLI
// share it.
type Query struct {
	projection.Filter
	// Cursor continues a previous page: Page.Next, opaque. Empty starts at
	// the beginning.
	Cursor string
	// Limit is the page size: 1 to MaxLimit; 0 means DefaultLimit.
	Limit int
	// Queue lists in the queue order (projection.QueueKey: most urgent
	// first across machines, then oldest first) instead of task id order.
	Queue bool
	// Desc reverses the order: newest first (id order), least urgent first
	// (queue order). The default is oldest first (creation order, which is
	// task id order).
	Desc bool
}

// Page sizes.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// ErrBadCursor is returned for a cursor that Tasks did not produce or that
// belongs to a query in another order or direction.
var ErrBadCursor = errors.New("replay: bad cursor")

// Page is one page of a task list.
type Page struct {
	Tasks []projection.Summary `json:"tasks"`
	// Next is the cursor of the following page, "" on the last page.
	Next string `json:"next_cursor,omitempty"`
}

// listOrder is the order of one query: which persisted index it seeks in
// and how it names a task's position.
type listOrder struct{ queue, desc bool }

// tag prefixes the cursors of the order: "a." / "d." (id order, the format
// cursors have always had), "qa." / "qd." (queue order).
func (o listOrder) tag() string {
	t := "a."
	if o.desc {
		t = "d."
	}
	if o.queue {
		t = "q" + t
	}
	return t
}

// index is the persisted index the order seeks in: the summaries by id,
// or the queue index (key: projection.QueueKey, no value).
func (o listOrder) index() string {
	if o.queue {
		return prefQueue
	}
	return prefSum
}

// key is a task's position in the order, as the index sorts it.
func (o listOrder) key(buf []byte, machine string, priority int, created time.Time, id string) []byte {
	if o.queue {
		return projection.AppendQueueKey(buf[:0], machine, priority, created, id)
	}
	return append(buf[:0], id...)
}

// follows reports whether position a comes after b in the order; the
// conversion in the comparison does not allocate, which keeps a scan of
// every task in memory free of allocations for those it skips.
func (o listOrder) follows(a []byte, b string) bool {
	if o.desc {
		return string(a) < b
	}
	return string(a) > b
}

// before reports whether position a comes before b in the order.
func (o listOrder) before(a, b string) bool {
	if o.desc {
		return a > b
	}
	return a < b
}

// Cursors are the order's tag followed by the position of the last task of
// the page: its id (id order), or its queue key in hex then its id (queue
// order). Positions never change for a task in id order; in queue order
// they change only if a task's priority does (between its input and its
// TASK_CREATED), so a cursor is stable under concurrent changes.
func (o listOrder) cursor(key string) string {
	if o.queue {
		return o.tag() + hex.EncodeToString([]byte(key[:projection.QueueKeyLen])) + key[projection.QueueKeyLen:]
	}
	return o.tag() + key
}

func (o listOrder) parseCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	bad := fmt.Errorf("%w: %q", ErrBadCursor, c)
	rest, ok := strings.CutPrefix(c, o.tag())
	if !ok {
		return "", bad
	}
	var pos []byte
	if o.queue {
		if len(rest) < 2*projection.QueueKeyLen {
			return "", bad
		}
		b, err := hex.DecodeString(rest[:2*projection.QueueKeyLen])
		if err != nil {
			return "", bad
		}
		pos, rest = b, rest[2*projection.QueueKeyLen:]
	}
	if len(rest) != ulid.EncodedSize {
		return "", bad
	}
	if _, err := ulid.ParseStrict(rest); err != nil {
		return "", bad
	}
	return string(append(pos, rest...)), nil
}

// listed is a task on its way to a page, with its position.
type listed struct {
	key string
	sum projection.Summary
}

// Tasks returns one page of the tasks that match q, in task id order
// (creation order) or, with q.Queue, in the queue order; q.Desc reverses
// either. It merges the tasks in memory (the newest state of every active
// or recently changed task) with the persisted read model (every other
// task), so terminal tasks that left memory are listed too.
//
// A page seeks: the persisted index (summaries by id, or the queue index)
// is read from the cursor on, and only until the page is full, so page
// 1,000 costs what page 1 does. With a filter, the entries read are those
// up to the limit+1-th match: a filter that keeps a fraction f of the
// tasks reads about limit/f entries. The tasks in memory are scanned on
// every page (for the daemon, those in flight and those changed since the
// last checkpoint; for a View that does not persist, every task). A filter
// on unfinished states only (liveStates: the queue's waiting and running
// tasks) reads no index at all: those tasks are all in memory.
func (v *View) Tasks(ctx context.Context, q Query) (Page, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return Page{}, fmt.Errorf("replay: limit %d: give 1 to %d", limit, MaxLimit)
	}
	o := listOrder{queue: q.Queue, desc: q.Desc}
	after, err := o.parseCursor(q.Cursor)
	if err != nil {
		return Page{}, err
	}

	// Memory first, under the lock: the best limit+1 matches past the
	// cursor. A checkpoint writes tasks before it evicts them, so a task
	// missing from this scan is already persisted at least as new as what
	// memory had.
	var mem []listed
	var inMemory map[string]struct{}
	var buf []byte
	var cold []fsm.Task
	live := liveStates(q.States)
	v.mu.RLock()
	st := v.st
	if st != nil && live {
		cold = v.set.Tasks().Cold(q.States...)
	} else if st != nil {
		inMemory = make(map[string]struct{}, v.set.Tasks().Len())
	}
	v.set.Tasks().Each(func(t *fsm.Task) {
		if inMemory != nil {
			inMemory[t.ID] = struct{}{}
		}
		buf = o.key(buf, t.Machine.Name, t.Priority, t.CreatedAt, t.ID)
		if after != "" && !o.follows(buf, after) {
			return
		}
		if len(mem) > limit && o.follows(buf, mem[limit].key) {
			return // no better than the worst kept (positions are unique)
		}
		s := projection.Summarize(t)
		if !q.Filter.Match(&s) {
			return
		}
		k := string(buf)
		i := sort.Search(len(mem), func(i int) bool { return o.before(k, mem[i].key) })
		if len(mem) <= limit {
			mem = append(mem, listed{})
		}
		copy(mem[i+1:], mem[i:])
		mem[i] = listed{key: k, sum: s}
	})
	v.mu.RUnlock()

	var persisted []listed
	switch {
	case st != nil && live:
		// Every task in these states is in memory, or left it to stay
		// within the budget (its stub is cold, its summary persisted and
		// current): nothing else needs reading.
		for i := range cold {
			sum, err := st.loadSummary(cold[i].ID)
			if err != nil {
				return Page{}, err
			}
			k := string(o.key(buf, sum.Machine, sum.Priority, sum.CreatedAt, sum.ID))
			if (after == "" || o.before(after, k)) && q.Filter.Match(&sum) {
				persisted = append(persisted, listed{key: k, sum: sum})
			}
		}
		sort.Slice(persisted, func(i, j int) bool { return o.before(persisted[i].key, persisted[j].key) })
	case st != nil:
		if persisted, err = st.seekTasks(ctx, o, after, limit+1, &q.Filter, inMemory); err != nil {
			return Page{}, err
		}
	}

	// Merge the two ordered lists.
	var out []listed
	i, j := 0, 0
	for len(out) <= limit && (i < len(mem) || j < len(persisted)) {
		if j >= len(persisted) || (i < len(mem) && o.before(mem[i].key, persisted[j].key)) {
			out = append(out, mem[i])
			i++
		} else {
			out = append(out, persisted[j])
			j++
		}
	}
	page := Page{Tasks: make([]projection.Summary, 0, min(len(out), limit))}
	for _, l := range out[:min(len(out), limit)] {
		page.Tasks = append(page.Tasks, l.sum)
	}
	if len(out) > limit {
		page.Next = o.cursor(out[limit-1].key)
	}
	return page, nil
}

// liveStates reports whether a task in any of states is unfinished, so
// that it is held in memory (or left it as a cold stub): idle, reasoning,
// acting, suspended, the version 0 states, and dispatch's pending, assigned
// and in_progress. Not completed or failed, and not timed_out, where a
// dispatch task can be dead-lettered (finished) without changing state. An
// empty list (every state) is not live.
func liveStates(states []fsm.State) bool {
	for _, s := range states {
		if s.IsTerminal() || s == fsm.StateTimedOut {
			return false
		}
	}
	return len(states) > 0
}

// seekTasks reads the persisted index of order o from the position after
// (exclusive; "" from the start) in the order's direction, and returns the
// first n tasks that match f and are not in inMemory (memory holds their
// newer state). A queue index entry whose task's summary has another
// queue key (its priority changed after the entry was written) is stale
// and skipped.
func (s *store) seekTasks(ctx context.Context, o listOrder, after string, n int, f *projection.Filter, inMemory map[string]struct{}) ([]listed, error) {
	prefix := o.index()
	lower, upper := []byte(prefix), prefixEnd(prefix)
	if after != "" {
		if o.desc {
			upper = []byte(prefix + after)
		} else {
			lower = append([]byte(prefix+after), 0) // the least key after it
		}
	}
	dir := eventlog.Forward
	if o.desc {
		dir = eventlog.Backward
	}
	it := s.log.ScanAuxRange(lower, upper, dir)
	defer it.Close()
	var out []listed
	for read := 1; len(out) < n && it.Next(); read++ {
		if read&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		key := string(it.Key()[len(prefix):])
		id := key
		if o.queue {
			if len(key) <= projection.QueueKeyLen {
				continue
			}
			id = key[projection.QueueKeyLen:]
		}
		if _, ok := inMemory[id]; ok {
			continue
		}
		var sum projection.Summary
		var err error
		if o.queue {
			sum, err = s.loadSummary(id)
			if errors.Is(err, projection.ErrTaskNotFound) {
				continue // an entry left behind by a removal
			}
		} else if sum, err = projection.DecodeSummary(it.Value()); err != nil {
			err = fmt.Errorf("replay: persisted summary of %s: %w", id, err)
		}
		if err != nil {
			return nil, err
		}
		if o.queue && string(sum.QueueKey()) != key {
			continue // stale: the task's priority changed since
		}
		if f.Match(&sum) {
			out = append(out, listed{key: key, sum: sum})
		}
	}
	return out, it.Err()
}

func prefixEnd(p string) []byte {
	end := []byte(p)
	end[len(end)-1]++ // the prefixes end in '/'
	return end
}

// Dump is the canonical encoding of everything a View holds, in memory
// and persisted: the byte-identical state the equivalence tests and verify
// compare. Tasks and Progress map a task id to fsm.EncodeTask and
// Progress.Encode bytes.
type Dump struct {
	Seq      uint64
	Tasks    map[string][]byte
	Progress map[string][]byte
	Stats    []byte
	Memory   []byte
}

// Dump returns the state of the View. It reads every persisted task, so
// it is for tests, verify and tools, not for serving requests.
func (v *View) Dump(ctx context.Context) (*Dump, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	d := &Dump{Seq: v.set.Seq(), Tasks: map[string][]byte{}, Progress: map[string][]byte{}}
	var err error
	if d.Stats, err = v.set.Stats().Encode(); err != nil {
		return nil, err
	}
	if d.Memory, err = v.set.Memory().Encode(); err != nil {
		return nil, err
	}
	for _, t := range v.set.Tasks().ListAll() {
		if d.Tasks[t.ID], err = fsm.EncodeTask(t); err != nil {
			return nil, err
		}
		if p, ok := v.set.Progress(t.ID); ok {
			if d.Progress[t.ID], err = p.Encode(); err != nil {
				return nil, err
			}
		}
	}
	if v.st == nil {
		return d, nil
	}
	for _, kind := range []struct {
		prefix string
		into   map[string][]byte
	}{{prefTask, d.Tasks}, {prefProg, d.Progress}} {
		it := v.st.log.ScanAux([]byte(kind.prefix))
		for it.Next() {
			if err := ctx.Err(); err != nil {
				it.Close()
				return nil, err
			}
			id := string(it.Key()[len(kind.prefix):])
			if v.set.Tasks().Has(id) {
				continue
			}
			if kind.prefix == prefProg {
				// Stored beside its task, as what Encode gives.
				b, err := restoredProgress(it.Value(), d.Tasks[id])
				if err != nil {
					it.Close()
					return nil, fmt.Errorf("replay: persisted progress of %s: %w", id, err)
				}
				kind.into[id] = b
				continue
			}
			// Stored with a reference to its input (EncodeStoredTask):
			// read back whole, as EncodeTask gives.
			t, err := decodeStoredTask(v.st.log, it.Value())
			if err == nil {
				kind.into[id], err = fsm.EncodeTask(t)
			}
			if err != nil {
				it.Close()
				return nil, fmt.Errorf("replay: persisted task %s: %w", id, err)
			}
		}
		err := it.Err()
		it.Close()
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// restoredProgress turns a persisted progress (Progress.EncodeStored) into
// Progress.Encode's encoding, with the persisted task record tb.
func restoredProgress(stored, tb []byte) ([]byte, error) {
	t, err := fsm.DecodeTask(tb)
	if err != nil {
		return nil, err
	}
	p, err := projection.DecodeStored(stored, &t)
	if err != nil {
		return nil, err
	}
	return p.Encode()
}

// Bytes is the whole dump as one canonical byte string.
func (d *Dump) Bytes() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "seq %d\nstats %x\nmemory %x\n", d.Seq, d.Stats, d.Memory)
	for _, id := range sortedKeys(d.Tasks) {
		fmt.Fprintf(&b, "task %s %x\nprogress %x\n", id, d.Tasks[id], d.Progress[id])
	}
	for _, id := range sortedKeys(d.Progress) {
		if _, ok := d.Tasks[id]; !ok {
			fmt.Fprintf(&b, "orphan progress %s %x\n", id, d.Progress[id])
		}
	}
	return b.Bytes()
}

// Diff describes how d and o differ, at most max lines; nil when equal.
func (d *Dump) Diff(o *Dump, max int) []string {
	var out []string
	add := func(format string, args ...any) {
		if len(out) < max {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	if d.Seq != o.Seq {
		add("seq %d != %d", d.Seq, o.Seq)
	}
	if !bytes.Equal(d.Stats, o.Stats) {
		add("stats differ")
	}
	if !bytes.Equal(d.Memory, o.Memory) {
		add("memory differs")
	}
	for _, pair := range []struct {
		what string
		a, b map[string][]byte
	}{{"task", d.Tasks, o.Tasks}, {"progress", d.Progress, o.Progress}} {
		for _, id := range sortedKeys(pair.a) {
			if ob, ok := pair.b[id]; !ok {
				add("%s %s only on the left", pair.what, id)
			} else if !bytes.Equal(pair.a[id], ob) {
				add("%s %s differs", pair.what, id)
			}
		}
		for _, id := range sortedKeys(pair.b) {
			if _, ok := pair.a[id]; !ok {
				add("%s %s only on the right", pair.what, id)
			}
		}
	}
	return out
}

func sortedKeys(m map[string][]byte) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
