package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/projection"
)

// Archives (docs/retention.md). A retention run writes the finished tasks
// it removes from the live log to one archive file, an NDJSON export
// compressed with gzip whose header carries the run's ArchiveManifest, and
// appends the same manifest to "$system" as an eventlog.TypeEventsArchived
// event in the batch that removes them (eventlog.Log.Retire). The policy
// (which tasks, when) is package retention's; the format and the checks
// are here, beside the export they extend.

// ManifestSchemaVersion is the body schema of an EVENTS_ARCHIVED event.
//
// Persisted: bump it only for an incompatible change of ArchiveManifest.
const ManifestSchemaVersion = 1

// SeqRange is an inclusive range of global sequences.
type SeqRange struct {
	First uint64 `msgpack:"first" json:"first"`
	Last  uint64 `msgpack:"last" json:"last"`
}

// ArchiveManifest describes one retention run: what it removed from the
// live log and where that went.
type ArchiveManifest struct {
	// File is the archive's file name, relative to the archive directory.
	File string `msgpack:"file" json:"file"`
	// Ranges are the removed sequences, ascending runs of consecutive
	// sequences: exactly the log's holes that point to this manifest.
	Ranges []SeqRange `msgpack:"ranges" json:"ranges"`
	// Tasks and Events count what was removed.
	Tasks  int `msgpack:"tasks" json:"tasks"`
	Events int `msgpack:"events" json:"events"`
	// Hash is "sha256:" and the hex SHA-256 of the removed events'
	// records (eventlog.EncodeRecord) concatenated in sequence order.
	Hash string `msgpack:"hash" json:"hash"`
	// FinishedBefore is the run's cutoff: every removed task's last event
	// is older.
	FinishedBefore time.Time `msgpack:"finished_before" json:"finished_before"`
}

// ErrArchive is returned when an archive or a manifest is unreadable or
// disagrees with the log.
var ErrArchive = errors.New("replay: archive")

// ArchiveHasher computes an ArchiveManifest's Hash.
type ArchiveHasher struct{ h hash.Hash }

// NewArchiveHasher returns a hasher; Add the events in sequence order.
func NewArchiveHasher() *ArchiveHasher { return &ArchiveHasher{h: sha256.New()} }

// Add hashes one event's record.
func (a *ArchiveHasher) Add(ev eventlog.Event) error {
	rec, err := eventlog.EncodeRecord(ev)
	if err != nil {
		return err
	}
	a.h.Write(rec)
	return nil
}

// Sum returns the hash in the manifest's form.
func (a *ArchiveHasher) Sum() string { return "sha256:" + hex.EncodeToString(a.h.Sum(nil)) }

// RangesOf turns ascending sequences into runs of consecutive ones.
func RangesOf(seqs []uint64) []SeqRange {
	var out []SeqRange
	for _, s := range seqs {
		if n := len(out); n > 0 && out[n-1].Last+1 == s {
			out[n-1].Last = s
			continue
		}
		out = append(out, SeqRange{First: s, Last: s})
	}
	return out
}

// ManifestEvent returns the EVENTS_ARCHIVED event that records m: the
// manifest is its body, and its small fields are copied into the metadata
// for people and jq.
func ManifestEvent(m *ArchiveManifest) (eventlog.Event, error) {
	body, err := codec.Encode(m)
	if err != nil {
		return eventlog.Event{}, err
	}
	md := map[string]string{
		"file": m.File, "tasks": strconv.Itoa(m.Tasks), "events": strconv.Itoa(m.Events), "hash": m.Hash,
		"ranges": strconv.Itoa(len(m.Ranges)),
	}
	if len(m.Ranges) > 0 {
		md["first"] = strconv.FormatUint(m.Ranges[0].First, 10)
		md["last"] = strconv.FormatUint(m.Ranges[len(m.Ranges)-1].Last, 10)
	}
	return eventlog.Event{Type: eventlog.TypeEventsArchived, Schema: ManifestSchemaVersion, Metadata: md, Body: body}, nil
}

// DecodeManifest decodes the body of an EVENTS_ARCHIVED event.
func DecodeManifest(ev eventlog.Event) (*ArchiveManifest, error) {
	if ev.Type != eventlog.TypeEventsArchived || ev.Stream != eventlog.SystemStream {
		return nil, fmt.Errorf("%w: event %d is %s on %s, not a manifest", ErrArchive, ev.Seq, ev.Type, ev.Stream)
	}
	if ev.Schema != ManifestSchemaVersion {
		return nil, fmt.Errorf("%w: manifest at seq %d has schema %d, this build reads %d", ErrArchive, ev.Seq, ev.Schema, ManifestSchemaVersion)
	}
	var m ArchiveManifest
	if err := codec.Decode(ev.Body, &m); err != nil {
		return nil, fmt.Errorf("%w: manifest at seq %d: %v", ErrArchive, ev.Seq, err)
	}
	return &m, nil
}

