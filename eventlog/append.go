package eventlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
)

// Request states: an appender may withdraw a request only while it is still
// queued; once the committer takes it, its outcome stands.
const (
	reqQueued int32 = iota
	reqTaken
	reqCancelled
)

type appendReq struct {
	appends []StreamAppend  // the log's events; filled in place
	one     [1]StreamAppend // appends' array for one stream
	nevents int
	nbytes  int
	state   atomic.Int32
	done    chan struct{} // receives once, when the outcome is set (donePool)
	results []AppendResult
	oneRes  [1]AppendResult // results' array for one stream
	err     error
	retire  *Retirement   // Retire: removal riding on the append
	retAux  *pebble.Batch // its aux writes, built before queueing
}

// Append appends events to stream atomically (all or none), after checking
// expected against the stream's current version. It returns once the events
// are durable (a synced commit). See AppendMulti for the rules.
func (l *Log) Append(ctx context.Context, stream string, expected ExpectedVersion, events ...Event) (AppendResult, error) {
	res, err := l.AppendMulti(ctx, StreamAppend{Stream: stream, Expected: expected, Events: events})
	if err != nil {
		return AppendResult{}, err
	}
	return res[0], nil
}

// AppendMulti appends to several streams atomically: every stream's
// expected version is checked and either all events are committed, in one
// synced batch with consecutive sequences in argument order, or none are.
//
// Idempotency: if every event carries an ID already in the log with the
// same content (stream, type, schema, causation, metadata, body), nothing
// is written and the results describe the events as first stored, whatever
// the expected versions say (a retry after an ambiguous failure must not
// conflict with itself). If some IDs exist and others do not, or an existing
// ID has different content, the append fails with ErrIDReused.
//
// The context bounds the wait while the request is queued; once the
// committer has taken the request its outcome stands and is returned.
func (l *Log) AppendMulti(ctx context.Context, appends ...StreamAppend) ([]AppendResult, error) {
	return l.appendMulti(ctx, appends, nil)
}

