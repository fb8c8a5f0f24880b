package broker

import (
	"context"
	"slices"
	"sync"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// childIndex is the sub-task index: parent task id -> the ids of the tasks
// created with that parent_task_id (dispatch tasks created through the API,
// and the pegasus.task children the built-in worker runs broker tasks as).
// It is kept by the broker's fold: loaded once at New from the view, then
// every creation the broker follows (or makes) adds to it, so a task's
// children are a map lookup, not a scan of every task. Memory only: a
// restart loads it again.
type childIndex struct {
	mu       sync.Mutex
	children map[string][]string // parent -> children, in id order
	parent   map[string]string   // child -> parent
}

func newChildIndex() *childIndex {
	return &childIndex{children: map[string][]string{}, parent: map[string]string{}}
}

// add records that child has parent ("" records nothing). Adding a link
// twice is harmless: creations are seen both where they are made and
// where they are followed.
func (x *childIndex) add(parent, child string) {
	if parent == "" || child == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.parent[child]; ok {
		return
	}
	x.parent[child] = parent
	cs := x.children[parent]
	i, _ := slices.BinarySearch(cs, child)
	x.children[parent] = slices.Insert(cs, i, child)
}

// of returns a copy of parent's children, in id order.
func (x *childIndex) of(parent string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.children[parent])
}

// parentOf returns the parent of child, "" if it has none indexed.
func (x *childIndex) parentOf(child string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.parent[child]
}

// Children returns the ids of the tasks created with parent_task_id id
// (dispatch sub-tasks, and the pegasus.task children of a broker task run
// by the built-in worker), in id order, from the broker's index. Only
// children the view holds are named: the built-in worker indexes a child
// just before it appends the child's input (so that the child's first
// events wake its loop), and a child named before that input is folded
// would be a task the API does not know yet.
func (b *Broker) Children(id string) []string {
	cs := b.children.of(id)
	out := cs[:0]
	for _, c := range cs {
		if _, err := b.tasks.Task(c); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// sourced is what a Tasks offers, beside the dispatch tasks, to load the
// index at start: the tasks created from one source. FromView has it.
type sourced interface {
	TasksFrom(source string) []fsm.Task
}

// TasksFrom returns the tasks (of any machine) whose source is source: at
// start, the children the built-in worker created (AgentSource).
func (v viewTasks) TasksFrom(source string) []fsm.Task {
	var out []fsm.Task
	q := replay.Query{Filter: projection.Filter{Sources: []string{source}}, Limit: replay.MaxLimit}
	for {
		page, err := v.Tasks(context.Background(), q)
		if err != nil {
			return out
		}
		for _, s := range page.Tasks {
			if t, err := v.Task(s.ID); err == nil {
				out = append(out, t)
			}
		}
		if page.Next == "" {
			return out
		}
		q.Cursor = page.Next
	}
}

// loadChildren indexes the children that are not dispatch tasks (those
// New indexes as it loads them): the built-in worker's.
func (b *Broker) loadChildren() {
	s, ok := b.tasks.(sourced)
	if !ok {
		return
	}
	for _, t := range s.TasksFrom(AgentSource) {
		b.children.add(t.ParentID, t.ID)
	}
}
