package projection

import (
	"sort"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// OtherKey is where the stats count values beyond their bound of distinct
// keys (machines, task types, sources, failure reasons), so that hostile or
// high-cardinality input cannot grow them without limit.
const OtherKey = "(other)"

// maxIterationBucket is the last bucket of the iterations distribution:
// tasks with more iterations are counted there.
const maxIterationBucket = 100

// Stats is the stats projection: counts by state, machine, task type and
// source;
// created, completed and failed per minute over a window; task duration
// percentiles; iterations per finished task; top failure reasons. Every
// piece is bounded (see StatsOptions) and deterministic: times come from
// the events, so two folds of the same log agree byte for byte.
type Stats struct {
	opts StatsOptions
	s    statsState
	// cells count the tasks in each machine and state since s's ByState
	// and ByMachineState were last brought up to date (DecodeStats, or
	// settle when the cells are many): a fold counts a task at every
	// change of state, and a map update per count (two in each map) was
	// most of the stats' time. index finds a cell by machine and state.
	// Not persisted: Encode and Report add the cells to the maps.
	cells []stateCell
	index map[machineState]int32
}

// machineState is the key of Stats.index.
type machineState struct {
	machine string
	state   fsm.State
}

// stateCell is one machine and state's count in Stats.cells.
type stateCell struct {
	key     string // ByMachineState's key: the machine name, a space, the state
	state   fsm.State
	byState bool // counted in ByState too (not a broker task, see byState)
	n       int64
}

// maxStateKeys bounds Stats.cells (machine names come from the log); past
// it the cells are settled into the maps and start over.
const maxStateKeys = 1024

// cell returns t's cell, adding it if new.
func (st *Stats) cell(t *fsm.Task) *stateCell {
	if i, ok := st.index[machineState{t.Machine.Name, t.State}]; ok {
		return &st.cells[i]
	}
	if len(st.cells) >= maxStateKeys {
		st.settle()
	}
	if st.index == nil {
		st.index = make(map[machineState]int32, 16)
	}
	name := strings.Clone(t.Machine.Name)
	st.cells = append(st.cells, stateCell{key: name + " " + string(t.State), state: t.State,
		byState: name != fsm.DispatchMachineName})
	st.index[machineState{name, t.State}] = int32(len(st.cells) - 1)
	return &st.cells[len(st.cells)-1]
}

// settle adds the cells to ByState and ByMachineState and empties them.
func (st *Stats) settle() {
	addCells(&st.s.ByState, &st.s.ByMachineState, st.cells)
	st.cells = st.cells[:0]
	clear(st.index)
}

// addCells adds cells to the counts by state and by machine and state.
func addCells(byState *map[fsm.State]int64, byMachineState *map[string]int64, cells []stateCell) {
	for i := range cells {
		c := &cells[i]
		if c.n == 0 {
			continue
		}
		if c.byState {
			bump(byState, c.state, c.n)
		}
		bump(byMachineState, c.key, c.n)
	}
}

// states returns ByState and ByMachineState with the cells added, without
// changing st (Report runs under a read lock).
func (st *Stats) states() (map[fsm.State]int64, map[string]int64) {
	byState, byMachineState := copyMap(st.s.ByState), copyMap(st.s.ByMachineState)
	addCells(&byState, &byMachineState, st.cells)
	return byState, byMachineState
}

// StatsOptions bound the stats projection. Changing them changes what is
// folded, so they are part of the projection's persisted identity: a
// restart with other values rebuilds the projections.
type StatsOptions struct {
	// Window is how many minutes of per-minute counts are kept, ending at
	// the minute of the newest event folded.
	//
	// The default value is 60.
	Window int
	// MaxKeys bounds the distinct machines, task types, sources and failure
	// reasons counted; further ones are counted under OtherKey.
	//
	// The default value is 256.
	MaxKeys int
}

// EnsureDefaults fills zero fields with their defaults and returns o.
func (o StatsOptions) EnsureDefaults() StatsOptions {
	if o.Window <= 0 {
		o.Window = 60
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 256
	}
	return o
}

// Minute is the activity of one minute (UTC).
type Minute struct {
	Minute    int64 `msgpack:"minute" json:"-"` // unix time / 60
	Created   int64 `msgpack:"created" json:"created"`
	Completed int64 `msgpack:"completed" json:"completed"`
	Failed    int64 `msgpack:"failed" json:"failed"`
}

// statsState is the folded state, persisted as is.
type statsState struct {
	Events         int64                   // every event folded
	Refused        int64                   // events the fold refused
	Created        int64                   // tasks
	Completed      int64                   // tasks
	Failed         int64                   // tasks
	ByState        map[fsm.State]int64     // tasks now in each state, of every machine but dispatch.task
	ByMachineState map[string]int64        // tasks now in each state per machine: "NAME STATE"
	ByMachine      map[string]int64        // tasks created per machine (NAME@VERSION)
	ByType         map[string]int64        // tasks created per type
	BySource       map[string]int64        // tasks created per source
	Inputs         map[fsm.EventType]int64 // inputs that created tasks (and events on $inputs), per type
	System         map[string]int64        // events on $system per type
	MemoryEvents   int64                   // events on $memory
	FailureReasons map[string]int64        // TASK_FAILED reason codes
	Minutes        []Minute                // ascending, within the window
	LastMinute     int64                   // newest minute seen
	Durations      Histogram               // created -> terminal, ms, all finished tasks
	CompletedDur   Histogram
	FailedDur      Histogram
	Iterations     map[int]int64 // finished tasks per iteration count
	LastEventTime  time.Time
}

// NewStats returns empty stats.
func NewStats(o StatsOptions) *Stats {
	return &Stats{opts: o.EnsureDefaults()}
}

// Options returns the options the stats were built with.
func (st *Stats) Options() StatsOptions { return st.opts }

func bump[K comparable](m *map[K]int64, k K, d int64) {
	if *m == nil {
		*m = map[K]int64{}
	}
	if n := (*m)[k] + d; n != 0 {
		(*m)[k] = n
	} else {
		delete(*m, k)
	}
}

// bumpBounded counts k, or OtherKey once MaxKeys distinct keys are known.
func (st *Stats) bumpBounded(m *map[string]int64, k string) {
	if _, ok := (*m)[k]; !ok && len(*m) >= st.opts.MaxKeys {
		k = OtherKey
	}
	bump(m, k, 1)
}

// event counts one folded event of any stream.
func (st *Stats) event(ev fsm.Event, refused bool) {
	st.s.Events++
	if refused {
		st.s.Refused++
	}
	if ev.Time.After(st.s.LastEventTime) {
		st.s.LastEventTime = ev.Time.UTC()
	}
}

// input counts an event on the inputs stream.
func (st *Stats) input(ev fsm.Event) { bump(&st.s.Inputs, ev.Type, 1) }

// system counts an event on the system stream.
func (st *Stats) system(ev fsm.Event) {
	if _, ok := st.s.System[string(ev.Type)]; !ok && len(st.s.System) >= st.opts.MaxKeys {
		bump(&st.s.System, OtherKey, 1)
		return
	}
	bump(&st.s.System, string(ev.Type), 1)
}

// task folds one applied task event. A task is created by its first event
// (before is the zero Task): an external input, which leaves it idle, or
// TASK_CREATED on a new stream; a creating input is also counted by type.
func (st *Stats) task(ev fsm.Event, before, after *fsm.Task) {
	created := before.State == fsm.StateNone
	if created {
		if ev.Type != fsm.TaskCreated {
			st.input(ev)
		}
		st.s.Created++
		st.bumpBounded(&st.s.ByMachine, after.Machine.String())
		st.bumpBounded(&st.s.ByType, after.Type)
		st.bumpBounded(&st.s.BySource, after.Context.Source)
		st.minute(ev.Time, func(m *Minute) { m.Created++ })
	} else if before.State != after.State {
		st.byState(before, -1)
	}
	if created || before.State != after.State {
		st.byState(after, 1)
	}
	// Finished as its machine says: a dispatch task that failed and will be
	// retried is not (it is once completed or dead-lettered).
	if after.IsTerminal() && !before.IsTerminal() {
		ms := ev.Time.Sub(after.CreatedAt).Milliseconds()
		st.s.Durations.Add(ms)
		it := after.Context.Iteration
		if it > maxIterationBucket {
			it = maxIterationBucket
		}
		bump(&st.s.Iterations, it, 1)
		if after.State == fsm.StateCompleted {
			st.s.Completed++
			st.s.CompletedDur.Add(ms)
			st.minute(ev.Time, func(m *Minute) { m.Completed++ })
		} else {
			st.s.Failed++
			st.s.FailedDur.Add(ms)
			reason := "unknown"
			if b, ok := ev.Body.(*fsm.TaskFailedBody); ok && b != nil && b.Reason != "" {
				reason = b.Reason
			} else if b, ok := ev.Body.(*fsm.DispatchDeadLetteredBody); ok && b != nil && b.Reason != "" {
				reason = b.Reason
			}
			st.bumpBounded(&st.s.FailureReasons, reason)
			st.minute(ev.Time, func(m *Minute) { m.Failed++ })
		}
	}
}

// byState counts t in its state, d: per machine, and in ByState unless
// it is a broker task (dispatch.task shares completed and failed with
// pegasus.task but not their meaning; its figures are by_machine_state's
// and GET /api/v1/stats').
func (st *Stats) byState(t *fsm.Task, d int64) { st.cell(t).n += d }

// minute adds to the bucket of t's minute if it is inside the window,
// moving the window forward when t is the newest minute seen.
func (st *Stats) minute(t time.Time, add func(*Minute)) {
	m := t.Unix() / 60
	if t.Unix() < 0 && t.Unix()%60 != 0 {
		m-- // floor for times before 1970
	}
	if m > st.s.LastMinute || len(st.s.Minutes) == 0 && st.s.LastMinute == 0 {
		st.s.LastMinute = m
	}
	oldest := st.s.LastMinute - int64(st.opts.Window) + 1
	// Drop buckets that left the window.
	drop := 0
	for drop < len(st.s.Minutes) && st.s.Minutes[drop].Minute < oldest {
		drop++
	}
	if drop > 0 {
		st.s.Minutes = st.s.Minutes[:copy(st.s.Minutes, st.s.Minutes[drop:])]
	}
	if m < oldest {
		return // too old for the window; still in the totals
	}
	i := sort.Search(len(st.s.Minutes), func(i int) bool { return st.s.Minutes[i].Minute >= m })
	if i == len(st.s.Minutes) || st.s.Minutes[i].Minute != m {
		st.s.Minutes = append(st.s.Minutes, Minute{})
		copy(st.s.Minutes[i+1:], st.s.Minutes[i:])
		st.s.Minutes[i] = Minute{Minute: m}
	}
	add(&st.s.Minutes[i])
}

// kv is one map entry in the persisted form: msgpack sorts only maps with
// string keys and string or bool values, so the persisted form stores
// every map as a slice sorted by key, which makes the encoding canonical.
type kv struct {
	K string `msgpack:"k"`
	N int64  `msgpack:"n"`
}

type ikv struct {
	K int   `msgpack:"k"`
	N int64 `msgpack:"n"`
}

func sortedKV[K ~string](m map[K]int64) []kv {
	out := make([]kv, 0, len(m))
	for k, n := range m {
		out = append(out, kv{string(k), n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].K < out[j].K })
	return out
}

func sortedIKV(m map[int]int64) []ikv {
	out := make([]ikv, 0, len(m))
	for k, n := range m {
		out = append(out, ikv{k, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].K < out[j].K })
	return out
}

func fromKV[K ~string](s []kv) map[K]int64 {
	if len(s) == 0 {
		return nil
	}
	m := make(map[K]int64, len(s))
	for _, e := range s {
		m[K(e.K)] = e.N
	}
	return m
}

func fromIKV(s []ikv) map[int]int64 {
	if len(s) == 0 {
		return nil
	}
	m := make(map[int]int64, len(s))
	for _, e := range s {
		m[e.K] = e.N
	}
	return m
}

type histWire struct {
	Counts []ikv `msgpack:"counts"`
	Total  int64 `msgpack:"total"`
	Sum    int64 `msgpack:"sum"`
	Min    int64 `msgpack:"min"`
	Max    int64 `msgpack:"max"`
}

func (h *Histogram) wire() histWire {
	return histWire{Counts: sortedIKV(h.Counts), Total: h.Total, Sum: h.Sum, Min: h.Min, Max: h.Max}
}

func (w histWire) histogram() Histogram {
	return Histogram{Counts: fromIKV(w.Counts), Total: w.Total, Sum: w.Sum, Min: w.Min, Max: w.Max}
}

// statsWire is the persisted form of statsState.
type statsWire struct {
	Events         int64     `msgpack:"events"`
	Refused        int64     `msgpack:"refused"`
	Created        int64     `msgpack:"created"`
	Completed      int64     `msgpack:"completed"`
	Failed         int64     `msgpack:"failed"`
	ByState        []kv      `msgpack:"by_state"`
	ByMachineState []kv      `msgpack:"by_machine_state"`
	ByMachine      []kv      `msgpack:"by_machine"` // absent in records written before it existed
	ByType         []kv      `msgpack:"by_type"`
	BySource       []kv      `msgpack:"by_source"`
	Inputs         []kv      `msgpack:"inputs"`
	System         []kv      `msgpack:"system"`
	MemoryEvents   int64     `msgpack:"memory_events"`
	FailureReasons []kv      `msgpack:"failure_reasons"`
	Minutes        []Minute  `msgpack:"minutes"`
	LastMinute     int64     `msgpack:"last_minute"`
	Durations      histWire  `msgpack:"durations"`
	CompletedDur   histWire  `msgpack:"completed_durations"`
	FailedDur      histWire  `msgpack:"failed_durations"`
	Iterations     []ikv     `msgpack:"iterations"`
	LastEventTime  time.Time `msgpack:"last_event_time"`
}

// Encode returns the canonical encoding of the stats.
func (st *Stats) Encode() ([]byte, error) {
	s := &st.s
	byState, byMachineState := st.states()
	return marshal(&statsWire{
		Events: s.Events, Refused: s.Refused, Created: s.Created, Completed: s.Completed, Failed: s.Failed,
		ByState: sortedKV(byState), ByMachineState: sortedKV(byMachineState), ByMachine: sortedKV(s.ByMachine), ByType: sortedKV(s.ByType), BySource: sortedKV(s.BySource),
		Inputs: sortedKV(s.Inputs), System: sortedKV(s.System), MemoryEvents: s.MemoryEvents,
		FailureReasons: sortedKV(s.FailureReasons), Minutes: s.Minutes, LastMinute: s.LastMinute,
		Durations: s.Durations.wire(), CompletedDur: s.CompletedDur.wire(), FailedDur: s.FailedDur.wire(),
		Iterations: sortedIKV(s.Iterations), LastEventTime: s.LastEventTime,
	})
}

// DecodeStats decodes an encoding written by Stats.Encode, for stats built
// with options o.
func DecodeStats(data []byte, o StatsOptions) (*Stats, error) {
	var w statsWire
	if err := unmarshal(data, &w); err != nil {
		return nil, err
	}
	st := NewStats(o)
	st.s = statsState{
		Events: w.Events, Refused: w.Refused, Created: w.Created, Completed: w.Completed, Failed: w.Failed,
		ByState: fromKV[fsm.State](w.ByState), ByMachineState: fromKV[string](w.ByMachineState), ByMachine: fromKV[string](w.ByMachine),
		ByType: fromKV[string](w.ByType), BySource: fromKV[string](w.BySource),
		Inputs: fromKV[fsm.EventType](w.Inputs), System: fromKV[string](w.System), MemoryEvents: w.MemoryEvents,
		FailureReasons: fromKV[string](w.FailureReasons), Minutes: w.Minutes, LastMinute: w.LastMinute,
		Durations: w.Durations.histogram(), CompletedDur: w.CompletedDur.histogram(), FailedDur: w.FailedDur.histogram(),
		Iterations: fromIKV(w.Iterations), LastEventTime: w.LastEventTime.UTC(),
	}
	return st, nil
}

// StatsReport is the stats as the API and the CLI show them.
type StatsReport struct {
	Events    int64               `json:"events"`
	Refused   int64               `json:"refused"`
	Tasks     int64               `json:"tasks"`
	Completed int64               `json:"completed"`
	Failed    int64               `json:"failed"`
	ByState   map[fsm.State]int64 `json:"by_state"` // every machine's but dispatch.task's
	// ByMachineState is the tasks now in each state per machine NAME
	// (pegasus.task, dispatch.task), each machine's states apart.
	ByMachineState map[string]map[fsm.State]int64 `json:"by_machine_state"`
	ByMachine      map[string]int64               `json:"by_machine"` // tasks created per machine, NAME@VERSION
	ByType         map[string]int64               `json:"by_type"`
	BySource       map[string]int64               `json:"by_source"`
	Inputs         map[fsm.EventType]int64        `json:"inputs"`
	System         map[string]int64               `json:"system"`
	MemoryEvents   int64                          `json:"memory_events"`
	PerMinute      []MinuteReport                 `json:"per_minute"`
	Duration       DurationReport                 `json:"duration_ms"`
	CompletedDur   DurationReport                 `json:"completed_duration_ms"`
	FailedDur      DurationReport                 `json:"failed_duration_ms"`
	Iterations     []IterationCount               `json:"iterations"`
	FailureReasons []ReasonCount                  `json:"top_failure_reasons"`
	LastEventTime  time.Time                      `json:"last_event_time"`
	WindowMinutes  int                            `json:"window_minutes"`
}

// MinuteReport is one minute of activity.
type MinuteReport struct {
	Time      time.Time `json:"time"`
	Created   int64     `json:"created"`
	Completed int64     `json:"completed"`
	Failed    int64     `json:"failed"`
}

// DurationReport summarises a duration histogram, in milliseconds. The
// percentiles are upper bounds exact to within 12.5%.
type DurationReport struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	Min   int64   `json:"min"`
	P50   int64   `json:"p50"`
	P90   int64   `json:"p90"`
	P99   int64   `json:"p99"`
	Max   int64   `json:"max"`
}