func (l *Log) appendMulti(ctx context.Context, appends []StreamAppend, rt *Retirement) ([]AppendResult, error) {
	if l.readOnly {
		return nil, ErrReadOnly
	}
	if err := l.Health(); err != nil { // a failed commit, damaged data
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req, err := l.newRequest(appends)
	if err != nil {
		return nil, err
	}
	if rt != nil {
		if req.retAux, err = l.retireAux(rt); err != nil {
			return nil, err
		}
		req.retire = rt
		if req.retAux != nil {
			defer req.retAux.Close() // copied into the group's batch, if taken
		}
	}
	l.closeMu.RLock()
	if l.closing {
		l.closeMu.RUnlock()
		return nil, ErrClosed
	}
	select {
	case l.reqs <- req:
		l.closeMu.RUnlock()
	case <-ctx.Done():
		l.closeMu.RUnlock()
		return nil, ctx.Err()
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		if req.state.CompareAndSwap(reqQueued, reqCancelled) {
			// The committer still signals done: it is not reused.
			return nil, ctx.Err()
		}
		<-req.done
	}
	donePool.Put(req.done)
	if req.err != nil {
		return nil, req.err
	}
	return req.results, nil
}

// donePool holds the done channels of requests whose appenders received
// their one signal: empty, with room for one.
var donePool = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// newRequest validates and copies the caller's events, which the
// committer fills in (sequence, version, id, time, correlation) and
// returns as the append's results. Their Body and Metadata stay the
// caller's: the committer reads them only while the caller waits for the
// outcome, writes what it stores into its batch, and publish gives the
// subscriptions copies. It also resolves correlations that it can without
// the committer, to keep the committer's serial work small.
func (l *Log) newRequest(appends []StreamAppend) (*appendReq, error) {
	if len(appends) == 0 {
		return nil, invalidf("append without streams")
	}
	req := &appendReq{done: donePool.Get().(chan struct{})}
	req.appends = req.one[:]
	if len(appends) > 1 {
		req.appends = make([]StreamAppend, len(appends))
	}
	// The events of all streams are copied into one slice, each stream's
	// part capped so that an append to one cannot reach the next.
	nevents := 0
	for _, sa := range appends {
		nevents += len(sa.Events)
	}
	all := make([]Event, 0, nevents)
	var idBuf [8]idIndex
	ids := idSet{list: idBuf[:0]} // id -> index in all
	for i, sa := range appends {
		if err := ValidateStream(sa.Stream); err != nil {
			return nil, err
		}
		if sa.Expected < Any {
			return nil, invalidf("expected version %d", int64(sa.Expected))
		}
		if len(sa.Events) == 0 {
			return nil, invalidf("append to stream %q without events", sa.Stream)
		}
		first := len(all)
		all = append(all, sa.Events...)
		evs := all[first:len(all):len(all)]
		for j := range evs {
			ev := &evs[j]
			ev.Stream = sa.Stream
			ev.Seq, ev.Version = 0, 0
			// Normalised to what a read returns (nil, not empty; UTC
			// without a monotonic reading), so that results compare
			// equal to the stored events.
			if len(ev.Metadata) == 0 {
				ev.Metadata = nil
			}
			if len(ev.Body) == 0 {
				ev.Body = nil
			}
			if !ev.Time.IsZero() {
				ev.Time = ev.Time.Round(0).UTC()
			}
			if err := validateEnvelope(ev); err != nil {
				return nil, err
			}
			if !ev.Time.IsZero() {
				if _, err := unixNanos(ev.Time); err != nil {
					return nil, err
				}
			}
			size := encodedSizeHint(ev)
			if size > l.opts.MaxEventBytes {
				return nil, invalidf("event of type %q is about %d bytes, more than MaxEventBytes (%d)",
					ev.Type, size, l.opts.MaxEventBytes)
			}
			req.nbytes += size
			if ev.ID != (ulid.ULID{}) {
				if _, dup := ids.find(ev.ID); dup {
					return nil, invalidf("event id %s appears twice in one append", ev.ID)
				}
				ids = ids.add(ev.ID, first+j)
			}
		}
		req.nevents += len(evs)
		req.appends[i] = StreamAppend{Stream: sa.Stream, Expected: sa.Expected, Events: evs}
	}
	// Correlation: inherit the causation's correlation when the causation is
	// known. Earlier events of this append count; later ones cannot be
	// causes. Unresolved correlations are set by the committer.
	for i := range all {
		ev := &all[i]
		if ev.Causation == (ulid.ULID{}) || ev.Correlation != (ulid.ULID{}) {
			continue
		}
		if j, ok := ids.find(ev.Causation); ok && j < i {
			ev.Correlation = all[j].Correlation
			if ev.Correlation == (ulid.ULID{}) && all[j].Causation == (ulid.ULID{}) {
				ev.Correlation = all[j].ID
			}
			continue
		}
		if parent, err := l.Get(ev.Causation); err == nil {
			ev.Correlation = parent.Correlation
		}
	}
	return req, nil
}

// idSet maps the ids of one append's events to their indexes: a list
// while it is short (most appends carry a few events), a map beyond.
type idSet struct {
	list []idIndex
	m    map[ulid.ULID]int
}

type idIndex struct {
	id ulid.ULID
	i  int
}

// idSetList is how many ids idSet keeps in its list.
const idSetList = 16

func (s idSet) find(id ulid.ULID) (int, bool) {
	if s.m != nil {
		i, ok := s.m[id]
		return i, ok
	}
	for _, e := range s.list {
		if e.id == id {
			return e.i, true
		}
	}
	return 0, false
}

// add returns the set with id at index i.
func (s idSet) add(id ulid.ULID, i int) idSet {
	switch {
	case s.m != nil:
		s.m[id] = i
	case len(s.list) < idSetList:
		s.list = append(s.list, idIndex{id, i})
	default:
		s.m = make(map[ulid.ULID]int, 2*idSetList)
		for _, e := range s.list {
			s.m[e.id] = e.i
		}
		s.m[id] = i
	}
	return s
}

// groupState is the committer's scratch for one commit group.
type groupState struct {
	batch    *pebble.Batch
	nextSeq  uint64
	now      time.Time
	versions map[string]uint64    // stream -> version including this group
	ids      map[ulid.ULID]*Event // ids written by this group
	key      []byte
	val      []byte
	rec      []byte
	local    map[string]uint64 // per-request overlay of versions
	ok       []*appendReq      // requests that wrote events
}

// commitLoop is the single committer. It owns sequence assignment, the
// expected-version and idempotency checks and the stream version cache, so
// none of them need locks, and it publishes the head only after a synced
// commit, so readers never see a position before every lower one is durable
// (with Options.Unsynced, after a commit that is not synced).
//
// Group formation. The committer takes whatever queued while the previous
// group was syncing. Left at that, a closed loop of W appenders splits into
// two cohorts that alternate fsyncs, W/2 events each: appenders acknowledged
// by fsync N come back while fsync N+1 (the other cohort) runs. That is what
// Pebble's own WAL writer does with concurrent committers. So after
// acknowledging a group of k appenders, the committer waits a moment
// (bounded by Options.MaxGroupWait and by half the recent commit latency)
// for k requests to gather before it commits: the cohorts merge, each fsync
// carries all W events, and throughput nearly doubles. A lone appender never
// waits (k = 1 is met by its own request).
func (l *Log) commitLoop() {
	defer close(l.committerDone)
	g := &l.group
	g.versions = map[string]uint64{}
	g.ids = map[ulid.ULID]*Event{}
	g.local = map[string]uint64{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var group []*appendReq
	expected := 1     // requests in the last committed group
	var latency int64 // moving average of commit latency, in ns
	for {
		req, ok := <-l.reqs
		if !ok {
			return
		}
		// Let the goroutines that are runnable now make their appends
		// first: with one P (GOMAXPROCS 1, a daemon under taskset -c N or
		// on a one-core container) the first request's sender hands its P
		// straight to this loop, which would otherwise commit every
		// request on its own, and expect one the next time.
		runtime.Gosched()
		group = append(group[:0], req)
		n, size := req.nevents, req.nbytes
		open, waiting := true, false
		wait := min(time.Duration(latency/2), l.opts.MaxGroupWait)
	gather:
		for n < l.opts.MaxGroupEvents && size < l.opts.MaxGroupBytes {
			var r *appendReq
			select {
			case r, ok = <-l.reqs:
			default:
				if len(group) >= expected || wait <= 0 {
					break gather
				}
				if !waiting {
					waiting = true
					timer.Reset(wait)
				}
				select {
				case r, ok = <-l.reqs:
				case <-timer.C:
					waiting = false
					l.stats.waitsExpired.Add(1)
					break gather
				}
			}
			if !ok {
				open = false
				break
			}
			group = append(group, r)
			n += r.nevents
			size += r.nbytes
		}
		if waiting {
			timer.Stop()
		}
		if waiting {
			l.stats.waitsFull.Add(1)
		}
		start := time.Now()
		l.commitGroup(group)
		latency += (int64(time.Since(start)) - latency) / 8
		expected = len(group)
		clear(group)
		if !open {
			return
		}
		l.refreshMarker(start)
	}
}

// markerInterval bounds how often the committer records the head in the
// marker (see refreshMarker).
const markerInterval = time.Second

// refreshMarker records the durable head in the head marker after a commit
// when the marker is older than markerInterval, so that after a crash the
// marker lags the acknowledged head by at most about a second of appends
// (and at most reserveStep events: reserve records the head too). It costs
// at most one extra fsync per second, after the group was acknowledged.
func (l *Log) refreshMarker(now time.Time) {
	head := l.head.Load()
	m, at := l.marked()
	if head <= m.head || now.Sub(at) < l.markEvery || l.failure() != nil {
		return
	}
	// With Options.Unsynced the marker records the head once synced.
	head, err := l.syncHead()
	if err != nil {
		l.poison(fmt.Errorf("sync the head: %w", err))
		return
	}
	if err := l.updateMarker(func(m *marker) {
		m.head = max(m.head, head)
		m.reserved = max(m.reserved, m.head)
	}); err != nil {
		l.poison(fmt.Errorf("write %s: %w", MarkerFile, err))
	}
}

// commitGroup checks, commits (synced) and publishes one group, then
// acknowledges its requests.
func (l *Log) commitGroup(group []*appendReq) {
	g := &l.group
	defer func() {
		for _, r := range group {
			r.done <- struct{}{} // never blocks: room for one, sent once
		}
	}()
	if err := l.failure(); err != nil {
		for _, r := range group {
			r.state.CompareAndSwap(reqQueued, reqTaken)
			r.err = err
		}
		return
	}
	clear(g.versions)
	clear(g.ids)
	g.ok = g.ok[:0]
	g.nextSeq = l.head.Load() + 1
	g.now = l.opts.Clock().Round(0).UTC()
	if _, err := unixNanos(g.now); err != nil {
		for _, r := range group {
			r.state.CompareAndSwap(reqQueued, reqTaken)
			r.err = fmt.Errorf("eventlog: Options.Clock returned an unusable time: %w", err)
		}
		return
	}
	g.batch = l.db.NewBatch()
	for _, r := range group {
		if !r.state.CompareAndSwap(reqQueued, reqTaken) {
			continue // withdrawn by its appender
		}
		if r.err = l.prepare(r); r.err == nil {
			g.ok = append(g.ok, r)
		}
	}
	if g.batch.Empty() {
		// Nothing to write (failures and idempotent replays only).
		g.batch.Close()
		return
	}
	reserved := l.reserve(g.nextSeq - 1)
	err := l.applyGroup(g.batch)
	if merr := reserved(); merr != nil && err == nil {
		// The group may be durable, but nothing bounds its sequences
		// on disk: its outcome is unknown, as after a failed commit.
		err = fmt.Errorf("write %s: %w", MarkerFile, merr)
	}
	if ferr := l.failure(); ferr != nil && err == nil {
		// The commit rotated the WAL and the marker could not name the
		// new one (walCreated poisoned the log): the group is in a WAL
		// whose loss would go unnoticed. Not acknowledged.
		err = ferr
	}
	if err != nil {
		err = l.poison(err)
		for _, r := range g.ok {
			r.results, r.err = nil, err
		}
		// The batch is not closed: after a failed commit Pebble may still
		// reference it.
		return
	}
	g.batch.Close()
	for s, v := range g.versions {
		l.cacheVersion(s, v)
	}
	l.stats.commits.Add(1)
	l.stats.appends.Add(uint64(len(g.ok)))
	l.stats.events.Add(g.nextSeq - l.head.Load() - 1)
	l.publish(g.nextSeq-1, g.ok)
	clear(g.ok)
}

// reserve makes sure the head marker covers sequences up to last before
// any of them is acknowledged, so that a sequence handed out is never
// handed out again, whatever is lost later. It writes the marker (synced)
// once per reserveStep events, recording the current durable head on the
// way, and ahead of need (reserveAhead), so that in a steady stream no
// group waits for it. Only a group beyond the reservation (the first, or
// a burst that outruns the background write) waits: its write runs while
// the group commits, so that its fsyncs overlap the WAL's, and the
// returned wait reports its outcome and must be called before the group
// is acknowledged. A crash in between leaves the group unacknowledged, so
// no reader or appender has seen its sequences: if the WAL kept it and
// the marker did not, Open finds the head beyond the marker, which is
// allowed.
func (l *Log) reserve(last uint64) (wait func() error) {
	m, _ := l.marked()
	if last > m.reserved {
		head := l.durableHead()
		done := make(chan error, 1)
		go func() { done <- l.extendReservation(head, last, last+reserveStep) }()
		return func() error { return <-done }
	}
	if m.reserved-last < reserveStep/2 && l.reserving.CompareAndSwap(false, true) {
		l.reserveAhead(last+reserveStep/2, m.reserved+reserveStep)
	}
	return func() error { return nil }
}

// reserveAhead extends the reservation to to in the background, unless it
// reserves need by then, for a group that came within half a step of it:
// the groups that follow, still covered, do not wait for the write. A
// failed write poisons the log: the groups it was started for are covered
// by the reservation before it, and no later one is acknowledged. Close
// waits for it (reserveWG); reserving is set until it ends.
func (l *Log) reserveAhead(need, to uint64) {
	head := l.durableHead()
	l.reserveWG.Add(1)
	go func() {
		defer l.reserveWG.Done()
		defer l.reserving.Store(false)
		if l.testHookReserve != nil {
			l.testHookReserve()
		}
		if err := l.extendReservation(head, need, to); err != nil {
			l.poison(fmt.Errorf("write %s: %w", MarkerFile, err))
		}
	}()
}

// extendReservation writes the marker with head and reserved = to, unless
// the marker as last written (a background reservation's) already
// reserves need.
func (l *Log) extendReservation(head, need, to uint64) error {
	return l.updateMarkerUnless(func(m marker) bool { return m.reserved >= need }, func(m *marker) {
		m.head = max(m.head, head)
		m.reserved = max(m.reserved, to)
	})
}

// prepare checks one request against the log and the group so far and, if it
// passes, adds its events to the group's batch.
func (l *Log) prepare(r *appendReq) error {
	g := &l.group
	// Idempotency first: a replay of a committed append must succeed even
	// though its expected versions are now stale.
	existing, withID, total := 0, 0, 0
	for _, sa := range r.appends {
		for i := range sa.Events {
			total++
			ev := &sa.Events[i]
			if ev.ID == (ulid.ULID{}) {
				continue
			}
			withID++
			if l.takeFresh(ev.ID, freshID) {
				continue
			}
			prev, found, err := l.lookupID(ev.ID)
			if err != nil {
				return err
			}
			if !found {
				continue
			}
			if !sameContent(ev, prev) {
				return fmt.Errorf("%w: %s is already event %d of stream %q with different content",
					ErrIDReused, ev.ID, prev.Seq, prev.Stream)
			}
			existing++
		}
	}
	if existing > 0 {
		if existing != total {
			return fmt.Errorf("%w: partial replay: %d of %d events already in the log", ErrIDReused, existing, total)
		}
		return l.replayResults(r)
	}

	// Expected versions. The same stream may appear twice in one
	// AppendMulti; the overlay makes the second part see the first.
	clear(g.local)
	r.results = r.newResults()
	for i, sa := range r.appends {
		cur, ok := g.local[sa.Stream]
		if !ok && l.freshStream(sa.Stream) {
			ok = true // no append named this stream since NewID drew its name: cur is 0
		}
		if !ok {
			var err error
			if cur, err = l.currentVersion(sa.Stream); err != nil {
				return err
			}
		}
		if sa.Expected != Any && uint64(sa.Expected) != cur {
			return &ConflictError{Stream: sa.Stream, Expected: sa.Expected, Current: cur}
		}
		r.results[i].Version = cur // start version, replaced below
		g.local[sa.Stream] = cur + uint64(len(sa.Events))
	}
	if r.retire != nil {
		if err := l.checkRetire(r.retire); err != nil {
			return err
		}
	}

	// Checks passed: assign positions and write.
	for i, sa := range r.appends {
		res := &r.results[i]
		ver := res.Version
		res.FirstSeq = g.nextSeq
		for j := range sa.Events {
			ev := &sa.Events[j]
			ver++
			ev.Seq, ev.Version = g.nextSeq, ver
			g.nextSeq++
			if ev.ID == (ulid.ULID{}) {
				ev.ID = l.newID(g.now)
			}
			if ev.Time.IsZero() {
				ev.Time = g.now
			}
			if ev.Correlation == (ulid.ULID{}) {
				if p, ok := g.ids[ev.Causation]; ok && ev.Causation != (ulid.ULID{}) {
					ev.Correlation = p.Correlation
				} else {
					ev.Correlation = ev.ID
				}
			}
			if err := l.writeEvent(ev); err != nil {
				// Validation in newRequest makes this unreachable; if it is
				// reached the batch holds part of this request, so the whole
				// group must not be committed.
				panic(fmt.Sprintf("eventlog: encoding a validated event failed: %v", err))
			}
			g.ids[ev.ID] = ev
		}
		if len(sa.Events) > 0 {
			l.writeStreamEntry(sa.Stream, ver, res.FirstSeq, uint64(len(sa.Events)))
		}
		g.versions[sa.Stream] = ver
		res.LastSeq = g.nextSeq - 1
		res.Version = ver
		res.Events = sa.Events
	}
	if r.retire != nil {
		// Cannot fail on a validated request: a Pebble batch only
		// refuses writes once committed or closed.
		if err := l.writeRetire(r.retire, r.retAux, g.nextSeq-1); err != nil {
			panic(fmt.Sprintf("eventlog: writing a validated retirement failed: %v", err))
		}
	}
	return nil
}

func (l *Log) writeEvent(ev *Event) error {
	g := &l.group
	var err error
	g.rec, err = appendCompactRecord(g.rec[:0], ev)
	if err != nil {
		return err
	}
	b := g.batch
	g.key = appendEventKey(g.key[:0], ev.Seq)
	b.Set(g.key, g.rec, nil)
	g.key = appendIDIndexKey(g.key[:0], ev.ID)
	g.val = binary.BigEndian.AppendUint64(g.val[:0], ev.Seq)
	b.Set(g.key, g.val, nil)
	if ev.Causation != (ulid.ULID{}) {
		g.key = appendCausationIndexKey(g.key[:0], ev.Causation, ev.Seq)
		b.Set(g.key, nil, nil)
	}
	return nil
}

// writeStreamEntry adds the stream index entry of one append's events to
// one stream: they got consecutive sequences and versions, so one entry,
// keyed by the last version, covers them (format.md, "Stream index").
func (l *Log) writeStreamEntry(stream string, last, firstSeq, count uint64) {
	g := &l.group
	g.key = appendStreamIndexKey(g.key[:0], stream, last)
	g.val = AppendStreamIndexValue(g.val[:0], firstSeq, count)
	g.batch.Set(g.key, g.val, nil)
}

// lookupID finds id among this group's events or in the committed log.
func (l *Log) lookupID(id ulid.ULID) (*Event, bool, error) {
	if ev, ok := l.group.ids[id]; ok {
		return ev, true, nil
	}
	seq, err := l.getSeq(IDIndexKey(id))
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	ev, err := l.readEvent(seq)
	if err != nil {
		return nil, false, err
	}
	if ev.ID != id {
		return nil, false, corruptSeq(seq, "id index entry for %s points to event %s", id, ev.ID)
	}
	return &ev, true, nil
}

func sameContent(a, b *Event) bool {
	return a.Stream == b.Stream && a.Type == b.Type && a.Schema == b.Schema &&
		a.Causation == b.Causation && string(a.Body) == string(b.Body) &&
		maps.Equal(a.Metadata, b.Metadata)
}

// replayResults fills r's results from the stored events of an idempotent
// replay.
func (l *Log) replayResults(r *appendReq) error {
	r.results = r.newResults()
	for i, sa := range r.appends {
		res := &r.results[i]
		res.Events = make([]Event, len(sa.Events))
		for j := range sa.Events {
			prev, _, err := l.lookupID(sa.Events[j].ID)
			if err != nil {
				return err
			}
			res.Events[j] = *prev
			if res.FirstSeq == 0 || prev.Seq < res.FirstSeq {
				res.FirstSeq = prev.Seq
			}
			res.LastSeq = max(res.LastSeq, prev.Seq)
			res.Version = max(res.Version, prev.Version)
		}
	}
	return nil
}

// newResults returns zeroed results for r's streams.
func (r *appendReq) newResults() []AppendResult {
	if len(r.appends) == 1 {
		r.oneRes = [1]AppendResult{}
		return r.oneRes[:]
	}
	return make([]AppendResult, len(r.appends))
}

// currentVersion returns a stream's version including this group's pending
// events. Called only by the committer.
func (l *Log) currentVersion(stream string) (uint64, error) {
	if v, ok := l.group.versions[stream]; ok {
		return v, nil
	}
	if v, ok := l.versions[stream]; ok {
		return v, nil
	}
	// Everything in Pebble is committed: the committer is the only writer
	// and it is here, not in the middle of a commit.
	v, _, err := l.lastStreamEntry(stream, ^uint64(0))
	if err != nil {
		return 0, err
	}
	l.cacheVersion(stream, v)
	return v, nil
}

func (l *Log) cacheVersion(stream string, v uint64) {
	if _, ok := l.versions[stream]; !ok && len(l.versions) >= l.opts.StreamCacheSize {
		// Evict about half, arbitrarily: a miss costs one index read, and
		// this keeps the cache bounded without LRU bookkeeping on the hot
		// path.
		n := len(l.versions) / 2
		for s := range l.versions {
			if n == 0 {
				break
			}
			delete(l.versions, s)
			n--
		}
	}
	l.versions[stream] = v
}

// publish makes a committed group visible: it advances the head and hands
// the events to live subscriptions, under subMu so that a subscription
// switching to live cannot miss a group.
func (l *Log) publish(head uint64, reqs []*appendReq) {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.head.Store(head)
	if len(l.subs) == 0 {
		return
	}
	// Subscribers get their own copies: the caller owns AppendResult.Events.
	// Sized first: one allocation each, on the commit path.
	nevs, nbytes := 0, 0
	for _, r := range reqs {
		for _, res := range r.results {
			nevs += len(res.Events)
			for _, ev := range res.Events {
				nbytes += len(ev.Body)
			}
		}
	}
	evs := make([]Event, 0, nevs)
	bodies := make([]byte, 0, nbytes)
	for _, r := range reqs {
		for _, res := range r.results {
			for _, ev := range res.Events {
				bodies = append(bodies, ev.Body...)
				evs = append(evs, ev)
			}
		}
	}
	off := 0
	for i := range evs {
		ev := &evs[i]
		n := len(ev.Body)
		if n > 0 {
			ev.Body = bodies[off : off+n : off+n]
		}
		off += n
		if ev.Metadata != nil {
			ev.Metadata = maps.Clone(ev.Metadata)
		}
	}
	for s := range l.subs {
		s.deliver(evs)
	}
}

// Stats are counters since Open, for operators and benchmarks.
type Stats struct {
	// Commits is the number of synced group commits (one batch, one fsync).
	Commits uint64
	// Appends and Events count the appends and events they carried.
	// Events/Commits is the group commit's batching factor.
	Appends, Events uint64
	// GatherWaits counts commits that waited for appenders to come back
	// (see Options.MaxGroupWait); GatherTimeouts those whose wait expired
	// before all of them did.
	GatherWaits, GatherTimeouts uint64
}

type statsCounters struct {
	commits, appends, events, waitsFull, waitsExpired atomic.Uint64
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	return Stats{
		Commits: l.stats.commits.Load(), Appends: l.stats.appends.Load(), Events: l.stats.events.Load(),
		GatherWaits:    l.stats.waitsFull.Load() + l.stats.waitsExpired.Load(),
		GatherTimeouts: l.stats.waitsExpired.Load(),
	}
}