// RecordedManifest is a manifest with the position of its event.
type RecordedManifest struct {
	Seq uint64 `json:"seq"`
	ArchiveManifest
}

// Manifests returns the manifests recorded in the log, in order.
func Manifests(ctx context.Context, r Reader) ([]RecordedManifest, error) {
	it := r.Stream(ctx, eventlog.SystemStream, 1)
	defer it.Close()
	var out []RecordedManifest
	for it.Next() {
		ev := it.Event()
		if ev.Type != eventlog.TypeEventsArchived {
			continue
		}
		m, err := DecodeManifest(ev)
		if err != nil {
			return nil, err
		}
		out = append(out, RecordedManifest{Seq: ev.Seq, ArchiveManifest: *m})
	}
	return out, it.Err()
}

// checkManifests is the part of Verify that holds the log's holes to the
// manifests: every hole belongs to exactly the ranges of the manifest it
// points to, and every manifest's ranges are holes. A hole without its
// manifest was reported by eventlog's audit.
func checkManifests(ctx context.Context, l *eventlog.Log, rep *Report) error {
	holes, err := l.Holes()
	if err != nil {
		return err
	}
	byManifest := map[uint64][]SeqRange{}
	for _, h := range holes {
		byManifest[h.Manifest] = append(byManifest[h.Manifest], SeqRange{First: h.First, Last: h.Last})
	}
	ms, err := Manifests(ctx, FromLog(l))
	if err != nil {
		rep.add(Problem{Kind: ProblemLog, Reason: err.Error()})
		return nil
	}
	for _, m := range ms {
		got := byManifest[m.Seq]
		delete(byManifest, m.Seq)
		var n uint64
		for _, r := range m.Ranges {
			n += r.Last - r.First + 1
		}
		if !slices.Equal(got, m.Ranges) || n != uint64(m.Events) {
			rep.add(Problem{Kind: ProblemLog, Seq: m.Seq, Stream: eventlog.SystemStream, Type: eventlog.TypeEventsArchived,
				Reason: fmt.Sprintf("the manifest lists %d range(s) holding %d sequences for %d events, the log has %d hole(s) pointing to it",
					len(m.Ranges), n, m.Events, len(got))})
		}
	}
	for _, seq := range slices.Sorted(maps.Keys(byManifest)) {
		rep.add(Problem{Kind: ProblemLog, Seq: byManifest[seq][0].First,
			Reason: fmt.Sprintf("hole(s) point to seq %d, which holds no manifest", seq)})
	}
	return nil
}

// ArchiveReport is what VerifyArchives found.
type ArchiveReport struct {
	Manifests int `json:"manifests"`
	Events    int `json:"events"`
	// Orphans are archive files no manifest names: left by a run that
	// crashed before its removal committed (the next run deletes them).
	Orphans  []string  `json:"orphans,omitempty"`
	Problems []Problem `json:"problems"`
}

// OK reports whether every archive matched its manifest.
func (r *ArchiveReport) OK() bool { return len(r.Problems) == 0 }

// ArchivePattern matches archive file names in an archive directory.
const ArchivePattern = "pegasus-archive-*.ndjson.gz"

// VerifyArchives re-reads every archive the log's manifests name, in dir,
// and checks it against its manifest: the header's manifest, the events'
// sequences exactly the manifest's ranges, their count, and the hash of
// their records.
func VerifyArchives(ctx context.Context, r Reader, fs vfs.FS, dir string) (*ArchiveReport, error) {
	ms, err := Manifests(ctx, r)
	if err != nil {
		return nil, err
	}
	rep := &ArchiveReport{Manifests: len(ms), Problems: []Problem{}}
	named := map[string]bool{}
	for _, m := range ms {
		named[m.File] = true
		n, err := verifyArchive(ctx, fs, fs.PathJoin(dir, m.File), &m.ArchiveManifest)
		rep.Events += n
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			rep.Problems = append(rep.Problems, Problem{Kind: ProblemLog, Seq: m.Seq, Stream: eventlog.SystemStream,
				Type: eventlog.TypeEventsArchived, Reason: err.Error()})
		}
	}
	files, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		files, err = nil, nil // no archive yet: every manifest's file is reported missing above
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrArchive, err)
	}
	for _, f := range files {
		if ok, _ := filepath.Match(ArchivePattern, f); ok && !named[f] {
			rep.Orphans = append(rep.Orphans, f)
		}
	}
	sort.Strings(rep.Orphans)
	return rep, nil
}

// AddArchives records an archive check in the report: its problems count
// as the log's.
func (r *Report) AddArchives(ar *ArchiveReport) {
	r.Archives = ar
	for _, p := range ar.Problems {
		r.add(p)
	}
}