// IterationCount is how many finished tasks took Iterations iterations
// (the last bucket counts that many or more).
type IterationCount struct {
	Iterations int   `json:"iterations"`
	Tasks      int64 `json:"tasks"`
}

// ReasonCount is how many tasks failed with a reason code.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// TopFailureReasons is how many reasons StatsReport lists.
const TopFailureReasons = 10

func durationReport(h *Histogram) DurationReport {
	return DurationReport{
		Count: h.Total, Mean: h.Mean(), Min: h.Min,
		P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99), Max: h.Max,
	}
}

// Report returns the stats as shown to users. Maps are copies.
func (st *Stats) Report() StatsReport {
	s := &st.s
	byState, byMachineState := st.states()
	r := StatsReport{
		Events: s.Events, Refused: s.Refused, Tasks: s.Created, Completed: s.Completed, Failed: s.Failed,
		ByState: map[fsm.State]int64{}, ByMachine: copyMap(s.ByMachine), ByType: copyMap(s.ByType), BySource: copyMap(s.BySource),
		Inputs: copyMap(s.Inputs), System: copyMap(s.System), MemoryEvents: s.MemoryEvents,
		Duration: durationReport(&s.Durations), CompletedDur: durationReport(&s.CompletedDur),
		FailedDur: durationReport(&s.FailedDur), LastEventTime: s.LastEventTime,
		WindowMinutes: st.opts.Window,
	}
	for _, state := range fsm.States {
		r.ByState[state] = byState[state]
	}
	for state, n := range byState {
		if n != 0 {
			r.ByState[state] = n // the states of older machines, when some task is in one
		}
	}
	r.ByMachineState = map[string]map[fsm.State]int64{}
	for k, n := range byMachineState {
		name, state, _ := strings.Cut(k, " ")
		if r.ByMachineState[name] == nil {
			r.ByMachineState[name] = map[fsm.State]int64{}
		}
		r.ByMachineState[name][fsm.State(state)] = n
	}
	for _, m := range s.Minutes {
		r.PerMinute = append(r.PerMinute, MinuteReport{
			Time: time.Unix(m.Minute*60, 0).UTC(), Created: m.Created, Completed: m.Completed, Failed: m.Failed,
		})
	}
	for it, n := range s.Iterations {
		r.Iterations = append(r.Iterations, IterationCount{Iterations: it, Tasks: n})
	}
	sort.Slice(r.Iterations, func(i, j int) bool { return r.Iterations[i].Iterations < r.Iterations[j].Iterations })
	for reason, n := range s.FailureReasons {
		r.FailureReasons = append(r.FailureReasons, ReasonCount{Reason: reason, Count: n})
	}
	sort.Slice(r.FailureReasons, func(i, j int) bool {
		a, b := r.FailureReasons[i], r.FailureReasons[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Reason < b.Reason
	})
	if len(r.FailureReasons) > TopFailureReasons {
		r.FailureReasons = r.FailureReasons[:TopFailureReasons]
	}
	return r
}

func copyMap[K comparable](m map[K]int64) map[K]int64 {
	out := make(map[K]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
