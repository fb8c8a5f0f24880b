package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// The NDJSON export format (docs/export.md): one JSON object per line. The
// first line is a header; every other line is one event in the JSON form
// of docs/events.md (EventJSON), in increasing sequence order:
//
//	{"format":"pegasus-export","version":1,"head":1234,"complete":true}
//	{"id":"01J...","seq":1,"stream":"$inputs","version":1,"type":"MESSAGE_RECEIVED","schema":1,
//	 "time":"2025-01-02T03:04:05.123456789Z","body":"<base64>","data":{...},"summary":"..."}
//
// body (the stored msgpack bytes) is the truth; data and summary are for
// people and are ignored on reading.
const (
	ExportFormat  = "pegasus-export"
	ExportVersion = 1
)

// MaxExportLine bounds one line of an export when reading, in bytes: an
// event of eventlog's largest size, base64-encoded, plus its decoded copy.
const MaxExportLine = 64 << 20

// ExportHeader is the first line of an export.
type ExportHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Head is the source's head sequence when exported.
	Head uint64 `json:"head"`
	// Complete is true when every event from 1 to Head is in the file, so
	// a fold of it is a fold of the whole log (and its sequence must be
	// gap-free).
	Complete bool `json:"complete"`
	// Filter records what was selected when not complete.
	Filter *ExportFilter `json:"filter,omitempty"`
	// Archive is the manifest of a retention run's archive (see
	// docs/retention.md): the file holds the events it removed.
	Archive *ArchiveManifest `json:"archive,omitempty"`
}

// ExportFilter selects the events to export. The zero filter selects all.
type ExportFilter struct {
	// Tasks selects these tasks' streams, with the events that caused
	// them from other streams (their inputs), so that the file folds into
	// the same tasks and `why` still reaches the root.
	Tasks []string `json:"tasks,omitempty"`
	// From and To bound the global sequence, inclusive; 0 is unbounded.
	From uint64 `json:"from,omitempty"`
	To   uint64 `json:"to,omitempty"`
}

func (f *ExportFilter) isZero() bool { return len(f.Tasks) == 0 && f.From == 0 && f.To == 0 }

// Exporter writes an NDJSON export.
type Exporter struct {
	w   *bufio.Writer
	n   int
	err error
}

// NewExporter writes the header to w and returns an Exporter for the
// events. Call Close to flush.
func NewExporter(w io.Writer, h ExportHeader) (*Exporter, error) {
	h.Format, h.Version = ExportFormat, ExportVersion
	e := &Exporter{w: bufio.NewWriterSize(w, 1<<16)}
	b, err := json.Marshal(&h)
	if err != nil {
		return nil, err
	}
	e.w.Write(b)
	if err := e.w.WriteByte('\n'); err != nil {
		return nil, err
	}
	return e, nil
}

// Write writes one event, in the JSON form (MarshalEvent).
func (e *Exporter) Write(ev eventlog.Event) error {
	if e.err != nil {
		return e.err
	}
	b, err := MarshalEvent(ev)
	if err != nil {
		e.err = err
		return err
	}
	e.w.Write(b)
	if err := e.w.WriteByte('\n'); err != nil {
		e.err = err
		return err
	}
	e.n++
	return nil
}

// Count returns how many events were written.
func (e *Exporter) Count() int { return e.n }

// Close flushes the export.
func (e *Exporter) Close() error {
	if e.err != nil {
		return e.err
	}
	return e.w.Flush()
}