func verifyArchive(ctx context.Context, fs vfs.FS, path string, m *ArchiveManifest) (int, error) {
	f, err := fs.Open(path)
	if err != nil {
		return 0, fmt.Errorf("archive %s: %w", m.File, err)
	}
	defer f.Close()
	er, err := NewExportReader(f)
	if err != nil {
		return 0, fmt.Errorf("archive %s: %w", m.File, err)
	}
	defer er.Close()
	if h := er.Header().Archive; h == nil || h.Hash != m.Hash || h.Events != m.Events || !slices.Equal(h.Ranges, m.Ranges) {
		return 0, fmt.Errorf("archive %s: its header's manifest is not the log's", m.File)
	}
	hs := NewArchiveHasher()
	var seqs []uint64
	for n := 0; er.Next(); n++ {
		if n&1023 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		ev := er.Event()
		seqs = append(seqs, ev.Seq)
		if err := hs.Add(ev); err != nil {
			return len(seqs), fmt.Errorf("archive %s: event %d: %w", m.File, ev.Seq, err)
		}
	}
	if err := er.Err(); err != nil {
		return len(seqs), fmt.Errorf("archive %s: %w", m.File, err)
	}
	switch {
	case len(seqs) != m.Events:
		return len(seqs), fmt.Errorf("archive %s: %d events, the manifest says %d", m.File, len(seqs), m.Events)
	case !slices.Equal(RangesOf(seqs), m.Ranges):
		return len(seqs), fmt.Errorf("archive %s: its sequences are not the manifest's ranges", m.File)
	case hs.Sum() != m.Hash:
		return len(seqs), fmt.Errorf("archive %s: hash %s, the manifest says %s", m.File, hs.Sum(), m.Hash)
	}
	return len(seqs), nil
}

// Finished is a task that retention may remove: finished (fsm.Task
// IsTerminal, so a dispatch task only once dead-lettered), its last event
// before a cutoff and already in the persisted projections.
type Finished struct {
	ID      string
	Version uint64 // events in its stream
	Seq     uint64 // its last event
	// queueKey is its entry in the queue order index, removed with it.
	queueKey []byte
}

// FinishedBefore lists, in id order, at most max finished tasks whose last
// event is older than cutoff, from the persisted projections (a task whose
// last event is beyond their checkpoint is not listed: a read model must
// not be written again after its task is forgotten). It returns nil when
// there are no persisted projections.
func FinishedBefore(ctx context.Context, l *eventlog.Log, cutoff time.Time, max int) ([]Finished, error) {
	raw, err := l.GetAux(keyMeta)
	if errors.Is(err, eventlog.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m meta
	if err := codec.Decode(raw, &m); err != nil {
		return nil, fmt.Errorf("replay: projection meta: %w", err)
	}
	st := &store{log: l}
	var out []Finished
	it := l.ScanAux([]byte(prefSum))
	defer it.Close()
	for n := 0; it.Next() && len(out) < max; n++ {
		if n&1023 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		sum, err := projection.DecodeSummary(it.Value())
		if err != nil {
			return nil, fmt.Errorf("replay: persisted summary %q: %w", it.Key(), err)
		}
		// A dispatch task may be finished in any of its end states
		// (dead-lettered after a timeout); the task record decides.
		dispatch := strings.HasPrefix(sum.Machine, fsm.DispatchMachineName+"@")
		if (!sum.State.IsTerminal() && !dispatch) || !sum.UpdatedAt.Before(cutoff) || sum.Seq > m.Seq || strings.HasPrefix(sum.ID, "$") {
			continue
		}
		t, _, err := st.loadRecord(sum.ID) // its state and versions: the input is not needed
		if err != nil {
			return nil, err
		}
		if !t.IsTerminal() || t.Version != sum.Events {
			continue
		}
		out = append(out, Finished{ID: t.ID, Version: t.Version, Seq: t.Seq, queueKey: sum.QueueKey()})
	}
	return out, it.Err()
}

// ForgetTasks deletes the persisted read models of tasks (record, summary,
// progress, active mark, queue order entry, snapshots) in b: retention adds
// it to the batch that removes their events, so the projections never name
// a task the log no longer holds.
func ForgetTasks(b *eventlog.AuxBatch, tasks []Finished) {
	for _, f := range tasks {
		id := f.ID
		for _, p := range []string{prefTask, prefSum, prefProg, prefActive} {
			b.Delete(taskKey(p, id))
		}
		if f.queueKey != nil {
			b.Delete(append([]byte(prefQueue), f.queueKey...))
		}
		sp := snapPrefix(id)
		end := append(append([]byte(nil), sp[:len(sp)-1]...), 1)
		b.DeleteRange(sp, end)
	}
}

// ArchiveHeader is the export header of an archive.
func ArchiveHeader(head uint64, m *ArchiveManifest) ExportHeader {
	return ExportHeader{Head: head, Archive: m}
}
