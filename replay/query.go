package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/oklog/ulid/v2"

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
	// Desc lists newest first; the default is oldest first (creation
	// order, which is task id order).
	Desc bool
}

// Page sizes.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// ErrBadCursor is returned for a cursor that Tasks did not produce or that
// belongs to a query in the other direction.
var ErrBadCursor = errors.New("replay: bad cursor")

// Page is one page of a task list.
type Page struct {
	Tasks []projection.Summary `json:"tasks"`
	// Next is the cursor of the following page, "" on the last page.
	Next string `json:"next_cursor,omitempty"`
}

// Cursors are "a." or "d." (the direction) followed by the last task id
// of the page: stable under concurrent changes, since ids never change.
func makeCursor(desc bool, id string) string {
	if desc {
		return "d." + id
	}
	return "a." + id
}

func parseCursor(c string, desc bool) (string, error) {
	if c == "" {
		return "", nil
	}
	want := "a."
	if desc {
		want = "d."
	}
	id, ok := strings.CutPrefix(c, want)
	if !ok || len(id) != ulid.EncodedSize {
		return "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	if _, err := ulid.ParseStrict(id); err != nil {
		return "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return id, nil
}

// Tasks returns one page of the tasks that match q, in task id order
// (creation order), newest first with q.Desc. It merges the tasks in memory
// (the newest state of every active or recently changed task) with the
// persisted read model (every other task), so terminal tasks that left
// memory are listed too.
func (v *View) Tasks(ctx context.Context, q Query) (Page, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return Page{}, fmt.Errorf("replay: limit %d: give 1 to %d", limit, MaxLimit)
	}
	after, err := parseCursor(q.Cursor, q.Desc)
	if err != nil {
		return Page{}, err
	}
	past := func(id string) bool { // beyond the cursor in the query's direction
		if after == "" {
			return true
		}
		if q.Desc {
			return id < after
		}
		return id > after
	}

	// Memory first, under the lock. A checkpoint writes tasks before it
	// evicts them, so a task missing from this copy is already persisted
	// at least as new as what memory had.
	v.mu.RLock()
	all := v.set.Tasks().ListAll()
	st := v.st
	v.mu.RUnlock()
	inMemory := make(map[string]struct{}, len(all))
	var mem []projection.Summary
	for i := range all {
		inMemory[all[i].ID] = struct{}{}
		s := projection.Summarize(&all[i])
		if past(s.ID) && q.Filter.Match(&s) {
			mem = append(mem, s)
		}
	}
	if q.Desc {
		sort.Slice(mem, func(i, j int) bool { return mem[i].ID > mem[j].ID })
	}

	var persisted []projection.Summary // ascending; for Desc, a ring of the last limit+1
	if st != nil {
		it := st.log.ScanAux([]byte(prefSum))
		defer it.Close()
		n := 0
		for it.Next() {
			if n++; n&1023 == 0 {
				if err := ctx.Err(); err != nil {
					return Page{}, err
				}
			}
			id := string(it.Key()[len(prefSum):])
			if _, ok := inMemory[id]; ok || !past(id) {
				continue
			}
			s, err := projection.DecodeSummary(it.Value())
			if err != nil {
				return Page{}, fmt.Errorf("replay: persisted summary of %s: %w", id, err)
			}
			if !q.Filter.Match(&s) {
				continue
			}
			persisted = append(persisted, s)
			if !q.Desc && len(persisted) > limit {
				break // ascending: limit+1 found, later ids cannot come first
			}
			if q.Desc && len(persisted) > 2*(limit+1) {
				persisted = append(persisted[:0], persisted[len(persisted)-(limit+1):]...)
			}
		}
		if err := it.Err(); err != nil {
			return Page{}, err
		}
		if q.Desc {
			if len(persisted) > limit+1 {
				persisted = persisted[len(persisted)-(limit+1):]
			}
			for i, j := 0, len(persisted)-1; i < j; i, j = i+1, j-1 {
				persisted[i], persisted[j] = persisted[j], persisted[i]
			}
		}
	}

	// Merge the two ordered lists.
	before := func(a, b string) bool {
		if q.Desc {
			return a > b
		}
		return a < b
	}
	var out []projection.Summary
	i, j := 0, 0
	for len(out) <= limit && (i < len(mem) || j < len(persisted)) {
		if j >= len(persisted) || (i < len(mem) && before(mem[i].ID, persisted[j].ID)) {
			out = append(out, mem[i])
			i++
		} else {
			out = append(out, persisted[j])
			j++
		}
	}
	page := Page{Tasks: out}
	if len(out) > limit {
		page.Tasks = out[:limit]
		page.Next = makeCursor(q.Desc, out[limit-1].ID)
	}
	if page.Tasks == nil {
		page.Tasks = []projection.Summary{}
	}
	return page, nil
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
			kind.into[id] = it.Value()
		}
		err := it.Err()
		it.Close()
		if err != nil {
			return nil, err
		}
	}
	return d, nil
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