// Export writes the events of r selected by f to w as NDJSON and returns
// how many it wrote.
func Export(ctx context.Context, r Reader, w io.Writer, f ExportFilter) (int, error) {
	h := ExportHeader{Head: r.Head(), Complete: f.isZero()}
	if !h.Complete {
		fc := f
		h.Filter = &fc
	}
	if lr, ok := r.(*LogReader); ok && h.Complete {
		// Retention archived part of the log: the file has its holes.
		holes, err := lr.Log.Holes()
		if err != nil {
			return 0, err
		}
		h.Complete = len(holes) == 0
	}
	e, err := NewExporter(w, h)
	if err != nil {
		return 0, err
	}
	inRange := func(seq uint64) bool { return seq >= f.From && (f.To == 0 || seq <= f.To) }
	if len(f.Tasks) == 0 {
		it := r.Events(ctx, max(f.From, 1))
		defer it.Close()
		for n := 0; it.Next(); n++ {
			if n&1023 == 0 && ctx.Err() != nil {
				return e.Count(), ctx.Err()
			}
			ev := it.Event()
			if !inRange(ev.Seq) {
				if f.To != 0 && ev.Seq > f.To {
					break
				}
				continue
			}
			if err := e.Write(ev); err != nil {
				return e.Count(), err
			}
		}
		if err := it.Err(); err != nil {
			return e.Count(), err
		}
		return e.Count(), e.Close()
	}
	// Per task: the streams plus the events outside them that caused them.
	picked := map[uint64]eventlog.Event{}
	inStreams := map[string]bool{}
	for _, id := range f.Tasks {
		inStreams[id] = true
	}
	for _, id := range f.Tasks {
		it := r.Stream(ctx, id, 1)
		found := false
		for it.Next() {
			found = true
			ev := it.Event()
			if inRange(ev.Seq) {
				picked[ev.Seq] = ev
			}
		}
		err := it.Err()
		it.Close()
		if err != nil {
			return 0, err
		}
		if !found {
			return 0, fmt.Errorf("replay: export: task %s has no events", id)
		}
	}
	var causes []eventlog.Event
	for _, ev := range picked {
		for c := ev.Causation; c != (ulid.ULID{}); {
			cause, err := r.Get(ctx, c)
			if errors.Is(err, eventlog.ErrNotFound) {
				break
			}
			if err != nil {
				return 0, err
			}
			if _, ok := picked[cause.Seq]; ok || inStreams[cause.Stream] || !inRange(cause.Seq) {
				break
			}
			causes = append(causes, cause)
			c = cause.Causation
		}
	}
	for _, c := range causes {
		picked[c.Seq] = c
	}
	seqs := make([]uint64, 0, len(picked))
	for s := range picked {
		seqs = append(seqs, s)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, s := range seqs {
		if err := e.Write(picked[s]); err != nil {
			return e.Count(), err
		}
	}
	return e.Count(), e.Close()
}

// ExportReader reads an NDJSON export. It is an Iterator over the events;
// Header returns the header line.
//
// A file of events in the JSON form without a header (the events of an API
// response, tail --json output) reads too, as a partial export: its header
// is implied, with Complete false.
type ExportReader struct {
	sc     *bufio.Scanner
	header ExportHeader
	line   int
	ev     eventlog.Event
	// first is set when the first line was an event: Next returns it.
	first bool
	err   error
}

// ErrExportFormat is returned for a file that is not a Pegasus export or
// has a newer version.
var ErrExportFormat = errors.New("replay: not a Pegasus export")

// NewExportReader reads the header of an export from r. A gzip-compressed
// export (a retention archive) is decompressed as it is read.
func NewExportReader(r io.Reader) (*ExportReader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrExportFormat, err)
		}
		r = zr
	} else {
		r = br
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), MaxExportLine)
	er := &ExportReader{sc: sc}
	var first []byte
	for len(first) == 0 {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: empty file", ErrExportFormat)
		}
		er.line++
		first = bytes.TrimSpace(sc.Bytes())
	}
	if json.Unmarshal(first, &er.header) == nil && er.header.Format == ExportFormat {
		if er.header.Version > ExportVersion {
			return nil, fmt.Errorf("%w: export version %d is newer than this build's %d", ErrExportFormat, er.header.Version, ExportVersion)
		}
		return er, nil
	}
	ev, err := ParseEvent(first)
	if err != nil {
		return nil, fmt.Errorf("%w: the first line is neither an export header nor an event", ErrExportFormat)
	}
	er.header = ExportHeader{Format: ExportFormat, Version: ExportVersion}
	er.ev, er.first = ev, true
	return er, nil
}

// Header returns the export's header.
func (er *ExportReader) Header() ExportHeader { return er.header }

// Next reads the next event.
func (er *ExportReader) Next() bool {
	if er.err != nil {
		return false
	}
	if er.first {
		er.first = false
		return true
	}
	for er.sc.Scan() {
		er.line++
		b := bytes.TrimSpace(er.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		ev, err := ParseEvent(b)
		if err != nil {
			er.err = fmt.Errorf("replay: export line %d: %w", er.line, err)
			return false
		}
		er.ev = ev
		return true
	}
	er.err = er.sc.Err()
	return false
}

func (er *ExportReader) Event() eventlog.Event { return er.ev }
func (er *ExportReader) Err() error            { return er.err }
func (er *ExportReader) Close() error          { return nil }

// ReadExport loads a whole export into a MemLog, for the per-task queries.
func ReadExport(r io.Reader) (*MemLog, ExportHeader, error) {
	er, err := NewExportReader(r)
	if err != nil {
		return nil, ExportHeader{}, err
	}
	m, err := NewMemLog()
	if err != nil {
		return nil, ExportHeader{}, err
	}
	for er.Next() {
		if err := m.add(er.Event()); err != nil {
			return nil, er.header, fmt.Errorf("replay: export line %d: %w", er.line, err)
		}
	}
	return m, er.header, er.Err()
}

// ImportResult says what Import did.
type ImportResult struct {
	Events int
	// Renumbered counts events whose sequence or stream version in the
	// target differs from the export's (a filtered export, or a target that
	// was not empty). Ids, times, causation and bodies never change.
	Renumbered int
}

// ErrNotEmpty is returned by Import into a log that already has events.
var ErrNotEmpty = errors.New("replay: import target is not empty")

// Import appends the events of it to l, in order, keeping their ids, times,
// causation, correlation, metadata and bodies; the log assigns sequences
// and versions, which equal the export's for a complete export into an
// empty log. The target must be empty. Events are appended in atomic
// batches of up to 1000.
func Import(ctx context.Context, l *eventlog.Log, it Iterator) (ImportResult, error) {
	var res ImportResult
	if l.Head() != 0 {
		return res, ErrNotEmpty
	}
	var batch []eventlog.Event
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var appends []eventlog.StreamAppend
		for _, ev := range batch {
			if n := len(appends); n > 0 && appends[n-1].Stream == ev.Stream {
				appends[n-1].Events = append(appends[n-1].Events, ev)
				continue
			}
			appends = append(appends, eventlog.StreamAppend{Stream: ev.Stream, Expected: eventlog.Any, Events: []eventlog.Event{ev}})
		}
		results, err := l.AppendMulti(ctx, appends...)
		if err != nil {
			return err
		}
		i := 0
		for _, r := range results {
			for _, got := range r.Events {
				if got.Seq != batch[i].Seq || got.Version != batch[i].Version {
					res.Renumbered++
				}
				i++
			}
		}
		res.Events += len(batch)
		batch = batch[:0]
		return nil
	}
	for it.Next() {
		batch = append(batch, it.Event())
		if len(batch) >= 1000 {
			if err := flush(); err != nil {
				return res, err
			}
		}
	}
	if err := it.Err(); err != nil {
		return res, err
	}
	return res, flush()
}
